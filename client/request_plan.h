// A request of the Cluster cut into each shard's commands (client/cluster.cpp submits them): which blocks, checked
// against the model and the caller's buffers, and as which runs of blocks on which shard, with an exchange's READ
// after each of its WRITEs. Pure layout math over the caller's memory: no shard is asked. Private to the library.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "blockps/layout.h"
#include "client/transport/lu_command.h"
#include "contract/compressed_wire.h"
#include "contract/result.h"

namespace blockps::detail {

// What a request does.
enum class Transfer { push, pull, exchange, assign_weights, read_weights };
// "push", "write_weights", ...: the name of the call, for messages and the trace.
const char* name_of(Transfer transfer);
// Whether a request of `transfer` writes (push, write_weights, exchange) and to which LU (weights for write_weights
// and read_weights, else grad).
bool writes(Transfer transfer);
bool uses_weights_lu(Transfer transfer);

// The caller's memory of one request: `data` is what is written or read; an exchange reads into `pulled`.
struct Buffers {
  std::byte* data = nullptr;
  std::size_t data_bytes = 0;
  std::byte* pulled = nullptr;
  std::size_t pulled_bytes = 0;
};

// One shard's part of a request: its commands, and where each command's first byte is in the model (for messages).
struct ShardCommands {
  std::vector<LuCommand> commands;
  std::vector<std::uint64_t> model_offsets;
};

// The largest command of each direction (Cluster::open caps them to what every transport carries).
struct RequestCaps {
  std::uint64_t write_bytes = 0;
  std::uint64_t read_bytes = 0;
};

// How many commands an exchange's part on one shard is cut into at least, where its blocks allow: a sync shard
// answers a READ when the rounds of all its blocks closed, so one READ of a shard's whole part (a small model: one
// 1 MiB bucket is the whole Fashion-MNIST MLP) would wait for the last push of the exchange, and the pull could not
// overlap the push (bench/RESULTS.md, issue 48: the MLP at 10 Mbit/s, 0.69x DDP with one command a shard, 1.32x with
// at least 8).
inline constexpr std::uint64_t kExchangeSlices = 8;

// Ok, or invalid_argument naming the call: blocks [first_block, first_block + block_count) outside the model, or a
// buffer that is not those blocks' size.
Status check_request(const Layout& layout, Transfer transfer, std::uint64_t first_block, std::uint64_t block_count,
                     const Buffers& buffers);

// Each shard's commands for a checked request: runs of blocks contiguous on one shard within the caps (an exchange's
// READs use the WRITE cap, and its runs are cut into kExchangeSlices a shard where its blocks allow); an exchange's
// READs come after all of a shard's WRITEs, each waiting for its own WRITE (LuCommand::after; the transports
// interleave them on the wire: client/transport/command_order.h). One part per shard, empty where the request has
// no block of it.
std::vector<ShardCommands> plan_request(const Layout& layout, RequestCaps caps, Transfer transfer,
                                        std::uint64_t first_block, std::uint64_t block_count, const Buffers& buffers);

// A compressed exchange (a shard's compress=, docs/OPTIONS.md "Compressed blocks"): each block goes out as one WRITE
// of its compressed block at the block's first byte on its shard, and one READ at the same place follows it: of the
// compressed block (`pull_compressed`: an averaging shard's compressed average) or of the whole block in the wire
// dtype (an optimizer shard's weights). Compressed buffers hold the blocks' images back to back (packed).
struct CompressedExchange {
  CompressedFormat format = CompressedFormat::sign1;
  std::size_t element_bytes = 4;  // of the wire dtype: a block's elements are its bytes over this
  bool pull_compressed = true;
};

// Bytes blocks [first_block, first_block + block_count) take compressed, packed (each block's image, padding
// included); block first_block + k's image starts at packed_offset(..., k).
std::uint64_t packed_bytes(const Layout& layout, const CompressedExchange& how, std::uint64_t first_block,
                           std::uint64_t block_count);

// Ok, or invalid_argument naming the call: blocks outside the model, or a buffer that is not their size (packed, or
// their wire bytes for an uncompressed pull).
Status check_compressed_exchange(const Layout& layout, const CompressedExchange& how, std::uint64_t first_block,
                                 std::uint64_t block_count, const Buffers& buffers);

// Each shard's commands: a WRITE per block, then the READ of each after its own WRITE (as plan_request's exchange).
std::vector<ShardCommands> plan_compressed_exchange(const Layout& layout, const CompressedExchange& how,
                                                    std::uint64_t first_block, std::uint64_t block_count,
                                                    const Buffers& buffers);

}  // namespace blockps::detail
