// Shards, gradients and workers for the rounds' unit tests: the coordinator with its keeper (Fixture), and a
// round mode alone, driven by the test without a keeper thread (ModeBench).
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "ps_backend/control/status_page_writer.h"
#include "ps_backend/rounds/round_mode.h"
#include "ps_backend/rounds/rounds.h"
#include "tests/support/faulty_store.h"

namespace blockps::unit {

inline constexpr std::uint64_t kBlockBytes = 1024, kShardBytes = 4 * kBlockBytes;  // f32: 256 elements per block

inline OptimizerParams sgd(float lr) {
  OptimizerParams p;
  p.kind = OptimizerKind::sgd;
  p.lr = lr;
  return p;
}

inline std::vector<std::byte> gradient(std::uint64_t bytes, float seed) {
  std::vector<std::byte> g(bytes);
  for (std::size_t i = 0; i < bytes / 4; ++i) {
    // Values whose f32 sum depends on the order of addition.
    const float v = seed * (1.0f + static_cast<float>(i) * 1e-3f) + (i % 2 ? 1e-7f : 3e7f);
    std::memcpy(g.data() + 4 * i, &v, 4);
  }
  return g;
}

inline std::vector<float> weights(const ModelShard& m) {
  std::vector<std::byte> raw(kShardBytes);
  m.read_weights(0, raw);
  std::vector<float> w(kShardBytes / 4);
  std::memcpy(w.data(), raw.data(), raw.size());
  return w;
}

inline float f32_at(const std::vector<std::byte>& bytes, std::size_t i) {
  float v;
  std::memcpy(&v, bytes.data() + 4 * i, 4);
  return v;
}

inline RoundPolicy sync_policy(std::uint32_t workers, std::uint32_t min_workers, std::uint32_t straggler_ms = 60000) {
  RoundPolicy p;
  p.mode = RoundPolicy::Mode::sync;
  p.workers = workers;
  p.min_workers = min_workers;
  p.straggler_ms = straggler_ms;
  return p;
}

inline RoundPolicy ssp_policy(std::uint32_t staleness, std::uint32_t workers, std::uint32_t min_workers = 1) {
  RoundPolicy p = sync_policy(workers, min_workers);
  p.mode = RoundPolicy::Mode::ssp;
  p.staleness = staleness;
  return p;
}

inline const WorkerRef kA{1, 11, "iqn.w:a"}, kB{1, 12, "iqn.w:b"}, kC{1, 13, "iqn.w:c"};

/// A shard with its rounds (and their keeper thread).
struct Fixture {
  ModelShard model;
  Rounds rounds;
  /// `fault_trigger`: the shard's store fails every update while that file exists (tests/support/faulty_store.h).
  explicit Fixture(RoundPolicy p, float lr = 1.0f, const std::string& fault_trigger = "")
      : model(
            {kShardBytes, WireDtype::f32, kBlockBytes}, sgd(lr), nullptr,
            fault_trigger.empty()
                ? ModelShard::StoreWrapper{}
                : [fault_trigger](
                      std::unique_ptr<ShardStore> s) { return make_faulty_store(std::move(s), fault_trigger); }),
        rounds(model, p, nullptr) {}
  /// The rounds' report as the status page writes it (its "rounds" section).
  nlohmann::json status() const { return rounds_section(rounds.status()); }
  Admission push(const WorkerRef& w, const std::vector<std::byte>& g, std::uint64_t offset = 0) {
    const Admission a = rounds.admit_push(&g, w, offset, g.size());
    if (a == Admission::run) {
      EXPECT_TRUE(rounds.land_push(&g, g).ok());
    }
    return a;
  }
};

/// A shard and a round mode's context, for a mode alone: nothing runs unless the test calls it.
struct ModeBench {
  ModelShard model;
  RoundContext ctx;
  explicit ModeBench(const RoundPolicy& p, const OptimizerParams& optimizer = sgd(1.0f))
      : model({kShardBytes, WireDtype::f32, kBlockBytes}, optimizer, nullptr), ctx(model, p, nullptr) {}

  /// What the coordinator does with a push: admit (the worker joins), land, count, settle.
  Admission push(RoundMode& mode, const WorkerRef& w, const std::vector<std::byte>& g, std::uint64_t offset = 0) {
    Ticket ticket;
    const Admission a = admit(mode, w, offset, g.size(), ticket);
    if (a == Admission::run) land(mode, ticket, g);
    return a;
  }
  Admission admit(RoundMode& mode, const WorkerRef& w, std::uint64_t offset, std::uint64_t len, Ticket& ticket) {
    const auto spans = split_into_blocks(ctx.geometry, offset, len);
    EXPECT_FALSE(spans.empty());
    const auto now = std::chrono::steady_clock::now();
    std::lock_guard lock(ctx.lock);
    ctx.members.admitted_push(w, now);
    return mode.admit_push(w, spans, now, ticket);
  }
  void land(RoundMode& mode, Ticket& ticket, const std::vector<std::byte>& g) {
    EXPECT_TRUE(mode.land(ticket, g).ok());
    {
      std::lock_guard lock(ctx.lock);
      mode.landed(ticket);
      ctx.members.landed_push(ticket.front().contribution->itn, std::chrono::steady_clock::now());
    }
    EXPECT_TRUE(mode.after_landing(ticket).ok());
  }
  /// A member leaves, as the coordinator drops it.
  void drop(RoundMode& mode, const WorkerRef& w) {
    std::lock_guard lock(ctx.lock);
    if (ctx.members.drop(w.itn, "test")) mode.drop_worker(w.itn);
  }
  RoundProgress progress(const RoundMode& mode) {
    std::lock_guard lock(ctx.lock);
    return mode.progress();
  }
  Admission pull(RoundMode& mode, const WorkerRef& w, std::uint64_t first_block, std::uint64_t last_block) {
    std::lock_guard lock(ctx.lock);
    return mode.admit_pull(w.itn, first_block, last_block);
  }
};

}  // namespace blockps::unit
