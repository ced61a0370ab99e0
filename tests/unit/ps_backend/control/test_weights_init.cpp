// Who sets the weights of a new job: the first init-weights is granted, the others see who holds the grant; only
// the holder's init-done sets them; a holder whose session is gone lapses; an applied update reads as set.
#include <gtest/gtest.h>

#include "ps_backend/control/weights_init.h"
#include "tests/support/status_text.h"

namespace blockps {
namespace {

using State = WeightsInit::State;

const WorkerRef kA{1, 10, "iqn.2026-11.test:host-a"}, kARestarted{1, 12, "iqn.2026-11.test:host-a"},
    kB{1, 20, "iqn.2026-11.test:host-b"};

TEST(WeightsInit, TheFirstAskerHoldsTheGrantAndOnlyItsInitDoneSetsTheWeights) {
  WeightsInit init;
  EXPECT_EQ(init.view(false).state, State::unset);
  init.ask(kA, false);
  init.ask(kB, false);  // B comes second: nothing changes
  EXPECT_EQ(init.view(false).state, State::granted);
  EXPECT_EQ(init.view(false).by, kA.iqn);
  EXPECT_NE(error_text(init.done(kB)).find("holds no init-weights grant (it is iqn.2026-11.test:host-a's)"),
            std::string::npos)
      << error_text(init.done(kB));
  EXPECT_EQ(init.view(false).state, State::granted) << "B's init-done changed nothing";
  EXPECT_EQ(error_text(init.done(kA)), "");
  EXPECT_EQ(init.view(false).state, State::set);
  EXPECT_EQ(init.view(false).by, kA.iqn);
  EXPECT_EQ(error_text(init.done(kA)), "") << "said twice";
  init.ask(kB, false);
  EXPECT_EQ(init.view(false).state, State::set) << "set weights are never granted again";
}

TEST(WeightsInit, AGrantWhoseSessionIsGoneLapsesAndAHolderAskingAgainKeepsIt) {
  WeightsInit init;
  init.ask(kA, false);
  init.forget_gone_session([](int, std::uint64_t) { return true; });
  EXPECT_EQ(init.view(false).by, kA.iqn) << "its session is there";
  init.ask(kARestarted, false);  // the same host after a restart: still its grant, with its new session
  init.forget_gone_session([](int, std::uint64_t itn) { return itn != kA.itn; });
  EXPECT_EQ(init.view(false).state, State::granted) << "the new session is alive";
  init.forget_gone_session([](int, std::uint64_t) { return false; });
  EXPECT_EQ(init.view(false).state, State::unset);
  init.ask(kB, false);
  EXPECT_EQ(init.view(false).by, kB.iqn);
  EXPECT_NE(error_text(init.done(kA)).find("holds no init-weights grant"), std::string::npos);
}

TEST(WeightsInit, AnAppliedUpdateReadsAsSetAndATakeoverUnsetsThem) {
  WeightsInit init;
  EXPECT_EQ(init.view(true).state, State::set) << "a trained shard (or one loaded with steps) is set";
  EXPECT_EQ(init.view(true).by, "");
  init.ask(kA, true);  // a shard restarted from its checkpoint: nobody is granted
  EXPECT_EQ(init.view(false).state, State::unset);
  EXPECT_NE(error_text(init.done(kA)).find("(nobody asked)"), std::string::npos);
  init.ask(kA, false);
  ASSERT_EQ(error_text(init.done(kA)), "");
  init.restart();
  EXPECT_EQ(init.view(false).state, State::unset);
  EXPECT_NE(error_text(init.done(kA)).find("(nobody asked)"), std::string::npos);
}

}  // namespace
}  // namespace blockps
