#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "aggregator/gradient_average.h"

namespace blockps {
namespace {

// The scalar definition the vectorised clones must reproduce bit for bit.
std::vector<float> scalar_average(const std::vector<std::vector<float>>& grads) {
  std::vector<float> avg = grads[0];
  for (std::size_t j = 1; j < grads.size(); ++j)
    for (std::size_t i = 0; i < avg.size(); ++i) avg[i] += grads[j][i];
  const float scale = 1.0f / static_cast<float>(grads.size());
  for (float& v : avg) v *= scale;
  return avg;
}

std::vector<std::vector<float>> gradients(std::size_t k, std::size_t n) {
  std::mt19937 rng(7);
  // Magnitudes far apart, so the f32 sum depends on the order of addition.
  std::uniform_real_distribution<float> small(-1e-3f, 1e-3f), large(-3e7f, 3e7f);
  std::vector<std::vector<float>> g(k, std::vector<float>(n));
  for (auto& v : g)
    for (std::size_t i = 0; i < n; ++i) v[i] = i % 2 ? small(rng) : large(rng);
  return g;
}

std::vector<const float*> pointers(const std::vector<std::vector<float>>& grads) {
  std::vector<const float*> p;
  p.reserve(grads.size());
  for (const auto& g : grads) p.push_back(g.data());
  return p;
}

TEST(AverageGradients, MatchesTheScalarSumInTheGivenOrderBitForBit) {
  for (std::size_t k : {1, 2, 3, 5}) {
    for (std::size_t n : {0, 1, 7, 64, 1023}) {
      const auto g = gradients(k, n);
      std::vector<float> out(n, -1.0f);
      average_gradients(pointers(g), out);
      EXPECT_EQ(out, scalar_average(g)) << k << " gradients of " << n << " elements";
    }
  }
}

TEST(AverageGradients, SumsInPlaceInTheFirstGradient) {
  auto g = gradients(3, 1000);
  const auto expected = scalar_average(g);
  average_gradients(pointers(g), g[0]);
  EXPECT_EQ(g[0], expected);
}

TEST(AverageGradients, TheOrderOfTheGradientsIsPartOfTheResult) {
  const auto g = gradients(3, 1000);
  const std::vector<std::vector<float>> reversed{g[2], g[1], g[0]};
  std::vector<float> forward(1000), backward(1000);
  average_gradients(pointers(g), forward);
  average_gradients(pointers(reversed), backward);
  EXPECT_EQ(forward, scalar_average(g));
  EXPECT_EQ(backward, scalar_average(reversed));
  EXPECT_NE(forward, backward) << "these values round differently when added in another order";
}

TEST(AverageGradients, NoGradientsLeaveTheOutputAsItIs) {
  std::vector<float> out(4, 2.5f);
  average_gradients({}, out);
  EXPECT_EQ(out, std::vector<float>(4, 2.5f));
}

}  // namespace
}  // namespace blockps
