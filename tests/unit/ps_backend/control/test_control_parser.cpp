// The grammar of control writes (contract/control_lines.h, contract/place.h): every key, and the refusal of each
// wrong line, naming it and what is allowed.
#include <gtest/gtest.h>

#include <vector>

#include "ps_backend/control/control_parser.h"
#include "tests/support/status_text.h"

namespace blockps {
namespace {

ControlWrite parse_ok(std::string_view text) {
  Result<ControlWrite> r = parse_control_lines(text);
  if (!r.ok()) {
    ADD_FAILURE() << text << ": " << r.message();
    return {};
  }
  return std::move(r).value();
}

std::string parse_error(std::string_view text) {
  Result<ControlWrite> r = parse_control_lines(text);
  if (r.ok()) {
    ADD_FAILURE() << "accepted: " << text;
    return "";
  }
  EXPECT_EQ(r.status().code(), StatusCode::invalid_argument) << text;
  return r.message();
}

TEST(ControlLines, TheOldKeysInTheOrderWritten) {
  using namespace std::literals;
  const ControlWrite w = parse_ok("# a comment\n\nlr=0.5\r\ncheckpoint\nreset-rounds\n\0\0\0"sv);
  ASSERT_EQ(w.actions.size(), 3u);
  EXPECT_EQ(w.actions[0].kind, ControlAction::Kind::set_lr);
  EXPECT_FLOAT_EQ(w.actions[0].lr, 0.5f);
  EXPECT_EQ(w.actions[1].kind, ControlAction::Kind::checkpoint);
  EXPECT_EQ(w.actions[2].kind, ControlAction::Kind::reset_rounds);
  EXPECT_FALSE(w.job);
  EXPECT_FALSE(w.place);
  EXPECT_FALSE(w.takeover || w.release || w.replace_place);
}

TEST(ControlLines, JobTakeoverAndRelease) {
  ControlWrite w = parse_ok("job=torchrun:4f2e-a.b_c@host/1+x\n");
  ASSERT_TRUE(w.job);
  EXPECT_EQ(*w.job, "torchrun:4f2e-a.b_c@host/1+x");
  EXPECT_FALSE(w.takeover);
  EXPECT_TRUE(w.actions.empty());
  w = parse_ok("takeover\njob=run-b\n");  // the order of lines does not matter
  EXPECT_EQ(*w.job, "run-b");
  EXPECT_TRUE(w.takeover);
  w = parse_ok("release\n");
  EXPECT_TRUE(w.release);
  EXPECT_FALSE(w.job);
  EXPECT_EQ(*parse_ok("job=" + std::string(128, 'j')).job, std::string(128, 'j'));
}

TEST(ControlLines, PlaceAndReplacePlace) {
  ControlWrite w = parse_ok("place=m-3f9a2c01d4e5b677 0/2 stripe\n");
  ASSERT_TRUE(w.place);
  EXPECT_EQ(w.place->model, "m-3f9a2c01d4e5b677");
  EXPECT_EQ(w.place->index, 0u);
  EXPECT_EQ(w.place->count, 2u);
  EXPECT_EQ(w.place->layout, PlaceLayout::stripe);
  EXPECT_FALSE(w.replace_place);
  w = parse_ok("place= resnet50  65535/65536\trange \nreplace-place\n");
  EXPECT_EQ(w.place->model, "resnet50");
  EXPECT_EQ(w.place->index, 65535u);
  EXPECT_EQ(w.place->count, 65536u);
  EXPECT_EQ(w.place->layout, PlaceLayout::range);
  EXPECT_TRUE(w.replace_place);
  EXPECT_EQ(format_place(*w.place), "resnet50 65535/65536 range");
  EXPECT_EQ(*parse_place(format_place(*w.place)), *w.place);
  // A whole claim as a client's status session writes it.
  w = parse_ok("job=run-a\ntakeover\nplace=m 1/3 stripe\nreplace-place\n");
  EXPECT_EQ(*w.job, "run-a");
  EXPECT_EQ(w.place->index, 1u);
}

TEST(ControlLines, WrongLinesAreRefusedNamingThem) {
  EXPECT_NE(parse_error("bogus=1\n")
                .find("control 'bogus=1': unknown (known: lr=VALUE, checkpoint, reset-rounds, "
                      "job=NAME, takeover, release, place=MODEL INDEX/COUNT LAYOUT, "
                      "replace-place, init-weights, init-done)"),
            std::string::npos);
  EXPECT_NE(parse_error("").find("no key=value line"), std::string::npos);
  EXPECT_NE(parse_error("lr=-1\n").find("lr=-1"), std::string::npos);
  EXPECT_NE(parse_error("checkpoint=now\n").find("unknown"), std::string::npos);
  // job names
  for (const std::string& bad :
       std::vector<std::string>{"job=\n", "job=has space\n", "job=semi;colon\n", "job=" + std::string(129, 'j')})
    EXPECT_NE(parse_error(bad).find("a job name is 1 to 128 characters of A-Z a-z 0-9 . _ : @ / + -"),
              std::string::npos)
        << bad;
  EXPECT_NE(parse_error("job=a\njob=b\n").find("job= is given twice"), std::string::npos);
  EXPECT_NE(parse_error("takeover\n").find("only together with job=NAME"), std::string::npos);
  EXPECT_NE(parse_error("takeover=1\njob=a\n").find("unknown"), std::string::npos);
  EXPECT_NE(parse_error("job\n").find("unknown"), std::string::npos);
  EXPECT_NE(parse_error("release\njob=a\n").find("not together with job=a"), std::string::npos);
  // places
  const std::pair<std::string, std::string> bad_places[] = {
      {"place=m 0/2\n", "the layout is not stripe or range"},
      {"place=m 0/2 spiral\n", "the layout is not stripe or range"},
      {"place=m 2/2 stripe\n", "INDEX/COUNT out of range"},
      {"place=m 0/0 stripe\n", "INDEX/COUNT out of range"},
      {"place=m 0/65537 stripe\n", "INDEX/COUNT out of range"},
      {"place=m -1/2 stripe\n", "not whole numbers"},
      {"place=m 0/x stripe\n", "not whole numbers"},
      {"place=m 02 stripe\n", "no INDEX/COUNT"},
      {"place=m 0/2 stripe extra\n", "more than three words"},
      {"place=m;x 0/2 stripe\n", "the model name is not allowed"},
      {"place=\n", "the model name is not allowed"},
  };
  for (const auto& [line, why] : bad_places) {
    const std::string message = parse_error(line);
    EXPECT_NE(message.find(why), std::string::npos) << line << ": " << message;
    EXPECT_NE(message.find("allowed: MODEL INDEX/COUNT LAYOUT"), std::string::npos) << message;
  }
  EXPECT_NE(parse_error("place=m 0/2 stripe\nplace=m 1/2 stripe\n").find("place= is given twice"), std::string::npos);
  EXPECT_NE(parse_error("replace-place\n").find("only together with place="), std::string::npos);
}

}  // namespace
}  // namespace blockps
