#include "bench/bench_report.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <ctime>
#include <iostream>
#include <random>
#include <sstream>
#include <thread>

#include "tests/support/blockps_shard.h"
#include "tests/support/process.h"

namespace blockps::bench {

void print_run_header(const std::string& name) {
  char when[64];
  const std::time_t t = std::time(nullptr);
  std::strftime(when, sizeof when, "%F %T %Z", std::localtime(&t));
  utsname u{};
  ::uname(&u);
  std::cout << name << " benchmark, " << when << "\n"
            << "machine: " << std::thread::hardware_concurrency() << " CPUs (nproc " << ::sysconf(_SC_NPROCESSORS_ONLN)
            << "), " << cpu_model() << ", " << u.sysname << " " << u.release << "\n";
}

std::string cpu_model() {
  std::istringstream in(testing::read_text_file("/proc/cpuinfo"));
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(colon + 2);
    }
  }
  return "unknown CPU";
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::vector<std::byte> finite_f32_gradients(std::size_t bytes, unsigned seed) {
  std::vector<std::byte> out(bytes);
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (std::size_t i = 0; i + sizeof(float) <= bytes; i += sizeof(float)) {
    const float f = dist(gen);
    std::memcpy(out.data() + i, &f, sizeof f);
  }
  return out;
}

Status preflight() {
  std::string why = testing::TgtdInstance::unavailable_reason();
  if (why.empty()) why = testing::blockps_module_missing_reason();
  return why.empty() ? Status::Ok() : Status::Error(StatusCode::config, why);
}

Status usage_error(std::string message) { return Status::Error(StatusCode::invalid_argument, std::move(message)); }

int fail(std::string_view prog, const std::string& message, std::span<const testing::TgtdInstance> tgtds) {
  std::cerr << prog << ": ERROR: " << message << "\n";
  for (std::size_t i = 0; i < tgtds.size(); ++i) {
    if (tgtds[i].log_path().empty()) continue;
    std::cerr << "tgtd " << i << " log (" << tgtds[i].log_path() << "):\n"
              << testing::tail_of(tgtds[i].log_text(), 3000) << "\n";
  }
  return 1;
}

}  // namespace blockps::bench
