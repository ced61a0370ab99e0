// Tenancy: which job a worker belongs to, and that job's hold on the shards (docs/OPTIONS.md, "Jobs and places").
// Every tenancy question of libblockps is answered here, for the C++ API, the C API, the CLI and the Python binding
// alike (they pass their arguments; none decides on its own):
//   - which job: choose_job (the caller's name, else the cluster file's [client] job, else $BLOCKPS_JOB, else the
//     caller's default, such as the Python package's name from torchrun);
//   - which kind of shard: read_claims refuses a shard of another kind than the worker expects;
//   - which place and model: Tenancy::settle (client/job_and_place.h has the pure rules and sentences);
//   - the claim, a takeover, a relaunch waiting out a dead holder's claim: Tenancy::claim_shards;
//   - release: Tenancy::release.
// Nothing is written to a shard before every check that can be made from the status pages passed: the job's name
// (before any login), the shards' kind and place (before the first control line).
// Private to the library: Cluster (client/cluster.cpp) owns one Tenancy over its shards' I/O threads.
#pragma once

#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "blockps/cluster.h"
#include "client/job_and_place.h"
#include "contract/result.h"

namespace blockps {

namespace detail {
class ShardIoThread;
}

// Where a worker's job name can come from, in the order choose_job takes them.
struct JobSources {
  std::optional<std::string> asked;     // the caller's (OpenOptions::job, Cluster::claim's job): "" means no job
  std::string file;                     // the cluster file's [client] job ("" none)
  const char* environment = nullptr;    // $BLOCKPS_JOB (null or "": none)
  std::optional<std::string> fallback;  // the caller's default (OpenOptions::default_job)
  // Why the caller has no default where it needed one (OpenOptions::no_default_job_because): "" when a worker of
  // no job is fine.
  std::string no_fallback_because;
};

// The job a worker belongs to ("" none). Errors: a name that is not one (invalid_argument for the caller's, config
// for the file's and the environment's), and no name where the caller said why it needed one (invalid_argument).
Result<std::string> choose_job(const JobSources& sources);

// choose_job for a worker opening `config` with `options` (asked: options.job, or what the caller puts first), with
// $BLOCKPS_JOB read here; errors name the cluster file.
Result<std::string> choose_job(const ClusterConfig& config, const OpenOptions& options,
                               const std::optional<std::string>& asked);

// "FILE: shard 'S' (STATUS LU ADDRESS)": how the tenancy's refusals name a shard.
std::string shard_words(const ClusterConfig& config, std::size_t index);

// Each shard's job and place as its status page says (`pages`, as JSON, in the file's order), and a refusal
// (mismatch) of the first shard of another kind than `expect`.
Result<std::vector<ShardClaim>> read_claims(const ClusterConfig& config, const std::vector<nlohmann::json>& pages,
                                            ShardKind expect);

class Tenancy {
 public:
  // `config` and `shards` are the Cluster's and outlive this.
  Tenancy(const ClusterConfig& config, std::vector<std::unique_ptr<detail::ShardIoThread>>& shards);

  const std::string& job() const { return job_; }
  const std::string& model() const { return model_; }
  // Where the cluster file puts shard `shard` of the model.
  Place place_of(std::size_t shard) const;

  // Cluster::open's step after the shape checks: the model (ModelChoice), every shard in its place (unless
  // options.replace_place), then the claim of `job` (claim_shards). `claims`: what each page said, of the kind the
  // worker expects (read_claims).
  Status settle(const std::string& job, const OpenOptions& options, std::vector<ShardClaim> claims);
  // Cluster::claim: reads every page afresh, checks the kind and the place (a shard re-initialised since open() may
  // hold another model) and claims for `job`.
  Status claim(const std::string& job, bool takeover, ShardKind expect);
  // A refusal (mismatch) of the first shard of another kind than `expect`, from every page read afresh.
  Status check_kind(ShardKind expect);
  // Drops every shard's claim (the operator's `blockps release`); the job that held each shard before ("" none).
  Result<std::vector<std::string>> release();

 private:
  // The control lines of the claim and the place, then every session joins the job: first the shards another job
  // holds, one at a time (a refusal there stops before the shards no other job holds), then shard 0 (its place names
  // the model where workers made up an identity each), then the rest at once.
  Status claim_shards(const std::string& job, bool takeover, bool replace_place, std::vector<ShardClaim> claims);
  // One shard's status-session write of its claim and place, and the refusal in words.
  Status write_claim(detail::ShardIoThread& shard, std::size_t index, const std::string& job, bool takeover,
                     bool replace_place, std::vector<ShardClaim>& claims);
  // Every session of one shard joins `job` (the grad, weights and status LU's own sessions).
  Status join_sessions(detail::ShardIoThread& shard, std::size_t index, const std::string& job);
  AskingWorker asking(std::size_t index, const std::string& job) const;
  // A refusal (mismatch) of the first shard whose page holds another place than the file gives it.
  Status check_places(const std::vector<ShardClaim>& claims) const;
  // Every shard's job and place as its page says now, of the kind `expect` (read_claims).
  Result<std::vector<ShardClaim>> read_claims_now(ShardKind expect);

  const ClusterConfig& config_;
  std::vector<std::unique_ptr<detail::ShardIoThread>>& shards_;
  std::string job_;
  std::string model_;
  bool model_generated_ = false;  // model_ is a new identity (no shard held one yet)
};

}  // namespace blockps
