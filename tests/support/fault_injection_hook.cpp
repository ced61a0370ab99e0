// The hook of the test-only module (tests/integration/sync/CMakeLists.txt: bs_blockps with this file and the faulty
// store linked in, in its own module directory): with BLOCKPS_FAULT_INJECTION_FILE=PATH in tgtd's environment,
// every shard the module opens gets a store that fails every optimizer update while PATH exists
// (faulty_store.h), so that tests through a real tgtd see what workers see when a round cannot be applied. The
// installed module has neither this hook nor the store.
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>

#include "contract/log.h"
#include "ps_backend/shard/shard_registry.h"
#include "tests/support/faulty_store.h"

namespace {

// Run when tgtd loads the module, before it registers the backing store.
[[maybe_unused]] const bool kHookInstalled = [] {
  const char* trigger = std::getenv(blockps::kFaultInjectionFileVariable);
  if (trigger == nullptr || *trigger == '\0') return false;
  blockps::ShardRegistry::instance().wrap_stores(
      [file = std::string(trigger)](std::unique_ptr<blockps::ShardStore> store) {
        blockps::log_line(std::string(blockps::kFaultInjectionFileVariable) + "=" + file +
                          ": TEST HOOK: every optimizer update of this shard fails while that file exists");
        return blockps::make_faulty_store(std::move(store), file);
      });
  return true;
}();

}  // namespace
