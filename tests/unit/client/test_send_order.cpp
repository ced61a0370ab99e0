// next_to_send (client/send_order.h): which of a shard's queued exchanges its stream sends next.
#include <gtest/gtest.h>

#include <vector>

#include "client/send_order.h"

namespace blockps {
namespace {

constexpr std::uint64_t kBlock = 4096;

// An exchange of shard blocks [first, first + count): a WRITE and a READ of each, at model offset `model_offset`.
struct Exchange {
  std::vector<LuCommand> commands;
  std::uint64_t model_offset;
  Exchange(std::uint64_t first, std::uint64_t count, std::uint64_t model) : model_offset(model) {
    for (std::uint64_t b = first; b < first + count; ++b) {
      commands.push_back({IoDirection::write, b * kBlock, {{nullptr, kBlock}}});
      commands.push_back({IoDirection::read, b * kBlock, {{nullptr, kBlock}}, commands.size() - 1});
    }
  }
};

std::size_t pick(const std::vector<Exchange>& queue, SendOrder order) {
  std::vector<QueuedExchange> queued;
  for (const Exchange& e : queue) queued.push_back({e.commands, e.model_offset});
  return next_to_send(queued, order);
}

// The blocks in the order sent, when every exchange of `queue` waits behind the credit window at once.
std::vector<std::uint64_t> sent(std::vector<Exchange> queue, SendOrder order) {
  std::vector<std::uint64_t> blocks;
  while (!queue.empty()) {
    const std::size_t next = pick(queue, order);
    blocks.push_back(queue[next].model_offset / kBlock);
    queue.erase(queue.begin() + static_cast<std::ptrdiff_t>(next));
  }
  return blocks;
}

TEST(SendOrderTest, AscendingSendsTheLowestModelOffsetsFirstWhateverTheyWereQueued) {
  // Backward in forward-ordered layout queues the last layers first: blocks 6-7, then 4-5, 2-3, 0-1.
  const std::vector<Exchange> queue{{6, 2, 6 * kBlock}, {4, 2, 4 * kBlock}, {2, 2, 2 * kBlock}, {0, 2, 0}};
  EXPECT_EQ(sent(queue, SendOrder::ascending), (std::vector<std::uint64_t>{0, 2, 4, 6}));
  EXPECT_EQ(sent(queue, SendOrder::queue), (std::vector<std::uint64_t>{6, 4, 2, 0}));
}

TEST(SendOrderTest, DescendingSendsTheHighestFirstAsBlockpsTorchsReversedLayoutNeeds) {
  // blockps.torch lays the parameters out in reverse: backward fills block 0 first, the first layers are last.
  const std::vector<Exchange> queue{{0, 2, 0}, {2, 2, 2 * kBlock}, {4, 2, 4 * kBlock}, {6, 2, 6 * kBlock}};
  EXPECT_EQ(sent(queue, SendOrder::descending), (std::vector<std::uint64_t>{6, 4, 2, 0}));
  EXPECT_EQ(sent(queue, SendOrder::queue), (std::vector<std::uint64_t>{0, 2, 4, 6}));
}

// A block's second push never passes its first: the shard would park it, and it would hold the slot the first needs.
TEST(SendOrderTest, AnExchangeNeverPassesAnEarlierOneOfTheSameBlocks) {
  const std::vector<Exchange> queue{{4, 2, 4 * kBlock}, {5, 1, 0}, {1, 1, kBlock}};
  EXPECT_EQ(pick(queue, SendOrder::ascending), 2u) << "block 5's second exchange waits behind its first; block 1 goes";
  const std::vector<Exchange> only_overlapping{{4, 2, 4 * kBlock}, {4, 1, 0}};
  EXPECT_EQ(pick(only_overlapping, SendOrder::ascending), 0u);
}

TEST(SendOrderTest, EqualOffsetsKeepTheQueuesOrder) {
  const std::vector<Exchange> queue{{2, 1, kBlock}, {3, 1, kBlock}};
  EXPECT_EQ(pick(queue, SendOrder::ascending), 0u);
  EXPECT_EQ(pick(queue, SendOrder::descending), 0u);
}

}  // namespace
}  // namespace blockps
