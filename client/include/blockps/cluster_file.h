// The cluster file (TOML): the model's shape, the layout, the client's settings and how to reach each shard's
// LUs. One loader for the C++ API, the CLI and the tests; every refusal names the file, the key (and the
// shard), the value seen and what is allowed. docs/OPTIONS.md lists every key.
//
//   [model]
//   name = "resnet50-run7" # optional: the model's identity, recorded by the shards (their place)
//   size = "32M"          # wire bytes of the whole model (K, M, G = 2^10, 2^20, 2^30), or an integer
//   dtype = "f32"         # f32, bf16, f16
//   block = "256K"        # aggregation block (wire bytes); the shards' block= must be the same
//   [layout]
//   kind = "stripe"       # stripe (default) or range
//   [client]
//   job = "run7"          # optional: the job this worker belongs to (a shard serves one job at a time)
//   initiator = "iqn..."  # default iqn.2026-11.io.blockps:worker-<hostname>-<pid>
//   queue_depth = 16      # commands in flight per shard
//   exchange_writes = 2   # of those, WRITEs in flight during an exchange (1..queue_depth)
//   send_order = "ascending"  # which queued exchange a shard's stream sends next: ascending or descending model
//                             # offsets, or queue (the order queued); default: the opener's (Cluster::prefer_send_order)
//   engine = "libaio"     # posix transport: psync, libaio, io_uring
//   max_request = "1M"    # largest request (a run of blocks contiguous on one shard)
//   reconnect_s = 60      # libiscsi: how long a lost session is logged in again; 0 = never
//   timeout_s = 30        # libiscsi: a login or a session with no command completing for this long fails
//   [[shard]]
//   name = "shard0"
//   grad = "iscsi://10.0.0.1:3260/iqn.2026-11.io.blockps:shard0/1"   # or iser://..., or /dev/...
//   weights = "iscsi://10.0.0.1:3260/iqn.2026-11.io.blockps:shard0/2"
//   status = "iscsi://10.0.0.1:3260/iqn.2026-11.io.blockps:shard0/3"
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "blockps/layout.h"
#include "blockps/lu_address.h"
#include "contract/limits.h"
#include "contract/lu_role.h"
#include "contract/result.h"
#include "contract/wire_dtype.h"

namespace blockps {

struct ShardSpec {
  std::string name;
  LuAddress grad, weights, status;
  const LuAddress& lu(LuRole role) const;
};

struct ModelSpec {
  std::uint64_t size_bytes = 0;
  WireDtype dtype = WireDtype::f32;  // what the shards' dtype= says
  std::uint64_t block_bytes = std::uint64_t{256} * 1024;
  // The model's identity ([model] name, a name as contract/control_lines.h allows; "" when the file names none):
  // the shards record it in their place, and a shard that holds another model is refused (client/job_and_place.h).
  std::string name;
};

// Which of the exchanges queued for a shard its stream sends next (client/send_order.h). The point is to send first
// what the next forward needs first (the first layers), in an order every worker computes alike, so that the
// shards' rounds close in it and DistributedOptimizer's early_forward starts the next forward soonest.
enum class SendOrder {
  ascending,   // the lowest model byte offset first: the first layers where the model is laid out in forward order
  descending,  // the highest first: the first layers of blockps.torch's layout (parameters in reverse order)
  queue,       // the order queued (before issue 48; the DDP hook's, which keeps DDP's bucket order)
};

struct ClientSpec {
  std::string initiator;  // always set after loading (the default is filled in)
  int queue_depth = 16;
  int exchange_writes = 2;  // WRITEs in flight per shard during an exchange (client/transport/command_order.h says why)
  // [client] send_order; none: the opener's choice (Cluster::prefer_send_order), else ascending.
  std::optional<SendOrder> send_order;
  PosixEngine engine = PosixEngine::libaio;
  std::uint64_t max_request_bytes = std::uint64_t{1024} * 1024;
  // How long a libiscsi session that was lost is logged in again before the operation fails (0: never). A
  // minute covers a shard restarted by its supervisor (tgtd's start, the LUs, loading the checkpoint).
  double reconnect_s = 60;
  // libiscsi: a login, or a session on which no command completed for this long, is given up (then
  // reconnect_s applies). The time to notice a shard whose host went silent rather than closed its connection.
  int timeout_s = 30;
  // The job this worker belongs to ([client] job, a name as contract/control_lines.h allows; "" when the file names
  // none): Cluster::open claims the shards for it (OpenOptions::job says which name wins).
  std::string job;
};

struct ClusterConfig {
  std::string source;  // the file name (or "<text>"), for messages
  ModelSpec model;
  LayoutKind layout = LayoutKind::stripe;
  ClientSpec client;
  std::vector<ShardSpec> shards;
};

// Limits the loader enforces (and the messages quote).
inline constexpr std::uint64_t kLuBlockBytes = kSectorBytes;    // sizes are multiples of the LU block size
inline constexpr std::uint64_t kMaxRequestBytes = 16ull << 20;  // one SCSI command
inline constexpr int kMaxQueueDepth = 1024;
inline constexpr double kMaxReconnectSeconds = 86400;
inline constexpr int kMaxTimeoutSeconds = 3600;

// Parses cluster-file text; `source` names it in messages.
Result<ClusterConfig> parse_cluster_text(std::string_view text, const std::string& source);
// Reads and parses the file at `path`.
Result<ClusterConfig> load_cluster_file(const std::string& path);

// The initiator name of worker `worker` on this host: iqn.2026-11.io.blockps:worker-<hostname>-<worker>
// (`worker` is used as it is: lower-case letters, digits, '-' and '.').
std::string worker_initiator_iqn(std::string_view worker);
// The client's default initiator name: worker_initiator_iqn(<pid>).
std::string default_initiator_iqn();

}  // namespace blockps
