#include "ps_backend/shard/admission_gate.h"

#include <algorithm>
#include <cctype>
#include <utility>

#include "contract/log.h"
#include "contract/scsi_codes.h"
#include "ps_backend/shard/served_shard.h"

namespace blockps {

std::optional<LuOutcome> AdmissionVerdict::answer() const {
  switch (what) {
    case Admission::run:
    case Admission::park:
      return std::nullopt;
    case Admission::not_ready:
      return refused(Refusal::not_ready);
    case Admission::failed:
      return refused(Refusal::failed);
    case Admission::conflict:
      return refused(Refusal::reservation_conflict);
    case Admission::denied:
      break;
  }
  return access_denied();
}

AdmissionGate::AdmissionGate(LuRole role, ServedShard& shard, std::vector<std::string> admins)
    : role_(role), shard_(shard), admins_(std::move(admins)) {}

bool AdmissionGate::concerns(LuRole role, std::uint8_t op) {
  using namespace scsi;
  switch (role) {
    case LuRole::grad:
      return is_read(op) || is_write(op);
    case LuRole::weights:
      return writes_data(op) || op == kWriteSame10 || op == kWriteSame16 || op == kOrWrite16;
    case LuRole::status:
      // A READ too: the status page then counts only the sessions of the holder that tgt still has (admission runs
      // on tgt's main thread, where the claim can ask; the page is written on an I/O thread, where it cannot).
      return writes_data(op) || is_read(op);
  }
  return false;
}

AdmissionVerdict AdmissionGate::admit(const void* owner, const void* handle, std::uint8_t op, std::uint64_t offset,
                                      std::uint64_t len, WorkerRef sender, const SessionProbe& alive) {
  AdmissionVerdict verdict = decide(owner, handle, op, offset, len, sender, alive);
  verdict.sender = std::move(sender);
  return verdict;
}

AdmissionVerdict AdmissionGate::decide(const void* owner, const void* handle, std::uint8_t op, std::uint64_t offset,
                                       std::uint64_t len, const WorkerRef& sender, const SessionProbe& alive) {
  if (role_ == LuRole::status) {
    if (alive) shard_.forget_gone_sessions(alive);
    return scsi::is_read(op) ? AdmissionVerdict{} : control_write(sender);
  }
  const bool is_write = !scsi::is_read(op);
  // The claim first: a command of another job's session never reaches the rounds (it would join their membership).
  if (std::optional<AdmissionVerdict> fenced = fence(owner, handle, is_write, sender, offset, len)) return *fenced;
  if (!shard_.holds_commands(role_)) return {};
  return rounds(owner, handle, is_write, sender, offset, len, alive);
}

AdmissionVerdict AdmissionGate::control_write(const WorkerRef& sender) {
  // iSCSI names compare without regard to case (RFC 3720 3.2.6.1: they are normalised to lower case).
  const auto same_name = [&](const std::string& admin) {
    return admin.size() == sender.iqn.size() &&
           std::equal(admin.begin(), admin.end(), sender.iqn.begin(), [](char a, char b) {
             return std::tolower(static_cast<unsigned char>(a)) == std::tolower(static_cast<unsigned char>(b));
           });
  };
  if (!checks_writers() || std::any_of(admins_.begin(), admins_.end(), same_name)) return {};
  std::string names;
  for (const std::string& a : admins_) names += (names.empty() ? "" : "|") + a;
  const std::string why = shard_.path() + ": control write from " + sender.iqn +
                          " refused: not an administrator of this shard (admins=" + names +
                          " on its status LU): write control lines from an administrator's initiator name";
  log_line(why);
  shard_.note_refusal(sender, role_, why);
  return {Admission::denied, false, {}};
}

std::optional<AdmissionVerdict> AdmissionGate::fence(const void* owner, const void* handle, bool is_write,
                                                     const WorkerRef& sender, std::uint64_t offset, std::uint64_t len) {
  const JobClaim::Check claim = shard_.claim().check(sender);
  if (claim.verdict != JobClaim::Verdict::refused) return std::nullopt;
  const std::string why =
      "shard " + shard_.path() + " is held by job " + claim.holder + " (" + sessions_joined(claim.sessions) +
      "); session " + std::to_string(sender.itn) + " of " + sender.iqn + " has not joined it, so its " +
      std::string(to_string(role_)) + "-LU " + (is_write ? "write" : "read") +
      " is refused (RESERVATION CONFLICT): join job " + claim.holder + " (job=" + claim.holder +
      "), take the shard over (job=NAME with takeover: blockps --takeover), or release it (blockps release)";
  if (claim.first_refusal) log_line(why + " (logged once per session)");
  if (!shard_.holds_commands(role_)) {
    shard_.note_refusal(sender, role_, why);  // listed now: the LU answers it when it executes
    return AdmissionVerdict{Admission::conflict, false, {}};
  }
  // Listed when the hand-back fails it.
  shard_.rounds()->park(owner, handle, is_write, sender, offset, len, why, Refusal::reservation_conflict);
  return AdmissionVerdict{Admission::conflict, true, {}};
}

AdmissionVerdict AdmissionGate::rounds(const void* owner, const void* handle, bool is_write, const WorkerRef& sender,
                                       std::uint64_t offset, std::uint64_t len, const SessionProbe& alive) {
  Rounds& rounds = *shard_.rounds();
  const Admission a =
      is_write ? rounds.admit_push(handle, sender, offset, len, alive) : rounds.admit_pull(sender.itn, offset, len);
  switch (a) {
    case Admission::run:
      return {a, false, {}};
    case Admission::park:
      rounds.park(owner, handle, is_write, sender, offset, len);
      return {a, true, {}};
    case Admission::not_ready:
    case Admission::failed:
    case Admission::conflict:
    case Admission::denied:
      break;
  }
  // A refusal of the rounds, held until the hand-back that fails it (signalled now).
  rounds.park(owner, handle, is_write, sender, offset, len, rounds.refusal_reason(sender),
              a == Admission::failed ? Refusal::failed : Refusal::not_ready);
  return {a, true, {}};
}

}  // namespace blockps
