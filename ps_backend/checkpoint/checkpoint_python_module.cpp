// blockps._shard_checkpoint: a shard's checkpoint file (checkpoint.h) as numpy arrays and back, for
// the Python package's torch-format export and import (blockps/torch/checkpoint.py). It links the shard's own
// reader and writer, so the file format has one definition; it runs where the checkpoint files are (the shard
// hosts, or wherever they were copied), and talks to no shard.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <variant>

#include "aggregator/cpu_engine.h"
#include "aggregator/model_shard.h"
#include "ps_backend/checkpoint/checkpoint.h"
#include "ps_backend/config/lu_options.h"

namespace py = pybind11;

namespace {

std::shared_ptr<blockps::CpuEngine> engine() {
  static auto e = std::make_shared<blockps::CpuEngine>(0);
  return e;
}

// The whole checkpoint: options (the shard's bsopts as its status page shows them), the per-block step counts,
// the f32 master weights and the optimizer's state slots (Adam: exp_avg, exp_avg_sq; momentum: the velocity),
// and the job that held the shard and its place ("MODEL INDEX/COUNT LAYOUT"), "" when none.
py::dict read_checkpoint(const std::string& path) {
  const blockps::Result<blockps::CheckpointHeader> header = blockps::read_checkpoint_header(path);
  if (!header.ok()) throw std::runtime_error(path + ": " + header.message());
  const blockps::ShardConfig config = header->config;
  blockps::ModelShard shard(config.geometry, config.optimizer, engine());
  if (blockps::Status loaded = blockps::load_checkpoint(path, shard); !loaded.ok())
    throw std::runtime_error(path + ": " + loaded.message());
  const std::uint64_t elements = config.geometry.elements(), block = config.geometry.block_elements();
  const int slots = blockps::state_slots(config.optimizer.kind);
  py::array_t<float> weights(static_cast<py::ssize_t>(elements));
  py::array_t<std::uint64_t> steps(static_cast<py::ssize_t>(config.geometry.blocks()));
  py::list state;
  std::vector<py::array_t<float>> state_arrays;
  for (int s = 0; s < slots; ++s) state_arrays.emplace_back(static_cast<py::ssize_t>(elements));
  shard.for_each_block([&](const blockps::BlockView& v) {
    const std::uint64_t first = v.index * block;
    std::copy(v.weights.begin(), v.weights.end(), weights.mutable_data() + first);
    steps.mutable_data()[v.index] = v.step;
    for (int s = 0; s < slots; ++s)
      std::copy(v.state[s].begin(), v.state[s].end(), state_arrays[static_cast<std::size_t>(s)].mutable_data() + first);
  });
  for (auto& a : state_arrays) state.append(a);
  py::dict d;
  d["options"] = blockps::format_shard_options(config);
  d["opt"] = std::string(blockps::to_string(config.optimizer.kind));
  d["block_elements"] = block;
  d["steps"] = steps;
  d["weights"] = weights;
  d["state"] = state;
  // Whose the shard was ("" / "" for a file without them: format 1, or a shard never claimed or placed).
  d["job"] = header->tenancy.job;
  d["place"] = header->tenancy.place ? blockps::format_place(*header->tenancy.place) : std::string();
  return d;
}

// Writes a checkpoint for a shard with these bsopts (at least size, dtype, block, opt; as in a targets.conf)
// holding `weights`, the slots' `state` and per-block `steps`. The shard's tgtd loads it when it opens the LUs.
void write_checkpoint(const std::string& path, const std::string& bsopts,
                      py::array_t<std::uint64_t, py::array::c_style> steps,
                      py::array_t<float, py::array::c_style> weights,
                      const std::vector<py::array_t<float, py::array::c_style>>& state) {
  const blockps::Result<blockps::LuOptions> parsed = blockps::parse_lu_options("role=grad;" + bsopts, 512);
  if (!parsed.ok()) throw py::value_error("bsopts: " + parsed.message());
  const blockps::ShardConfig config = parsed->config;
  const blockps::ShardGeometry& g = config.geometry;
  const int slots = blockps::state_slots(config.optimizer.kind);
  if (static_cast<std::uint64_t>(weights.size()) != g.elements())
    throw py::value_error("weights: " + std::to_string(weights.size()) + " elements, the shard has " +
                          std::to_string(g.elements()));
  if (static_cast<std::uint64_t>(steps.size()) != g.blocks())
    throw py::value_error("steps: " + std::to_string(steps.size()) + " blocks, the shard has " +
                          std::to_string(g.blocks()));
  if (state.size() != static_cast<std::size_t>(slots))
    throw py::value_error("state: " + std::to_string(state.size()) + " arrays, opt=" +
                          std::string(blockps::to_string(config.optimizer.kind)) + " keeps " + std::to_string(slots));
  for (const auto& a : state)
    if (static_cast<std::uint64_t>(a.size()) != g.elements())
      throw py::value_error("state: an array of " + std::to_string(a.size()) + " elements, the shard has " +
                            std::to_string(g.elements()));
  blockps::ModelShard shard(g, config.optimizer, engine());
  for (std::uint64_t b = 0; b < g.blocks(); ++b) {
    const std::uint64_t first = b * g.block_elements(), n = g.elements_in_block(b);
    const auto slice = [&](const py::array_t<float, py::array::c_style>& a) {
      return std::span<const float>(a.data() + first, n);
    };
    const std::span<const float> none;
    if (!shard.restore_block(b, steps.data()[b], slice(weights), slots > 0 ? slice(state[0]) : none,
                             slots > 1 ? slice(state[1]) : none))
      throw std::runtime_error("block " + std::to_string(b) + " could not be restored");
  }
  if (const auto written = blockps::write_checkpoint(path, shard, config); !written.ok())
    throw std::runtime_error(path + ": " + written.message());
}

}  // namespace

PYBIND11_MODULE(_shard_checkpoint, m) {
  m.doc() = "blockps shard checkpoint files as numpy arrays (the shard's own reader and writer)";
  m.def("read", &read_checkpoint, py::arg("path"),
        "dict: options (bsopts), opt, block_elements, steps (per block), weights (f32), state (f32 slots), job and "
        "place (\"\" when none).");
  m.def("write", &write_checkpoint, py::arg("path"), py::arg("bsopts"), py::arg("steps"), py::arg("weights"),
        py::arg("state"),
        "Write a checkpoint for a shard with these bsopts (crash-safe, as the shard writes its own).");
}
