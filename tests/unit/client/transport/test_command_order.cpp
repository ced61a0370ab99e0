// CommandOrder (client/transport/command_order.h): the order in which a transport issues an exchange's WRITEs and
// READs.
#include <gtest/gtest.h>

#include <chrono>
#include <vector>

#include "client/transport/command_order.h"

namespace blockps {
namespace {

// n WRITEs, then n READs, READ i after WRITE i: what Cluster::exchange gives each shard.
std::vector<LuCommand> exchange_batch(std::size_t n) {
  std::vector<LuCommand> c;
  for (std::size_t i = 0; i < n; ++i) c.push_back({IoDirection::write, i * 4096, {}});
  for (std::size_t i = 0; i < n; ++i) c.push_back({IoDirection::read, i * 4096, {}, i});
  return c;
}

TEST(CommandOrderTest, WithoutPredecessorsCommandsGoInIndexOrder) {
  std::vector<LuCommand> c(5);
  CommandOrder order(c, {.depth = 2});
  EXPECT_EQ(order.next(), 0u);
  EXPECT_EQ(order.next(), 1u);
  order.completed(1, true);
  EXPECT_EQ(order.next(), 2u);
  order.completed(0, true);
  EXPECT_EQ(order.next(), 3u);
  EXPECT_EQ(order.next(), 4u);
  EXPECT_TRUE(order.all_issued());
  EXPECT_EQ(order.next(), std::nullopt);
}

TEST(CommandOrderTest, AReadGoesAsSoonAsItsWriteCompletedAheadOfLaterWrites) {
  const auto c = exchange_batch(6);
  LuQueueCounters counters;
  CommandOrder order(c, {.depth = 4}, &counters);
  for (std::size_t w = 0; w < 4; ++w) EXPECT_EQ(order.next(), w);  // the queue fills with WRITEs
  EXPECT_EQ(counters.issued_beside_other_direction, 0u);
  order.completed(1, true);  // WRITE 1 done (out of order): its READ (index 6 + 1) goes next
  EXPECT_EQ(order.next(), 7u);
  EXPECT_EQ(counters.issued_beside_other_direction, 1u) << "a READ issued while WRITEs are in flight";
  order.completed(7, true);  // the READ's slot goes back to the WRITEs
  EXPECT_EQ(order.next(), 4u);
  EXPECT_EQ(counters.issued_beside_other_direction, 1u) << "no READ was in flight when WRITE 4 went";
}

TEST(CommandOrderTest, AReadNeverGoesBeforeItsWriteCompletedWithSuccess) {
  const auto c = exchange_batch(2);
  CommandOrder order(c, {.depth = 8});
  EXPECT_EQ(order.next(), 0u);
  EXPECT_EQ(order.next(), 1u);
  EXPECT_EQ(order.next(), std::nullopt) << "both READs wait for their WRITEs";
  order.completed(0, false);
  EXPECT_EQ(order.next(), std::nullopt) << "a failed WRITE's READ never goes";
  order.completed(1, true);
  EXPECT_EQ(order.next(), 3u);
  EXPECT_FALSE(order.all_issued());
}

// A sync shard parks READs until every worker pushed the block: READs must never hold every slot while this
// worker still has WRITEs to send.
TEST(CommandOrderTest, OneSlotStaysWithTheWritesWhileAnyAreLeft) {
  const auto c = exchange_batch(8);
  CommandOrder order(c, {.depth = 4});
  for (std::size_t w = 0; w < 4; ++w) EXPECT_EQ(order.next(), w);
  for (std::size_t w = 0; w < 4; ++w) order.completed(w, true);  // four READs ready, four slots free
  EXPECT_EQ(order.next(), 8u);
  EXPECT_EQ(order.next(), 9u);
  EXPECT_EQ(order.next(), 10u);
  EXPECT_EQ(order.next(), 4u) << "the fourth slot goes to a WRITE, not to READ 3";
  order.completed(4, true);  // READ 3 and READ 4 ready; three READs in flight
  EXPECT_EQ(order.next(), 5u);
  order.completed(5, true);
  order.completed(6 + 2, true);  // READ 0 done: the slot
  EXPECT_EQ(order.next(), 11u);
}

// A shard's stream: exchanges join the batch while it runs (grew), a new READ whose WRITE already succeeded is ready at
// once, and a batch that may grow keeps a slot for the WRITEs still to come even when none is left now: another
// worker's parked READ may wait for the next one.
TEST(CommandOrderTest, ABatchThatGrowsTakesInNewCommandsAndKeepsASlotForWritesToCome) {
  std::vector<LuCommand> c = exchange_batch(2);
  CommandOrder order(c, {.depth = 2});
  order.will_grow();
  EXPECT_EQ(order.next(), 0u);
  EXPECT_EQ(order.next(), 1u);
  order.completed(0, true);
  order.completed(1, true);
  EXPECT_EQ(order.next(), 2u);
  EXPECT_EQ(order.next(), std::nullopt) << "READ 1 would take the last slot, which stays with the WRITEs to come";
  EXPECT_FALSE(order.all_issued());
  // The next exchange joins: its WRITE takes the kept slot; a READ that waits for WRITE 1 (done) is ready at once.
  c.push_back({IoDirection::write, 8 * 4096, {}});
  c.push_back({IoDirection::read, 8 * 4096, {}, 4});
  c.push_back({IoDirection::read, 4096, {}, 1});
  order.grew(c);
  EXPECT_EQ(order.next(), 4u) << "the new WRITE, in the slot kept for it";
  order.completed(2, true);
  EXPECT_EQ(order.next(), 3u) << "READ 1, the oldest ready";
  order.completed(4, true);
  order.completed(3, true);
  EXPECT_EQ(order.next(), 6u) << "the new READ whose WRITE succeeded before it joined";
  order.completed(6, true);
  EXPECT_EQ(order.next(), 5u);
  EXPECT_TRUE(order.all_issued());
}

// A READ queues behind every WRITE already sent on the session's connection: an exchange keeps only
// exchange_writes WRITEs in flight, and a batch without READs waiting for WRITEs (a push) is not limited.
TEST(CommandOrderTest, AnExchangeKeepsAtMostExchangeWritesWritesInFlight) {
  const auto c = exchange_batch(6);
  CommandOrder order(c, {.depth = 8, .exchange_writes = 2});
  EXPECT_EQ(order.next(), 0u);
  EXPECT_EQ(order.next(), 1u);
  EXPECT_EQ(order.next(), std::nullopt) << "two WRITEs in flight: the third waits although slots are free";
  order.completed(0, true);
  EXPECT_EQ(order.next(), 6u) << "WRITE 0's READ first";
  EXPECT_EQ(order.next(), 2u) << "then the WRITE that takes WRITE 0's place";
  EXPECT_EQ(order.next(), std::nullopt);
  order.completed(6, true);
  EXPECT_EQ(order.next(), std::nullopt) << "a READ's completion frees no WRITE place";

  const std::vector<LuCommand> push(6, LuCommand{IoDirection::write, 0, {}});
  CommandOrder plain(push, {.depth = 4, .exchange_writes = 1});
  for (std::size_t w = 0; w < 4; ++w) EXPECT_EQ(plain.next(), w) << "no READ waits here: the whole depth";
}

TEST(CommandOrderTest, OnlyEarlierCommandsCanBePredecessors) {
  std::vector<LuCommand> c(2);
  EXPECT_EQ(CommandOrder::check(c), "");
  c[0].after = 1;
  EXPECT_EQ(CommandOrder::check(c), "command 0 waits for command 1, which is not an earlier command of the batch");
  c[0].after = 0;
  EXPECT_NE(CommandOrder::check(c), "");
}

TEST(CommandOrderTest, AnObserverHearsOfEveryCompletionWithItsOwnIssueTimeAndOutcome) {
  const auto c = exchange_batch(2);
  struct Heard {
    const LuCommand* command;
    std::chrono::steady_clock::time_point issued, completed;
    bool ok;
  };
  std::vector<Heard> heard;
  CommandOrder order(c, {.depth = 4}, nullptr, [&](const LuCommand& command, auto issued, auto completed, bool ok) {
    heard.push_back({&command, issued, completed, ok});
  });
  EXPECT_EQ(order.next(), 0u);
  const auto between = std::chrono::steady_clock::now();
  EXPECT_EQ(order.next(), 1u);
  order.completed(1, false);
  order.completed(0, true);
  ASSERT_EQ(heard.size(), 2u);
  EXPECT_EQ(heard[0].command, &c[1]);
  EXPECT_EQ(heard[1].command, &c[0]);
  EXPECT_FALSE(heard[0].ok);
  EXPECT_TRUE(heard[1].ok);
  EXPECT_GE(heard[0].issued, between) << "WRITE 1 was issued after WRITE 0";
  EXPECT_LE(heard[1].issued, between);
  for (const Heard& h : heard) EXPECT_LE(h.issued, h.completed);
}

}  // namespace
}  // namespace blockps
