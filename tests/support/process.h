// Running helper programs (tgtadm, iscsi-test-cu, ...) from tests and benchmarks without a shell, with a
// bounded wait and their output captured. Nothing here aborts: every failure comes back as a value.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "contract/result.h"

namespace blockps::testing {

using blockps::Status;

// What a command did.
struct CommandResult {
  int exit_code = -1;      // exit status; 128+N when killed by signal N; -1 when it never ran
  bool timed_out = false;  // it ran past its limit and was killed (exit_code is then 128+9)
  std::string output;      // stdout and stderr, interleaved as written
  std::string error;       // why it could not be started or waited for (empty when it ran)
  std::string command;     // the command line, for messages

  bool ok() const { return error.empty() && !timed_out && exit_code == 0; }
  // One line for test failure messages: "`cmd` exited 22: <output>".
  std::string describe() const;
};

struct RunOptions {
  std::chrono::milliseconds timeout{30'000};
  std::string cwd;  // empty: the caller's working directory
};

// Runs argv[0] (a path, or a name looked up in PATH) with argv, stdin from /dev/null, stdout and stderr into
// one pipe. Kills it (SIGKILL) when it runs past options.timeout. The child dies with the calling thread
// (PR_SET_PDEATHSIG), so an aborted test leaves nothing behind.
CommandResult run_command(const std::vector<std::string>& argv, const RunOptions& options = {});

// "a b 'c d'" for messages; not meant to be fed to a shell.
std::string join_command(const std::vector<std::string>& argv);

// Path of an executable: `name` itself when it contains a '/', else the first match in PATH (plus /usr/sbin
// and /sbin, where tgt lives, which a non-login PATH may lack). Empty when none is found.
std::string find_executable(const std::string& name);

// True when the calling process runs as root (tgtd needs it).
bool running_as_root();

// A TCP port on 127.0.0.1 that nothing listened on a moment ago (bound to port 0, then closed), for helpers
// that need one of their own (torchrun's rendezvous, gloo's MASTER_PORT): tests running side by side must not
// share a fixed port. 0 when none could be had.
int free_loopback_port();

// torchrun (the program at `torchrun`) with `ranks` ranks on this host and `max_restarts` restarts, up to the
// script to run: its rendezvous on a free loopback port (not --standalone's fixed 29400, which tests running side
// by side would share), and `--redirects 1 --tee 1` (Debian bookworm's torchrun crashes on Python 3.11 with its
// default `--redirects 0`: docs/OPTIONS.md). Empty when no port could be had.
std::vector<std::string> torchrun_command(const std::string& torchrun, int ranks, int max_restarts = 0);

// The environment setting that makes every rank of a torch test a worker of its own (blockps/torch/host.py's host
// aggregation off): the tests of the per-rank paths run their ranks on one machine, which is one host to blockps.
inline constexpr char kEveryRankAWorker[] = "BLOCKPS_HOST_AGGREGATION=0";

// One of `nodes` torchrun agents of one job on this machine (each is a host to blockps: torchrun's node), meeting
// at the c10d rendezvous on loopback `port` under `run_id` (a multi-node job needs one: blockps names the job by
// it). Start one command per node, side by side.
struct TorchrunNodes {
  int port = 0;
  int nodes = 1;
  int ranks_per_node = 1;
  std::string run_id;
};
std::vector<std::string> torchrun_node_command(const std::string& torchrun, const TorchrunNodes& nodes,
                                               int max_restarts = 0);

// The contents of a file; empty when it cannot be read.
std::string read_text_file(const std::string& path);

// The last `max_bytes` of `text`, prefixed with "...\n" when cut; for log excerpts in messages.
std::string tail_of(const std::string& text, std::size_t max_bytes);

}  // namespace blockps::testing
