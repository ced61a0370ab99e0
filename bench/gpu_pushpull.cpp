// gpu_pushpull: end-to-end push (WRITE + optimizer step) and pull (READ) throughput through one tgtd with a
// device=gpu:0 shard against a device=cpu shard of the same options, measured in the same run: rounds alternate
// which goes first, and the table shows medians and the median of the per-round gpu/cpu ratios. Beside the push
// throughput, what the shard costs the host: tgtd's CPU-seconds (user + system of all its threads, from
// /proc/PID/stat before and after each engine's push phase) per GB (10^9 bytes) pushed, over all rounds.
//
//   gpu_pushpull [--seconds S] [--rounds N] [--request-bytes B] [--opt sgd|adam|...] [--dtype f32|bf16|f16]
//
// --dtype is the shards' wire dtype (the gradients pushed are finite f32 values rounded to it; the master weights
// are f32 either way).
//
// Without a usable GPU it says so loudly and exits 0. Needs root and tgt (as bench/pushpull).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "aggregator/shard_store.h"
#include "aggregator/wire_convert.h"
#include "bench/bench_report.h"
#include "client/transport/iscsi_lun.h"
#include "ps_backend/config/lu_options.h"
#include "tests/support/blockps_shard.h"
#include "tests/support/lu_pipeline.h"
#include "tests/support/process.h"
#include "tests/support/temp_dir.h"
#include "tests/support/tgtd_instance.h"

namespace {

using namespace blockps;
using namespace blockps::testing;

constexpr const char* kInitiator = "iqn.2026-11.io.blockps:gpu-bench";
constexpr std::uint64_t kLuBytes = 256ull << 20;

int fail(const std::string& msg, const TgtdInstance* tgtd = nullptr) {
  return bench::fail("gpu_pushpull", msg, tgtd == nullptr ? std::span<const TgtdInstance>{} : std::span(tgtd, 1));
}

// CPU time process `pid` has used so far, all its threads, user + system (fields 14 and 15 of /proc/PID/stat,
// counted after the ')' that ends the command name, which may hold spaces), in seconds; < 0 when unreadable.
double cpu_seconds(pid_t pid) {
  const std::string stat = read_text_file("/proc/" + std::to_string(pid) + "/stat");
  const std::size_t name_end = stat.rfind(')');
  if (name_end == std::string::npos) return -1;
  std::istringstream fields(stat.substr(name_end + 1));
  std::string skip;
  for (int field = 3; field <= 13; ++field) fields >> skip;  // state .. cmajflt
  unsigned long long utime = 0, stime = 0;
  if (!(fields >> utime >> stime)) return -1;
  return static_cast<double>(utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

// "0.42" or "n/a" (tgtd's /proc entry was unreadable, or nothing was pushed).
std::string cpu_per_gb_text(double cpu_s, double gb) {
  if (cpu_s < 0 || gb <= 0) return "n/a";
  char text[32];
  std::snprintf(text, sizeof text, "%.3f", cpu_s / gb);
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 2;
  int rounds = 5;
  std::uint64_t request = 1u << 20;
  std::string opt = "sgd";
  std::string dtype_name = "f32";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--seconds")
      seconds = std::atof(v.c_str());
    else if (k == "--rounds")
      rounds = std::atoi(v.c_str());
    else if (k == "--request-bytes") {
      if (!parse_byte_size(v, request)) return fail("--request-bytes " + v);
    } else if (k == "--opt")
      opt = v;
    else if (k == "--dtype")
      dtype_name = v;
    else
      return fail("unknown option " + k + " (--seconds S --rounds N --request-bytes B --opt O --dtype D)");
  }
  if (argc % 2 == 0) return fail("options come in pairs: --seconds S --rounds N --request-bytes B --opt O --dtype D");
  const std::optional<WireDtype> dtype = parse_wire_dtype(dtype_name);
  if (seconds <= 0 || rounds < 1 || request == 0 || request % 512 != 0 || kLuBytes % request != 0 ||
      !parse_optimizer(opt) || !dtype)
    return fail(
        "need --seconds > 0, --rounds >= 1, --request-bytes a multiple of 512 dividing 256M, --opt an optimizer, "
        "--dtype f32, bf16 or f16 (got --dtype " +
        dtype_name + ")");

  bench::print_run_header("blockps gpu_pushpull");
  if (const Status gpu = check_device(Device::cuda(0)); !gpu.ok()) {
    std::printf(
        "\n*** gpu_pushpull: NOT RUN, no usable GPU on this machine: %s ***\n"
        "*** No GPU figure was measured. Run it on a GPU host. ***\n\n",
        gpu.message().c_str());
    return 0;
  }
  if (Status s = bench::preflight(); !s.ok()) return fail(s.message());

  TempDir dir;
  if (Status s = dir.create("blockps-gpu-bench-"); !s.ok()) return fail(s.message());
  TgtdInstance tgtd;
  TgtdOptions tgtd_options;
  tgtd_options.environment.push_back(std::string("GLIBC_TUNABLES=") + kTgtdGlibcTunables);
  if (Status s = tgtd.start(tgtd_options); !s.ok()) return fail(s.message());

  const char* devices[] = {"cpu", "gpu:0"};
  IscsiLun luns[2];
  for (int i = 0; i < 2; ++i) {
    const std::string iqn = std::string("iqn.2026-11.io.blockps:bench-") + (i ? "gpu" : "cpu");
    const std::string bsopts =
        "role=grad;size=256M;dtype=" + dtype_name + ";lr=0.001;opt=" + opt + ";device=" + devices[i];
    for (auto r : {tgtd.add_target(i + 1, iqn),
                   tgtd.add_lu(i + 1, 1, dir.path(std::string(devices[i]) + ".ckpt"), "blockps", bsopts)})
      if (!r.ok()) return fail(r.describe(), &tgtd);
    if (Status s = luns[i].connect(tgtd.url(iqn, 1), kInitiator); !s.ok()) return fail(s.message(), &tgtd);
  }
  std::vector<std::byte> grads = bench::finite_f32_gradients(64ull << 20, 12345);
  if (*dtype != WireDtype::f32) {  // the same values, rounded to the wire dtype
    std::vector<float> values(grads.size() / sizeof(float));
    std::memcpy(values.data(), grads.data(), grads.size());
    grads.resize(values.size() * wire_size(*dtype));
    encode_wire(*dtype, values.data(), grads.data(), values.size());
  }
  // cpu_s and gb: what the run added to tgtd's CPU-seconds and to the GB moved (cpu_s < 0 once unreadable).
  const auto run = [&](IscsiLun& lun, IoDirection d, double secs, std::uint64_t requests, double& mbps,
                       double* cpu_s = nullptr, double* gb = nullptr) {
    const double cpu_before = cpu_seconds(tgtd.pid());
    PipelineSpec spec;
    spec.direction = d;
    spec.request_bytes = static_cast<std::uint32_t>(request);
    spec.queue_depth = 16;
    spec.seconds = secs;
    spec.requests = requests;
    if (d == IoDirection::write) spec.write_source = grads;
    const PipelineResult r = run_pipeline(lun, spec);
    const double cpu_after = cpu_seconds(tgtd.pid());
    mbps = r.megabytes_per_second();
    if (cpu_s != nullptr)
      *cpu_s = (cpu_before < 0 || cpu_after < 0 || *cpu_s < 0) ? -1 : *cpu_s + cpu_after - cpu_before;
    if (gb != nullptr) *gb += static_cast<double>(r.bytes) / 1e9;
    return r.ok() ? std::string() : r.error.describe();
  };
  std::printf("tgtd control %d, one session per LU, QD16, %s requests, opt=%s, 256M %s shards; MB/s = 10^6 B/s\n",
              tgtd.control(), format_byte_size(request).c_str(), opt.c_str(), dtype_name.c_str());
  for (auto& lun : luns)  // warm-up: one pass each way
    for (auto d : {IoDirection::write, IoDirection::read}) {
      double ignored = 0;
      if (std::string e = run(lun, d, 0, kLuBytes / request, ignored); !e.empty()) return fail("warm-up: " + e, &tgtd);
    }
  std::vector<double> mb[2][2], ratio[2];              // [direction][device], [direction]
  double push_cpu_s[2] = {0, 0}, push_gb[2] = {0, 0};  // [device], over all rounds' push phases
  for (int round = 0; round < rounds; ++round) {
    for (int d = 0; d < 2; ++d) {
      double got[2] = {0, 0};
      for (int k = 0; k < 2; ++k) {
        const int dev = (round + k) % 2;  // alternate which device goes first
        if (std::string e = run(luns[dev], d ? IoDirection::read : IoDirection::write, seconds, 0, got[dev],
                                d ? nullptr : &push_cpu_s[dev], d ? nullptr : &push_gb[dev]);
            !e.empty())
          return fail(std::string(devices[dev]) + ": " + e, &tgtd);
      }
      mb[d][0].push_back(got[0]), mb[d][1].push_back(got[1]);
      ratio[d].push_back(got[0] > 0 ? got[1] / got[0] : 0);
    }
    std::printf("  round %d: push cpu %.0f gpu %.0f, pull cpu %.0f gpu %.0f MB/s\n", round + 1, mb[0][0].back(),
                mb[0][1].back(), mb[1][0].back(), mb[1][1].back());
  }
  const std::string cpu_per_gb[2] = {cpu_per_gb_text(push_cpu_s[0], push_gb[0]),
                                     cpu_per_gb_text(push_cpu_s[1], push_gb[1])};
  std::string cpu_ratio = "n/a";
  if (cpu_per_gb[0] != "n/a" && cpu_per_gb[1] != "n/a" && push_cpu_s[0] > 0) {
    char text[32];
    std::snprintf(text, sizeof text, "%.2f", (push_cpu_s[1] / push_gb[1]) / (push_cpu_s[0] / push_gb[0]));
    cpu_ratio = text;
  }
  std::printf("\n%-6s %10s %12s %10s %14s %16s %10s\n", "", "cpu MB/s", "gpu:0 MB/s", "gpu/cpu", "cpu CPU-s/GB",
              "gpu:0 CPU-s/GB", "gpu/cpu");
  for (int d = 0; d < 2; ++d)
    std::printf("%-6s %10.0f %12.0f %10.2f %14s %16s %10s\n", d ? "pull" : "push", bench::median(mb[d][0]),
                bench::median(mb[d][1]), bench::median(ratio[d]), d ? "-" : cpu_per_gb[0].c_str(),
                d ? "-" : cpu_per_gb[1].c_str(), d ? "-" : cpu_ratio.c_str());
  std::printf(
      "CPU-s/GB: tgtd's CPU-seconds (user + system, all threads, /proc/%d/stat) per 10^9 bytes pushed, over the %d "
      "push phases of each engine (%.1f GB cpu, %.1f GB gpu:0); lower burns fewer host cores\n",
      static_cast<int>(tgtd.pid()), rounds, push_gb[0], push_gb[1]);
  return 0;
}
