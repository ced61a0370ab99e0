// Allocation failure on demand, for the calling thread only (the core's own threads must not see it): the way
// a test makes the real core fail inside a call. This test binary replaces the global operator new for it.
#pragma once

namespace blockps::unit {

// While set, every operator new on this thread throws std::bad_alloc.
void fail_allocations_on_this_thread(bool fail);

}  // namespace blockps::unit
