// What Cluster::open checks of each connected shard (client/open_checks.h).
#include "client/open_checks.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "client/shard_io_thread.h"
#include "contract/status_page.h"

namespace blockps {

using detail::read_status_page;
using detail::ShardIoThread;

Result<nlohmann::json> check_shard_shape(ShardIoThread& shard, std::size_t index, const ClusterConfig& config,
                                         const Layout& layout) {
  const std::uint64_t need = layout.shard_bytes(index);
  const std::string why = " (model " + std::to_string(config.model.size_bytes) + " bytes in blocks of " +
                          std::to_string(config.model.block_bytes) + ", " + std::string(to_string(config.layout)) +
                          " layout over " + std::to_string(config.shards.size()) + " shards)";
  for (LuRole role : {LuRole::grad, LuRole::weights}) {
    const std::uint64_t have = shard.lu(role).capacity_bytes();
    if (have != need) {
      return Status::Error(StatusCode::mismatch, config.source + ": " + shard.lu_name(role) + ": capacity is " +
                                                     std::to_string(have) + " bytes, the layout gives this shard " +
                                                     std::to_string(need) + why);
    }
  }
  auto page = read_status_page(shard);
  if (!page.ok()) return page.status();
  const std::string prefix = config.source + ": shard '" + shard.spec().name + "': status page ";
  nlohmann::json j = nlohmann::json::parse(page.value(), nullptr, false);
  using pointer = nlohmann::json::json_pointer;
  if (j.is_discarded() || !j.is_object() || !j.contains(pointer(status_page::kShard)) ||
      !j[pointer(status_page::kShard)].is_object())
    return Status::Error(StatusCode::mismatch,
                         prefix + "is not a blockps status page (no JSON object with a \"shard\" member)");
  auto number = [&](const char* field) -> std::optional<std::uint64_t> {
    const pointer p(field);
    if (!j.contains(p) || !j[p].is_number_unsigned()) return std::nullopt;
    return j[p].get<std::uint64_t>();
  };
  const auto size = number(status_page::kShardSize);
  const auto block = number(status_page::kShardBlock);
  const pointer dtype_field(status_page::kShardDtype);
  const std::string dtype =
      j.contains(dtype_field) && j[dtype_field].is_string() ? j[dtype_field].get<std::string>() : "";
  if (!size || !block || dtype.empty())
    return Status::Error(StatusCode::mismatch, prefix + "lacks shard.size, shard.dtype or shard.block");
  if (*size != need)
    return Status::Error(StatusCode::mismatch, prefix + "says size = " + std::to_string(*size) +
                                                   " bytes, the cluster file's layout needs " + std::to_string(need) +
                                                   why);
  if (dtype != to_string(config.model.dtype))
    return Status::Error(StatusCode::mismatch, prefix + "says dtype = " + dtype + ", the cluster file says dtype = " +
                                                   std::string(to_string(config.model.dtype)));
  if (*block != config.model.block_bytes)
    return Status::Error(StatusCode::mismatch,
                         prefix + "says block = " + std::to_string(*block) +
                             " bytes, the cluster file says block = " + std::to_string(config.model.block_bytes));
  return j;
}

Result<std::uint64_t> cap_requests(const std::vector<std::unique_ptr<ShardIoThread>>& shards, ClusterConfig& config) {
  std::uint64_t write_cap = config.client.max_request_bytes;
  for (const auto& shard : shards) {
    for (LuRole role : {LuRole::grad, LuRole::weights}) {
      if (const std::uint64_t safe = shard->lu(role).max_safe_write_bytes(); safe != 0)
        write_cap = std::min(write_cap, std::max(safe, config.model.block_bytes));
      const std::uint64_t limit = shard->lu(role).max_command_bytes();
      if (limit == 0) continue;
      if (config.model.block_bytes > limit) {
        return Status::Error(StatusCode::config,
                             config.source + ": shard '" + shard->spec().name + "': " + shard->lu_name(role) +
                                 " carries at most " + std::to_string(limit) +
                                 " bytes per command (libiscsi 1.19's iSER transport), less than [model] block = " +
                                 std::to_string(config.model.block_bytes) +
                                 ": use block <= 256K, iscsi:// URLs, or the kernel initiator's devices");
      }
      config.client.max_request_bytes = std::min(config.client.max_request_bytes, limit);
    }
  }
  return std::min(config.client.max_request_bytes, write_cap);
}

}  // namespace blockps
