#include "tests/support/lu_pipeline.h"

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "client/transport/aligned_buffer.h"

namespace blockps::testing {
namespace {

using Clock = std::chrono::steady_clock;

ScsiResult spec_error(std::string message) { return ScsiResult{kScsiTransportError, 0, 0, std::move(message)}; }

// The spec's commands, made as slots free up. Reads go into one buffer per command in flight, lent at issue
// and taken back at completion; a tag names the buffer.
class Pipeline final : public CommandStream {
 public:
  Pipeline(const PipelineSpec& spec, std::uint64_t range) : spec_(spec), range_(range) {}

  // The read buffers; false when memory ran out.
  bool allocate() {
    if (spec_.direction == IoDirection::write) return true;
    for (int i = 0; i < spec_.queue_depth; ++i) {
      buffers_.push_back(make_aligned_buffer(spec_.request_bytes));
      if (!buffers_.back()) return false;
      free_.push_back(static_cast<std::uint64_t>(i));
    }
    return true;
  }

  void stop_issuing_at(Clock::time_point when) { stop_issuing_at_ = when; }

  bool next(LuCommand& command, std::uint64_t& tag) override {
    if ((spec_.requests != 0 && issued_ >= spec_.requests) || Clock::now() >= stop_issuing_at_) return false;
    const std::uint64_t req = spec_.request_bytes;
    std::byte* data = nullptr;
    tag = 0;
    if (spec_.direction == IoDirection::write) {
      // libiscsi only reads a WRITE's data.
      data = const_cast<std::byte*>(spec_.write_source.data() + next_ % spec_.write_source.size());
    } else {
      tag = free_.back();
      free_.pop_back();
      data = buffers_[tag].get();
    }
    command.direction = spec_.direction;
    command.offset = spec_.range_offset + next_;
    command.segments.assign(1, IoSegment{data, req});
    command.after = kNoPredecessor;
    ++issued_;
    next_ = (next_ + req) % range_;
    return true;
  }

  void completed(std::uint64_t tag, const ScsiResult& result) override {
    if (spec_.direction == IoDirection::read) free_.push_back(tag);
    if (!result.ok()) return;
    ++requests_;
    bytes_ += spec_.request_bytes;
  }

  std::uint64_t requests() const { return requests_; }
  std::uint64_t bytes() const { return bytes_; }

 private:
  const PipelineSpec& spec_;
  const std::uint64_t range_;
  Clock::time_point stop_issuing_at_ = Clock::time_point::max();
  std::vector<AlignedBuffer> buffers_;
  std::vector<std::uint64_t> free_;  // buffers no command in flight reads into
  std::uint64_t issued_ = 0;
  std::uint64_t next_ = 0;  // range-relative offset of the next request
  std::uint64_t requests_ = 0, bytes_ = 0;
};

}  // namespace

PipelineResult run_pipeline(IscsiLun& lun, const PipelineSpec& spec) {
  PipelineResult result;
  const std::uint64_t req = spec.request_bytes;
  if (!lun.connected()) {
    result.error = spec_error("not connected");
    return result;
  }
  // Alignment and the transport's limits are checked by run_stream() on the first command.
  if (req == 0) {
    result.error = spec_error("request size 0: a request is at least one block");
    return result;
  }
  if (spec.queue_depth < 1) {
    result.error = spec_error("queue depth " + std::to_string(spec.queue_depth) + " must be >= 1");
    return result;
  }
  if (spec.requests == 0 && spec.seconds <= 0) {
    result.error = spec_error("pipeline needs a request count or a duration");
    return result;
  }
  std::uint64_t range = spec.range_bytes;
  if (range == 0) range = lun.capacity_bytes() > spec.range_offset ? lun.capacity_bytes() - spec.range_offset : 0;
  range -= range % req;
  if (range < req) {
    result.error = spec_error("range of " + std::to_string(range) + " bytes holds no request of " +
                              std::to_string(req) + " bytes");
    return result;
  }
  if (spec.direction == IoDirection::write && (spec.write_source.empty() || spec.write_source.size() % req != 0)) {
    result.error = spec_error("write_source of " + std::to_string(spec.write_source.size()) +
                              " bytes must be a non-zero multiple of the request size " + std::to_string(req));
    return result;
  }

  Pipeline pipeline(spec, range);
  if (!pipeline.allocate()) {
    result.error = spec_error("out of memory for read buffers");
    return result;
  }
  const auto start = Clock::now();
  if (spec.seconds > 0)
    pipeline.stop_issuing_at(start +
                             std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(spec.seconds)));
  result.error = lun.run_stream(pipeline, spec.queue_depth);
  result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  result.requests = pipeline.requests();
  result.bytes = pipeline.bytes();
  return result;
}

}  // namespace blockps::testing
