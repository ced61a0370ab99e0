// The `blockps` command's subcommands. Each takes the cluster file's path and its own options (already checked
// by the argument parser), prints its report on stdout and its errors on stderr ("blockps: ERROR: ..."), and
// returns the process's exit status. Nothing here throws past its caller or aborts.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "contract/result.h"

namespace blockps::cli {

// The exit statuses (docs/OPTIONS.md, "blockps CLI").
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;  // the cluster file, a shard, a file or an operation failed
inline constexpr int kExitUsage = 2;   // the command line is wrong (CLI11's parser says why)

// Prints "blockps: ERROR: <message>" on stderr.
void print_error(const std::string& message);

// The whole of `file` ("-": stdin), or why not: "FILE: cannot read the WHAT: strerror".
Result<std::string> read_input(const std::string& file, const std::string& what);

// Every shard's status page: a table with a total line, or {"shards": [...]} with --json. A shard whose page
// cannot be read is reported (stderr, and its row / its "error" member) and the exit status is kExitFailed, but
// the other shards are still shown.
// With `fields` (JSON pointers of contract/status_page.h): only those values, one line per page, tab-separated in
// the order given (a string as it is, anything else as JSON): "NAME\tVALUE..." per shard of the cluster, or the
// values alone of the one page in the file `page` ("-": stdin; what a status LU reads, NUL padding ignored), which
// needs no cluster file. A field the contract does not name is a usage error; one a page lacks, kExitFailed.
struct StatusOptions {
  bool json = false;
  std::vector<std::string> fields;
  std::optional<std::string> page;
};
int run_status(const std::string& cluster_file, const StatusOptions& options);

// Assigns the whole model's weights (the weights LUs) from a file of exactly model_bytes() wire bytes, as job
// `job` (nullopt: the cluster file's [client] job, else $BLOCKPS_JOB, else none). A shard another job holds is
// refused before anything is written (unless `takeover`), and so is a shard in another place (unless `relayout`:
// then every shard takes the place this file gives it).
struct InitOptions {
  std::string from;
  std::optional<std::string> job;
  bool takeover = false;
  bool relayout = false;
};
int run_init(const std::string& cluster_file, const InitOptions& options);

// Reads the whole model's weights (the weights LUs) into a file, written atomically (temp file + rename). It claims
// nothing (a shard's weights may be read whoever holds it), but a shard in another place is refused.
struct SaveOptions {
  std::string to;
};
int run_save(const std::string& cluster_file, const SaveOptions& options);

// Whole-model operations (pushes send a zero gradient) for a while or a number of iterations each, then a
// summary table (or JSON lines). both = push, then pull; step = a training step's communication done the
// sequential way (push, then pull); exchange = the same step as one pipelined exchange (Cluster::exchange).
enum class BenchOp { push, pull, both, step, exchange };
struct BenchOptions {
  double seconds = 5.0;          // per operation, when iterations is 0
  std::uint64_t iterations = 0;  // per operation; 0: run for `seconds`
  std::uint64_t warmup = 0;      // iterations first run and not counted
  BenchOp op = BenchOp::both;
  bool progress = true;            // a progress line on stderr, about every 0.5 s
  bool json = false;               // one JSON object per operation on stdout instead of the table
  std::optional<std::string> job;  // the job that claims the shards, as InitOptions::job
};
int run_bench(const std::string& cluster_file, const BenchOptions& options);

// Drops every shard's claim (the control line `release`): the operator's override when a job's holder is gone, or
// before another job takes over. Reports which job held each shard.
int run_release(const std::string& cluster_file);

// Serves Prometheus metrics of every shard at http://LISTEN/metrics until killed (client/cli/exporter_command.cpp).
struct ExporterOptions {
  std::string listen = "127.0.0.1:9464";  // HOST:PORT
  int timeout_s = 5;                      // a shard's login within a scrape
};
int run_exporter(const std::string& cluster_file, const ExporterOptions& options);

// Prints the shard config `file` as tgt-admin reads it, each blockps-shard line made into its three LUs
// (client/cli/targets_conf.h); a wrong line is kExitFailed with "FILE:LINE: what is wrong". Needs no cluster file.
int run_conf_expand(const std::string& file);

// The readers of a shard config the scripts call (client/cli/targets_conf.h; none needs a cluster file). Each
// prints line-oriented text for bash; an unreadable file or a wrong line is kExitFailed with "FILE[:LINE]: what is
// wrong" on stderr and nothing on stdout.
// `conf value FILE KEY`: each top-level KEY line's value, one line each, in file order (none: nothing, exit 0).
int run_conf_value(const std::string& file, const std::string& key);
// `conf lus FILE`: "IQN LUN BSTYPE PATH" per LU of FILE as tgt-admin reads it ("-" for no lun, no bs-type).
int run_conf_lus(const std::string& file);
// `conf for-tgt-admin FILE [--iser]`: FILE as scripts/ps-up.sh gives it to `tgt-admin -C N`: expanded, without
// its control-port line, and with `iser` an iSER copy of each target.
int run_conf_for_tgt_admin(const std::string& file, bool iser);
// `conf shard FILE`: "PORTAL IQN GRAD_LUN WEIGHTS_LUN STATUS_LUN", what scripts/attach.sh --conf logs in to.
int run_conf_shard(const std::string& file);

}  // namespace blockps::cli
