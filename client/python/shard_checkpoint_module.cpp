// blockps._shard_checkpoint: a shard's checkpoint file (contract/checkpoint_file.h) as numpy arrays and back, for
// the Python package's torch-format export and import (blockps/torch/checkpoint.py). It links the ground floor's
// file library, the one definition of the format, and nothing of the shard: it runs where the checkpoint files are
// (the shard hosts, or wherever they were copied) and talks to no shard. The options text it reads and writes is
// the shard's to parse: the shard checks it against the geometry the file records when it loads the file.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "contract/checkpoint_file.h"

namespace py = pybind11;

namespace {

using FloatArray = py::array_t<float, py::array::c_style>;

// What a header says, with the geometry as a dict (None for a file that does not record it).
py::dict header_dict(const blockps::CheckpointFileHeader& h) {
  py::dict d;
  d["options"] = h.options;
  d["blocks"] = h.blocks;
  d["created"] = h.created_unix;
  // Whose the shard was ("" / "" for a file without them: format 1, or a shard never claimed or placed).
  d["job"] = h.tenancy.job;
  d["place"] = h.tenancy.place ? blockps::format_place(*h.tenancy.place) : std::string();
  if (h.geometry) {
    py::dict g;
    g["elements"] = h.geometry->elements;
    g["block_elements"] = h.geometry->block_elements;
    g["state_slots"] = h.geometry->state_slots;
    d["geometry"] = g;
  } else {
    d["geometry"] = py::none();
  }
  return d;
}

py::dict read_header(const std::string& path) {
  const blockps::Result<blockps::CheckpointFileHeader> header = blockps::read_checkpoint_file_header(path);
  if (!header.ok()) throw std::runtime_error(header.message());
  return header_dict(*header);
}

// The whole checkpoint: the header's fields, the per-block step counts, the f32 master weights and the optimizer's
// state slots (Adam: exp_avg, exp_avg_sq; momentum: the velocity). `geometry` (elements, block_elements,
// state_slots: the cluster file's and the optimizer's) reads a file that records none; a file that records one
// must record this one.
py::dict read_checkpoint(const std::string& path, std::optional<blockps::CheckpointGeometry> geometry) {
  py::dict d;
  py::array_t<std::uint64_t> steps;
  FloatArray weights;
  std::vector<FloatArray> state;
  std::uint64_t block_elements = 0;
  const auto body_geometry =
      [&](const blockps::CheckpointFileHeader& h) -> blockps::Result<blockps::CheckpointGeometry> {
    d = header_dict(h);
    const std::optional<blockps::CheckpointGeometry> g = h.geometry ? h.geometry : geometry;
    if (!g)
      return blockps::Status::Error(blockps::StatusCode::invalid_argument,
                                    path +
                                        ": the file does not record its geometry (written before issue 49): give "
                                        "elements, block_elements and state_slots");
    if (geometry && !(*geometry == *g))
      return blockps::Status::Error(blockps::StatusCode::mismatch, path + ": the file records " + to_string(*g) +
                                                                       ", expected " + to_string(*geometry));
    if (blockps::Status usable = blockps::check_checkpoint_geometry(*g); !usable.ok()) return usable;
    steps = py::array_t<std::uint64_t>(static_cast<py::ssize_t>(g->blocks()));
    weights = FloatArray(static_cast<py::ssize_t>(g->elements));
    for (std::uint32_t s = 0; s < g->state_slots; ++s) state.emplace_back(static_cast<py::ssize_t>(g->elements));
    block_elements = g->block_elements;
    return *g;
  };
  const auto take = [&](const blockps::CheckpointBlockRecord& r) {
    const std::uint64_t first = r.index * block_elements;
    steps.mutable_data()[r.index] = r.step;
    std::copy(r.weights.begin(), r.weights.end(), weights.mutable_data() + first);
    for (std::size_t s = 0; s < state.size(); ++s)
      std::copy(r.state[s].begin(), r.state[s].end(), state[s].mutable_data() + first);
    return blockps::Status::Ok();
  };
  if (blockps::Status read = blockps::read_checkpoint_file(path, body_geometry, take); !read.ok()) {
    if (read.code() == blockps::StatusCode::mismatch) throw py::value_error(read.message());
    throw std::runtime_error(read.message());
  }
  py::list state_list;
  for (auto& a : state) state_list.append(a);
  d["block_elements"] = block_elements;
  d["steps"] = steps;
  d["weights"] = weights;
  d["state"] = state_list;
  return d;
}

// Writes a checkpoint holding `weights`, the slots' `state` and per-block `steps` in blocks of `block_elements`,
// with `options` (the shard's bsopts, at least size, dtype, block and opt; as in a targets.conf) recorded as
// given. The shard's tgtd loads it when it opens the LUs, and refuses it there when the options do not parse or do
// not give this geometry.
void write_checkpoint(const std::string& path, const std::string& options, std::uint64_t block_elements,
                      py::array_t<std::uint64_t, py::array::c_style> steps, FloatArray weights,
                      const std::vector<FloatArray>& state) {
  const blockps::CheckpointGeometry g{static_cast<std::uint64_t>(weights.size()), block_elements,
                                      static_cast<std::uint32_t>(state.size())};
  if (blockps::Status usable = blockps::check_checkpoint_geometry(g); !usable.ok())
    throw py::value_error(usable.message());
  if (static_cast<std::uint64_t>(steps.size()) != g.blocks())
    throw py::value_error("steps: " + std::to_string(steps.size()) + " blocks, " + std::to_string(g.elements) +
                          " weights in blocks of " + std::to_string(block_elements) + " are " +
                          std::to_string(g.blocks()));
  for (const auto& a : state)
    if (static_cast<std::uint64_t>(a.size()) != g.elements)
      throw py::value_error("state: an array of " + std::to_string(a.size()) + " elements, the weights have " +
                            std::to_string(g.elements));
  const auto give = [&](std::uint64_t b, blockps::CheckpointBlockRecord& r) {
    const std::uint64_t first = b * block_elements, n = g.elements_in_block(b);
    r.step = steps.data()[b];
    r.weights = {weights.data() + first, n};
    for (std::size_t s = 0; s < state.size(); ++s) r.state[s] = {state[s].data() + first, n};
    return blockps::Status::Ok();
  };
  if (blockps::Status written = blockps::write_checkpoint_file(path, options, g, {}, give); !written.ok())
    throw std::runtime_error(written.message());
}

}  // namespace

PYBIND11_MODULE(_shard_checkpoint, m) {
  m.doc() = "blockps shard checkpoint files as numpy arrays (the ground floor's reader and writer of the format)";
  m.def("read_header", &read_header, py::arg("path"),
        "dict: options (the shard's bsopts text), blocks, created, job and place (\"\" when none), geometry "
        "(elements, block_elements, state_slots; None for a file that does not record it).");
  m.def(
      "read",
      [](const std::string& path, std::optional<std::uint64_t> elements, std::optional<std::uint64_t> block_elements,
         std::optional<std::uint32_t> state_slots) {
        std::optional<blockps::CheckpointGeometry> g;
        if (elements || block_elements || state_slots) {
          if (!elements || !block_elements || !state_slots)
            throw py::value_error("read: give all of elements, block_elements and state_slots, or none");
          g = blockps::CheckpointGeometry{*elements, *block_elements, *state_slots};
        }
        return read_checkpoint(path, g);
      },
      py::arg("path"), py::arg("elements") = py::none(), py::arg("block_elements") = py::none(),
      py::arg("state_slots") = py::none(),
      "read_header's dict plus block_elements, steps (per block), weights (f32) and state (f32 slots). The "
      "geometry given reads a file that records none; a file that records another is a ValueError.");
  m.def("write", &write_checkpoint, py::arg("path"), py::arg("options"), py::arg("block_elements"), py::arg("steps"),
        py::arg("weights"), py::arg("state"),
        "Write a checkpoint (crash-safe, as the shard writes its own) with these options recorded as given.");
}
