// mode=ssp:K, stale synchronous parallel (docs/OPTIONS.md, "Synchronous rounds"): every push is applied at once;
// a worker's push of a block waits while it is more than K pushes ahead of the slowest live worker on that
// block. READs never wait.
#pragma once

#include <map>
#include <memory>
#include <unordered_map>
#include <vector>

#include "ps_backend/rounds/round_mode.h"

namespace blockps {

class SspMode final : public RoundMode {
 public:
  explicit SspMode(RoundContext& ctx);

  Admission admit_push(const WorkerRef& worker, std::span<const BlockSpan> spans, Clock::time_point now,
                       Ticket& ticket) override;
  Admission admit_pull(std::uint64_t itn, std::uint64_t first_block, std::uint64_t last_block) override;
  void landed(const Ticket& ticket) override;
  void drop_worker(std::uint64_t itn) override;
  void reset() override;
  RoundProgress progress() const override;
  std::uint64_t rounds_pushed(std::uint64_t itn) const override;

  Status land(Ticket& ticket, std::span<const std::byte> data) override;
  Status after_landing(const Ticket& ticket) override;
  void tick() override {}  // nothing closes by a deadline: every push is applied as it lands

 private:
  struct Block {
    // The push of the block each worker is in: which sectors it covered so far (a push may come in pieces).
    std::map<std::uint64_t, std::shared_ptr<Contribution>> open;
    std::unordered_map<std::uint64_t, std::uint64_t> clock;  // worker -> its completed pushes of the block
  };

  RoundContext& ctx_;
  std::vector<Block> blocks_;
};

}  // namespace blockps
