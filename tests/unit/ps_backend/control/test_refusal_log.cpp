// The latest refusals in words: oldest first, at most the capacity, and a repeated refusal counted, not repeated.
#include <gtest/gtest.h>

#include "ps_backend/control/refusal_log.h"

namespace blockps {
namespace {

const WorkerRef kA{1, 10, "iqn.2024-01.test:a"}, kB{1, 20, "iqn.2024-01.test:b"};

TEST(RefusalLog, KeepsTheLatestOldestFirst) {
  RefusalLog log(3);
  EXPECT_TRUE(log.recent().empty());
  for (int i = 0; i < 5; ++i) log.add(kA, LuRole::grad, "reason " + std::to_string(i));
  const std::vector<RefusalEntry> recent = log.recent();
  ASSERT_EQ(recent.size(), 3u);
  EXPECT_EQ(recent[0].reason, "reason 2");
  EXPECT_EQ(recent[2].reason, "reason 4");
  EXPECT_EQ(recent[2].iqn, "iqn.2024-01.test:a");
  EXPECT_EQ(recent[2].session, 10u);
  EXPECT_EQ(recent[2].lu, LuRole::grad);
  EXPECT_GT(recent[2].unix_ms, 1600000000000u);
  EXPECT_EQ(recent[2].count, 1u);
}

// A refused job repeats its commands: one entry counts them and moves to the end, and the other entries stay.
TEST(RefusalLog, ARepeatedRefusalIsCountedInOneEntry) {
  RefusalLog log(3);
  log.add(kA, LuRole::grad, "held by job x");
  log.add(kB, LuRole::status, "control refused");
  for (int i = 0; i < 10; ++i) log.add(kA, LuRole::grad, "held by job x");
  std::vector<RefusalEntry> recent = log.recent();
  ASSERT_EQ(recent.size(), 2u);
  EXPECT_EQ(recent[0].iqn, "iqn.2024-01.test:b");
  EXPECT_EQ(recent[1].reason, "held by job x");
  EXPECT_EQ(recent[1].count, 11u);
  // Another LU, session or reason is another entry.
  log.add(kA, LuRole::weights, "held by job x");
  log.add(kB, LuRole::grad, "held by job x");
  recent = log.recent();
  ASSERT_EQ(recent.size(), 3u);
  EXPECT_EQ(recent[0].reason, "held by job x");
  EXPECT_EQ(recent[0].lu, LuRole::grad);
  EXPECT_EQ(recent[1].lu, LuRole::weights);
  EXPECT_EQ(recent[2].iqn, "iqn.2024-01.test:b");
}

}  // namespace
}  // namespace blockps
