#include "tests/support/tgtd_instance.h"

#include <fcntl.h>
#include <netdb.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <regex>
#include <sstream>
#include <thread>

namespace blockps::testing {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// tgtd's control socket path prefix (mgmt.c: TGT_IPC_SOCKET overrides /var/run/tgtd/socket).
std::string ipc_prefix() {
  const char* env = std::getenv("TGT_IPC_SOCKET");
  return (env != nullptr && *env != '\0') ? env : "/var/run/tgtd/socket";
}

std::string lock_path(int control) { return ipc_prefix() + "." + std::to_string(control) + ".lock"; }
std::string socket_path(int control) { return ipc_prefix() + "." + std::to_string(control); }

// tgtd holds a lockf() lock on socket.N.lock for its lifetime (mgmt.c ipc_init). Returns the pid of the
// process holding it, or 0 when nobody does.
pid_t control_lock_holder(int control) {
  int fd = ::open(lock_path(control).c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  struct flock fl {};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  fl.l_start = 0;
  fl.l_len = 1;
  pid_t holder = (::fcntl(fd, F_GETLK, &fl) == 0 && fl.l_type != F_UNLCK) ? fl.l_pid : 0;
  ::close(fd);
  return holder;
}

bool control_in_use(int control) { return control_lock_holder(control) != 0; }

// Whether tgtd could bind address:port now. tgtd sets SO_REUSEADDR, so we do too: TIME_WAIT leftovers of a
// previous run do not block it, a live listener does.
bool port_free(const std::string& address, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV | AI_PASSIVE;
  addrinfo* res = nullptr;
  if (::getaddrinfo(address.c_str(), std::to_string(port).c_str(), &hints, &res) != 0 || res == nullptr) {
    return true;  // let tgtd be the judge; start_once() verifies the portal it got
  }
  bool free = true;
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) != 0) free = false;
    ::close(fd);
  }
  ::freeaddrinfo(res);
  return free;
}

std::mt19937& rng() {
  static std::mt19937 gen([] {
    std::random_device rd;
    return rd() ^ (static_cast<unsigned>(::getpid()) << 16) ^
           static_cast<unsigned>(Clock::now().time_since_epoch().count());
  }());
  return gen;
}

int pick_control() {
  std::uniform_int_distribution<int> dist(2000, 29999);  // tgtd keeps it in a short
  int n = dist(rng());
  for (int i = 0; i < 200 && control_in_use(n); ++i) n = dist(rng());
  return n;
}

int pick_port(const std::string& address) {
  // Below Linux's ephemeral range (32768-60999), where outgoing connections take their local ports.
  std::uniform_int_distribution<int> dist(20000, 32767);
  int p = dist(rng());
  for (int i = 0; i < 200 && !port_free(address, p); ++i) p = dist(rng());
  return p;
}

std::string now_text() {
  std::time_t t = std::time(nullptr);
  char buf[64];
  std::strftime(buf, sizeof buf, "%F %T", std::localtime(&t));
  return buf;
}

void append_to_file(const std::string& path, const std::string& text) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return;
  [[maybe_unused]] auto w = ::write(fd, text.data(), text.size());
  ::close(fd);
}

std::size_t file_size(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? static_cast<std::size_t>(st.st_size) : 0;
}

bool exited_now(pid_t pid, int& status) { return ::waitpid(pid, &status, WNOHANG) == pid; }

// tgtd leaves socket.N and socket.N.lock behind when it exits. Remove them, but only while holding the lock
// ourselves, so we never pull the files from under a tgtd that took the number after ours exited.
void remove_control_files(int control) {
  int fd = ::open(lock_path(control).c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return;
  if (::lockf(fd, F_TLOCK, 1) == 0) {
    ::unlink(socket_path(control).c_str());
    ::unlink(lock_path(control).c_str());
  }
  ::close(fd);
}

}  // namespace

TgtdInstance::~TgtdInstance() {
  (void)stop();  // a destructor has no one to report to; stop() always leaves no process behind
  if (configured_ && control_ >= 0) remove_control_files(control_);
}

std::string TgtdInstance::unavailable_reason() {
  if (!running_as_root())
    return "tgtd needs root and this process is not root (euid " + std::to_string(::geteuid()) + ")";
  if (find_executable("tgtd").empty()) return "tgtd is not installed (scripts/setup.sh installs package tgt)";
  if (find_executable("tgtadm").empty()) return "tgtadm is not installed (package tgt)";
  return {};
}

std::string tgt_module_dir() {
  const char* env = std::getenv("BLOCKPS_BACKING_STORE_DIR");
  return (env != nullptr && *env != '\0') ? env : kTgtBackingStoreDir;
}

std::string blockps_module_path() { return tgt_module_dir() + "/bs_blockps.so"; }

bool TgtdInstance::blockps_module_installed() { return ::access(blockps_module_path().c_str(), R_OK) == 0; }

Status TgtdInstance::start(const TgtdOptions& options) {
  if (running()) return Status::Error("tgtd is already running (pid " + std::to_string(pid_) + ")");
  options_ = options;
  if (std::string why = unavailable_reason(); !why.empty()) return Status::Error(why);
  tgtd_path_ = find_executable(options_.tgtd);
  tgtadm_path_ = find_executable(options_.tgtadm);
  if (tgtd_path_.empty()) return Status::Error("tgtd executable not found: " + options_.tgtd);
  if (tgtadm_path_.empty()) return Status::Error("tgtadm executable not found: " + options_.tgtadm);
  if (options_.control && (*options_.control < 0 || *options_.control > 32767)) {
    return Status::Error("control number " + std::to_string(*options_.control) + " out of range 0..32767");
  }
  if (options_.port && (*options_.port <= 0 || *options_.port > 65535)) {
    return Status::Error("port " + std::to_string(*options_.port) + " out of range 1..65535");
  }
  if (options_.log_dir.empty()) {
    // A second start() (after stop()) keeps appending to the same log.
    if (own_log_dir_.path().empty()) {
      if (Status s = own_log_dir_.create("blockps-tgtd-"); !s.ok()) return s;
    }
    log_path_ = own_log_dir_.path("tgtd.log");
  } else {
    log_path_ = options_.log_dir + "/tgtd.log";
  }

  // start_once() sets control_/port_ while it waits; a failed start must not leave them naming a number
  // that may belong to another tgtd by now.
  const int previous_control = configured_ ? control_ : -1;
  const int previous_port = configured_ ? port_ : -1;
  auto give_up = [&](std::string why) {
    control_ = previous_control;
    port_ = previous_port;
    return Status::Error(std::move(why));
  };
  std::string last_why;
  for (int attempt = 0; attempt < std::max(1, options_.attempts); ++attempt) {
    int control = options_.control.value_or(pick_control());
    int port = options_.port.value_or(pick_port(options_.address));
    std::string why;
    const StartOutcome outcome = start_once(control, port, why);
    if (outcome != StartOutcome::ok && outcome != StartOutcome::control_taken) remove_control_files(control);
    switch (outcome) {
      case StartOutcome::ok:
        control_ = control;
        port_ = port;
        configured_ = true;
        return Status::Ok();
      case StartOutcome::control_taken:
        if (options_.control) return give_up(why);
        break;
      case StartOutcome::port_taken:
        if (options_.port) return give_up(why);
        break;
      case StartOutcome::failed:
        return give_up(why);
    }
    last_why = why;
  }
  return give_up("gave up starting tgtd after " + std::to_string(options_.attempts) + " attempts; last: " + last_why);
}

TgtdInstance::StartOutcome TgtdInstance::start_once(int control, int port, std::string& why) {
  // Another tgtd on this control number would answer our tgtadm calls as if it were ours: never start there.
  if (pid_t holder = control_lock_holder(control); holder != 0) {
    why = "control number " + std::to_string(control) + " is used by another tgtd (pid " + std::to_string(holder) +
          " holds " + lock_path(control) + ")";
    return StartOutcome::control_taken;
  }
  const std::string portal_arg =
      "portal=" + (options_.address.find(':') != std::string::npos ? "[" + options_.address + "]" : options_.address) +
      ":" + std::to_string(port);
  std::vector<std::string> args = {tgtd_path_, "-f", "-C", std::to_string(control), "--iscsi", portal_arg};
  args.insert(args.end(), options_.extra_args.begin(), options_.extra_args.end());

  append_to_file(log_path_, "=== " + now_text() + " blockps TgtdInstance: " +
                                (options_.environment.empty() ? "" : join_command(options_.environment) + " ") +
                                join_command(args) + "\n");
  const std::size_t run_start = file_size(log_path_);
  auto new_log = [&] {
    std::string all = read_text_file(log_path_);
    return all.size() > run_start ? all.substr(run_start) : std::string{};
  };

  int log_fd = ::open(log_path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) {
    why = "cannot open tgtd log " + log_path_ + ": " + std::strerror(errno);
    return StartOutcome::failed;
  }
  std::vector<char*> cargv;
  for (auto& a : args) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  // The child's environment, built before fork (setenv is not async-signal-safe): ours, with options'
  // NAME=VALUE entries replacing same-named ones.
  std::vector<std::string> env_strings = options_.environment;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    const std::string name = entry.substr(0, entry.find('='));
    bool overridden = false;
    for (const auto& o : options_.environment) overridden = overridden || o.substr(0, o.find('=')) == name;
    if (!overridden) env_strings.push_back(entry);
  }
  std::vector<char*> cenv;
  for (auto& e : env_strings) cenv.push_back(e.data());
  cenv.push_back(nullptr);
  // tgtd loads every file of its compiled-in module directory; another one is bind-mounted over it in the
  // child's own mount namespace (the host's stays untouched).
  const std::string module_dir = options_.module_dir.empty() ? tgt_module_dir() : options_.module_dir;
  const bool bind_module_dir = module_dir != kTgtBackingStoreDir;
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    why = std::string("fork: ") + std::strerror(errno);
    ::close(log_fd);
    return StartOutcome::failed;
  }
  if (pid == 0) {
    // tgtd must not outlive a test that crashed or was killed: it would hold its port and control number.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) ::dup2(devnull, STDIN_FILENO);
    ::dup2(log_fd, STDOUT_FILENO);
    ::dup2(log_fd, STDERR_FILENO);
    ::signal(SIGPIPE, SIG_DFL);
    if (bind_module_dir &&
        (::unshare(CLONE_NEWNS) != 0 || ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
         ::mount(module_dir.c_str(), kTgtBackingStoreDir, nullptr, MS_BIND, nullptr) != 0)) {
      static const char msg[] = "TgtdInstance: cannot bind-mount $BLOCKPS_BACKING_STORE_DIR over the module dir\n";
      [[maybe_unused]] auto w = ::write(STDERR_FILENO, msg, sizeof msg - 1);
      ::_exit(127);
    }
    ::execve(cargv[0], cargv.data(), cenv.data());
    static const char msg[] = "TgtdInstance: execve(tgtd) failed\n";
    [[maybe_unused]] auto w = ::write(STDERR_FILENO, msg, sizeof msg - 1);
    ::_exit(127);
  }
  ::close(log_fd);
  pid_ = pid;
  control_ = control;  // tgtadm() needs it while we wait
  port_ = port;

  const auto deadline = Clock::now() + options_.ready_timeout;
  bool ready = false;
  while (Clock::now() < deadline) {
    int status = 0;
    if (exited_now(pid_, status)) {
      pid_ = -1;
      std::string log = new_log();
      if (log.find("another tgtd is using") != std::string::npos) {
        why = "control number " + std::to_string(control) + " is used by another tgtd (" + lock_path(control) +
              " is locked)";
        return StartOutcome::control_taken;
      }
      why = "tgtd exited during start-up (status " + std::to_string(status) + "); its log " + log_path_ + ":\n" +
            tail_of(log, 4000);
      return StartOutcome::failed;
    }
    // Ready when our process holds the control lock (not another tgtd that raced us to the number) and
    // answers on the control socket.
    if (control_lock_holder(control) == pid_) {
      CommandResult r = run_command({tgtadm_path_, "-C", std::to_string(control), "--op", "show", "--mode", "sys"},
                                    RunOptions{5s, {}});
      if (r.ok()) {
        ready = true;
        break;
      }
    }
    std::this_thread::sleep_for(20ms);
  }
  if (!ready) {
    std::string log = new_log();
    (void)kill9();
    why = "tgtd (control " + std::to_string(control) + ") did not answer tgtadm within " +
          std::to_string(options_.ready_timeout.count()) + " ms; its log:\n" + tail_of(log, 4000);
    return StartOutcome::failed;
  }

  // When tgtd cannot bind the portal it logs it and silently listens on 0.0.0.0:3260 and [::]:3260 instead
  // (iscsi_tcp.c: iscsi_tcp_init falls back to the wildcard portal). Only the portal list tells.
  CommandResult portals = tgtadm({"--op", "show", "--mode", "portal"});
  const std::string want = "Portal: " + portal() + ",";
  if (!portals.ok() || portals.output.find(want) == std::string::npos) {
    std::string log = new_log();
    (void)kill9();
    bool bind_failed = log.find("unable to bind server socket") != std::string::npos ||
                       log.find("failed to create/bind to portal") != std::string::npos;
    why = "tgtd could not listen on " + options_.address + ":" + std::to_string(port) +
          (bind_failed ? " (port in use)" : "") + "; portals it has: " + portals.output + "; log:\n" +
          tail_of(log, 2000);
    return bind_failed ? StartOutcome::port_taken : StartOutcome::failed;
  }
  return StartOutcome::ok;
}

Status TgtdInstance::wait_until_gone(std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    int status = 0;
    pid_t w = ::waitpid(pid_, &status, WNOHANG);
    if (w == pid_ || (w < 0 && errno == ECHILD)) {
      pid_ = -1;
      return Status::Ok();
    }
    std::this_thread::sleep_for(20ms);
  }
  return Status::Error("tgtd (pid " + std::to_string(pid_) + ") still runs after " + std::to_string(timeout.count()) +
                       " ms");
}

void TgtdInstance::reap_and_forget() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
}

std::vector<int> TgtdInstance::target_ids() const {
  std::vector<int> ids;
  CommandResult r = tgtadm({"--op", "show", "--mode", "target"});
  if (!r.ok()) return ids;
  static const std::regex line(R"(^Target (\d+): )");
  std::istringstream in(r.output);
  for (std::string l; std::getline(in, l);) {
    std::smatch m;
    if (std::regex_search(l, m, line)) ids.push_back(std::stoi(m[1]));
  }
  return ids;
}

Status TgtdInstance::stop() {
  if (!running()) return Status::Ok();
  std::string problems;
  for (int tid : target_ids()) {
    CommandResult r = tgtadm({"--op", "delete", "--mode", "target", "--tid", std::to_string(tid), "--force"});
    if (!r.ok()) problems += r.describe() + "; ";
  }
  CommandResult sys = tgtadm({"--op", "delete", "--mode", "system"});
  if (!sys.ok()) problems += sys.describe() + "; ";
  Status gone = wait_until_gone(sys.ok() ? options_.stop_timeout : 1000ms);
  if (!gone.ok()) {
    problems += gone.message() + ", killed with SIGKILL";
    reap_and_forget();
  }
  if (!problems.empty()) return Status::Error("tgtd did not stop cleanly: " + problems);
  return Status::Ok();
}

Status TgtdInstance::kill9() {
  if (!running()) return Status::Error("tgtd is not running");
  reap_and_forget();
  return Status::Ok();
}

Status TgtdInstance::restart() {
  if (!configured_) return Status::Error("restart() before a successful start()");
  if (running()) {
    if (Status s = stop(); !s.ok()) {
      // stop() killed it anyway; carry on with the fresh start, but do not hide what happened.
      append_to_file(log_path_, "=== restart: " + s.message() + "\n");
    }
  }
  const auto deadline = Clock::now() + options_.ready_timeout;
  while (!port_free(options_.address, port_)) {
    if (Clock::now() >= deadline) {
      return Status::Error("port " + std::to_string(port_) + " is still in use " +
                           std::to_string(options_.ready_timeout.count()) + " ms after tgtd stopped");
    }
    std::this_thread::sleep_for(50ms);
  }
  std::string why;
  if (start_once(control_, port_, why) != StartOutcome::ok) return Status::Error("restart failed: " + why);
  return Status::Ok();
}

std::string TgtdInstance::log_text() const { return read_text_file(log_path_); }

CommandResult TgtdInstance::tgtadm(std::vector<std::string> args) const {
  if (control_ < 0 || tgtadm_path_.empty()) {
    CommandResult r;
    r.command = "tgtadm " + join_command(args);
    r.error = "tgtd was never started";
    return r;
  }
  std::vector<std::string> argv = {tgtadm_path_, "-C", std::to_string(control_)};
  argv.insert(argv.end(), std::make_move_iterator(args.begin()), std::make_move_iterator(args.end()));
  return run_command(argv, RunOptions{options_.command_timeout, {}});
}

CommandResult TgtdInstance::add_target(int tid, const std::string& iqn, Logins logins) const {
  const std::string t = std::to_string(tid);
  CommandResult r = tgtadm({"--lld", "iscsi", "--op", "new", "--mode", "target", "--tid", t, "-T", iqn});
  if (!r.ok()) return r;
  // The parameters before the binding, so that no session logs in with tgt's defaults.
  for (const auto& p : kBlockpsSessionParameters) {
    r = tgtadm({"--lld", "iscsi", "--op", "update", "--mode", "target", "--tid", t, "-n", p.name, "-v", p.value});
    if (!r.ok()) return r;
  }
  return logins == Logins::allowed ? allow_all_initiators(tid) : r;
}

CommandResult TgtdInstance::allow_all_initiators(int tid) const {
  return tgtadm({"--lld", "iscsi", "--op", "bind", "--mode", "target", "--tid", std::to_string(tid), "-I", "ALL"});
}

std::string with_test_device(const std::string& bstype, const std::string& bsopts) {
  const char* device = std::getenv(kTestDeviceVariable);
  if (bstype != "blockps" || device == nullptr || *device == '\0') return bsopts;
  if (bsopts.find("device=") != std::string::npos) return bsopts;  // the test chose one itself
  return bsopts + ";device=" + device;
}

CommandResult TgtdInstance::add_lu(int tid, int lun, const std::string& path, const std::string& bstype,
                                   const std::string& bsopts, std::optional<unsigned> blocksize) const {
  if (path.find(',') != std::string::npos || bsopts.find(',') != std::string::npos) {
    CommandResult r;
    r.command = "tgtadm --op new --mode logicalunit -b " + path + " --bsopts " + bsopts;
    r.error =
        "a ',' in the backing-store path or bsopts: tgtd splits its option string on ',' "
        "(use ';' between bsopts)";
    return r;
  }
  std::vector<std::string> args = {"--lld",  "iscsi",
                                   "--op",   "new",
                                   "--mode", "logicalunit",
                                   "--tid",  std::to_string(tid),
                                   "--lun",  std::to_string(lun),
                                   "-b",     path};
  if (!bstype.empty()) args.insert(args.end(), {"--bstype", bstype});
  if (!bsopts.empty()) args.insert(args.end(), {"--bsopts", with_test_device(bstype, bsopts)});
  if (blocksize) args.insert(args.end(), {"--blocksize", std::to_string(*blocksize)});
  return tgtadm(std::move(args));
}

bool TgtdInstance::has_lu(int tid, int lun) const {
  CommandResult r = tgtadm({"--op", "show", "--mode", "target"});
  if (!r.ok()) return false;
  static const std::regex target_line(R"(^Target (\d+): )");
  static const std::regex lun_line(R"(^\s+LUN: (\d+)\s*$)");
  std::istringstream in(r.output);
  int current = -1;
  for (std::string l; std::getline(in, l);) {
    std::smatch m;
    if (std::regex_search(l, m, target_line)) {
      current = std::stoi(m[1]);
    } else if (current == tid && std::regex_match(l, m, lun_line) && std::stoi(m[1]) == lun) {
      return true;
    }
  }
  return false;
}

std::string TgtdInstance::portal() const {
  const std::string& a = options_.address;
  return (a.find(':') != std::string::npos ? "[" + a + "]" : a) + ":" + std::to_string(port_);
}

std::string TgtdInstance::url(const std::string& iqn, int lun) const {
  return "iscsi://" + portal() + "/" + iqn + "/" + std::to_string(lun);
}

}  // namespace blockps::testing
