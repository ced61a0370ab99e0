// A failed batch as the transports report it (client/transport/lu_transport.h): the Status code each kind of failure
// carries up to the library's callers, which the transport decides where it knows the answer. The factory's choice of
// transport needs an LU: tests/integration/client/test_client_posix.cpp and test_client.cpp.
#include <gtest/gtest.h>

#include "client/transport/lu_transport.h"
#include "contract/scsi_codes.h"

namespace blockps {
namespace {

TEST(LuFailure, AReservationConflictIsAConflictAndKeepsTheAnswer) {
  const LuFailure f = LuFailure::answered(3, scsi::kReservationConflict, 0, "RESERVATION CONFLICT");
  EXPECT_EQ(f.command, 3u);
  EXPECT_EQ(f.status.code(), StatusCode::conflict);
  EXPECT_EQ(f.reason(), "RESERVATION CONFLICT");
  EXPECT_EQ(f.scsi_status, scsi::kReservationConflict);
  EXPECT_FALSE(f.job_refused);
}

TEST(LuFailure, AnyOtherAnswerIsIoWithItsSense) {
  const LuFailure f = LuFailure::answered(0, scsi::kCheckCondition, scsi::kNotReady, "CHECK CONDITION NOT_READY");
  EXPECT_EQ(f.status.code(), StatusCode::io);
  EXPECT_EQ(f.scsi_status, scsi::kCheckCondition);
  EXPECT_EQ(f.sense_key, scsi::kNotReady);
}

TEST(LuFailure, OursIsIoAndALostSessionIsUnreachableNeitherWithAnAnswer) {
  const LuFailure io = LuFailure::io(1, "short transfer");
  EXPECT_EQ(io.status.code(), StatusCode::io);
  EXPECT_EQ(io.scsi_status, kNoScsiStatus);
  const LuFailure lost = LuFailure::unreachable(2, "not logged in again within 5 s");
  EXPECT_EQ(lost.status.code(), StatusCode::unreachable);
  EXPECT_EQ(lost.reason(), "not logged in again within 5 s");
  EXPECT_EQ(lost.scsi_status, kNoScsiStatus);
}

TEST(LuFailure, OnlyAFailureTheTargetAnsweredWasAnswered) {
  EXPECT_TRUE(LuFailure::answered(0, scsi::kCheckCondition, scsi::kIllegalRequest, "x").answered());
  EXPECT_TRUE(LuFailure::answered(0, scsi::kReservationConflict, 0, "x").answered());
  // libiscsi's "not connected", a timeout, an errno: nothing was refused (a join= write lost this way stays io).
  EXPECT_FALSE(LuFailure::io(0, "transport error: not connected").answered());
  EXPECT_FALSE(LuFailure::unreachable(0, "not logged in again").answered());
}

TEST(LuFailure, ARefusedJobLineIsAConflictInTheWordsGivenKeepingTheAnswer) {
  const LuFailure f = LuFailure::answered(0, scsi::kCheckCondition, scsi::kIllegalRequest, "ILLEGAL REQUEST")
                          .refusing_job([](const std::string& why) { return "the shard refused job=a: " + why; });
  EXPECT_TRUE(f.job_refused);
  EXPECT_EQ(f.status.code(), StatusCode::conflict);
  EXPECT_EQ(f.reason(), "the shard refused job=a: ILLEGAL REQUEST");
  EXPECT_EQ(f.sense_key, scsi::kIllegalRequest);  // the answer stays: the page explains it
}

}  // namespace
}  // namespace blockps
