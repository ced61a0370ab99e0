// What Cluster::open checks of each connected shard before anything is written to it, beside the tenancy
// (client/tenancy.h): that its LUs and status page have the shape the cluster file and its layout give the shard, and
// how large a request its transports carry. Private to the library.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <vector>

#include "blockps/cluster_file.h"
#include "blockps/layout.h"
#include "contract/result.h"

namespace blockps {

namespace detail {
class ShardIoThread;
}

// Checks shard `index`'s grad and weights LU capacities and its status page's size, dtype and block against `config`
// and `layout` (mismatch, naming the field and both values); the page, as JSON. On the shard's I/O thread or before
// it runs.
Result<nlohmann::json> check_shard_shape(detail::ShardIoThread& shard, std::size_t index, const ClusterConfig& config,
                                         const Layout& layout);

// The largest WRITE request the connected shards take, with config.client.max_request_bytes lowered to what every
// LU carries in one command. A transport that carries at most N bytes per command (libiscsi over iser://:
// kLibiscsiIserMaxCommandBytes) caps the requests; a model block cannot be split (a push of part of a block is a
// step of the whole block), so a block larger than that is refused (config). A transport whose larger WRITEs are
// fragile (libiscsi 1.19 and NOP-In) caps the WRITE requests likewise.
Result<std::uint64_t> cap_requests(const std::vector<std::unique_ptr<detail::ShardIoThread>>& shards,
                                   ClusterConfig& config);

}  // namespace blockps
