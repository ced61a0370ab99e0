// What every blockps benchmark shares: the header line that says where and when it ran, medians, and finite
// gradients to push.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace blockps::bench {

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
