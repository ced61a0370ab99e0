// The worker-PS contract: the control lines a worker or an operator writes to a shard's status LU
// (docs/OPTIONS.md, "Control writes"). Header-only and dependency-free (docs/ARCHITECTURE.md).
#pragma once

#include <string_view>

namespace blockps::control {

/// `lr=VALUE`: the learning rate from the next push on (the same values bsopts lr= accepts).
inline constexpr std::string_view kLr = "lr";
/// `checkpoint`: write a checkpoint now; the WRITE completes when it is on disk.
inline constexpr std::string_view kCheckpoint = "checkpoint";
/// `reset-rounds` (mode=sync/ssp): drop every open round and restart the round counters at 0.
inline constexpr std::string_view kResetRounds = "reset-rounds";
/// What a refusal lists as known.
inline constexpr std::string_view kKnown = "lr=VALUE, checkpoint, reset-rounds";

}  // namespace blockps::control
