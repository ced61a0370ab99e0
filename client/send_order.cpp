#include "client/send_order.h"

namespace blockps {
namespace {

// Whether two exchanges touch a common byte of the LU.
bool overlap(std::span<const LuCommand> a, std::span<const LuCommand> b) {
  for (const LuCommand& x : a)
    for (const LuCommand& y : b)
      if (x.offset < y.offset + y.bytes() && y.offset < x.offset + x.bytes()) return true;
  return false;
}

}  // namespace

std::size_t next_to_send(std::span<const QueuedExchange> queued, SendOrder order) {
  std::size_t best = 0;
  if (order == SendOrder::queue) return best;
  const auto sooner = [order](const QueuedExchange& x, const QueuedExchange& y) {
    return order == SendOrder::ascending ? x.lowest_model_offset < y.lowest_model_offset
                                         : x.lowest_model_offset > y.lowest_model_offset;
  };
  for (std::size_t j = 1; j < queued.size(); ++j) {
    if (!sooner(queued[j], queued[best])) continue;
    bool passes_its_own_bytes = false;
    for (std::size_t k = 0; k < j && !passes_its_own_bytes; ++k)
      passes_its_own_bytes = overlap(queued[k].commands, queued[j].commands);
    if (!passes_its_own_bytes) best = j;
  }
  return best;
}

}  // namespace blockps
