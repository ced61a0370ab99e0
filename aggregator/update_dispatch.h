// The one place that turns a runtime (OptimizerKind, WireDtype) pair into the template pair an element-wise
// update is compiled for. The CPU engine (cpu_engine.cpp), the CUDA launcher (cuda_kernels.cuh) and the tests'
// scalar reference all go through it, so a new optimizer or wire dtype is added here once.
#pragma once

#include "aggregator/optimizer.h"
#include "contract/wire_dtype.h"

namespace blockps {

namespace detail {

template <OptimizerKind K, class Update, class Otherwise>
[[gnu::always_inline]] inline decltype(auto) dispatch_dtype(WireDtype dtype, Update& update, Otherwise& otherwise) {
  switch (dtype) {
    case WireDtype::f32:
      return update.template operator()<K, WireDtype::f32>();
    case WireDtype::bf16:
      return update.template operator()<K, WireDtype::bf16>();
    case WireDtype::f16:
      return update.template operator()<K, WireDtype::f16>();
  }
  return otherwise();
}

}  // namespace detail

/// Calls `update.template operator()<K, D>()` for `kind` and `dtype`, or `otherwise()` for a value that names
/// no kind or dtype (both return the same type). Always inlined: the CPU engine's target clones must get each
/// clone's own loop (cpu_clones.h), so `update`'s operator() should be always inlined too.
template <class Update, class Otherwise>
[[gnu::always_inline]] inline decltype(auto) dispatch_update(OptimizerKind kind, WireDtype dtype, Update&& update,
                                                             Otherwise&& otherwise) {
  switch (kind) {
    case OptimizerKind::sgd:
      return detail::dispatch_dtype<OptimizerKind::sgd>(dtype, update, otherwise);
    case OptimizerKind::momentum:
      return detail::dispatch_dtype<OptimizerKind::momentum>(dtype, update, otherwise);
    case OptimizerKind::adam:
      return detail::dispatch_dtype<OptimizerKind::adam>(dtype, update, otherwise);
    case OptimizerKind::adamw:
      return detail::dispatch_dtype<OptimizerKind::adamw>(dtype, update, otherwise);
    case OptimizerKind::sum:
      return detail::dispatch_dtype<OptimizerKind::sum>(dtype, update, otherwise);
    case OptimizerKind::average:
      return detail::dispatch_dtype<OptimizerKind::average>(dtype, update, otherwise);
  }
  return otherwise();
}

}  // namespace blockps
