// The libiscsi transport: an IscsiLun session whose commands run on libiscsi's own poll loop (run_commands).
#include "client/transport.h"

namespace blockps {
namespace {

class LibiscsiTransport final : public LuTransport {
 public:
  LibiscsiTransport(IscsiLun lun, std::string name) : lun_(std::move(lun)), name_(std::move(name)) {}
  const std::string& describe() const override { return name_; }
  std::uint64_t capacity_bytes() const override { return lun_.capacity_bytes(); }
  std::uint32_t block_size() const override { return lun_.block_size(); }
  std::uint64_t max_command_bytes() const override { return lun_.max_command_bytes(); }
  std::uint64_t max_safe_write_bytes() const override { return kLibiscsiImmediateWriteBytes; }
  std::optional<LuFailure> run(std::span<const LuCommand> commands, QueueLimits limits) override {
    if (!lun_.connected()) return LuFailure{0, "disconnected (an earlier transport failure dropped the session)"};
    const CommandBatchResult r = lun_.run_commands(commands, limits, &counters_);
    if (r.ok()) return std::nullopt;
    return LuFailure{r.failed_command, r.error.describe()};
  }
  LuQueueCounters queue_counters() const override { return counters_; }

 private:
  IscsiLun lun_;
  std::string name_;
  LuQueueCounters counters_;
};

}  // namespace

Result<std::unique_ptr<LuTransport>> open_libiscsi_transport(const std::string& url, const TransportOptions& options) {
  IscsiLun lun;
  if (Status s = lun.connect(url, options.initiator); !s.ok()) return s;
  return std::unique_ptr<LuTransport>(std::make_unique<LibiscsiTransport>(std::move(lun), "libiscsi " + url));
}

Result<std::unique_ptr<LuTransport>> open_lu_transport(const LuAddress& address, const TransportOptions& options) {
  if (address.kind == LuAddress::Kind::device_path) return open_posix_transport(address.text, options);
  return open_libiscsi_transport(address.text, options);
}

}  // namespace blockps
