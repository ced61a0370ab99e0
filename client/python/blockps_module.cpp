// The Python binding (module blockps._blockps; the package blockps re-exports it): Cluster and DoubleBuffer of
// the C++ API. Buffers cross without copies: push/pull take any contiguous writable buffer (numpy arrays,
// torch tensors through .numpy()), and DoubleBuffer.weights / .grads are numpy views of the library's own
// buffers. Errors raise blockps.Error with the library's message. The GIL is released while I/O runs, and
// wherever the library may wait for its I/O threads: they take it to run Python completion callbacks.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>

#include "blockps/cluster.h"
#include "blockps/double_buffer.h"

namespace py = pybind11;
using blockps::Cluster;
using blockps::CompressedFormat;
using blockps::DoubleBuffer;
using blockps::LuQueueCounters;
using blockps::Result;
using blockps::SendOrder;

namespace {

struct BlockpsError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// blockps.ShardUnreachableError, a blockps.Error: a shard's session was lost for longer than [client]
// reconnect_s. A training loop may catch it to checkpoint and wait for the operator, where any other
// blockps.Error means a bug or a bad configuration.
struct ShardUnreachable : BlockpsError {
  using BlockpsError::BlockpsError;
};

// blockps.MismatchError, a blockps.Error and a ValueError: the shards disagree with what this worker was told or
// needs (the cluster file's sizes, a shard's place, the kind of shard), found before anything was written to them.
struct Mismatch : BlockpsError {
  using BlockpsError::BlockpsError;
};
// blockps.InvalidArgumentError, a blockps.Error and a ValueError: an argument the library refused before it sent
// anything (a job name that is not one, no job where the caller needs one, a takeover without a job).
struct InvalidArgument : BlockpsError {
  using BlockpsError::BlockpsError;
};

void check(const blockps::Status& s) {
  if (s.ok()) return;
  if (s.code() == blockps::StatusCode::unreachable) throw ShardUnreachable(s.message());
  if (s.code() == blockps::StatusCode::mismatch) throw Mismatch(s.message());
  if (s.code() == blockps::StatusCode::invalid_argument) throw InvalidArgument(s.message());
  throw BlockpsError(s.message());
}

// With the GIL: the exception instance check(s) raises in Python (None when s is ok). pybind11 turns a C++
// exception into its registered Python type only where it leaves a bound function, so check() runs as one.
py::object exception_of(const blockps::Status& s) {
  try {
    py::cpp_function([&s] { check(s); })();
  } catch (py::error_already_set& e) {
    return e.value();
  }
  return py::none();
}

// True once Python must not be entered: while the interpreter finalizes, a thread that takes the GIL is stopped
// (pthread_exit, fatal on a library thread), and after it there is no interpreter.
bool python_finalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing() != 0 || Py_IsInitialized() == 0;
#else
  return _Py_IsFinalizing() != 0 || Py_IsInitialized() == 0;
#endif
}

// Set on a thread while it runs or drops a Python completion callback. The callable may let go of the last
// reference to its Cluster (or a DoubleBuffer over it) there, on one of that cluster's I/O threads, which its
// destructor waits for.
thread_local bool in_completion_callback = false;

class InCompletionCallback {
 public:
  InCompletionCallback() { in_completion_callback = true; }
  ~InCompletionCallback() { in_completion_callback = was_; }
  InCompletionCallback(const InCompletionCallback&) = delete;
  InCompletionCallback& operator=(const InCompletionCallback&) = delete;

 private:
  bool was_ = in_completion_callback;
};

// How the binding destroys a Cluster or a DoubleBuffer: each waits for the operations in flight, whose Python
// completion callbacks take the GIL on the cluster's I/O threads, so it runs with the GIL released. On one of those
// threads (a callback dropped the last reference) it runs on a thread of its own instead: it would wait for itself.
template <class T>
struct DeleteWithoutGil {
  void operator()(T* object) const {
    if (in_completion_callback) {
      std::thread([object] { delete object; }).detach();
      return;
    }
    py::gil_scoped_release release;
    delete object;
  }
};
template <class T>
using HeldWithoutGil = std::unique_ptr<T, DeleteWithoutGil<T>>;

// A Python callable as the library's CompletionCallback: called once with None or the exception the operation
// failed with, on one of the cluster's I/O threads (or on the caller's, for a request refused before any I/O).
// Copies of the std::function may be dropped on any thread: the callable is released with the GIL held.
class PyCompletion {
 public:
  explicit PyCompletion(py::object on_done) : on_done_(new py::object(std::move(on_done)), release) {}

  void operator()(const blockps::Status& s) const noexcept {
    if (python_finalizing()) return;  // the interpreter is going away: the callable can no longer be called
    const InCompletionCallback scope;
    const py::gil_scoped_acquire gil;
    try {
      (*on_done_)(exception_of(s));
    } catch (py::error_already_set& e) {
      // Nothing to raise it into: the thread is the library's. Reported as Python reports a __del__'s error.
      e.discard_as_unraisable(*on_done_);
    } catch (const std::exception& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what());
      PyErr_WriteUnraisable(on_done_->ptr());
    }
  }

 private:
  static void release(py::object* on_done) {
    if (python_finalizing()) return;  // leaked: touching a Python object now could stop this thread
    const InCompletionCallback scope;
    const py::gil_scoped_acquire gil;
    delete on_done;
  }

  std::shared_ptr<py::object> on_done_;
};

// The bytes of a C-contiguous buffer (no copy is made, so a strided one is refused).
std::span<std::byte> contiguous_span(const py::buffer& b, bool writable, const char* what) {
  py::buffer_info info = b.request(writable);
  const auto bytes = static_cast<std::uint64_t>(info.size) * static_cast<std::uint64_t>(info.itemsize);
  py::ssize_t expect = info.itemsize;  // C-contiguous: strides from the last axis up
  for (auto i = info.ndim; i-- > 0;) {
    if (info.shape[static_cast<std::size_t>(i)] > 1 && info.strides[static_cast<std::size_t>(i)] != expect)
      throw py::value_error(std::string(what) + ": the buffer must be C-contiguous (no copy is made)");
    expect *= info.shape[static_cast<std::size_t>(i)];
  }
  return {static_cast<std::byte*>(info.ptr), static_cast<std::size_t>(bytes)};
}

// The bytes of a C-contiguous buffer, checked against the model's size.
std::span<std::byte> model_span(const Cluster& c, const py::buffer& b, bool writable, const char* what) {
  const std::span<std::byte> bytes = contiguous_span(b, writable, what);
  if (bytes.size() != c.model_bytes())
    throw py::value_error(std::string(what) + ": the buffer has " + std::to_string(bytes.size()) +
                          " bytes, the model has " + std::to_string(c.model_bytes()));
  return bytes;
}

// A compressed format from its Python name.
CompressedFormat compressed_format(const std::string& name) {
  if (const std::optional<CompressedFormat> f = blockps::parse_compressed_format(name)) return *f;
  throw py::value_error("format = '" + name + "': must be 'sign1' or 'int8'");
}

// The kind of shard a worker needs, from its Python name.
blockps::ShardKind shard_kind(const std::string& expect) {
  for (blockps::ShardKind kind :
       {blockps::ShardKind::any, blockps::ShardKind::optimizer, blockps::ShardKind::averaging}) {
    if (expect == to_string(kind)) return kind;
  }
  throw py::value_error("expect = '" + expect + "': must be 'any', 'optimizer' or 'averaging'");
}

// A numpy view of model wire bytes in the wire dtype (bf16 has no numpy type: its raw uint16 bits).
py::array model_view(const Cluster& c, std::span<std::byte> bytes, py::handle owner) {
  switch (c.config().model.dtype) {
    case blockps::WireDtype::f32:
      return py::array(py::dtype("float32"), {static_cast<py::ssize_t>(bytes.size() / 4)}, {}, bytes.data(), owner);
    case blockps::WireDtype::f16:
      return py::array(py::dtype("float16"), {static_cast<py::ssize_t>(bytes.size() / 2)}, {}, bytes.data(), owner);
    case blockps::WireDtype::bf16:
      break;
  }
  return py::array(py::dtype("uint16"), {static_cast<py::ssize_t>(bytes.size() / 2)}, {}, bytes.data(), owner);
}

// A blocking whole-model transfer of Cluster as a Python method: checks the buffer, releases the GIL.
template <auto method>
auto transfer(const char* what) {
  // A method that accepts read-only bytes (push, write_weights) only reads the buffer.
  constexpr bool writable = !std::is_invocable_v<decltype(method), Cluster&, std::span<const std::byte>>;
  using Span = std::conditional_t<writable, std::span<std::byte>, std::span<const std::byte>>;
  return [what](Cluster& c, const py::buffer& buffer) {
    const Span bytes = model_span(c, buffer, writable, what);
    py::gil_scoped_release release;
    check((c.*method)(bytes));
  };
}

// A numpy view of one of the DoubleBuffer's compute buffers; the view keeps the DoubleBuffer alive.
template <auto buffer>
auto buffer_view() {
  return [](const py::object& self) {
    auto& db = self.cast<DoubleBuffer&>();
    return model_view(db.cluster(), (db.*buffer)(), self);
  };
}

py::dict metrics_dict(const blockps::StepMetrics& m) {
  py::dict d;
  d["step"] = m.step;
  d["compute_s"] = m.compute_s;
  d["stall_s"] = m.stall_s;
  d["bubble_s"] = m.bubble_s;
  d["push_s"] = m.push_s;
  d["pull_s"] = m.pull_s;
  d["weight_age_s"] = m.weight_age_s;
  d["pipelined"] = m.pipelined;
  return d;
}

// An asynchronous operation of the Cluster, holding the Python buffers it reads and writes until it is
// finished: dropping it (or the interpreter's exit) waits for the I/O instead of freeing memory under it.
class PyOperation {
 public:
  PyOperation(blockps::Operation op, py::object grads, py::object weights)
      : op_(std::move(op)), grads_(std::move(grads)), weights_(std::move(weights)) {}
  PyOperation(const PyOperation&) = delete;
  PyOperation& operator=(const PyOperation&) = delete;
  ~PyOperation() {
    py::gil_scoped_release release;
    (void)op_.wait();
  }
  void wait() const {
    blockps::Status s = blockps::Status::Ok();
    {
      py::gil_scoped_release release;
      s = op_.wait();
    }
    check(s);
  }
  bool ready() const { return op_.ready(); }

 private:
  blockps::Operation op_;
  py::object grads_, weights_;
};

// A blocking transfer of blocks [first, first + count) of Cluster as a Python method (the library checks the
// buffer's size against the blocks).
template <auto method>
auto block_transfer(const char* what) {
  constexpr bool writable =
      !std::is_invocable_v<decltype(method), Cluster&, std::uint64_t, std::uint64_t, std::span<const std::byte>>;
  return [what](Cluster& c, std::uint64_t first, std::uint64_t count, const py::buffer& buffer) {
    const std::span<std::byte> bytes = contiguous_span(buffer, writable, what);
    py::gil_scoped_release release;
    check((c.*method)(first, count, bytes));
  };
}

using ClusterClass = py::class_<Cluster, HeldWithoutGil<Cluster>>;

// blockps.Error and its kinds (ShardUnreachableError, MismatchError, InvalidArgumentError), which every call raises
// (check()).
void bind_errors(py::module_& m) {
  const auto& error = py::register_exception<BlockpsError>(m, "Error");
  // After Error: pybind11 tries the translators registered last first.
  py::register_exception<ShardUnreachable>(m, "ShardUnreachableError", error.ptr());
  // Two bases (py::register_exception takes one): made with the C API, kept for the interpreter's life.
  const auto error_and_value_error = [&](const char* name) {
    PyObject* type = PyErr_NewException((std::string("blockps._blockps.") + name).c_str(),
                                        py::make_tuple(error, py::handle(PyExc_ValueError)).ptr(), nullptr);
    if (type == nullptr) throw py::error_already_set();
    m.attr(name) = py::handle(type);
    return type;
  };
  static PyObject* mismatch = error_and_value_error("MismatchError");
  static PyObject* invalid_argument = error_and_value_error("InvalidArgumentError");
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Mismatch& e) {
      PyErr_SetString(mismatch, e.what());
    } catch (const InvalidArgument& e) {
      PyErr_SetString(invalid_argument, e.what());
    }
  });
}

// Cluster(...): opening a cluster file, the job and model it holds, and what it is (sizes, dtype, shards).
void bind_cluster_open(ClusterClass& cluster) {
  cluster
      .def(py::init([](const std::string& cluster_file, const std::optional<std::string>& worker,
                       const std::optional<std::string>& job, bool takeover, bool replace_place,
                       const std::string& expect, const std::optional<std::string>& default_job,
                       const std::string& no_default_job_because) {
             auto config = blockps::load_cluster_file(cluster_file);
             check(config.status());
             // Only the default name (this process's pid) gives way to the worker's: a name the file sets
             // stays, for the targets' ACLs, and the sessions' ISIDs still tell the workers apart.
             if (worker && config.value().client.initiator == blockps::default_initiator_iqn())
               config.value().client.initiator = blockps::worker_initiator_iqn(*worker);
             blockps::OpenOptions options;
             options.job = job;
             options.default_job = default_job;
             options.no_default_job_because = no_default_job_because;
             options.takeover = takeover;
             options.replace_place = replace_place;
             options.expect = shard_kind(expect);
             py::gil_scoped_release release;
             auto c = Cluster::open(config.value(), options);
             check(c.status());
             return HeldWithoutGil<Cluster>(c.value().release());
           }),
           py::arg("cluster_file"), py::arg("worker") = py::none(), py::kw_only(), py::arg("job") = py::none(),
           py::arg("takeover") = false, py::arg("replace_place") = false, py::arg("expect") = "any",
           py::arg("default_job") = py::none(), py::arg("no_default_job_because") = "",
           "Open a cluster file (TOML) and connect every shard. worker: this process's name within the job "
           "(e.g. 'rank3'); without [client] initiator in the file the iSCSI name is "
           "iqn.2026-11.io.blockps:worker-<host>-<worker> instead of ...-<pid>. job: the job whose sessions claim "
           "the shards (None: the file's [client] job, else BLOCKPS_JOB, else default_job, else no job; '': no job); "
           "no_default_job_because: where no job is chosen, raise ValueError with this reason before anything is "
           "written (a caller that needs a job); a shard another job holds raises blockps.Error naming the holder. "
           "takeover: claim the shards although "
           "another job holds them. replace_place: give each shard the place this file gives it even where it holds "
           "another (a re-layout or a new model); otherwise a shard in another place raises. expect: 'any', "
           "'optimizer' or 'averaging' (opt=average), the kind of shard this worker needs.")
      .def_property_readonly(
          "job", [](const Cluster& c) { return c.job(); }, "The job this cluster's sessions belong to ('' none).")
      .def_property_readonly(
          "model", [](const Cluster& c) { return c.model(); }, "The model (identity) whose place the shards hold.")
      .def(
          "claim",
          [](Cluster& c, const std::optional<std::string>& job, bool takeover, const std::string& expect,
             const std::optional<std::string>& default_job, const std::string& no_default_job_because) {
            blockps::OpenOptions options;
            options.job = job;
            options.takeover = takeover;
            options.expect = shard_kind(expect);
            options.default_job = default_job;
            options.no_default_job_because = no_default_job_because;
            py::gil_scoped_release release;
            check(c.claim(options));
          },
          py::arg("job") = py::none(), py::kw_only(), py::arg("takeover") = false, py::arg("expect") = "any",
          py::arg("default_job") = py::none(), py::arg("no_default_job_because") = "",
          "Join every session of every shard to a job (takeover: also shards another job holds): `job`, else the one "
          "this cluster holds, else the file's [client] job, BLOCKPS_JOB or default_job, as at open; claimed only "
          "when it is not the one held (or takeover). Every shard is first checked to be of the kind `expect` "
          "(blockps.MismatchError). Raises blockps.Error naming the holder of a shard another job holds.")
      .def(
          "prefer_send_order",
          [](Cluster& c, const std::string& order) {
            if (order == "ascending") {
              c.prefer_send_order(SendOrder::ascending);
            } else if (order == "descending") {
              c.prefer_send_order(SendOrder::descending);
            } else if (order == "queue") {
              c.prefer_send_order(SendOrder::queue);
            } else {
              throw py::value_error("blockps: send order '" + order + "': must be ascending, descending or queue");
            }
          },
          py::arg("order"),
          "The order in which each shard sends the exchanges queued behind its credit window: 'ascending' or "
          "'descending' model offsets (first send the first layers: blockps.torch's layout puts them last, so "
          "descending), or 'queue'; the cluster file's [client] send_order, where it names one, stands.")
      .def_property_readonly("initiator", [](const Cluster& c) { return c.config().client.initiator; })
      .def_property_readonly("model_bytes", &Cluster::model_bytes)
      .def_property_readonly("block_bytes", [](const Cluster& c) { return c.layout().block_bytes(); })
      .def_property_readonly("block_count", [](const Cluster& c) { return c.layout().block_count(); })
      .def_property_readonly("dtype", [](const Cluster& c) { return std::string(to_string(c.config().model.dtype)); })
      .def_property_readonly("elements",
                             [](const Cluster& c) { return c.model_bytes() / wire_size(c.config().model.dtype); })
      .def_property_readonly("shard_count", [](const Cluster& c) { return c.config().shards.size(); });
}

// Cluster's transfers: whole-model and block push, pull and exchange, and the weights LUs as a disk.
void bind_cluster_transfers(ClusterClass& cluster) {
  cluster
      .def("push", transfer<&Cluster::push>("push"), py::arg("grads"),
           "Push gradients (model_bytes, wire format): each shard runs its optimizer.")
      .def("pull", transfer<&Cluster::pull>("pull"), py::arg("weights"),
           "Pull the current weights into a writable buffer of model_bytes.")
      .def(
          "exchange",
          [](Cluster& c, const py::buffer& grads, const py::buffer& weights) {
            const std::span<const std::byte> g = model_span(c, grads, false, "exchange (grads)");
            const std::span<std::byte> w = model_span(c, weights, true, "exchange (weights)");
            py::gil_scoped_release release;
            check(c.exchange(g, w));
          },
          py::arg("grads"), py::arg("weights"),
          "Push gradients and pull the new weights in one pipelined operation (both link directions busy); "
          "weights may be the same buffer as grads.")
      .def(
          "exchange_blocks_async",
          [](Cluster& c, std::uint64_t first, std::uint64_t count, const py::buffer& grads, const py::buffer& weights,
             const std::optional<py::function>& on_done) {
            const std::span<const std::byte> g = contiguous_span(grads, false, "exchange_blocks_async (grads)");
            const std::span<std::byte> w = contiguous_span(weights, true, "exchange_blocks_async (weights)");
            blockps::CompletionCallback done;
            if (on_done) done = PyCompletion(*on_done);
            blockps::Operation op;
            {
              // A refusal calls on_done here, on this thread: it takes the GIL back for the call.
              py::gil_scoped_release release;
              op = c.exchange_blocks_async(first, count, g, w, std::move(done));
            }
            return std::make_unique<PyOperation>(std::move(op), grads, weights);
          },
          py::arg("first_block"), py::arg("block_count"), py::arg("grads"), py::arg("weights"),
          py::arg("on_done") = py::none(),
          "Start a pipelined push+pull of global blocks [first_block, first_block + block_count): grads and "
          "weights hold exactly those blocks' wire bytes. Returns an Operation; both buffers are kept alive "
          "until it is finished. on_done(error): called once when the operation finished, with None, or with the "
          "blockps.Error (ShardUnreachableError) that wait() raises; on one of the cluster's I/O threads, or at "
          "once on this thread for a request refused before any I/O (blocks outside the model, a buffer of the "
          "wrong size). A buffer refused here (ValueError: not C-contiguous) raises and never calls it. wait() "
          "returns at once in it. The I/O thread waits for it: keep it short, and do not wait for (or drop the "
          "last reference to) another unfinished operation of this cluster in it. What it raises goes to "
          "sys.unraisablehook.")
      .def(
          "packed_bytes",
          [](const Cluster& c, const std::string& format, std::uint64_t first, std::uint64_t count) {
            return c.packed_bytes(compressed_format(format), first, count);
          },
          py::arg("format"), py::arg("first_block"), py::arg("block_count"),
          "Bytes blocks [first_block, first_block + block_count) take compressed in `format` ('sign1', 'int8'), "
          "back to back (0 for blocks outside the model).")
      .def(
          "exchange_compressed_blocks_async",
          [](Cluster& c, std::uint64_t first, std::uint64_t count, const std::string& format, const std::string& pull,
             const py::buffer& packed, const py::buffer& pulled, const std::optional<py::function>& on_done) {
            const CompressedFormat f = compressed_format(format);
            if (pull != "average" && pull != "weights")
              throw py::value_error("pull = '" + pull + "': must be 'average' or 'weights'");
            const std::span<const std::byte> g = contiguous_span(packed, false, "exchange_compressed_blocks_async");
            const std::span<std::byte> w = contiguous_span(pulled, true, "exchange_compressed_blocks_async (pulled)");
            blockps::CompletionCallback done;
            if (on_done) done = PyCompletion(*on_done);
            blockps::Operation op;
            {
              py::gil_scoped_release release;
              op = c.exchange_compressed_blocks_async(
                  first, count, f,
                  pull == "average" ? Cluster::CompressedPull::average : Cluster::CompressedPull::weights, g, w,
                  std::move(done));
            }
            return std::make_unique<PyOperation>(std::move(op), packed, pulled);
          },
          py::arg("first_block"), py::arg("block_count"), py::arg("format"), py::arg("pull"), py::arg("packed"),
          py::arg("pulled"), py::arg("on_done") = py::none(),
          "The compressed exchange (shards with compress= past their warm-up): each block of [first_block, "
          "first_block + block_count) goes out as one WRITE of its compressed block (`packed`: the blocks' images back "
          "to back, packed_bytes(format, ...) bytes; blockps.compress_blocks makes them) and its READ follows. pull: "
          "'average' (an averaging shard's compressed average, packed like the push, into `pulled`) or 'weights' (an "
          "optimizer shard's weights in the wire dtype). Otherwise as exchange_blocks_async.")
      .def("write_weights_blocks", block_transfer<&Cluster::write_weights_blocks>("write_weights_blocks"),
           py::arg("first_block"), py::arg("block_count"), py::arg("weights"),
           "Assign the weights of blocks [first_block, first_block + block_count) (weights LUs; no optimizer).")
      .def("read_weights_blocks", block_transfer<&Cluster::read_weights_blocks>("read_weights_blocks"),
           py::arg("first_block"), py::arg("block_count"), py::arg("weights"),
           "Read the weights of blocks [first_block, first_block + block_count) from the weights LUs.")
      .def("write_weights", transfer<&Cluster::write_weights>("write_weights"), py::arg("weights"),
           "Assign the weights (weights LUs; no optimizer runs).")
      .def("read_weights", transfer<&Cluster::read_weights>("read_weights"), py::arg("weights"),
           "Read the weights (weights LUs) into a writable buffer of model_bytes.");
}

// Cluster's control writes, status pages and recovery counters.
void bind_cluster_control(ClusterClass& cluster) {
  cluster
      .def(
          "control",
          [](Cluster& c, const std::string& lines) {
            py::gil_scoped_release release;
            check(c.control(lines));
          },
          py::arg("lines"),
          "Send control lines ('lr=0.001', 'checkpoint', ...; docs/OPTIONS.md) to every shard's status LU.")
      .def(
          "set_or_take_weights",
          [](Cluster& c, const py::function& set_weights, double patience_s) {
            if (!(patience_s > 0 && patience_s <= 86400))
              throw py::value_error("set_or_take_weights: patience_s=" + std::to_string(patience_s) +
                                    ": must be seconds in (0, 86400]");
            std::optional<py::error_already_set> raised;  // set_weights()'s exception, raised again here
            Result<bool> outcome = [&] {
              py::gil_scoped_release release;
              return c.set_or_take_weights(
                  [&]() -> blockps::Status {
                    py::gil_scoped_acquire acquire;
                    try {
                      set_weights();
                      return blockps::Status::Ok();
                    } catch (py::error_already_set& e) {
                      raised.emplace(std::move(e));
                      return blockps::Status::Error("set_weights raised");
                    }
                  },
                  std::chrono::milliseconds(static_cast<std::int64_t>(patience_s * 1000)));
            }();
            if (raised) throw std::move(*raised);
            check(outcome.status());
            return outcome.value();
          },
          py::arg("set_weights"), py::arg("patience_s") = 300.0,
          "An elastic job's start (docs/DEPLOY.md, \"Elastic jobs\"): the first worker to ask the first shard sets "
          "the weights (calls set_weights(), which writes them, then says init-done) and gets True; the others wait "
          "until they are set and get False (then read them). Raises after patience_s seconds with the grant still "
          "another host's, naming it.")
      .def("status_pages",
           [](Cluster& c) {
             Result<std::vector<blockps::ShardStatusPage>> pages = [&] {
               py::gil_scoped_release release;
               return c.status_pages();
             }();
             check(pages.status());
             py::list out;
             for (const auto& p : pages.value()) out.append(py::make_tuple(p.shard, p.json));
             return out;
           })
      .def(
          "recovery_counters",
          [](Cluster& c) {
            Result<std::vector<LuQueueCounters>> counters = [&] {
              py::gil_scoped_release release;
              return c.recovery_counters();
            }();
            check(counters.status());
            py::list out;
            for (std::size_t i = 0; i < counters.value().size(); ++i) {
              const LuQueueCounters& k = counters.value()[i];
              py::dict d;
              d["shard"] = c.config().shards[i].name;
              d["commands"] = k.commands;
              d["reconnects"] = k.reconnects;
              d["unanswered_pushes_dropped"] = k.unanswered_writes_dropped;
              d["unit_attentions_resent"] = k.unit_attentions_resent;
              out.append(d);
            }
            return out;
          },
          "Per shard (cluster-file order), since the cluster opened: {'shard', 'commands', 'reconnects', "
          "'unanswered_pushes_dropped', 'unit_attentions_resent'} (each recovery is also logged: stderr by default).");
}

// Calls fn(first element, elements, packed offset, packed bytes) for each block of `elements` elements cut into
// blocks of `block_elements` (the last may be shorter), their compressed images back to back.
template <class Fn>
void for_each_block(CompressedFormat f, std::size_t elements, std::size_t block_elements, Fn&& fn) {
  std::size_t at = 0;
  for (std::size_t i = 0; i < elements; i += block_elements) {
    const std::size_t n = std::min(block_elements, elements - i);
    const std::size_t bytes = compressed_block_bytes(f, n);
    fn(i, n, at, bytes);
    at += bytes;
  }
}

// The packed bytes of `elements` elements in blocks of `block_elements`; ValueError (with the GIL: before the work)
// when block_elements is 0 or `have` bytes of the packed buffer (`what`) are fewer.
std::size_t packed_bytes_of(CompressedFormat f, std::size_t elements, std::size_t block_elements, std::size_t have,
                            const char* what) {
  if (block_elements == 0) throw py::value_error(std::string(what) + ": block_elements must be > 0");
  std::size_t need = 0;
  for_each_block(f, elements, block_elements,
                 [&](std::size_t, std::size_t, std::size_t, std::size_t bytes) { need += bytes; });
  if (have < need)
    throw py::value_error(std::string(what) + " holds " + std::to_string(have) + " bytes, the blocks need " +
                          std::to_string(need));
  return need;
}

// The compressed formats (contract/compressed_wire.h), over numpy arrays: what the torch paths compress their pushes
// and decode their pulls with, a run of blocks at a time with the GIL released.
void bind_compressed_blocks(py::module_& m) {
  // f32 elements of a C-contiguous float32 array (writable when asked).
  const auto floats = [](const py::buffer& b, bool writable, const char* what) {
    py::buffer_info info = b.request(writable);
    if (info.itemsize != 4 || info.format != py::format_descriptor<float>::format())
      throw py::value_error(std::string(what) + ": must be float32");
    const std::span<std::byte> bytes = contiguous_span(b, writable, what);
    return std::span<float>(reinterpret_cast<float*>(bytes.data()), bytes.size() / 4);
  };
  m.def(
      "compressed_block_bytes",
      [](const std::string& format, std::uint64_t elements) {
        return compressed_block_bytes(compressed_format(format), static_cast<std::size_t>(elements));
      },
      py::arg("format"), py::arg("elements"),
      "Bytes a block of `elements` f32 elements takes in `format` ('sign1', 'int8'), padding to 512 included.");
  m.def(
      "compress_blocks",
      [floats](const std::string& format, const py::buffer& x, const py::buffer& residual, const py::buffer& out,
               std::uint64_t block_elements) {
        const CompressedFormat f = compressed_format(format);
        const std::span<float> values = floats(x, false, "compress_blocks (x)");
        const std::span<float> feedback = floats(residual, true, "compress_blocks (residual)");
        const std::span<std::byte> packed = contiguous_span(out, true, "compress_blocks (out)");
        if (feedback.size() != values.size())
          throw py::value_error("compress_blocks: residual has " + std::to_string(feedback.size()) + " elements, x " +
                                std::to_string(values.size()));
        const std::size_t need =
            packed_bytes_of(f, values.size(), block_elements, packed.size(), "compress_blocks (out)");
        py::gil_scoped_release release;
        for_each_block(f, values.size(), block_elements,
                       [&](std::size_t i, std::size_t n, std::size_t at, std::size_t bytes) {
                         check(compress(f, values.subspan(i, n), feedback.subspan(i, n), packed.subspan(at, bytes)));
                       });
        return need;
      },
      py::arg("format"), py::arg("x"), py::arg("residual"), py::arg("out"), py::arg("block_elements"),
      "Compress float32 `x` block by block (`block_elements` each, the last may be shorter) into `out` (their "
      "images back to back), each with error feedback: `residual` (float32, x's size) is added first and becomes "
      "what the block left out. Returns the bytes written. blockps.InvalidArgumentError (nothing of that block "
      "written) for a NaN, an Inf or an overflowing sum, naming the element.");
  m.def(
      "decompress_blocks",
      [floats](const std::string& format, const py::buffer& packed, const py::buffer& out,
               std::uint64_t block_elements) {
        const CompressedFormat f = compressed_format(format);
        const std::span<std::byte> in = contiguous_span(packed, false, "decompress_blocks (packed)");
        const std::span<float> values = floats(out, true, "decompress_blocks (out)");
        packed_bytes_of(f, values.size(), block_elements, in.size(), "decompress_blocks (packed)");
        py::gil_scoped_release release;
        for_each_block(f, values.size(), block_elements,
                       [&](std::size_t i, std::size_t n, std::size_t at, std::size_t bytes) {
                         check(decompress(f, in.subspan(at, bytes), values.subspan(i, n)));
                       });
      },
      py::arg("format"), py::arg("packed"), py::arg("out"), py::arg("block_elements"),
      "Decode blocks' images back to back (as compress_blocks writes them) into float32 `out`.");
}

// blockps.Operation, what exchange_blocks_async returns.
void bind_operation(py::module_& m) {
  py::class_<PyOperation>(m, "Operation")
      .def("wait", &PyOperation::wait, "Block until every shard finished its part; raises blockps.Error on failure.")
      .def("ready", &PyOperation::ready, "True when wait() would not block.");
}

// What a cluster file says without connecting: its layout, and the iSCSI name a worker logs in with.
void bind_cluster_file(py::module_& m) {
  m.def(
      "cluster_layout",
      [](const std::string& cluster_file) {
        auto config = blockps::load_cluster_file(cluster_file);
        check(config.status());
        const blockps::ClusterConfig& c = config.value();
        const auto layout = blockps::make_layout(c.layout, c.model.size_bytes, c.model.block_bytes, c.shards.size());
        py::array_t<std::uint64_t> places({static_cast<py::ssize_t>(layout->block_count()), py::ssize_t{4}});
        auto p = places.mutable_unchecked<2>();
        for (std::uint64_t b = 0; b < layout->block_count(); ++b) {
          const blockps::BlockPlace place = layout->place(b);
          const auto row = static_cast<py::ssize_t>(b);
          p(row, 0) = place.shard;
          p(row, 1) = place.shard_offset;
          p(row, 2) = place.model_offset;
          p(row, 3) = place.bytes;
        }
        py::list shards, shard_bytes;
        for (std::size_t i = 0; i < c.shards.size(); ++i) {
          shards.append(c.shards[i].name);
          shard_bytes.append(layout->shard_bytes(i));
        }
        py::dict d;
        d["job"] = c.client.job;
        d["model_name"] = c.model.name;
        d["dtype"] = std::string(to_string(c.model.dtype));
        d["model_bytes"] = c.model.size_bytes;
        d["block_bytes"] = c.model.block_bytes;
        d["shards"] = shards;
        d["shard_bytes"] = shard_bytes;
        d["places"] = places;
        return d;
      },
      py::arg("cluster_file"),
      "Where the cluster file's layout puts each block, without connecting: job ([client] job, '' none), "
      "model_name ([model] name, '' none), dtype, model_bytes, block_bytes, shards (names), shard_bytes, places "
      "(blocks x [shard, shard byte offset, model byte offset, bytes]).");

  m.def("worker_initiator", &blockps::worker_initiator_iqn, py::arg("worker"),
        "The iSCSI name Cluster(..., worker=W) logs in with when the cluster file names none.");
}

// blockps.DoubleBuffer over a Cluster.
void bind_double_buffer(py::module_& m) {
  py::class_<DoubleBuffer, HeldWithoutGil<DoubleBuffer>>(m, "DoubleBuffer")
      .def(py::init([](Cluster& c, const std::string& mode, bool adaptive_pull, double smoothing, double safety,
                       int warmup_steps) {
             blockps::PipelineOptions o;
             if (mode == "double")
               o.mode = blockps::PipelineMode::double_buffer;
             else if (mode == "sequential")
               o.mode = blockps::PipelineMode::sequential;
             else
               throw py::value_error("mode = '" + mode + "': must be 'double' or 'sequential'");
             o.adaptive_pull = adaptive_pull;
             o.smoothing = smoothing;
             o.safety = safety;
             o.warmup_steps = warmup_steps;
             py::gil_scoped_release release;
             auto db = DoubleBuffer::create(c, o);
             check(db.status());
             return HeldWithoutGil<DoubleBuffer>(db.value().release());
           }),
           py::arg("cluster"), py::arg("mode") = "double", py::arg("adaptive_pull") = true, py::arg("smoothing") = 0.2,
           py::arg("safety") = 0.05, py::arg("warmup_steps") = 3, py::keep_alive<1, 2>(),
           "Two weights+gradients buffers over the cluster (it is kept alive). Pulls the weights into both.")
      .def_property_readonly("weights", buffer_view<&DoubleBuffer::weights>(),
                             "numpy view of the compute buffer's weights (no copy); another buffer after step()")
      .def_property_readonly("grads", buffer_view<&DoubleBuffer::grads>(),
                             "numpy view of the compute buffer's gradients (pushed as they are at step(); "
                             "zero them yourself)")
      .def(
          "step",
          [](DoubleBuffer& db) {
            blockps::Result<blockps::StepMetrics> r = blockps::Status::Error("not run");
            {
              py::gil_scoped_release release;
              r = db.step();
            }
            check(r.status());
            return metrics_dict(r.value());
          },
          "Push this buffer's gradients, pull fresh weights into it, swap. Returns the step's metrics (dict).")
      .def("averages", [](const DoubleBuffer& db) {
        const auto a = db.averages();
        py::dict d;
        d["compute_s"] = a.compute_s;
        d["push_s"] = a.push_s;
        d["pull_s"] = a.pull_s;
        d["pull_deviation_s"] = a.pull_deviation_s;
        return d;
      });
}

}  // namespace

PYBIND11_MODULE(_blockps, m) {
  m.doc() = "blockps: push gradients to and pull weights from a blockps parameter server";
  bind_errors(m);
  // Registered in this order: a signature names a class registered before it by its Python name.
  ClusterClass cluster(m, "Cluster");
  bind_cluster_open(cluster);
  bind_cluster_transfers(cluster);
  bind_cluster_control(cluster);
  bind_operation(m);
  bind_compressed_blocks(m);
  bind_cluster_file(m);
  bind_double_buffer(m);
}
