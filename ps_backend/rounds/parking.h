// Commands the glue holds back (tgt's asynchronous completion) until the rounds let them go on: which LU
// parked them, their deadlines and refusals, and the glue's wake-up subscriptions. Thread-safe: its own lock,
// taken after the rounds' lock when both are held, and never around a call back into the rounds.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>

#include "ps_backend/rounds/admission.h"
#include "ps_backend/rounds/worker_ref.h"

namespace blockps {

/// A grad-LU command held by the glue.
struct ParkedCommand {
  const void* handle;
  bool is_push;
  WorkerRef worker;
  std::uint64_t offset, len;
  std::chrono::steady_clock::time_point deadline;
  std::string refusal;  // set: fail it with this reason at the next wake
  Refusal refused_as = Refusal::not_ready;
};

class ParkingLot {
 public:
  /// `timeout_ms`: the longest a command stays parked (worker_timeout_ms).
  explicit ParkingLot(std::uint32_t timeout_ms) : timeout_ms_(timeout_ms) {}

  /// Hold a command the glue parked; `owner` is the LU whose glue resubmits it. With a `refusal`, the command is
  /// only held until the glue's next wake, which fails it with that reason (a store can complete a command
  /// with its own sense only asynchronously), and that wake is signalled now (the owner's subscription).
  void park(const void* owner, const void* handle, bool is_push, const WorkerRef& worker, std::uint64_t offset,
            std::uint64_t len, std::string refusal = {}, Refusal refused_as = Refusal::not_ready);
  /// Every command parked for `owner` fails with `why` (not_ready) at its next process(): its LU is closing.
  void refuse(const void* owner, const std::string& why);
  /// Every command parked for any LU fails with `why` as `as` at its owner's next process(), which wake_all()
  /// brings soon.
  void refuse_all(const std::string& why, Refusal as);

  using Readmit = std::function<Admission(const ParkedCommand&)>;
  using Resubmit = std::function<void(const ParkedCommand&)>;
  using Fail = std::function<void(const ParkedCommand&, Refusal, const std::string& why)>;
  /// Give back every command of `owner`: `fail` those aborted (`aborted(handle)`), refused or past their
  /// deadline (not_ready); the others go where `readmit` says: run to `resubmit`, not_ready or failed to `fail`
  /// with `degraded_reason()`, park back here with their first deadline. Deadline failures name
  /// `degraded_reason()` too when it is not "".
  void process(const void* owner, const std::function<bool(const void* handle)>& aborted, const Readmit& readmit,
               const Resubmit& resubmit, const Fail& fail, const std::function<std::string()>& degraded_reason);

  /// `wake` is called (from any thread) when parked commands of `owner` may go on; it must only signal.
  void subscribe(const void* owner, std::function<void()> wake);
  void unsubscribe(const void* owner);
  /// Wake every subscriber.
  void wake_all() const;
  /// wake_all when a command is parked (the data path's wake-ups: spare tgtd's main thread the others).
  void wake_if_parked() const;

  std::size_t size() const;
  bool empty() const { return size() == 0; }

 private:
  const std::uint32_t timeout_ms_;
  mutable std::mutex mutex_;
  std::multimap<const void*, ParkedCommand> parked_;
  std::map<const void*, std::function<void()>> subscribers_;
};

}  // namespace blockps
