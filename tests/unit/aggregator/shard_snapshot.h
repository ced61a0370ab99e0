// A whole shard copied out through for_each_block (the checkpoint path): for comparing shards in tests.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "aggregator/model_shard.h"

namespace blockps::test {

struct Snapshot {
  std::vector<std::uint64_t> steps;
  std::vector<float> w, s0, s1;
};

inline Snapshot snapshot(const ModelShard& shard) {
  Snapshot s;
  shard.for_each_block([&](const BlockView& view) {
    EXPECT_EQ(view.index, s.steps.size());
    s.steps.push_back(view.step);
    s.w.insert(s.w.end(), view.weights.begin(), view.weights.end());
    s.s0.insert(s.s0.end(), view.state[0].begin(), view.state[0].end());
    s.s1.insert(s.s1.end(), view.state[1].begin(), view.state[1].end());
  });
  EXPECT_EQ(s.steps.size(), shard.geometry().blocks())
      << "a block could not be visited: " << shard.engine_status().message();
  return s;
}

}  // namespace blockps::test
