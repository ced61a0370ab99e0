// Who sets the weights of a new job (docs/OPTIONS.md, "Elastic jobs"): the hosts of an elastic job each run their
// own launcher and meet only at the shards, so the first one sets the initial weights and the others take them.
// A session asks with the control line init-weights; the shard grants the first that asks while its weights were
// never set (no update applied since the shard was created, none in the checkpoint it loaded), and the grant holder
// says init-done once it wrote them. The status page's /init tells everyone where it stands, so an asker learns from it
// whether it holds the grant and the others wait for "set". A grant whose session is gone before init-done lapses (the
// next init-weights takes it), so a host that dies while setting them holds no one up. Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>

#include "contract/result.h"
#include "ps_backend/control/job_claim.h"
#include "ps_backend/rounds/worker_ref.h"

namespace blockps {

class WeightsInit {
 public:
  enum class State { unset, granted, set };
  struct View {
    State state = State::unset;
    std::string by;  // granted: the IQN of the session that sets them; set: the one that did ("" when loaded)
  };

  /// init-weights from `who`: granted when the weights are unset and not `trained` (an update applied: a shard loaded
  /// from a checkpoint after a restart), or the grant is already `who`'s IQN (a host that asks again after a restart).
  /// Otherwise nothing changes: the status page says who holds the grant, or that the weights are set. Never refused.
  void ask(const WorkerRef& who, bool trained);
  /// init-done from `who`: the grant holder's weights are set. invalid_argument when `who` holds no grant.
  Status done(const WorkerRef& who);
  /// A grant whose session is gone lapses (tgt's main thread; `alive` is its session lookup).
  void forget_gone_session(const SessionProbe& alive);
  /// Another job took the shard over: its weights are the new job's to set.
  void restart();
  /// Where it stands; `trained` (an update was applied) reads as set, whatever was asked.
  View view(bool trained) const;

 private:
  mutable std::mutex mutex_;
  State state_ = State::unset;
  WorkerRef holder_;  // granted: who; set: who did ("" iqn when loaded)
};

std::string_view to_string(WeightsInit::State s);

}  // namespace blockps
