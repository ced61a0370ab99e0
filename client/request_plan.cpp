// A request cut into each shard's commands (client/request_plan.h).
#include "client/request_plan.h"

#include <algorithm>
#include <string>
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

}  // namespace blockps::detail
