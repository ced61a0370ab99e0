#include "aggregator/optimizer.h"

#include <cmath>

namespace blockps {

std::string_view to_string(OptimizerKind k) {
  switch (k) {
    case OptimizerKind::sgd:
      return "sgd";
    case OptimizerKind::momentum:
      return "momentum";
    case OptimizerKind::adam:
      return "adam";
    case OptimizerKind::adamw:
      return "adamw";
    case OptimizerKind::sum:
      return "sum";
    case OptimizerKind::average:
      return "average";
  }
  return "invalid";
}

std::optional<OptimizerKind> parse_optimizer(std::string_view name) {
  for (OptimizerKind k : kAllOptimizerKinds) {
    if (name == to_string(k)) return k;
  }
  return std::nullopt;
}

StepConstants step_constants(const OptimizerParams& p, std::uint64_t step) {
  // Step 0 would make the bias corrections 0 and the Adam step Inf/NaN; the first real step is 1.
  const double t = static_cast<double>(step == 0 ? 1 : step);
  // beta^t in double: in f32, 1 - 0.999^t loses most of its digits for small t.
  const auto bias_correction = [t](float beta) { return static_cast<float>(1.0 - std::pow(double{beta}, t)); };
  return StepConstants{
      .lr = p.lr,
      .weight_decay = p.weight_decay,
      .momentum = p.momentum,
      .beta1 = p.beta1,
      .beta2 = p.beta2,
      .eps = p.eps,
      .bias_correction1 = bias_correction(p.beta1),
      .bias_correction2 = bias_correction(p.beta2),
      .nesterov = p.nesterov,
  };
}

}  // namespace blockps
