// What every blockps benchmark shares: the header line that says where and when it ran, medians, and finite
// gradients to push.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "contract/result.h"
#include "tests/support/tgtd_instance.h"

namespace blockps::bench {

/// Ok when a benchmark that starts tgtd with our module can run here; else why not: not root, tgt missing, or the
/// module missing from its directory.
Status preflight();
/// A refused command line (StatusCode::invalid_argument), for the benchmarks' argument parsers.
Status usage_error(std::string message);
/// "PROG: ERROR: MESSAGE" and the tail of each started tgtd's log on stderr; returns 1 (main's exit status).
int fail(std::string_view prog, const std::string& message, std::span<const testing::TgtdInstance> tgtds = {});

/// "NAME benchmark, DATE" and "machine: N CPUs (nproc N), CPU MODEL, KERNEL" on stdout.
void print_run_header(const std::string& name);
/// The first "model name" of /proc/cpuinfo ("unknown CPU" when there is none).
std::string cpu_model();
/// Median of the values (0 for none).
double median(std::vector<double> values);
/// `bytes` of random f32 values in [-1, 1) from `seed` (bytes rounded down to whole floats, the rest zero):
/// finite gradients that keep small-lr weights far from overflow.
std::vector<std::byte> finite_f32_gradients(std::size_t bytes, unsigned seed);

}  // namespace blockps::bench
