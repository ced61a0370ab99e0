// contract/result.h: the one error vocabulary. A Status is ok or an error with a kind and a message that is never
// empty; a Result<T> holds a value or the error that prevented it, and one built from an ok Status is an error
// that says so; errno's text from any thread.
#include <gtest/gtest.h>

#include <cerrno>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "contract/result.h"

namespace blockps {
namespace {

TEST(Status, OkHasNoMessageAndTheOkCode) {
  const Status ok = Status::Ok();
  EXPECT_TRUE(ok.ok());
  EXPECT_EQ(ok.message(), "");
  EXPECT_EQ(ok.code(), StatusCode::ok);
}

TEST(Status, AnErrorKeepsItsKindAndMessage) {
  const Status s = Status::Error(StatusCode::config, "c.toml: [model] size is missing");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::config);
  EXPECT_EQ(s.message(), "c.toml: [model] size is missing");
  EXPECT_EQ(Status::Error("engine fault").code(), StatusCode::unknown);  // an error made without a kind
}

TEST(Status, AnErrorIsNeverOkWhateverItIsMadeOf) {
  const Status empty = Status::Error("");
  EXPECT_FALSE(empty.ok());
  EXPECT_EQ(empty.message(), "unspecified error");
  const Status ok_kind = Status::Error(StatusCode::ok, "a failure labelled ok");
  EXPECT_FALSE(ok_kind.ok());
  EXPECT_EQ(ok_kind.code(), StatusCode::unknown);
  EXPECT_EQ(ok_kind.message(), "a failure labelled ok");
  const Status both = Status::Error(StatusCode::ok, "");
  EXPECT_FALSE(both.ok());
  EXPECT_EQ(both.code(), StatusCode::unknown);
}

TEST(Result, AValue) {
  Result<std::string> r = std::string("shard0");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value(), "shard0");
  EXPECT_EQ(*r, "shard0");
  EXPECT_EQ(r->size(), 6u);
  EXPECT_EQ(r.message(), "");
  EXPECT_TRUE(r.status().ok());
  r.value() += "!";
  EXPECT_EQ(*r, "shard0!");
}

TEST(Result, TheErrorThatPreventedTheValue) {
  const Result<int> r = Status::Error(StatusCode::conflict, "shard s1 is held by job a");
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.message(), "shard s1 is held by job a");
  EXPECT_EQ(r.status().code(), StatusCode::conflict);
  EXPECT_EQ(r.status().message(), "shard s1 is held by job a");
}

TEST(Result, BuiltFromAnOkStatusIsAnErrorThatSaysSo) {
  const Result<int> r = Status::Ok();
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::unknown);
  EXPECT_EQ(r.message(), "Result built from an ok Status without a value");
}

TEST(Result, MovesAValueThatCannotBeCopiedOut) {
  Result<std::unique_ptr<int>> r = std::make_unique<int>(7);
  ASSERT_TRUE(r.ok());
  std::unique_ptr<int> taken = std::move(r).value();
  ASSERT_NE(taken, nullptr);
  EXPECT_EQ(*taken, 7);
}

TEST(ErrnoMessage, StrerrorsTextFromAnyThread) {
  EXPECT_EQ(errno_message(ENOENT), "No such file or directory");
  EXPECT_EQ(errno_message(EPIPE), "Broken pipe");
  EXPECT_EQ(errno_message(123456), "Unknown error 123456");
  std::vector<std::string> seen(8);
  {
    std::vector<std::jthread> threads;
    for (std::size_t i = 0; i < seen.size(); ++i)
      threads.emplace_back([&seen, i] {
        for (int n = 0; n < 1000; ++n) seen[i] = errno_message(i % 2 ? EIO : EAGAIN);
      });
  }
  for (std::size_t i = 0; i < seen.size(); ++i)
    EXPECT_EQ(seen[i], i % 2 ? "Input/output error" : "Resource temporarily unavailable");
}

}  // namespace
}  // namespace blockps
