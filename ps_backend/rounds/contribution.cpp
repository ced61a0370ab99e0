#include "ps_backend/rounds/contribution.h"

#include <algorithm>

#include "aggregator/wire_convert.h"

namespace blockps {

std::vector<BlockSpan> split_into_blocks(const ShardGeometry& geometry, std::uint64_t offset, std::uint64_t len) {
  const std::uint64_t end = offset + len;
  if (len == 0 || offset % kSectorBytes || len % kSectorBytes || end > geometry.bytes || end < offset) return {};
  const std::uint64_t esize = wire_size(geometry.dtype), block_bytes = geometry.block_bytes;
  std::vector<BlockSpan> spans;
  for (std::uint64_t b = offset / block_bytes; b <= (end - 1) / block_bytes; ++b) {
    const std::uint64_t base = b * block_bytes;
    const std::uint64_t begin = std::max(offset, base), stop = std::min(end, base + block_bytes);
    spans.push_back({b, begin - offset, (begin - base) / kSectorBytes, (stop - begin) / kSectorBytes,
                     (begin - base) / esize, (stop - begin) / esize});
  }
  return spans;
}

std::uint32_t compressed_sectors(const ShardGeometry& geometry, std::uint64_t block, CompressedFormat format) {
  return static_cast<std::uint32_t>(compressed_block_bytes(format, geometry.elements_in_block(block)) / kSectorBytes);
}

Contribution::Contribution(const ShardGeometry& geometry, std::uint64_t block_index, std::uint64_t round_index,
                           const WorkerRef& worker, bool decoded, std::optional<CompressedFormat> compressed_as)
    : block(block_index), round(round_index), itn(worker.itn), compressed(compressed_as), iqn(worker.iqn) {
  const std::uint64_t base = block * geometry.block_bytes;
  const std::uint64_t block_len = std::min<std::uint64_t>(geometry.bytes - base, geometry.block_bytes);
  elements = decoded ? block_len / wire_size(geometry.dtype) : 0;
  sectors = compressed ? compressed_sectors(geometry, block, *compressed)
                       : static_cast<std::uint32_t>(block_len / kSectorBytes);
  claimed.assign(sectors, false);
}

bool Contribution::claims_any(const BlockSpan& s) const {
  if (s.first_sector + s.sectors > claimed.size()) return true;
  for (std::uint64_t i = s.first_sector; i < s.first_sector + s.sectors; ++i)
    if (claimed[i]) return true;
  return false;
}

void Contribution::claim(const BlockSpan& s) {
  for (std::uint64_t i = s.first_sector; i < s.first_sector + s.sectors; ++i) claimed[i] = true;
  claimed_n += static_cast<std::uint32_t>(s.sectors);
}

void Contribution::unclaim(const BlockSpan& s) {
  for (std::uint64_t i = s.first_sector; i < s.first_sector + s.sectors; ++i) claimed[i] = false;
  claimed_n -= static_cast<std::uint32_t>(s.sectors);
}

Status Contribution::decode(WireDtype dtype, const BlockSpan& s, std::span<const std::byte> data) {
  std::call_once(grad_allocated, [this] { grad.resize(elements); });
  if (compressed) {
    // Admitted only as the whole compressed block (BspMode::admit_push).
    const std::size_t bytes = std::size_t{sectors} * kSectorBytes;
    if (data.size() < s.data_offset + bytes)
      return Status::Error(StatusCode::invalid_argument, "the compressed block's data is short");
    return decompress(*compressed, data.subspan(s.data_offset, bytes), grad);
  }
  const std::size_t esize = wire_size(dtype);
  const std::uint64_t have = data.size() > s.data_offset ? (data.size() - s.data_offset) / esize : 0;
  decode_wire(dtype, data.data() + s.data_offset, grad.data() + s.element_in_block, std::min(have, s.elements));
  return Status::Ok();
}

}  // namespace blockps
