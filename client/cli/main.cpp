// `blockps`: the operator's command for a running cluster (docs/OPTIONS.md, "blockps CLI").
//
//   blockps --cluster cluster.toml status [--json | --field POINTER...]
//   blockps status --page FILE --field POINTER...
//   blockps -c cluster.toml [--job NAME] init --from weights.bin [--takeover] [--relayout]
//   blockps -c cluster.toml save --to weights.bin
//   blockps -c cluster.toml release
//   blockps -c cluster.toml [--job NAME] bench [--seconds 5 | --iterations N] [--warmup K] [--op
//   push|pull|both|step|exchange]
//                                 [--json] [--no-progress]
//   blockps -c cluster.toml exporter [--listen 127.0.0.1:9464] [--timeout 5]
//   blockps conf expand FILE
//   blockps conf value FILE KEY
//   blockps conf lus FILE
//   blockps conf for-tgt-admin FILE [--iser]
//   blockps conf shard FILE
//
// Exit status: 0 ok, 1 an operation failed (the message says which and why), 2 a usage error.
#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <exception>
#include <iostream>
#include <optional>
#include <string>

#include "client/cli/commands.h"
#include "client/cli/status_field.h"

namespace blockps::cli {

void print_error(const std::string& message) { std::cerr << "blockps: ERROR: " << message << "\n"; }

Result<std::string> read_input(const std::string& file, const std::string& what) {
  const bool from_stdin = file == "-";
  std::FILE* in = from_stdin ? stdin : std::fopen(file.c_str(), "rb");
  const int open_error = errno;
  std::string text;
  char buffer[65536];
  for (std::size_t n = 0; in && (n = std::fread(buffer, 1, sizeof buffer, in)) > 0;) text.append(buffer, n);
  const int err = !in ? open_error : std::ferror(in) ? errno : 0;  // a directory opens, and fails to read (EISDIR)
  if (in && !from_stdin) std::fclose(in);
  if (err) return Status::Error(StatusCode::io, file + ": cannot read the " + what + ": " + errno_message(err));
  return text;
}

namespace {

// --field's check: a pointer contract/status_page.h names (an unknown one is a usage error, not a missing field).
const CLI::Validator kStatusPageField(
    [](std::string& pointer) {
      if (is_status_page_field(pointer)) return std::string();
      return "'" + pointer + "' is not a field of the status page: contract/status_page.h names " +
             status_page_fields() + " (and the members of its latency objects and arrays)";
    },
    "POINTER");

int run(int argc, char** argv) {
  CLI::App app{"Show, initialise, save, release, benchmark and monitor a blockps parameter-server cluster"};
  app.require_subcommand(1);
  app.fallthrough();  // --cluster may also follow the subcommand
  std::string cluster_file;
  // Required by every subcommand but `conf` and `status --page` (checked after parsing).
  app.add_option("-c,--cluster", cluster_file, "the cluster file (TOML; docs/OPTIONS.md, \"Cluster file\")")
      ->envname("BLOCKPS_CLUSTER");
  std::optional<std::string> job;
  app.add_option("--job", job,
                 "init and bench: the job whose sessions claim the shards (a shard serves one job at a time; default: "
                 "the cluster file's [client] job, else $BLOCKPS_JOB, else none)");

  StatusOptions status;
  CLI::App* status_cmd = app.add_subcommand(
      "status", "every shard's status page: a table with a total line, and each shard's job and place");
  CLI::Option* json_flag =
      status_cmd->add_flag("--json", status.json, "print {\"shards\": [page, ...]} (each page with its \"name\")");
  CLI::Option* field_option =
      status_cmd
          ->add_option("--field", status.fields,
                       "print only this field of each page, a JSON pointer of contract/status_page.h (/shard/size); "
                       "repeat it for several, tab-separated on each shard's line (NAME, TAB, VALUE...)")
          ->check(kStatusPageField)
          ->excludes(json_flag);
  status_cmd
      ->add_option("--page", status.page,
                   "with --field: read one status page from this file (- for stdin; JSON as a status LU reads, NUL "
                   "padding ignored) instead of the cluster's shards, and print its values alone")
      ->needs(field_option);

  InitOptions init;
  CLI::App* init_cmd = app.add_subcommand(
      "init",
      "assign the whole model's weights from a file (weights LUs) as a worker of --job, and set each shard's place; a "
      "shard another job holds, or in another place, is refused before anything is written");
  init_cmd->add_option("--from", init.from, "raw wire-dtype bytes, exactly the model's size")->required();
  init_cmd->add_flag("--takeover", init.takeover,
                     "claim the shards for --job even where another job holds them (that job's next command is "
                     "refused)");
  init_cmd->add_flag("--relayout", init.relayout,
                     "give every shard the place this file gives it (a new model, or the shards in a new order or "
                     "layout), even where it holds another");

  SaveOptions save;
  CLI::App* save_cmd = app.add_subcommand(
      "save",
      "read the whole model's weights into a file (atomically); claims nothing, refuses shards in another place");
  save_cmd->add_option("--to", save.to, "the file to write (replaced by a rename)")->required();

  CLI::App* release_cmd = app.add_subcommand(
      "release", "drop every shard's job claim (the operator's override: any job may claim the shards next)");

  BenchOptions bench;
  bool no_progress = false;
  CLI::App* bench_cmd = app.add_subcommand("bench", "whole-model push/pull throughput and latency");
  bench_cmd->add_option("--seconds", bench.seconds, "how long each operation runs (seconds)")
      ->check(CLI::Range(0.01, 86400.0))
      ->capture_default_str();
  bench_cmd
      ->add_option("--iterations", bench.iterations,
                   "whole-model operations per op, instead of --seconds (0: use --seconds)")
      ->check(CLI::Range(std::uint64_t{0}, std::uint64_t{1} << 40))
      ->capture_default_str();
  bench_cmd->add_option("--warmup", bench.warmup, "operations run first and not counted")
      ->check(CLI::Range(std::uint64_t{0}, std::uint64_t{1} << 40))
      ->capture_default_str();
  std::string op = "both";
  bench_cmd
      ->add_option("--op", op,
                   "push, pull, both (push, then pull), step (each iteration a push then a pull) or exchange (each "
                   "iteration one pipelined push+pull)")
      ->check(CLI::IsMember({"push", "pull", "both", "step", "exchange"}))
      ->capture_default_str();
  bench_cmd->add_flag("--json", bench.json, "one JSON object per op on stdout (every iteration's seconds)");
  bench_cmd->add_flag("--no-progress", no_progress, "no progress line on stderr");

  ExporterOptions exporter;
  CLI::App* exporter_cmd =
      app.add_subcommand("exporter", "serve every shard's metrics to Prometheus over HTTP (GET /metrics)");
  exporter_cmd->add_option("--listen", exporter.listen, "HOST:PORT to serve on")->capture_default_str();
  exporter_cmd->add_option("--timeout", exporter.timeout_s, "seconds a shard's login may take within a scrape")
      ->check(CLI::Range(1, 60))
      ->capture_default_str();

  CLI::App* conf_cmd =
      app.add_subcommand("conf", "shard config files (configs/*.conf): what the scripts read from them");
  conf_cmd->require_subcommand(1);
  std::string conf_file;
  CLI::App* expand_cmd = conf_cmd->add_subcommand(
      "expand",
      "print FILE as tgt-admin reads it: each blockps-shard line made into its three <backing-store> blocks; a wrong "
      "line fails with FILE:LINE and what is allowed");
  expand_cmd->add_option("FILE", conf_file, "the shard config file")->required();
  std::string conf_key;
  CLI::App* value_cmd = conf_cmd->add_subcommand(
      "value",
      "print the value of each top-level KEY line of FILE (outside every <block>), one line each; none: nothing");
  value_cmd->add_option("FILE", conf_file, "the shard config file")->required();
  value_cmd->add_option("KEY", conf_key, "the key, e.g. blockps-portal")->required();
  CLI::App* lus_cmd = conf_cmd->add_subcommand(
      "lus",
      "print \"IQN LUN BSTYPE PATH\" for each LU of FILE as tgt-admin reads it (LUN, BSTYPE \"-\" when unset; "
      "a target's bs-type counts for its LUs without one)");
  lus_cmd->add_option("FILE", conf_file, "the shard config file")->required();
  bool conf_iser = false;
  CLI::App* for_tgt_admin_cmd = conf_cmd->add_subcommand(
      "for-tgt-admin",
      "print FILE as scripts/ps-up.sh gives it to tgt-admin -C N: expanded, its control-port line made a comment");
  for_tgt_admin_cmd->add_option("FILE", conf_file, "the shard config file")->required();
  for_tgt_admin_cmd->add_flag("--iser", conf_iser,
                              "also an iSER copy <target IQN-iser> (driver iser) of each target, over the same LUs");
  CLI::App* shard_cmd = conf_cmd->add_subcommand(
      "shard",
      "print \"PORTAL IQN GRAD_LUN WEIGHTS_LUN STATUS_LUN\" of FILE, what scripts/attach.sh --conf logs in to; "
      "fails naming FILE without exactly one blockps-portal line, one <target> and an LU of each role");
  shard_cmd->add_option("FILE", conf_file, "the shard config file")->required();

  try {
    app.parse(argc, argv);
    if (cluster_file.empty() && !conf_cmd->parsed() && !status.page) throw CLI::RequiredError("--cluster");
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? kExitOk : kExitUsage;  // --help is a ParseError with status 0
  }
  bench.progress = !no_progress;
  init.job = job;
  bench.job = job;
  bench.op = op == "push"       ? BenchOp::push
             : op == "pull"     ? BenchOp::pull
             : op == "step"     ? BenchOp::step
             : op == "exchange" ? BenchOp::exchange
                                : BenchOp::both;

  if (status_cmd->parsed()) return run_status(cluster_file, status);
  if (init_cmd->parsed()) return run_init(cluster_file, init);
  if (save_cmd->parsed()) return run_save(cluster_file, save);
  if (release_cmd->parsed()) return run_release(cluster_file);
  if (bench_cmd->parsed()) return run_bench(cluster_file, bench);
  if (exporter_cmd->parsed()) return run_exporter(cluster_file, exporter);
  if (expand_cmd->parsed()) return run_conf_expand(conf_file);
  if (value_cmd->parsed()) return run_conf_value(conf_file, conf_key);
  if (lus_cmd->parsed()) return run_conf_lus(conf_file);
  if (for_tgt_admin_cmd->parsed()) return run_conf_for_tgt_admin(conf_file, conf_iser);
  if (shard_cmd->parsed()) return run_conf_shard(conf_file);
  return kExitUsage;  // unreachable: require_subcommand(1)
}

}  // namespace
}  // namespace blockps::cli

int main(int argc, char** argv) {
  try {
    return blockps::cli::run(argc, argv);
  } catch (const std::exception& e) {  // e.g. bad_alloc for a model larger than memory: a message, not an abort
    blockps::cli::print_error(e.what());
    return blockps::cli::kExitFailed;
  }
}
