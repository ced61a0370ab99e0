// A private tgtd for one test or benchmark: its own control socket (-C N) and its own TCP portal, started on
// demand and always stopped (targets deleted with --force, `--op delete --mode system`, then SIGKILL after a
// bounded wait: tgtd ignores SIGTERM). Several test processes may run at once: each picks a free control
// number and port, and retries with others when tgtd reports a collision.
//
//   TgtdInstance tgtd;
//   if (Status s = tgtd.start(); !s.ok()) FAIL() << s.message();
//   tgtd.add_target(1, "iqn.2026-11.io.blockps:test");
//   tgtd.add_lu(1, 1, "/tmp/x/lun.img", "rdwr");
//   IscsiLun lun; lun.connect(tgtd.url("iqn.2026-11.io.blockps:test", 1), "iqn.2026-11.io.blockps:init");
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "tests/support/process.h"
#include "tests/support/temp_dir.h"

namespace blockps::testing {

// Where tgtd loads backing-store modules from (compiled into tgtd, docs/ARCHITECTURE.md, "Facts about tgt").
inline constexpr const char* kTgtBackingStoreDir = "/usr/lib/tgt/backing-store";
// The module directory our tgtds use: $BLOCKPS_BACKING_STORE_DIR when set (ctest sets it to the build's
// tgt-modules/, so a test runs the module it was built with and parallel builds never share one), else
// kTgtBackingStoreDir. Another directory is bind-mounted over kTgtBackingStoreDir in tgtd's own mount namespace.
std::string tgt_module_dir();
// tgt_module_dir()/bs_blockps.so
std::string blockps_module_path();

// The iSCSI session parameters every blockps target is set up with (docs/ARCHITECTURE.md, "Facts about the machines":
// writes are 3-4x faster than with tgt's defaults). Name and value as `tgtadm --op update --mode target -n NAME -v
// VALUE` takes them.
struct SessionParameter {
  const char* name;
  const char* value;
};
inline constexpr SessionParameter kBlockpsSessionParameters[] = {
    {"MaxRecvDataSegmentLength", "262144"},
    {"MaxXmitDataSegmentLength", "262144"},
    {"MaxBurstLength", "16776192"},
    {"FirstBurstLength", "16776192"},
    {"InitialR2T", "No"},
    {"ImmediateData", "Yes"},
};

// BLOCKPS_TEST_DEVICE=gpu:0 (or auto): every blockps LU the tests create gets `device=` that value unless its
// bsopts name a device, so that the whole integration suite runs on the CUDA engine on a GPU host.
inline constexpr const char* kTestDeviceVariable = "BLOCKPS_TEST_DEVICE";
// `bsopts` with ";device=$BLOCKPS_TEST_DEVICE" appended for a blockps LU (see above).
std::string with_test_device(const std::string& bstype, const std::string& bsopts);

// glibc malloc settings for tgtd. tgtd allocates one buffer per command (posix_memalign); with glibc's
// defaults a 1 MiB buffer is a fresh mmap (or a re-grown heap) each time and tgtd spends its time in page
// faults: on the 2-core machines 1 MiB QD16 null-LUN writes went from ~1.8 to ~3.2 GB/s and pulls from ~1.5 to
// ~2.9 GB/s with these. scripts/lib/blockps-tgt.sh gives ps-up's tgtds the same value.
inline constexpr const char* kTgtdGlibcTunables =
    "glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=268435456";

struct TgtdOptions {
  std::optional<int> control;  // -C N; unset: pick a free one in [2000, 30000)
  std::optional<int> port;     // TCP portal port; unset: pick a free one in [20000, 32768)
  std::string address = "127.0.0.1";
  std::string log_dir;        // empty: a private temp dir, removed with the instance
  std::string tgtd = "tgtd";  // looked up in PATH, /usr/sbin, /sbin
  std::string tgtadm = "tgtadm";
  std::vector<std::string> extra_args;  // appended to the tgtd command line
  // NAME=VALUE set in tgtd's environment (on top of ours), e.g. "GLIBC_TUNABLES=" + kTgtdGlibcTunables.
  std::vector<std::string> environment;
  // The module directory this tgtd loads; empty: tgt_module_dir(). A test-only module's, e.g.
  std::string module_dir;
  std::chrono::milliseconds ready_timeout{15'000};    // until `tgtadm --op show --mode sys` answers
  std::chrono::milliseconds stop_timeout{10'000};     // graceful stop, then SIGKILL
  std::chrono::milliseconds command_timeout{60'000};  // each tgtadm call
  int attempts = 12;                                  // start tries with other control numbers / ports on collisions
};

class TgtdInstance {
 public:
  TgtdInstance() = default;
  ~TgtdInstance();  // stops tgtd if it runs (see stop())
  TgtdInstance(const TgtdInstance&) = delete;
  TgtdInstance& operator=(const TgtdInstance&) = delete;

  // Why tgtd cannot run here (not root, tgtd/tgtadm missing), or empty when it can. Tests skip on this.
  static std::string unavailable_reason();
  // True when our module is in tgt_module_dir().
  static bool blockps_module_installed();

  // Starts `tgtd -f -C N --iscsi portal=ADDR:PORT` with stdout and stderr into log_path(), and waits until it
  // answers tgtadm and listens on its portal. On a control-number or port collision (which tgtd only reports
  // in its log, or by silently falling back to 0.0.0.0:3260) it retries with other numbers when they were not
  // fixed by the options. Error when it is already running or cannot be started.
  Status start(const TgtdOptions& options = {});
  // Stops it: deletes all targets (--force: live sessions are dropped), `--op delete --mode system`, waits
  // up to stop_timeout, then SIGKILL. Always leaves no process behind; the status says whether the graceful
  // path worked. A no-op when not running.
  Status stop();
  // SIGKILL now, and reap it (a crash, as far as initiators and the module can tell).
  Status kill9();
  // A fresh tgtd on the same control number and portal (after stop() or kill9(); stops it first if it runs).
  // Waits for the port to be free. Targets and LUs are not recreated: that is the caller's job.
  Status restart();

  bool running() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  int control() const { return control_; }
  int port() const { return port_; }
  const std::string& address() const { return options_.address; }
  const std::string& log_path() const { return log_path_; }
  std::string log_text() const;  // the whole log so far (all runs of this instance)

  // Runs `tgtadm -C <control> ARGS...` (no shell) and returns exit code and combined output.
  CommandResult tgtadm(std::vector<std::string> args) const;

  // Whether a new target accepts logins at once, or only after allow_all_initiators() (once its LUs are there).
  enum class Logins { allowed, later };
  // New target TID named IQN with kBlockpsSessionParameters, bound to all initiator addresses (-I ALL) unless
  // `logins` is Logins::later. Returns the first command that failed, or the last that succeeded.
  CommandResult add_target(int tid, const std::string& iqn, Logins logins = Logins::allowed) const;
  // Binds target TID to all initiator addresses (-I ALL): it accepts logins from now on.
  CommandResult allow_all_initiators(int tid) const;
  // New LU: --lun LUN -b PATH [--bstype BSTYPE] [--bsopts BSOPTS] [--blocksize BLOCKSIZE]. Empty bstype and
  // bsopts are left out. A ',' in path or bsopts is refused here (tgtd would split the option string on it).
  CommandResult add_lu(int tid, int lun, const std::string& path, const std::string& bstype = {},
                       const std::string& bsopts = {}, std::optional<unsigned> blocksize = {}) const;
  // True when `--op show --mode target` lists LUN under target TID.
  bool has_lu(int tid, int lun) const;

  // "iscsi://ADDR:PORT/IQN/LUN", what libiscsi and qemu take.
  std::string url(const std::string& iqn, int lun) const;
  // "ADDR:PORT".
  std::string portal() const;

 private:
  enum class StartOutcome { ok, control_taken, port_taken, failed };
  StartOutcome start_once(int control, int port, std::string& why);
  Status wait_until_gone(std::chrono::milliseconds timeout);
  void reap_and_forget();
  std::vector<int> target_ids() const;

  TgtdOptions options_;
  std::string tgtd_path_;
  std::string tgtadm_path_;
  TempDir own_log_dir_;
  std::string log_path_;
  pid_t pid_ = -1;
  int control_ = -1;
  int port_ = -1;
  bool configured_ = false;  // start() has fixed control and port: restart() reuses them
};

}  // namespace blockps::testing
