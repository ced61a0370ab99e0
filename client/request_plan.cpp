// A request cut into each shard's commands (client/request_plan.h).
#include "client/request_plan.h"

#include <algorithm>
#include <string>
#include <tuple>
#include <utility>

namespace blockps::detail {

const char* name_of(Transfer transfer) {
  switch (transfer) {
    case Transfer::push:
      return "push";
    case Transfer::pull:
      return "pull";
    case Transfer::exchange:
      return "exchange";
    case Transfer::assign_weights:
      return "write_weights";
    case Transfer::read_weights:
      return "read_weights";
  }
  return "?";
}

bool writes(Transfer transfer) {
  return transfer == Transfer::push || transfer == Transfer::assign_weights || transfer == Transfer::exchange;
}

bool uses_weights_lu(Transfer transfer) {
  return transfer == Transfer::assign_weights || transfer == Transfer::read_weights;
}

Status check_request(const Layout& layout, Transfer transfer, std::uint64_t first_block, std::uint64_t block_count,
                     const Buffers& buffers) {
  const char* what = name_of(transfer);
  const std::uint64_t blocks = layout.block_count();
  if (first_block > blocks || block_count > blocks - first_block) {
    return Status::Error(StatusCode::invalid_argument, std::string(what) + ": blocks [" + std::to_string(first_block) +
                                                           ", " + std::to_string(first_block + block_count) +
                                                           ") are outside the model's " + std::to_string(blocks) +
                                                           " blocks");
  }
  const std::uint64_t need =
      layout.model_offset_of_block(first_block + block_count) - layout.model_offset_of_block(first_block);
  const bool exchanging = transfer == Transfer::exchange;
  for (const auto& [bytes, name] : {std::pair{buffers.data_bytes, exchanging ? "gradient buffer" : "buffer"},
                                    std::pair{exchanging ? buffers.pulled_bytes : need, "weights buffer"}}) {
    if (bytes != need) {
      return Status::Error(StatusCode::invalid_argument,
                           std::string(what) + ": the " + name + " holds " + std::to_string(bytes) +
                               " bytes, blocks [" + std::to_string(first_block) + ", " +
                               std::to_string(first_block + block_count) + ") are " + std::to_string(need) + " bytes");
    }
  }
  return Status::Ok();
}

std::vector<ShardCommands> plan_request(const Layout& layout, RequestCaps caps, Transfer transfer,
                                        std::uint64_t first_block, std::uint64_t block_count, const Buffers& buffers) {
  const std::uint64_t base = layout.model_offset_of_block(first_block);
  const bool exchanging = transfer == Transfer::exchange;
  const bool writing = writes(transfer);
  std::vector<ShardCommands> parts(layout.shard_count());
  auto command = [&](IoDirection direction, const ShardRun& run, std::byte* data) {
    LuCommand c{direction, run.shard_offset, {}};
    for (const ModelPiece& p : run.pieces) c.segments.push_back({data + (p.model_offset - base), p.bytes});
    return c;
  };
  std::uint64_t cap = writing ? caps.write_bytes : caps.read_bytes;
  if (exchanging) {
    const std::uint64_t block = layout.block_bytes();
    const std::uint64_t per_shard = block_count * block / parts.size();
    cap = std::min(cap, std::max(block, per_shard / kExchangeSlices / block * block));
  }
  for (ShardRun& run : layout.runs(first_block, block_count, cap)) {
    ShardCommands& part = parts[run.shard];
    part.model_offsets.push_back(run.pieces.front().model_offset);
    part.commands.push_back(command(writing ? IoDirection::write : IoDirection::read, run, buffers.data));
  }
  if (!exchanging) return parts;
  for (ShardCommands& part : parts) {
    const std::size_t writes_of_part = part.commands.size();
    for (std::size_t w = 0; w < writes_of_part; ++w) {
      LuCommand read = part.commands[w];
      read.direction = IoDirection::read;
      read.after = w;
      for (IoSegment& segment : read.segments) segment.data = buffers.pulled + (segment.data - buffers.data);
      part.commands.push_back(std::move(read));
      part.model_offsets.push_back(part.model_offsets[w]);
    }
  }
  return parts;
}

namespace {
std::uint64_t packed_block_bytes(const Layout& layout, const CompressedExchange& how, std::uint64_t block) {
  return compressed_block_bytes(how.format, layout.bytes_of_block(block) / how.element_bytes);
}
}  // namespace

std::uint64_t packed_bytes(const Layout& layout, const CompressedExchange& how, std::uint64_t first_block,
                           std::uint64_t block_count) {
  if (block_count == 0) return 0;
  // Every block but the model's last has block_bytes.
  const std::uint64_t last = first_block + block_count - 1;
  return (block_count - 1) * packed_block_bytes(layout, how, first_block) + packed_block_bytes(layout, how, last);
}

Status check_compressed_exchange(const Layout& layout, const CompressedExchange& how, std::uint64_t first_block,
                                 std::uint64_t block_count, const Buffers& buffers) {
  const char* what = "exchange_compressed";
  const std::uint64_t blocks = layout.block_count();
  const std::string range =
      "blocks [" + std::to_string(first_block) + ", " + std::to_string(first_block + block_count) + ")";
  if (first_block > blocks || block_count > blocks - first_block)
    return Status::Error(StatusCode::invalid_argument, std::string(what) + ": " + range + " are outside the model's " +
                                                           std::to_string(blocks) + " blocks");
  if (how.element_bytes == 0 || layout.block_bytes() % how.element_bytes)
    return Status::Error(StatusCode::invalid_argument, std::string(what) +
                                                           ": the model's blocks are not whole elements of " +
                                                           std::to_string(how.element_bytes) + " bytes");
  const std::uint64_t packed = packed_bytes(layout, how, first_block, block_count);
  const std::uint64_t wire =
      layout.model_offset_of_block(first_block + block_count) - layout.model_offset_of_block(first_block);
  const std::string format(to_string(how.format));
  for (const auto& [bytes, need, name] :
       {std::tuple{buffers.data_bytes, packed, "compressed gradient buffer (" + format + ")"},
        std::tuple{
            buffers.pulled_bytes, how.pull_compressed ? packed : wire,
            how.pull_compressed ? "compressed average buffer (" + format + ")" : std::string("weights buffer")}}) {
    if (bytes != need)
      return Status::Error(StatusCode::invalid_argument, std::string(what) + ": the " + name + " holds " +
                                                             std::to_string(bytes) + " bytes, " + range + " are " +
                                                             std::to_string(need) + " bytes");
  }
  return Status::Ok();
}

std::vector<ShardCommands> plan_compressed_exchange(const Layout& layout, const CompressedExchange& how,
                                                    std::uint64_t first_block, std::uint64_t block_count,
                                                    const Buffers& buffers) {
  std::vector<ShardCommands> parts(layout.shard_count());
  std::vector<std::vector<LuCommand>> reads(parts.size());
  std::vector<std::vector<std::uint64_t>> read_offsets(parts.size());
  const std::uint64_t wire_base = layout.model_offset_of_block(first_block);
  std::uint64_t packed_at = 0;
  for (std::uint64_t b = first_block; b < first_block + block_count; ++b) {
    const BlockPlace place = layout.place(b);
    const std::uint64_t packed = packed_block_bytes(layout, how, b);
    ShardCommands& part = parts[place.shard];
    LuCommand write{IoDirection::write, place.shard_offset, {{buffers.data + packed_at, packed}}};
    LuCommand read{IoDirection::read, place.shard_offset, {}};
    read.segments = how.pull_compressed
                        ? std::vector<IoSegment>{{buffers.pulled + packed_at, packed}}
                        : std::vector<IoSegment>{{buffers.pulled + (place.model_offset - wire_base), place.bytes}};
    read.after = part.commands.size();
    part.commands.push_back(std::move(write));
    part.model_offsets.push_back(place.model_offset);
    reads[place.shard].push_back(std::move(read));
    read_offsets[place.shard].push_back(place.model_offset);
    packed_at += packed;
  }
  for (std::size_t s = 0; s < parts.size(); ++s) {
    for (LuCommand& r : reads[s]) parts[s].commands.push_back(std::move(r));
    parts[s].model_offsets.insert(parts[s].model_offsets.end(), read_offsets[s].begin(), read_offsets[s].end());
  }
  return parts;
}

}  // namespace blockps::detail
