// What a shard's status page says about the job that holds it and the place it holds in a model, checked against
// what a worker asks, and the sentences a refusal becomes (docs/OPTIONS.md, "Jobs and places"). Pure functions of
// the page: Cluster (client/cluster.cpp) reads the pages and sends the control lines; the unit tests pin the words.
//
// A shard serves one job at a time: a worker's sessions join a job with the control line `job=NAME`; commands of
// other sessions to the grad LU, and WRITEs to the weights LU, are answered RESERVATION CONFLICT. A shard also knows
// its place: which model (an identity), which shard of how many, which layout; a cluster file that would use it in
// another place is refused before anything is sent.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "blockps/cluster.h"  // ShardKind
#include "blockps/layout.h"
#include "blockps/lu_address.h"
#include "contract/place.h"
#include "contract/result.h"

namespace blockps {

// Where a shard sits in a model (contract/place.h); a Place with an empty model is no place.
// Shard `index` of `count` of `model` in the cluster file's layout.
Place place_in(const std::string& model, std::size_t index, std::size_t count, LayoutKind layout);
// "model MODEL as shard INDEX of COUNT (LAYOUT)"
std::string describe(const Place& place);

// One shard's job and place, as its status page says.
struct ShardClaim {
  std::string opt;                          // /shard/opt
  std::string holder;                       // the job that holds the shard; "" when unclaimed
  std::uint64_t sessions = 0;               // sessions that joined the holder
  std::optional<double> last_active_s_ago;  // the holder's last command; none when unclaimed
  std::optional<double> claim_idle_s;       // how long a silent holder keeps its claim
  std::uint64_t refused = 0;                // commands refused because of the claim
  bool lapsed = false;                      // the holder was silent for claim_idle_s: a job= claims the shard
  Place place;                              // model "" when the shard has no place

  // True when another job than `job` holds the shard and its claim has not lapsed (a job= of `job` is refused).
  bool held_against(const std::string& job) const { return !holder.empty() && holder != job && !lapsed; }
};

// Reads the job and place fields of a status page. Error (mismatch) when the page has none of them: a module
// older than jobs and places, which would serve any job in any place.
Result<ShardClaim> read_shard_claim(const nlohmann::json& page);

// "" when a shard running `opt` is of the kind `expect`; otherwise what it is, what was expected and what to change.
std::string kind_refusal(ShardKind expect, const std::string& opt);

// The model a cluster file's shards must hold: [model] name when the file gives one; else the model most shards
// hold (the first in file order on a tie); else a new identity (new_model_id). `generated` says which.
struct ModelChoice {
  std::string model;
  bool generated = false;
};
ModelChoice choose_model(const std::string& named, const std::vector<Place>& held);
// "m-" and 16 random hex digits.
std::string new_model_id();

// "" when a shard that holds `held` may serve as `wanted` (the same place, or none yet); otherwise why not and the
// fix, e.g. "holds model M as shard 0 of 2 (stripe); this cluster file places it as shard 1 of 2 (stripe): the file
// lists the shards in another order than the one that initialised them; restore the order, or re-initialise with
// `blockps init --relayout`". `named`: whether the file's [model] name chose wanted.model.
std::string place_refusal(const Place& held, const Place& wanted, bool named);

// The control lines one shard's status session writes when a worker opens the cluster: `job=NAME` (+ `takeover`)
// when it claims, `place=...` (+ `replace-place`) when the shard's place must be set or replaced. "" when there
// is nothing to write.
std::string open_control_lines(const std::string& job, bool takeover, const Place& held, const Place& wanted,
                               bool replace_place);
// "job=NAME\n": what every session of a job writes once logged in (and again after every re-login).
std::string join_line(const std::string& job);

// The status LU's LUN, when `status` is an iSCSI or iSER URL of the same target as `lu` (everything but the LUN
// equal); nullopt otherwise. A session reaches only its own target's LUs.
std::optional<int> status_lun_on_target_of(const LuAddress& lu, const LuAddress& status);

// What a shard answered that its status page can explain.
enum class ShardAnswer {
  reservation_conflict,  // RESERVATION CONFLICT: another job holds the shard (or took it over)
  job_refused,           // a session's job= line refused (at open, or after a re-login)
  not_ready,             // CHECK CONDITION NOT READY: too few workers, membership full, past a deadline
  hardware_error,        // CHECK CONDITION HARDWARE ERROR: an update the shard failed to apply (degraded)
  control_refused,       // CHECK CONDITION ILLEGAL REQUEST to a control write
};

// Who asked, for the sentence.
struct AskingWorker {
  std::string shard;         // "shard 'shard0'"
  std::string initiator;     // this worker's IQN (refusals of its own sessions are the ones read)
  std::string job;           // this worker's job ("" none)
  std::string cluster_file;  // for "blockps release --cluster FILE"
  // Refusals the shard recorded before this (its clock, Unix milliseconds) are another command's.
  std::int64_t since_unix_ms = 0;
};

// The sentence that says why the shard answered so: which shard, what it counts, what to change. From the newest
// /refusals/recent entry of this worker's initiator, else from what the page counts (/job, /rounds). "" when the
// page says nothing that explains it.
std::string explain_answer(const nlohmann::json& page, ShardAnswer answer, const AskingWorker& who);

// "shard 'S' is held by job 'A' (2 sessions, active 0.3 s ago); this job is 'B'. A shard serves one job at a
// time: stop job A, or take the shards over (...)": the refusal of a job's claim or command on a held shard.
std::string held_by_another_job(const ShardClaim& claim, const AskingWorker& who);

}  // namespace blockps
