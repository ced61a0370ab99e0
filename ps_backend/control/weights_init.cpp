#include "ps_backend/control/weights_init.h"

#include "contract/log.h"

namespace blockps {

void WeightsInit::ask(const WorkerRef& who, bool trained) {
  std::lock_guard lock(mutex_);
  if (trained && state_ == State::unset) return;  // view() says set: nobody sets them again
  if (state_ == State::unset || (state_ == State::granted && holder_.iqn == who.iqn)) {
    if (state_ == State::unset)
      log_line("init-weights: granted to session " + std::to_string(who.itn) + " of " + who.iqn);
    state_ = State::granted;
    holder_ = who;  // a restarted holder's new session
  }
}

Status WeightsInit::done(const WorkerRef& who) {
  std::lock_guard lock(mutex_);
  if (state_ == State::set && holder_.iqn == who.iqn) return Status::Ok();  // said twice
  if (state_ != State::granted || holder_.iqn != who.iqn)
    return Status::Error(StatusCode::invalid_argument,
                         "control init-done: session " + std::to_string(who.itn) + " of " + who.iqn +
                             " holds no init-weights grant (" +
                             (state_ == State::granted ? "it is " + holder_.iqn + "'s"
                              : state_ == State::set   ? "the weights are set already"
                                                       : "nobody asked") +
                             "): send init-weights first and set the weights only when the status page's /init/by "
                             "names this session's IQN");
  state_ = State::set;
  log_line("init-weights: set by session " + std::to_string(who.itn) + " of " + who.iqn);
  return Status::Ok();
}

void WeightsInit::forget_gone_session(const SessionProbe& alive) {
  std::lock_guard lock(mutex_);
  if (state_ != State::granted || alive(holder_.tid, holder_.itn)) return;
  log_line("init-weights: the grant of session " + std::to_string(holder_.itn) + " of " + holder_.iqn +
           " lapsed: its session is gone before init-done; the next init-weights takes it");
  state_ = State::unset;
  holder_ = {};
}

void WeightsInit::restart() {
  std::lock_guard lock(mutex_);
  state_ = State::unset;
  holder_ = {};
}

WeightsInit::View WeightsInit::view(bool trained) const {
  std::lock_guard lock(mutex_);
  if (trained && state_ != State::set) return {State::set, ""};
  return {state_, holder_.iqn};
}

std::string_view to_string(WeightsInit::State s) {
  switch (s) {
    case WeightsInit::State::unset:
      return "unset";
    case WeightsInit::State::granted:
      return "granted";
    case WeightsInit::State::set:
      return "set";
  }
  return "unset";
}

}  // namespace blockps
