// Which queued exchange a shard's stream sends next ([client] send_order, blockps/cluster_file.h's SendOrder): the
// one definition of the order every worker computes alike, so that a sync shard's rounds close in it and the next
// forward's first modules (DistributedOptimizer's early_forward) wait least (P3's and ByteScheduler's point: send
// what is needed first).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "blockps/cluster_file.h"
#include "client/transport/lu_command.h"

namespace blockps {

// One exchange waiting in a shard's queue: its commands on the shard's grad LU, and the lowest model byte offset it
// carries (the first layer it holds, in the model's order of parameters).
struct QueuedExchange {
  std::span<const LuCommand> commands;
  std::uint64_t lowest_model_offset = 0;
};

// The index in `queued` (not empty; in the order queued) of the exchange to send next. SendOrder::queue: the first.
// ascending (descending): the lowest (highest) model offset, the earliest queued among equals, except that an
// exchange never passes an earlier one that touches a byte of the LU it touches (a block's pushes go in the order
// queued: a sync shard parks a worker's second push of a block until its first one's round closed, and the second
// must not take the slot the first needs).
std::size_t next_to_send(std::span<const QueuedExchange> queued, SendOrder order);

}  // namespace blockps
