// A store that fails on demand: the test double of ShardStore that the failure tests use, in the unit tests and
// through a real tgtd (the test-only module of fault_injection_hook.cpp); never linked into the product. It wraps
// a real store (either engine) and forwards everything, except that while the file `trigger` exists every
// optimizer update fails, as a device fault would, without touching the weights. A file, not a count of calls, because
// the CPU engine updates block by block and the CUDA engine request by request: a test says when, not after how many.
#pragma once

#include <memory>
#include <string>

#include "aggregator/shard_store.h"

namespace blockps {

std::unique_ptr<ShardStore> make_faulty_store(std::unique_ptr<ShardStore> inner, std::string trigger);

/// The variable that names the trigger file in the environment of a tgtd running the test-only module
/// (fault_injection_hook.cpp): every shard it opens gets a faulty store with that trigger.
inline constexpr const char* kFaultInjectionFileVariable = "BLOCKPS_FAULT_INJECTION_FILE";

}  // namespace blockps
