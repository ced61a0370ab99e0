// The worker-PS contract: the control lines a worker or an operator writes to a shard's status LU
// (docs/OPTIONS.md, "Control writes" and "Jobs and places"), and the grammar of the names they carry.
// Header-only and dependency-free (docs/ARCHITECTURE.md).
#pragma once

#include <cstddef>
#include <string_view>

namespace blockps::control {

/// `lr=VALUE`: the learning rate from the next push on (the same values bsopts lr= accepts).
inline constexpr std::string_view kLr = "lr";
/// `checkpoint`: write a checkpoint now; the WRITE completes when it is on disk. Accepted from every session that
/// may write control lines, also while another job holds the shard.
inline constexpr std::string_view kCheckpoint = "checkpoint";
/// `reset-rounds` (mode=sync/ssp): drop every open round and restart the round counters at 0.
inline constexpr std::string_view kResetRounds = "reset-rounds";
/// `job=NAME`: the session that sent the WRITE joins job NAME. An unclaimed shard, or one whose holder sent no
/// command for claim_idle_s, is claimed by NAME; a shard NAME holds is joined; a shard another job holds refuses
/// the whole write (unless `takeover` is in it). NAME: is_name().
inline constexpr std::string_view kJob = "job";
/// `takeover`, only with `job=NAME` in the same WRITE: NAME claims the shard although another job holds it; the
/// old job's sessions are refused from then on and a shard with rounds resets them.
inline constexpr std::string_view kTakeover = "takeover";
/// `release`: the shard has no holder any more (an operator's override, `blockps release`).
inline constexpr std::string_view kRelease = "release";
/// `place=MODEL INDEX/COUNT LAYOUT`: which part of which model the shard holds (contract/place.h). A shard
/// without a place takes it; the same place is fine; another is refused unless `replace-place` is in the WRITE.
inline constexpr std::string_view kPlace = "place";
/// `replace-place`, only with `place=` in the same WRITE: the new place replaces the shard's (a new model or a
/// deliberate re-layout: `blockps init`).
inline constexpr std::string_view kReplacePlace = "replace-place";

/// `init-weights`: the sending session asks to set the weights of a new job (an elastic job's hosts meet only at the
/// shards: ps_backend/control/weights_init.h). Never refused; the status page's /init says who holds the grant.
inline constexpr std::string_view kInitWeights = "init-weights";
/// `init-done`: the grant holder wrote the weights; /init/state becomes "set". Refused from another session.
inline constexpr std::string_view kInitDone = "init-done";

/// The bytes of a control write of `lines_bytes` bytes of lines to an LU of `block_bytes` blocks: whole blocks, with
/// at least one NUL after the lines (the shard reads the lines up to the first NUL; the rest is padding).
inline constexpr std::size_t control_write_bytes(std::size_t lines_bytes, std::size_t block_bytes) {
  return (lines_bytes + block_bytes) / block_bytes * block_bytes;
}

/// What a refusal lists as known.
inline constexpr std::string_view kKnown =
    "lr=VALUE, checkpoint, reset-rounds, job=NAME, takeover, release, place=MODEL INDEX/COUNT LAYOUT, replace-place, "
    "init-weights, init-done";

/// The longest job or model name, in bytes.
inline constexpr std::size_t kMaxNameBytes = 128;

/// A character of a job or model name: letters, digits and . _ : @ / + -
inline constexpr bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
         c == ':' || c == '@' || c == '/' || c == '+' || c == '-';
}

/// A job or model name: 1..kMaxNameBytes characters, each is_name_char (torchrun's run ids, "m-3f9a2c01d4e5b677").
inline constexpr bool is_name(std::string_view name) {
  if (name.empty() || name.size() > kMaxNameBytes) return false;
  for (char c : name)
    if (!is_name_char(c)) return false;
  return true;
}

/// What a refusal of a name says is allowed.
inline constexpr std::string_view kNameRule = "1 to 128 characters of A-Z a-z 0-9 . _ : @ / + -";

}  // namespace blockps::control
