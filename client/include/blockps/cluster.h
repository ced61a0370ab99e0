// libblockps's C++ API: push gradients to and pull weights from a blockps parameter server, as a worker. In the
// source tree only (the CLI, the Python binding, the benchmarks): a program outside it uses the C API,
// <blockps/blockps.h>, the one with a stable ABI.
//
//   auto cluster = blockps::Cluster::open("cluster.toml");
//   if (!cluster.ok()) { std::cerr << cluster.message() << "\n"; return 1; }
//   std::vector<std::byte> weights((*cluster)->model_bytes()), grads(weights.size());
//   blockps::Status s = (*cluster)->pull(weights);     // blocking
//   blockps::Operation op = (*cluster)->push_async(grads); ... s = op.wait();
//
// The model is model_bytes() wire bytes (elements x dtype size) cut into blocks (cluster file [model]); the
// layout (blockps/layout.h) puts each block on one shard. Every call moves whole blocks: runs of blocks that
// are contiguous on one shard become one request of at most [client] max_request bytes, and all shards work
// in parallel (one I/O thread per shard) with [client] queue_depth requests in flight each.
//
// Errors come back as values (Status / Result) naming the shard, the LU, the byte offsets and the reason
// (SCSI status and sense, errno, disconnect). Nothing here throws or aborts. A Cluster is thread-safe: calls
// from several threads are queued on each shard's I/O thread and run there one after another.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "blockps/cluster_file.h"
#include "blockps/layout.h"
#include "blockps/queue_counters.h"
#include "contract/compressed_wire.h"
#include "contract/result.h"

namespace blockps {

// Private to the library: a worker's trace file (client/trace.h), the job's tenancy of the shards (client/tenancy.h).
class Trace;
class Tenancy;

namespace detail {
struct OperationState;
class ShardIoThread;
struct ShardCommands;
enum class Transfer;
struct Buffers;
}  // namespace detail

// Called once when an asynchronous operation has finished on every shard, with its outcome. It runs on one
// of the cluster's I/O threads: keep it short and do not wait on another operation of the same cluster in it.
// A request refused before any I/O (wrong buffer size, blocks outside the model) calls it at once, on the
// calling thread.
using CompletionCallback = std::function<void(const Status&)>;

// A handle to an asynchronous push or pull. Copies share the operation. A default-made handle is finished
// and ok.
class Operation {
 public:
  Operation() = default;
  explicit Operation(std::shared_ptr<detail::OperationState> state) : state_(std::move(state)) {}
  // Blocks until every shard finished its part; the first failure, or ok.
  Status wait() const;
  // True when wait() would not block.
  bool ready() const;

 private:
  std::shared_ptr<detail::OperationState> state_;
};

// One shard's status page (the status LU's JSON, NUL padding removed).
struct ShardStatusPage {
  std::string shard;
  std::string json;
};

// Which kind of shard a worker needs (its status page's /shard/opt).
enum class ShardKind {
  any,        // no check
  optimizer,  // a shard that steps an optimizer on each push (every opt but average): a pull returns weights
  averaging,  // opt=average: a READ after a push returns the round's average gradient (the DDP hook)
};
std::string_view to_string(ShardKind kind);

// How a worker opens a cluster: the job it belongs to and what it expects of the shards (docs/OPTIONS.md, "Jobs and
// places"). The defaults are a worker of the cluster file's job (if it names one).
struct OpenOptions {
  // The job this worker belongs to; every session of every shard joins it, and a shard held by another job
  // refuses. nullopt: the cluster file's [client] job, else $BLOCKPS_JOB, else default_job, else none
  // (client/tenancy.h, choose_job, is where this order is decided); "": none (no claim: a
  // worker of no job may read the weights of a held shard, but its pushes are refused). A name is 1 to 128
  // characters of A-Z a-z 0-9 . _ : @ / + -.
  std::optional<std::string> job;
  // The caller's own default, after $BLOCKPS_JOB (the Python package's name from torchrun: blockps/jobs.py).
  std::optional<std::string> default_job;
  // Why the caller has no default where it needs a job (e.g. "a torchrun over several hosts needs a job name every
  // host shares: give torchrun --rdzv_id NAME"): when no job is chosen, open() refuses with this before it sends
  // anything. "": a worker of no job is fine.
  std::string no_default_job_because;
  // Claim the shards even though another job holds them (needs a job): that job's sessions are dropped and its
  // next command refused; a shard with rounds starts them afresh.
  bool takeover = false;
  // Set each shard's place to the one this file gives it even where it holds another (a deliberate re-layout, or
  // a new model: `blockps init --relayout`); otherwise a shard in another place is refused.
  bool replace_place = false;
  // The kind of shard this worker needs (checked against every shard's opt before anything is written).
  ShardKind expect = ShardKind::any;
  // Only read status pages (`blockps status`, the exporter, `blockps release`): the shape checks, but no kind,
  // place or job check, and nothing written to the shards.
  bool status_only = false;

  // The options of a worker of `job` (nullopt: the default chain above), and of a reader of status pages.
  static OpenOptions of_job(std::optional<std::string> job) {
    OpenOptions o;
    o.job = std::move(job);
    return o;
  }
  static OpenOptions reading_status() {
    OpenOptions o;
    o.status_only = true;
    return o;
  }
};

class Cluster {
 public:
  // Loads the cluster file, connects every LU of every shard (in parallel) and checks that each grad and
  // weights LU has the capacity the layout gives its shard and that each shard's status page agrees with the
  // file on size, dtype and block. Then, unless options.status_only, in this order: every shard is of the kind
  // options.expect; every shard holds the place the file gives it (the model: [model] name, else the one the
  // shards hold, else a new identity; shard i of S in the file's layout), and a shard that holds none takes it;
  // the job claims every shard (no shard held by another job, unless takeover), from every session (grad,
  // weights and status LU: a session of no job is refused on a held shard). Errors: the file's mistakes (see
  // blockps/cluster_file.h), an LU that cannot be reached, a mismatch (naming the shard, the field and both values; the
  // kind; both places and the fix), a shard held by another job (StatusCode::conflict, naming the holder and how to
  // take it over), an invalid job name (invalid_argument).
  static Result<std::unique_ptr<Cluster>> open(const std::string& cluster_file, const OpenOptions& options = {});
  static Result<std::unique_ptr<Cluster>> open(const ClusterConfig& config, const OpenOptions& options = {});
  // Waits for the operations in flight, then closes every session.
  ~Cluster();
  Cluster(const Cluster&) = delete;
  Cluster& operator=(const Cluster&) = delete;

  const ClusterConfig& config() const { return config_; }
  // The job this cluster's sessions belong to ("" none), and the model whose place its shards hold ("" when
  // opened status_only).
  const std::string& job() const;
  const std::string& model() const;
  // Joins every session of every shard to `job` (with `takeover`, claiming shards another job holds), and sets
  // the place of a shard that holds none (a cluster opened with no job could not, where another job held it).
  // Errors as open's claim; `job` not a valid name: invalid_argument. Not for a cluster opened status_only, and
  // not while another thread reads job() or model().
  Status claim(const std::string& job, bool takeover = false, ShardKind expect = ShardKind::any);
  // The claim open() would make, for a cluster opened with no job or another one: the job options.job, else the
  // one this cluster holds, else the file's, $BLOCKPS_JOB's or options.default_job (as open() chooses), claimed
  // when it is not the one held (or options.takeover); every shard first checked to be of the kind options.expect.
  Status claim(const OpenOptions& options);
  // Drops every shard's claim (the operator's override: any job may claim the shards next); the job that held each
  // shard before ("" none), in the file's order. Also on a cluster opened status_only.
  Result<std::vector<std::string>> release();
  // The order in which each shard's stream sends the exchanges queued behind its credit window (SendOrder), unless
  // the cluster file's [client] send_order chose one (that stands): the opener knows where its model's first layers
  // are (blockps.torch lays parameters out in reverse: descending). Without either: ascending. From the next
  // exchange a shard takes in on; any thread.
  void prefer_send_order(SendOrder order);
  const Layout& layout() const { return *layout_; }
  std::uint64_t model_bytes() const { return layout_->model_bytes(); }

  // Whole model: `grads` / `weights` must be model_bytes() long. push writes the gradients to the grad LUs
  // (each shard runs its optimizer); pull reads the current weights from the grad LUs.
  Status push(std::span<const std::byte> grads);
  Status pull(std::span<std::byte> weights);
  // The same, asynchronous: the buffer must stay valid (and, for push, unchanged) until the operation is
  // finished. `on_done` (optional) is called when it is.
  Operation push_async(std::span<const std::byte> grads, CompletionCallback on_done = {});
  Operation pull_async(std::span<std::byte> weights, CompletionCallback on_done = {});

  // Push and pull in one pipelined operation: every shard's queue carries the WRITEs of `grads` and the READs
  // into `weights` at once, a run's READ issued as soon as its WRITE has completed, so both directions of
  // every link are busy (push then pull uses one direction at a time). The weights pulled for a block always
  // include this worker's push of it: async shards apply a push when its WRITE completes; a sync shard parks
  // the READ until the round with this push is applied; ssp:K as for a pull after a push. `weights` may be
  // the same buffer as `grads` (each block is read back only after its gradient has been sent). Both must
  // stay valid until the operation is finished. One session per shard: fine for sync shards.
  Status exchange(std::span<const std::byte> grads, std::span<std::byte> weights);
  Operation exchange_async(std::span<const std::byte> grads, std::span<std::byte> weights,
                           CompletionCallback on_done = {});

  // Global blocks [first_block, first_block + block_count): `data` holds exactly those blocks' model bytes
  // (from layout().model_offset_of_block(first_block)).
  Status push_blocks(std::uint64_t first_block, std::uint64_t block_count, std::span<const std::byte> grads);
  Status pull_blocks(std::uint64_t first_block, std::uint64_t block_count, std::span<std::byte> weights);
  Operation push_blocks_async(std::uint64_t first_block, std::uint64_t block_count, std::span<const std::byte> grads,
                              CompletionCallback on_done = {});
  Operation pull_blocks_async(std::uint64_t first_block, std::uint64_t block_count, std::span<std::byte> weights,
                              CompletionCallback on_done = {});
  Status exchange_blocks(std::uint64_t first_block, std::uint64_t block_count, std::span<const std::byte> grads,
                         std::span<std::byte> weights);
  Operation exchange_blocks_async(std::uint64_t first_block, std::uint64_t block_count,
                                  std::span<const std::byte> grads, std::span<std::byte> weights,
                                  CompletionCallback on_done = {});

  // Compressed exchanges, for shards with compress= past their warm-up (docs/OPTIONS.md, "Compressed blocks"): each
  // block of [first_block, first_block + block_count) goes out as one WRITE of its compressed block (the caller
  // compressed it: contract/compressed_wire.h, with the caller's error feedback) and the block's READ follows it,
  // pipelined as exchange_blocks. `packed_grads` holds the blocks' compressed images back to back
  // (packed_bytes(format, first_block, block_count) bytes). `pull`: what the READs bring into `pulled`:
  // CompressedPull::average, an averaging shard's compressed average of the round, packed like the push (decode it
  // with decompress); CompressedPull::weights, an optimizer shard's weights of the blocks in the wire dtype, as
  // exchange_blocks reads them. A buffer of the wrong size, or blocks outside the model: invalid_argument before any
  // I/O; a shard that takes the block in another form refuses it (ILLEGAL REQUEST, its reason in the shard's log).
  enum class CompressedPull { average, weights };
  std::uint64_t packed_bytes(CompressedFormat format, std::uint64_t first_block, std::uint64_t block_count) const;
  Status exchange_compressed_blocks(std::uint64_t first_block, std::uint64_t block_count, CompressedFormat format,
                                    CompressedPull pull, std::span<const std::byte> packed_grads,
                                    std::span<std::byte> pulled);
  Operation exchange_compressed_blocks_async(std::uint64_t first_block, std::uint64_t block_count,
                                             CompressedFormat format, CompressedPull pull,
                                             std::span<const std::byte> packed_grads, std::span<std::byte> pulled,
                                             CompletionCallback on_done = {});

  // The weights LUs as a disk: assign the whole model's weights (initialise, restore) or read them
  // (snapshot). No optimizer runs.
  Status write_weights(std::span<const std::byte> weights);
  Status read_weights(std::span<std::byte> weights);
  // The same for global blocks [first_block, first_block + block_count), as push_blocks.
  Status write_weights_blocks(std::uint64_t first_block, std::uint64_t block_count, std::span<const std::byte> weights);
  Status read_weights_blocks(std::uint64_t first_block, std::uint64_t block_count, std::span<std::byte> weights);

  // Sends control lines ("lr=0.001", "checkpoint", ...: docs/OPTIONS.md, "Control writes") to every shard's
  // status LU, all shards at once; the first error (a shard that refuses a line it does not know, or this
  // initiator because it is not one of the shard's admins=) is returned.
  Status control(std::string_view lines);
  // Every shard's status page, in cluster-file order.
  Result<std::vector<ShardStatusPage>> status_pages();
  // An elastic job's start (docs/DEPLOY.md, "Elastic jobs"): its hosts meet only at the shards, so the first to ask
  // sets the weights and the others take them. Asks the first shard of the file (control line init-weights; the
  // shard grants the first session that asks while its weights are unset); when it grants this worker,
  // `set_weights()` writes them (to every shard) and init-done follows, and the result is true. Otherwise it waits,
  // reading that shard's status page every 50 ms, until its /init/state is "set" (false: take the shards' weights),
  // asking again whenever the grant lapsed (its holder's session gone). Errors: set_weights()'s, a shard that
  // refuses the lines (its admins=), or `patience` passed with the grant still another host's (naming it).
  Result<bool> set_or_take_weights(const std::function<Status()>& set_weights, std::chrono::milliseconds patience);
  // Every shard's grad LU queue counters (commands issued, and issued while the other direction had commands
  // in flight), in cluster-file order: how much of the traffic used both directions at once.
  Result<std::vector<LuQueueCounters>> grad_queue_counters();
  // Every shard's counters summed over its three LUs since the cluster opened, in cluster-file order: commands,
  // sessions logged in again, pushes given up unanswered, commands sent again after UNIT ATTENTION (each kind
  // is also logged (set_log_sink; stderr by default), once per batch that needed it).
  Result<std::vector<LuQueueCounters>> recovery_counters();
  // The trace BLOCKPS_TRACE switched on (a file of spans: docs/OPTIONS.md, BLOCKPS_TRACE), or null.
  Trace* trace() const { return trace_.get(); }

 private:
  using Transfer = detail::Transfer;
  using Buffers = detail::Buffers;
  Cluster(ClusterConfig config, std::unique_ptr<Layout> layout);
  // A request: checked and cut into each shard's commands (client/request_plan.h), then posted to the shards' I/O
  // threads. A refusal (wrong blocks or buffer sizes) finishes it at once with invalid_argument.
  Operation submit(Transfer transfer, std::uint64_t first_block, std::uint64_t block_count, const Buffers& buffers,
                   CompletionCallback on_done);
  Operation submit_or_throw(Transfer transfer, std::uint64_t first_block, std::uint64_t block_count,
                            const Buffers& buffers, CompletionCallback& on_done);
  Operation post(Transfer transfer, std::vector<detail::ShardCommands> parts, CompletionCallback& on_done);
  // Runs job(shard, index) on every shard's I/O thread (where its sessions may be used) and waits for all.
  Status on_every_shard(const std::function<Status(detail::ShardIoThread&, std::size_t)>& job);

  ClusterConfig config_;
  bool status_only_ = false;
  // The largest WRITE request: [client] max_request, or less where a transport's larger WRITEs are fragile
  // (LuTransport::max_safe_write_bytes); READs use max_request.
  std::uint64_t max_write_request_bytes_ = 0;
  std::unique_ptr<Layout> layout_;
  // Before shards_: destroyed after them, so that their last spans are in the file (client/trace.h).
  std::unique_ptr<Trace> trace_;
  std::vector<std::unique_ptr<detail::ShardIoThread>> shards_;
  // The job, its claim and the model's place over shards_ (client/tenancy.h).
  std::unique_ptr<Tenancy> tenancy_;
};

}  // namespace blockps
