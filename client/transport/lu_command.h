// What the client asks of one LU, whatever carries it (client/transport/lu_transport.h: libiscsi or a block device):
// READs and WRITEs of scattered memory at byte offsets, a batch of them, and how many may be in flight.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace blockps {

enum class IoDirection { read, write };

// A piece of memory that a command reads into or writes from (commands may scatter and gather).
struct IoSegment {
  std::byte* data = nullptr;
  std::size_t bytes = 0;
};

// LuCommand::after when a command waits for no other.
inline constexpr std::size_t kNoPredecessor = static_cast<std::size_t>(-1);

// One READ or WRITE of the segments' bytes, back to back, at LU byte offset `offset`.
struct LuCommand {
  IoDirection direction = IoDirection::read;
  std::uint64_t offset = 0;
  std::vector<IoSegment> segments;
  // The index of an earlier command of the same batch that must complete with success before this one is
  // issued (the exchange: a block's READ after its WRITE); kNoPredecessor: none. See client/transport/command_order.h.
  std::size_t after = kNoPredecessor;
  // Whose command this is, for whoever observes the batch's completions (client/transport/command_order.h's
  // CommandObserver): a batch of exchanges numbers its exchanges (client/shard_io_thread.h). Transports copy it along.
  std::uint32_t tag = 0;
  std::uint64_t bytes() const {
    std::uint64_t n = 0;
    for (const IoSegment& s : segments) n += s.bytes;
    return n;
  }
};

// How many commands a transport keeps in flight on one LU.
struct QueueLimits {
  int depth = 16;  // commands in flight (>= 1)
  // In a batch where some commands wait for others (an exchange), independent commands (its WRITEs) in
  // flight; 0: no limit but `depth`. The cluster file's [client] exchange_writes;
  // client/transport/command_order.h says why.
  int exchange_writes = 0;
};

// How long an iSCSI login, or a command (in a batch: any command) waiting for its answer, may take before it fails,
// unless the caller says otherwise (ConnectOptions, TransportOptions).
inline constexpr std::chrono::seconds kDefaultIscsiTimeout{30};

}  // namespace blockps
