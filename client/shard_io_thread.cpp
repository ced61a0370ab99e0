// The shard I/O thread's free functions (client/shard_io_thread.h).
#include "client/shard_io_thread.h"

namespace blockps::detail {

std::int64_t unix_ms_now() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The answers of a shard that its status page explains (client/job_and_place.h), or none.
std::optional<ShardAnswer> shard_answer(const LuFailure& f, LuRole role, IoDirection direction) {
  if (f.job_refused) return ShardAnswer::job_refused;
  if (f.scsi_status == scsi::kReservationConflict) return ShardAnswer::reservation_conflict;
  if (f.scsi_status != scsi::kCheckCondition) return std::nullopt;
  if (f.sense_key == scsi::kNotReady) return ShardAnswer::not_ready;
  if (f.sense_key == scsi::kHardwareError) return ShardAnswer::hardware_error;
  if (f.sense_key == scsi::kIllegalRequest && role == LuRole::status && direction == IoDirection::write)
    return ShardAnswer::control_refused;
  return std::nullopt;
}

Result<std::string> read_status_page(ShardIoThread& shard) {
  LuTransport& lu = shard.lu(LuRole::status);
  std::uint64_t bytes = std::min(lu.capacity_bytes(), kStatusLuBytes);
  // The JSON is a few KiB: a transport with a per-command limit (libiscsi iSER) reads only what one command can.
  if (lu.max_command_bytes() != 0) bytes = std::min(bytes, lu.max_command_bytes());
  bytes -= bytes % lu.block_size();
  if (bytes == 0)
    return Status::Error(StatusCode::mismatch, shard.lu_name(LuRole::status) + ": capacity 0: not a blockps status LU");
  AlignedBuffer page = make_aligned_buffer(static_cast<std::size_t>(bytes));  // O_DIRECT (posix transport)
  if (!page) return Status::Error(StatusCode::unknown, "no memory for the status page");
  std::vector<LuCommand> read{{IoDirection::read, 0, {{page.get(), static_cast<std::size_t>(bytes)}}}};
  if (Status s = shard.run(LuRole::status, read, {}, /*explain=*/false); !s.ok()) return s;
  const char* text = reinterpret_cast<const char*>(page.get());
  return std::string(text, strnlen(text, bytes));
}

Status run_on_shards(ShardIoThreads& shards, const std::vector<std::size_t>& which,
                     const std::function<Status(ShardIoThread&, std::size_t)>& job) {
  if (which.empty()) return Status::Ok();
  auto state = std::make_shared<OperationState>();
  state->parts_left = which.size();
  for (std::size_t i : which) {
    ShardIoThread* shard = shards[i].get();
    shard->post([shard, i, &job] { return job(*shard, i); }, state);
  }
  return Operation(state).wait();
}

std::vector<std::size_t> all_shards(const ShardIoThreads& shards) {
  std::vector<std::size_t> all(shards.size());
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
  return all;
}

}  // namespace blockps::detail
