// The replaced global operator new behind allocation_failure.h. In a file of its own: GCC would otherwise see
// the replaced delete inlined next to the library's new and warn of a mismatch.
#include "tests/unit/ps_backend/tgt_glue/allocation_failure.h"

#include <cstdlib>
#include <new>

namespace {
thread_local bool t_fail_allocations = false;
}  // namespace

void blockps::unit::fail_allocations_on_this_thread(bool fail) { t_fail_allocations = fail; }

void* operator new(std::size_t n) {
  if (t_fail_allocations) throw std::bad_alloc();
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
