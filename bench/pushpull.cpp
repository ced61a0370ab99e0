// pushpull: gradient push and weight pull throughput of a blockps grad LU, against the ceiling of the same
// tgtd moving the same bytes to and from tgt's `null` backing store (no data handling at all), measured in the
// same run, over the same kind of session, at the same request size and queue depth.
//
//   pushpull [--seconds S] [--rounds N] [--queue-depth Q] [--lu-size BYTES] [--request-sizes 256K,1M]
//            [--no-tgtd-tuning]
//
// tgtd runs with the glibc malloc settings ps-up.sh gives it (kTgtdGlibcTunables); --no-tgtd-tuning runs it
// with glibc's defaults, to see what they cost (1 MiB requests are much slower then).
// Each round measures null write, push, null read, pull for S seconds each, null and blockps back to back with
// their order alternating between rounds, so that slow drift and other load on the machine hit both. The table
// shows the median MB/s of each figure and the median of the per-round ratios (each ratio pairs two runs taken
// seconds apart, which cancels drift better than a ratio of medians). Targets: push/null-write >= 0.85,
// pull/null-read >= 0.90. Exit status is non-zero only when the benchmark could not run.
// Needs root, tgt and bs_blockps.so installed (cmake --install build).
#include <sys/utsname.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

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

constexpr const char* kNullIqn = "iqn.2026-11.io.blockps:bench-null";
constexpr const char* kGradIqn = "iqn.2026-11.io.blockps:bench-grad";
constexpr const char* kInitiatorIqn = "iqn.2026-11.io.blockps:bench";
constexpr double kPushTarget = 0.85;
constexpr double kPullTarget = 0.90;

struct Options {
  double seconds = 2.0;
  int rounds = 5;
  int queue_depth = 16;
  std::uint64_t lu_bytes = 256ull << 20;
  std::vector<std::uint32_t> request_sizes = {256u << 10, 1u << 20};
  bool tgtd_tuning = true;
};

// Returns an error message, or "" when the arguments are good (or --help was printed: `exit_now`).
Status parse_args(int argc, char** argv, Options& o, bool& exit_now) {
  CLI::App app{
      "blockps pushpull: push (WRITE + SGD) and pull (READ) throughput through tgtd and the module, "
      "against a tgt null LUN measured in the same run"};
  std::string lu_size = format_byte_size(o.lu_bytes), sizes;
  app.add_option("--seconds", o.seconds, "seconds per figure")->check(CLI::PositiveNumber);
  app.add_option("--rounds", o.rounds, "rounds (figures are medians over rounds)")->check(CLI::Range(1, 1000));
  app.add_option("--queue-depth", o.queue_depth, "commands in flight")->check(CLI::Range(1, 128));
  app.add_option("--lu-size", lu_size, "size of each LU (K/M/G), a multiple of 1M");
  app.add_option("--request-sizes", sizes, "comma-separated request sizes (K/M), multiples of 512 up to 16M");
  app.add_flag(
      "--no-tgtd-tuning", [&](std::int64_t) { o.tgtd_tuning = false; }, "run tgtd with glibc's malloc defaults");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    std::cout << app.help();
    exit_now = true;
    return Status::Ok();
  } catch (const CLI::ParseError& e) {
    return bench::usage_error(e.what());
  }
  if (!parse_byte_size(lu_size, o.lu_bytes) || o.lu_bytes == 0 || o.lu_bytes % (1u << 20) != 0)
    return bench::usage_error("--lu-size needs a multiple of 1M (K/M/G suffixes), got '" + lu_size + "'");
  if (!sizes.empty()) {
    o.request_sizes.clear();
    std::stringstream list(sizes);
    for (std::string item; std::getline(list, item, ',');) {
      std::uint64_t b = 0;
      if (!parse_byte_size(item, b) || b == 0 || b % 512 != 0 || b > (16u << 20))
        return bench::usage_error("--request-sizes needs multiples of 512 up to 16M, got '" + item + "'");
      o.request_sizes.push_back(static_cast<std::uint32_t>(b));
    }
  }
  for (auto sz : o.request_sizes) {
    if (o.lu_bytes % sz != 0)
      return bench::usage_error("--lu-size " + format_byte_size(o.lu_bytes) + " is not a multiple of " +
                                format_byte_size(sz));
  }
  return Status::Ok();
}

int fail(const std::string& msg, const TgtdInstance* tgtd = nullptr) {
  return bench::fail("pushpull", msg, tgtd == nullptr ? std::span<const TgtdInstance>{} : std::span(tgtd, 1));
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  bool exit_now = false;
  if (Status s = parse_args(argc, argv, opt, exit_now); !s.ok()) return fail(s.message());
  if (exit_now) return 0;

  bench::print_run_header("blockps pushpull");

  if (Status s = bench::preflight(); !s.ok()) return fail(s.message());

  TempDir dir;
  if (Status s = dir.create("blockps-pushpull-"); !s.ok()) return fail(s.message());
  TgtdInstance tgtd;
  TgtdOptions tgtd_options;
  if (opt.tgtd_tuning) tgtd_options.environment.push_back(std::string("GLIBC_TUNABLES=") + kTgtdGlibcTunables);
  if (Status s = tgtd.start(tgtd_options); !s.ok()) return fail(s.message());

  const std::string ckpt = dir.path("bench.ckpt");
  const std::string bsopts = "role=grad;size=" + format_byte_size(opt.lu_bytes) + ";opt=sgd;lr=0.001;dtype=f32";
  if (Status s = make_file(ckpt, 0); !s.ok()) return fail(s.message());
  for (auto r : {tgtd.add_target(1, kNullIqn), tgtd.add_lu(1, 1, "null", "null"), tgtd.add_target(2, kGradIqn),
                 tgtd.add_lu(2, 1, ckpt, "blockps", bsopts)}) {
    if (!r.ok()) return fail(r.describe(), &tgtd);
  }

  IscsiLun null_lun, grad_lun;
  if (Status s = null_lun.connect(tgtd.url(kNullIqn, 1), kInitiatorIqn); !s.ok()) return fail(s.message(), &tgtd);
  if (Status s = grad_lun.connect(tgtd.url(kGradIqn, 1), kInitiatorIqn); !s.ok()) return fail(s.message(), &tgtd);
  if (grad_lun.capacity_bytes() != opt.lu_bytes) {
    return fail(
        "grad LU has " + std::to_string(grad_lun.capacity_bytes()) + " bytes, expected " + std::to_string(opt.lu_bytes),
        &tgtd);
  }

  const std::uint32_t largest = *std::max_element(opt.request_sizes.begin(), opt.request_sizes.end());
  std::size_t source_bytes = std::min<std::uint64_t>(opt.lu_bytes, 64ull << 20);
  source_bytes -= source_bytes % largest;
  if (source_bytes == 0) source_bytes = largest;
  const std::vector<std::byte> grads = bench::finite_f32_gradients(source_bytes, 12345);

  std::cout << "tgtd: one process, control " << tgtd.control() << ", portal " << tgtd.portal() << ", malloc "
            << (opt.tgtd_tuning ? std::string("GLIBC_TUNABLES=") + kTgtdGlibcTunables : "glibc defaults")
            << "; initiator libiscsi on the same host (loopback), one session per LU\n"
            << "LUs: null (tgt --bstype null) vs blockps grad (" << bsopts << ")\n"
            << "queue depth " << opt.queue_depth << ", " << opt.rounds << " rounds x " << opt.seconds
            << " s per figure; MB/s = 10^6 bytes/s\n";

  // MB/s of `lun` at `req` bytes a request, for `seconds` or `requests` requests.
  auto run = [&](IscsiLun& lun, IoDirection dir_, std::uint32_t req, double seconds,
                 std::uint64_t requests) -> Result<double> {
    PipelineSpec spec;
    spec.direction = dir_;
    spec.request_bytes = req;
    spec.queue_depth = opt.queue_depth;
    spec.range_bytes = opt.lu_bytes;
    spec.seconds = seconds;
    spec.requests = requests;
    if (dir_ == IoDirection::write) spec.write_source = grads;
    PipelineResult r = run_pipeline(lun, spec);
    if (!r.ok()) return Status::Error(StatusCode::io, r.error.describe());
    return r.megabytes_per_second();
  };

  // Warm-up: one full pass of pushes and pulls over the LU (the shard's memory is touched for the first time,
  // tgtd's buffers are allocated), and of the null LU, at the largest request size.
  {
    const std::uint64_t pass = opt.lu_bytes / largest;
    for (auto* lun : {&null_lun, &grad_lun}) {
      for (auto d : {IoDirection::write, IoDirection::read}) {
        if (Result<double> r = run(*lun, d, largest, 0, pass); !r.ok()) return fail("warm-up: " + r.message(), &tgtd);
      }
    }
  }

  struct Row {
    std::uint32_t req;
    double null_write, push, null_read, pull;  // medians, MB/s
    double push_ratio, pull_ratio;             // medians of the per-round ratios
  };
  std::vector<Row> rows;
  for (std::uint32_t req : opt.request_sizes) {
    std::vector<double> nw, pu, nr, pl, push_ratios, pull_ratios;
    for (int round = 0; round < opt.rounds; ++round) {
      const bool null_first = round % 2 == 0;
      // Writes: null and push back to back, then reads: null and pull, in alternating order.
      for (auto d : {IoDirection::write, IoDirection::read}) {
        IscsiLun& first = null_first ? null_lun : grad_lun;
        IscsiLun& second = null_first ? grad_lun : null_lun;
        const Result<double> a = run(first, d, req, opt.seconds, 0);
        if (!a.ok()) return fail(a.message(), &tgtd);
        const Result<double> b = run(second, d, req, opt.seconds, 0);
        if (!b.ok()) return fail(b.message(), &tgtd);
        const double null_mbps = null_first ? *a : *b;
        const double bps_mbps = null_first ? *b : *a;
        (d == IoDirection::write ? nw : nr).push_back(null_mbps);
        (d == IoDirection::write ? pu : pl).push_back(bps_mbps);
        (d == IoDirection::write ? push_ratios : pull_ratios).push_back(null_mbps > 0 ? bps_mbps / null_mbps : 0);
      }
      std::printf("  round %d, %s: null write %.0f, push %.0f (%.2f), null read %.0f, pull %.0f (%.2f) MB/s\n",
                  round + 1, format_byte_size(req).c_str(), nw.back(), pu.back(), push_ratios.back(), nr.back(),
                  pl.back(), pull_ratios.back());
    }
    rows.push_back(Row{req, bench::median(nw), bench::median(pu), bench::median(nr), bench::median(pl),
                       bench::median(push_ratios), bench::median(pull_ratios)});
  }

  // The weights must still be finite after all those pushes (a sanity check of the data path, not a target).
  {
    std::vector<std::byte> sample(1 << 20);
    ScsiResult r = grad_lun.read(0, sample);
    if (!r.ok()) return fail("pull of the first MiB after the run: " + r.describe(), &tgtd);
    std::size_t bad = 0;
    for (std::size_t i = 0; i < sample.size(); i += sizeof(float)) {
      float f;
      std::memcpy(&f, sample.data() + i, sizeof f);
      if (!std::isfinite(f)) ++bad;
    }
    if (bad != 0) std::cout << "WARNING: " << bad << " non-finite weights in the first MiB after the run\n";
  }

  std::printf("\n%-8s %12s %10s %16s %12s %10s %16s\n", "request", "null write", "push", "push/null-write", "null read",
              "pull", "pull/null-read");
  for (const Row& r : rows) {
    const double wr = r.push_ratio;
    const double rr = r.pull_ratio;
    char wtxt[32], rtxt[32];
    std::snprintf(wtxt, sizeof wtxt, "%.3f %s", wr, wr >= kPushTarget ? "ok" : "MISSED");
    std::snprintf(rtxt, sizeof rtxt, "%.3f %s", rr, rr >= kPullTarget ? "ok" : "MISSED");
    std::printf("%-8s %12.0f %10.0f %16s %12.0f %10.0f %16s\n", format_byte_size(r.req).c_str(), r.null_write, r.push,
                wtxt, r.null_read, r.pull, rtxt);
  }
  std::printf(
      "targets: push/null-write >= %.2f, pull/null-read >= %.2f (MB/s: medians of %d runs; ratios: medians of "
      "the %d per-round ratios)\n",
      kPushTarget, kPullTarget, opt.rounds, opt.rounds);
  null_lun.disconnect();
  grad_lun.disconnect();
  if (Status s = tgtd.stop(); !s.ok()) std::cerr << "pushpull: warning: " << s.message() << "\n";
  return 0;
}
