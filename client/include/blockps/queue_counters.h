// What a transport counts about its commands, summed over its life (LuTransport::queue_counters(),
// Cluster::grad_queue_counters()).
#pragma once

#include <cstdint>

namespace blockps {

// What a transport's batches did, summed over its life: enough to show from the transport itself (not from a
// clock) that READs and WRITEs were in flight at the same time.
struct LuQueueCounters {
  std::uint64_t commands = 0;  // issued
  // Issued while at least one command of the other direction was in flight.
  std::uint64_t issued_beside_other_direction = 0;
  // The libiscsi transport's recovery (client/transport/libiscsi_transport.cpp): sessions logged in again after a
  // transport failure, and WRITEs (pushes) given up because the session was lost before their answer came.
  std::uint64_t reconnects = 0;
  std::uint64_t unanswered_writes_dropped = 0;
  // Commands sent again because the target answered UNIT ATTENTION (client/transport/iscsi_lun.h,
  // kUnitAttentionResends): after a shard's LUs were added or its tgtd restarted while this session was logged in.
  std::uint64_t unit_attentions_resent = 0;

  LuQueueCounters& operator+=(const LuQueueCounters& o) {
    commands += o.commands;
    issued_beside_other_direction += o.issued_beside_other_direction;
    reconnects += o.reconnects;
    unanswered_writes_dropped += o.unanswered_writes_dropped;
    unit_attentions_resent += o.unit_attentions_resent;
    return *this;
  }
};

}  // namespace blockps
