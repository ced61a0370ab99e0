// A blockps shard on a private tgtd, as the client, CLI and C API tests need one: target TID named IQN with
// LUN 1 grad (`role=grad;` + shard_options), LUN 2 weights and LUN 3 status over one checkpoint file.
#pragma once

#include <string>

#include "tests/support/tgtd_instance.h"

namespace blockps::testing {

// Why integration tests of blockps cannot run here ("" when they can): tgtd unusable, or the module not
// installed where tgtd loads it. Tests skip on the first and fail on the second.
std::string tgtd_unavailable_reason();
std::string blockps_module_missing_reason();

// The opening of an integration fixture's SetUp(): skips the test, loudly, where tgtd cannot run; fails it
// where the built module is missing. A macro because GTEST_SKIP and ASSERT_* return from SetUp itself.
#define BLOCKPS_REQUIRE_TGTD_AND_MODULE()                                              \
  do {                                                                                 \
    if (std::string why = ::blockps::testing::tgtd_unavailable_reason(); !why.empty()) \
      GTEST_SKIP() << "INTEGRATION TEST SKIPPED: " << why;                             \
    ASSERT_EQ(::blockps::testing::blockps_module_missing_reason(), "");                \
  } while (0)

// Starts `tgtd` when it is not running, then adds the target and its three LUs, and only then lets initiators
// log in. Returns the first failure, with tgtd's log.
Status add_blockps_shard(TgtdInstance& tgtd, int tid, const std::string& iqn, const std::string& checkpoint,
                         const std::string& shard_options);

}  // namespace blockps::testing
