#include <gtest/gtest.h>

#include <cmath>

#include "aggregator/optimizer.h"

namespace blockps {
namespace {

TEST(Optimizer, NamesRoundTrip) {
  for (OptimizerKind k : kAllOptimizerKinds) EXPECT_EQ(parse_optimizer(to_string(k)), k);
  EXPECT_EQ(parse_optimizer("average"), OptimizerKind::average);
  EXPECT_EQ(to_string(OptimizerKind::adamw), "adamw");
  EXPECT_EQ(parse_optimizer("Adam"), std::nullopt);
  EXPECT_EQ(parse_optimizer("adam "), std::nullopt);
  EXPECT_EQ(parse_optimizer(""), std::nullopt);
}

TEST(Optimizer, StateSlots) {
  EXPECT_EQ(state_slots(OptimizerKind::sgd), 0);
  EXPECT_EQ(state_slots(OptimizerKind::sum), 0);
  EXPECT_EQ(state_slots(OptimizerKind::average), 0);
  EXPECT_EQ(state_slots(OptimizerKind::momentum), 1);
  EXPECT_EQ(state_slots(OptimizerKind::adam), 2);
  EXPECT_EQ(state_slots(OptimizerKind::adamw), 2);
}

TEST(Optimizer, StepConstantsCarryParamsAndBiasCorrections) {
  OptimizerParams p;
  p.lr = 0.25f;
  p.weight_decay = 0.5f;
  p.momentum = 0.75f;
  p.nesterov = true;
  p.beta1 = 0.8f;
  p.beta2 = 0.99f;
  p.eps = 1e-6f;
  for (std::uint64_t t : {1u, 2u, 10u, 1000u}) {
    const StepConstants k = step_constants(p, t);
    EXPECT_EQ(k.lr, p.lr);
    EXPECT_EQ(k.weight_decay, p.weight_decay);
    EXPECT_EQ(k.momentum, p.momentum);
    EXPECT_EQ(k.nesterov, p.nesterov);
    EXPECT_EQ(k.beta1, p.beta1);
    EXPECT_EQ(k.beta2, p.beta2);
    EXPECT_EQ(k.eps, p.eps);
    EXPECT_EQ(k.bias_correction1, static_cast<float>(1.0 - std::pow(double{0.8f}, double(t))));
    EXPECT_EQ(k.bias_correction2, static_cast<float>(1.0 - std::pow(double{0.99f}, double(t))));
  }
  EXPECT_EQ(step_constants(p, 1).bias_correction1, 1.0f - 0.8f);
}

TEST(Optimizer, StepZeroIsTreatedAsTheFirstStep) {
  const OptimizerParams p;
  EXPECT_EQ(step_constants(p, 0).bias_correction1, step_constants(p, 1).bias_correction1);
  EXPECT_EQ(step_constants(p, 0).bias_correction2, step_constants(p, 1).bias_correction2);
  EXPECT_GT(step_constants(p, 0).bias_correction2, 0.0f);
}

}  // namespace
}  // namespace blockps
