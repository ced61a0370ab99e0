#include "tests/support/process.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

namespace blockps::testing {
namespace {

using Clock = std::chrono::steady_clock;

bool is_executable_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

// Appends whatever the pipe holds right now; returns false at EOF or on a read error.
bool drain(int fd, std::string& out) {
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) {
      out.append(buf, static_cast<std::size_t>(n));
      continue;
    }
    if (n == 0) return false;
    if (errno == EINTR) continue;
    return errno == EAGAIN || errno == EWOULDBLOCK;
  }
}

int decode_wait_status(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

}  // namespace

std::string CommandResult::describe() const {
  std::ostringstream s;
  s << "`" << command << "`";
  if (!error.empty()) {
    s << " could not run: " << error;
  } else if (timed_out) {
    s << " timed out and was killed";
  } else {
    s << " exited " << exit_code;
  }
  if (!output.empty()) s << ": " << tail_of(output, 4000);
  return s.str();
}

std::string join_command(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv) {
    if (!out.empty()) out += ' ';
    bool plain = !a.empty() && a.find_first_of(" \t\n'\"\\;&|$`<>(){}*?") == std::string::npos;
    out += plain ? a : "'" + a + "'";
  }
  return out;
}

std::string find_executable(const std::string& name) {
  if (name.empty()) return {};
  if (name.find('/') != std::string::npos) return is_executable_file(name) ? name : std::string{};
  const char* env = std::getenv("PATH");
  std::string path = env != nullptr ? env : "";
  path += ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
  std::size_t start = 0;
  while (start <= path.size()) {
    std::size_t end = path.find(':', start);
    if (end == std::string::npos) end = path.size();
    std::string dir = path.substr(start, end - start);
    if (!dir.empty()) {
      std::string candidate = dir + "/" + name;
      if (is_executable_file(candidate)) return candidate;
    }
    start = end + 1;
  }
  return {};
}

bool running_as_root() { return ::geteuid() == 0; }

int free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  const bool bound = ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0 &&
                     ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0;
  ::close(fd);
  return bound ? ntohs(address.sin_port) : 0;
}

std::vector<std::string> torchrun_command(const std::string& torchrun, int ranks, int max_restarts) {
  const int port = free_loopback_port();
  if (port == 0) return {};
  return torchrun_node_command(torchrun, {.port = port, .nodes = 1, .ranks_per_node = ranks, .run_id = {}},
                               max_restarts);
}

std::vector<std::string> torchrun_node_command(const std::string& torchrun, const TorchrunNodes& nodes,
                                               int max_restarts) {
  std::vector<std::string> command{torchrun,
                                   "--rdzv_backend=c10d",
                                   "--rdzv_endpoint=127.0.0.1:" + std::to_string(nodes.port),
                                   "--nnodes=" + std::to_string(nodes.nodes),
                                   "--nproc_per_node=" + std::to_string(nodes.ranks_per_node),
                                   "--max_restarts=" + std::to_string(max_restarts),
                                   "--monitor_interval=1",
                                   "--redirects=1",
                                   "--tee=1"};
  if (!nodes.run_id.empty()) command.push_back("--rdzv_id=" + nodes.run_id);
  return command;
}

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string tail_of(const std::string& text, std::size_t max_bytes) {
  if (text.size() <= max_bytes) return text;
  return "...\n" + text.substr(text.size() - max_bytes);
}

CommandResult run_command(const std::vector<std::string>& argv, const RunOptions& options) {
  CommandResult result;
  result.command = join_command(argv);
  if (argv.empty()) {
    result.error = "empty command line";
    return result;
  }
  const std::string exe = find_executable(argv[0]);
  if (exe.empty()) {
    result.error = argv[0] + " not found (searched PATH, /usr/sbin, /sbin)";
    return result;
  }

  // Everything the child needs is prepared before fork: after fork only async-signal-safe calls are allowed.
  std::vector<std::string> args = argv;
  std::vector<char*> cargv;
  for (auto& a : args) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  const std::string cwd = options.cwd;

  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    result.error = std::string("pipe2: ") + std::strerror(errno);
    return result;
  }
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    result.error = std::string("fork: ") + std::strerror(errno);
    ::close(fds[0]);
    ::close(fds[1]);
    return result;
  }
  if (pid == 0) {
    // Die with the test that started us, even when it is killed.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) ::dup2(devnull, STDIN_FILENO);
    ::dup2(fds[1], STDOUT_FILENO);
    ::dup2(fds[1], STDERR_FILENO);
    ::signal(SIGPIPE, SIG_DFL);
    if (!cwd.empty() && ::chdir(cwd.c_str()) != 0) {
      static const char msg[] = "run_command: chdir failed\n";
      [[maybe_unused]] auto w = ::write(STDERR_FILENO, msg, sizeof msg - 1);
      ::_exit(127);
    }
    ::execv(exe.c_str(), cargv.data());
    static const char msg[] = "run_command: execv failed\n";
    [[maybe_unused]] auto w = ::write(STDERR_FILENO, msg, sizeof msg - 1);
    ::_exit(127);
  }
  ::close(fds[1]);
  ::fcntl(fds[0], F_SETFL, ::fcntl(fds[0], F_GETFL) | O_NONBLOCK);

  const auto deadline = Clock::now() + options.timeout;
  bool pipe_open = true;
  bool exited = false;
  int wait_status = 0;
  while (!exited) {
    if (pipe_open) {
      pollfd p{fds[0], POLLIN, 0};
      ::poll(&p, 1, 50);
      pipe_open = drain(fds[0], result.output);
    } else {
      ::usleep(10'000);
    }
    // Check for exit on every pass: a grandchild that keeps the pipe open must not keep us waiting.
    pid_t w = ::waitpid(pid, &wait_status, WNOHANG);
    if (w == pid) {
      exited = true;
    } else if (w < 0 && errno != EINTR) {
      result.error = std::string("waitpid: ") + std::strerror(errno);
      break;
    } else if (Clock::now() >= deadline) {
      ::kill(pid, SIGKILL);
      result.timed_out = true;
      ::waitpid(pid, &wait_status, 0);
      exited = true;
    }
  }
  if (pipe_open) drain(fds[0], result.output);
  ::close(fds[0]);
  if (exited) result.exit_code = decode_wait_status(wait_status);
  return result;
}

}  // namespace blockps::testing
