// Page-aligned byte buffers: the memory O_DIRECT I/O needs (the posix transport), and what the double buffer
// and tests/support's pipeline read into so that the same buffers serve either transport. One definition of the
// alignment and of how such memory is freed.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>

namespace blockps {

inline constexpr std::size_t kDirectIoAlignment = 4096;

struct FreeAlignedBuffer {
  void operator()(std::byte* p) const noexcept { std::free(p); }
};
using AlignedBuffer = std::unique_ptr<std::byte[], FreeAlignedBuffer>;

/// `bytes` bytes aligned to kDirectIoAlignment, zeroed unless the caller fills them at once; null when memory
/// ran out.
inline AlignedBuffer make_aligned_buffer(std::size_t bytes, bool zeroed = true) {
  void* p = nullptr;
  if (::posix_memalign(&p, kDirectIoAlignment, bytes == 0 ? 1 : bytes) != 0) return nullptr;
  if (zeroed) std::memset(p, 0, bytes);
  return AlignedBuffer(static_cast<std::byte*>(p));
}

}  // namespace blockps
