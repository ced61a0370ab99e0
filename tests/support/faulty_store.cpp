#include "tests/support/faulty_store.h"

#include <unistd.h>

#include <utility>

namespace blockps {
namespace {

class FaultyStore final : public ShardStore {
 public:
  FaultyStore(std::unique_ptr<ShardStore> inner, std::string trigger)
      : inner_(std::move(inner)), trigger_(std::move(trigger)) {}

  Device device() const override { return inner_->device(); }
  bool updates_whole_requests() const override { return inner_->updates_whole_requests(); }
  Status update(OptimizerKind kind, Gradient grad, std::span<const BlockUpdate> updates) override {
    if (::access(trigger_.c_str(), F_OK) == 0)
      return Status::Error(StatusCode::io, "injected fault: the update of elements " +
                                               std::to_string(updates.empty() ? 0 : updates.front().element) +
                                               ".. failed (" + trigger_ + " exists)");
    return inner_->update(kind, grad, updates);
  }
  float* host_weights() override { return inner_->host_weights(); }
  Status publish_weights(std::uint64_t element, std::uint64_t count) override {
    return inner_->publish_weights(element, count);
  }
  Status read_state(std::uint64_t element, std::uint64_t count, std::vector<float>& scratch,
                    std::span<const float> (&state)[2]) const override {
    return inner_->read_state(element, count, scratch, state);
  }
  Status write_state(std::uint64_t element, std::uint64_t count, std::span<const float> s0,
                     std::span<const float> s1) override {
    return inner_->write_state(element, count, s0, s1);
  }
  Status status() const override { return inner_->status(); }

 private:
  std::unique_ptr<ShardStore> inner_;
  const std::string trigger_;
};

}  // namespace

std::unique_ptr<ShardStore> make_faulty_store(std::unique_ptr<ShardStore> inner, std::string trigger) {
  return std::make_unique<FaultyStore>(std::move(inner), std::move(trigger));
}

}  // namespace blockps
