#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <vector>

#include "ps_backend/checkpoint/checkpoint.h"
#include "ps_backend/shard/served_lu.h"
#include "ps_backend/shard/shard_registry.h"
#include "tests/unit/ps_backend/test_support.h"

namespace blockps {
namespace {

using namespace scsi;
using unit::make_shard;
using unit::TempDir;

std::vector<std::uint8_t> cdb16(std::uint8_t op, std::uint8_t byte1 = 0) {
  std::vector<std::uint8_t> c(16, 0);
  c[0] = op;
  c[1] = byte1;
  return c;
}

std::vector<std::byte> f32s(std::initializer_list<float> v) {
  std::vector<std::byte> out(v.size() * 4);
  std::size_t i = 0;
  for (float f : v) std::memcpy(out.data() + 4 * i++, &f, 4);
  return out;
}

float f32_at(const std::vector<std::byte>& b, std::size_t i) {
  float f;
  std::memcpy(&f, b.data() + 4 * i, 4);
  return f;
}

struct Lus {
  TempDir dir;
  std::shared_ptr<ServedShard> shard;
  ServedLu grad, weights, status;
  explicit Lus(const std::string& bsopts)
      : shard(make_shard(dir.file("m.ckpt"), bsopts)),
        grad(LuRole::grad, shard, 512),
        weights(LuRole::weights, shard, 512),
        status(LuRole::status, shard, 512) {}
};

LuOutcome do_write(ServedLu& lu, std::uint64_t off, const std::vector<std::byte>& data, std::uint8_t op = kWrite16,
                   std::uint8_t byte1 = 0) {
  const auto c = cdb16(op, byte1);
  return lu.execute({c.data(), off, static_cast<std::uint32_t>(data.size()), {}, data});
}

LuOutcome do_read(ServedLu& lu, std::uint64_t off, std::vector<std::byte>& out) {
  const auto c = cdb16(kRead16);
  return lu.execute({c.data(), off, static_cast<std::uint32_t>(out.size()), out, {}});
}

TEST(ServedLu, PushOnGradAppliesSgdAndReadReturnsWeights) {
  Lus l("role=grad;size=4K;opt=sgd;lr=0.5");
  std::vector<std::byte> w(4096);
  ASSERT_EQ(do_write(l.weights, 0, std::vector<std::byte>(4096)).status, kGood);  // zeros
  std::vector<std::byte> g(512, std::byte{0});
  const auto head = f32s({2.0f, -4.0f});
  std::memcpy(g.data(), head.data(), head.size());
  ASSERT_EQ(do_write(l.grad, 512, g).status, kGood);
  ASSERT_EQ(do_read(l.grad, 0, w).status, kGood);
  EXPECT_EQ(f32_at(w, 128), -1.0f);  // 0 - 0.5 * 2
  EXPECT_EQ(f32_at(w, 129), 2.0f);
  EXPECT_EQ(f32_at(w, 0), 0.0f);
  EXPECT_EQ(l.shard->counters().pushes.load(), 1u);
}

TEST(ServedLu, WeightsLuIsAPlainDiskInTheWireDtype) {
  Lus l("role=grad;size=4K;dtype=bf16");
  std::vector<std::byte> in(1024);
  for (std::size_t i = 0; i < in.size(); i += 2) {  // bf16 values 1.0, 1.0078125, ...: all exact
    const std::uint16_t v = static_cast<std::uint16_t>(0x3f80 + (i / 2) % 64);
    std::memcpy(in.data() + i, &v, 2);
  }
  ASSERT_EQ(do_write(l.weights, 2048, in).status, kGood);
  std::vector<std::byte> out(1024);
  ASSERT_EQ(do_read(l.weights, 2048, out).status, kGood);
  EXPECT_EQ(out, in);
}

TEST(ServedLu, OutOfRangeIsRefusedAndChangesNothing) {
  Lus l("role=grad;size=4K;init=uniform:1");
  std::vector<std::byte> before(4096), after(4096);
  do_read(l.weights, 0, before);
  const LuOutcome r = do_write(l.grad, 3584, std::vector<std::byte>(1024, std::byte{1}));
  EXPECT_EQ(r.status, kCheckCondition);
  EXPECT_EQ(r.sense_key, kIllegalRequest);
  EXPECT_EQ(r.asc, kAscLbaOutOfRange);
  std::vector<std::byte> big(1024);
  EXPECT_EQ(do_read(l.grad, 4096, big).asc, kAscLbaOutOfRange);
  do_read(l.weights, 0, after);
  EXPECT_EQ(before, after);
}

TEST(ServedLu, AStatusLuReadOfNoBlocksWithoutABufferIsGood) {
  // A READ of 0 blocks comes without a data-in buffer: the page must not be copied to its null pointer (the
  // sanitizer build reports memcpy given one; tests/fuzz/fuzz_command.cpp found it).
  Lus l("role=grad;size=4K");
  const auto c = cdb16(kRead16);
  EXPECT_EQ(l.status.execute({c.data(), 0, 0, {}, {}}).status, kGood);
  EXPECT_EQ(l.status.execute({c.data(), 512, 0, {}, {}}).status, kGood);
}

TEST(ServedLu, StatusPageIsJsonAndTakesControlLines) {
  Lus l("role=grad;size=8K;opt=momentum;lr=0.25");
  ASSERT_EQ(do_write(l.grad, 0, std::vector<std::byte>(4096)).status, kGood);
  std::vector<std::byte> page(kStatusLuBytes);
  ASSERT_EQ(do_read(l.status, 0, page).status, kGood);
  const std::string text(reinterpret_cast<const char*>(page.data()));
  const auto j = nlohmann::json::parse(text);
  EXPECT_EQ(j["shard"]["size"], 8192);
  EXPECT_EQ(j["shard"]["opt"], "momentum");
  EXPECT_EQ(j["counters"]["pushes"], 1);
  EXPECT_EQ(j["counters"]["push_bytes"], 4096);
  EXPECT_EQ(j["rounds"]["mode"], "async");
  EXPECT_EQ(j["aggregation"]["latency"]["count"], 1);
  EXPECT_EQ(page.back(), std::byte{0});
  EXPECT_EQ(l.status.capacity_bytes(), kStatusLuBytes);

  const auto control = [&](const std::string& lines) {
    std::vector<std::byte> block(512);
    std::memcpy(block.data(), lines.data(), lines.size());
    return do_write(l.status, 0, block);
  };
  // Unknown keys, bad values and reset-rounds on an async shard are refused, and nothing of the write applies.
  for (const char* bad : {"bogus=1\n", "lr=0.5\nlr=-1\n", "reset-rounds\n", "", "checkpoint=now\n"}) {
    const LuOutcome w = control(bad);
    EXPECT_EQ(w.sense_key, kIllegalRequest) << bad;
    EXPECT_EQ(w.asc, kAscInvalidFieldInParameterList) << bad;
  }
  EXPECT_FLOAT_EQ(l.shard->config().optimizer.lr, 0.25f);
  ASSERT_EQ(control("# new rate\nlr=0.5\ncheckpoint\n").status, kGood);
  EXPECT_FLOAT_EQ(l.shard->config().optimizer.lr, 0.5f);
  EXPECT_FLOAT_EQ(l.shard->model().params().lr, 0.5f);
  EXPECT_FALSE(l.shard->dirty());  // the checkpoint line wrote one, after the new lr
}

// A checkpoint line whose checkpoint cannot be written is the medium's failure (as SYNCHRONIZE CACHE's), not a
// refused line: the writer must not take it for a typo.
TEST(ServedLu, AControlCheckpointThatCannotBeWrittenIsAMediumError) {
  Lus l("role=grad;size=8K");
  ASSERT_EQ(do_write(l.grad, 0, std::vector<std::byte>(4096)).status, kGood);
  const std::string tmp = l.dir.file("m.ckpt.tmp");
  ASSERT_EQ(::mkdir(tmp.c_str(), 0755), 0);  // where the temp file must go: the write fails
  std::vector<std::byte> block(512);
  const std::string line = "checkpoint\n";
  std::memcpy(block.data(), line.data(), line.size());
  const LuOutcome w = do_write(l.status, 0, block);
  EXPECT_EQ(w.status, kCheckCondition);
  EXPECT_EQ(w.sense_key, kMediumError);
  EXPECT_EQ(w.asc, kAscWriteError);
  EXPECT_EQ(l.shard->counters().checkpoint_errors.load(), 1u);
  ::rmdir(tmp.c_str());
}

// admins=: a control write runs only when its admission said its sender is an administrator (the gate decides:
// test_admission_gate.cpp); a write refused there, and one that was never admitted, get ACCESS DENIED and change
// nothing. Reads of the page stay open.
TEST(ServedLu, ControlLinesOnlyFromAdministrators) {
  TempDir dir;
  auto shard = make_shard(dir.file("m.ckpt"), "role=grad;size=8K;opt=sgd;lr=0.25");
  ServedLu status(LuRole::status, shard, 512, {"iqn.2026-11.io.blockps:admin"});
  ASSERT_TRUE(status.admission().checks_writers());
  EXPECT_FALSE(ServedLu(LuRole::status, shard, 512).admission().checks_writers());
  std::vector<std::byte> block(512);
  const std::string line = "lr=0.5\n";
  std::memcpy(block.data(), line.data(), line.size());
  const auto c = cdb16(kWrite16);
  int worker_cmd = 0, admin_cmd = 0, unseen_cmd = 0;
  const auto admit = [&](const void* handle, const std::string& iqn) {
    return status.admission().admit(&status, handle, kWrite16, 0, 512, WorkerRef{1, 7, iqn});
  };
  const auto write_as = [&](const void* handle, const AdmissionVerdict* admitted) {
    return status.execute({c.data(), 0, 512, {}, block, handle, admitted});
  };
  const AdmissionVerdict worker = admit(&worker_cmd, "iqn.2026-11.io.blockps:worker");
  EXPECT_EQ(worker.what, Admission::denied);
  EXPECT_FALSE(worker.held) << "a status LU holds no command: execution answers the refusal";
  for (const LuOutcome& w : {write_as(&worker_cmd, &worker), write_as(&unseen_cmd, nullptr)}) {
    EXPECT_EQ(w.status, kCheckCondition);
    EXPECT_EQ(w.sense_key, kIllegalRequest);
    EXPECT_EQ(w.asc, kAscAccessDeniedNoAccessRights);
  }
  EXPECT_FLOAT_EQ(shard->config().optimizer.lr, 0.25f);
  // The refusal is on the status page, in words, for the worker that was refused.
  ASSERT_EQ(shard->recent_refusals().size(), 1u);
  EXPECT_EQ(shard->recent_refusals()[0].iqn, "iqn.2026-11.io.blockps:worker");
  EXPECT_NE(shard->recent_refusals()[0].reason.find("not an administrator of this shard"), std::string::npos);
  const AdmissionVerdict admin = admit(&admin_cmd, "iqn.2026-11.io.blockps:admin");
  EXPECT_EQ(admin.what, Admission::run);
  ASSERT_EQ(write_as(&admin_cmd, &admin).status, kGood);
  EXPECT_FLOAT_EQ(shard->config().optimizer.lr, 0.5f);
  // Names compare without regard to case; WRITE AND VERIFY carries control lines too (its verify then compares
  // with the page and miscompares, but the line was admitted and applied).
  const AdmissionVerdict admin_again = admit(&admin_cmd, "IQN.2026-11.io.blockps:Admin");
  const std::string line2 = "lr=0.75\n";
  std::memcpy(block.data(), line2.data(), line2.size());
  const auto wv = cdb16(kWriteVerify16);
  EXPECT_NE(status.execute({wv.data(), 0, 512, {}, block, &admin_cmd, &admin_again}).asc,
            kAscAccessDeniedNoAccessRights);
  EXPECT_FLOAT_EQ(shard->config().optimizer.lr, 0.75f);
  std::vector<std::byte> page(4096);
  EXPECT_EQ(do_read(status, 0, page).status, kGood);
}

// A job holds the shard: another session's push, pull and weights write are answered RESERVATION CONFLICT (no
// sense) when they execute, and change nothing; its weights READ (a snapshot) is served; the holder's session
// runs everything. The status LU says who holds it.
TEST(ServedLu, AnotherJobsCommandsAreAnsweredReservationConflict) {
  Lus l("role=grad;size=4K;opt=sgd;lr=1;init=uniform:1");
  const WorkerRef a{1, 10, "iqn.2024-01.test:a"}, b{1, 20, "iqn.2024-01.test:b"};
  ASSERT_EQ(error_text(l.shard->control("job=train-a\n", &a)), "");
  std::vector<std::byte> before(4096), after(4096);
  ASSERT_EQ(do_read(l.weights, 0, before).status, kGood);
  const std::vector<std::byte> g(512, std::byte{0x3f});
  int cmd = 0;
  const auto as = [&](ServedLu& lu, const WorkerRef& who, std::uint8_t op, std::vector<std::byte>& in,
                      const std::vector<std::byte>& out) {
    const auto c = cdb16(op);
    const AdmissionVerdict admitted =
        lu.admission().admit(&lu, &cmd, op, 0, static_cast<std::uint32_t>(in.size() + out.size()), who);
    EXPECT_FALSE(admitted.held) << "an LU that cannot hold commands queues them";
    return lu.execute({c.data(), 0, static_cast<std::uint32_t>(in.size() + out.size()), in, out, &cmd, &admitted});
  };
  std::vector<std::byte> none, in(512);
  for (ServedLu* lu : {&l.grad, &l.weights}) {
    const LuOutcome w = as(*lu, b, kWrite16, none, g);
    EXPECT_EQ(w.status, kReservationConflict);
    EXPECT_EQ(w.sense_key, kNoSense);
    EXPECT_EQ(w.asc, kAscNone);
  }
  EXPECT_EQ(as(l.grad, b, kRead16, in, none).status, kReservationConflict);
  EXPECT_EQ(l.shard->counters().pushes.load(), 0u);
  EXPECT_EQ(l.shard->counters().weight_writes.load(), 0u);
  EXPECT_EQ(l.shard->claim_status().refused, 3u);
  // Not fenced: a snapshot of the weights (no admission at all).
  ASSERT_EQ(do_read(l.weights, 0, after).status, kGood);
  EXPECT_EQ(after, before);
  // The holder's session runs; its commands keep the claim alive.
  EXPECT_EQ(as(l.grad, a, kWrite16, none, g).status, kGood);
  EXPECT_EQ(as(l.grad, a, kRead16, in, none).status, kGood);
  EXPECT_EQ(l.shard->counters().pushes.load(), 1u);
  // A refusal is the refused command's only: the next command at the same address runs.
  EXPECT_EQ(as(l.weights, b, kWrite16, none, g).status, kReservationConflict);
  EXPECT_EQ(as(l.weights, a, kWrite16, none, g).status, kGood);

  std::vector<std::byte> page(kStatusLuBytes);
  ASSERT_EQ(do_read(l.status, 0, page).status, kGood);
  const auto j = nlohmann::json::parse(std::string(reinterpret_cast<const char*>(page.data())));
  EXPECT_EQ(j["job"]["holder"], "train-a");
  EXPECT_EQ(j["job"]["refused"], 4);
  const auto& recent = j["refusals"]["recent"];
  ASSERT_FALSE(recent.empty());
  EXPECT_EQ(recent.back()["iqn"], "iqn.2024-01.test:b");
  EXPECT_EQ(recent.back()["lu"], "weights");
  EXPECT_NE(recent.back()["reason"].get<std::string>().find("is held by job train-a"), std::string::npos);
}

// The control write's sender is the one its admission kept: job= needs it.
TEST(ServedLu, AControlWriteCarriesTheSenderItWasAdmittedWith) {
  Lus l("role=grad;size=4K");
  std::vector<std::byte> block(512);
  const std::string line = "job=train-a\n";
  std::memcpy(block.data(), line.data(), line.size());
  const auto c = cdb16(kWrite16);
  int cmd = 0;
  // Never admitted: no sender, so no job can be joined.
  EXPECT_EQ(l.status.execute({c.data(), 0, 512, {}, block, &cmd}).asc, kAscInvalidFieldInParameterList);
  EXPECT_EQ(l.shard->claim_status().holder, "");
  const AdmissionVerdict admitted =
      l.status.admission().admit(&l.status, &cmd, kWrite16, 0, 512, WorkerRef{1, 5, "iqn.2024-01.test:a"});
  ASSERT_EQ(l.status.execute({c.data(), 0, 512, {}, block, &cmd, &admitted}).status, kGood);
  EXPECT_EQ(l.shard->claim_status().holder, "train-a");
  EXPECT_EQ(l.shard->claim_status().sessions, 1u);
}

TEST(ServedLu, VerifyComparesWithTheWeights) {
  Lus l("role=weights;size=4K");
  const auto data = f32s({1, 2, 3, 4});
  std::vector<std::byte> block(512);
  std::memcpy(block.data(), data.data(), data.size());
  ASSERT_EQ(do_write(l.weights, 0, block, kWriteVerify16).status, kGood);
  EXPECT_EQ(do_write(l.weights, 0, block, kVerify16, 0x02).status, kGood);
  block[0] = std::byte{0x7f};
  LuOutcome r = do_write(l.weights, 0, block, kVerify16, 0x02);
  EXPECT_EQ(r.sense_key, kMiscompare);
  // tgt does not set the transfer length for VERIFY: the data length alone must drive the compare.
  const auto v = cdb16(kVerify16, 0x02);
  r = l.weights.execute({v.data(), 0, 0, {}, block});
  EXPECT_EQ(r.sense_key, kMiscompare);
  EXPECT_EQ(r.asc, kAscMiscompareDuringVerify);
  // BYTCHK=11b: one block compared with every block of the range (here 2 blocks of the same pattern).
  std::vector<std::byte> same(512, std::byte{0x11});
  ASSERT_EQ(do_write(l.weights, 1024, std::vector<std::byte>(1024, std::byte{0x11})).status, kGood);
  auto v11 = cdb16(kVerify16, 0x06);
  v11[13] = 2;
  EXPECT_EQ(l.weights.execute({v11.data(), 1024, 0, {}, same}).status, kGood);
  v11[13] = 3;  // the third block holds zeros
  EXPECT_EQ(l.weights.execute({v11.data(), 1024, 0, {}, same}).sense_key, kMiscompare);
  // VERIFY of no blocks (a conformance check sends one) has no data buffer at all: GOOD, and no compare of a
  // null pointer (the sanitizer build's integration run found memcmp given one).
  EXPECT_EQ(l.weights.execute({v.data(), 0, 0, {}, {}}).status, kGood);
  // The data read back from a grad LU is weights, never the gradient just sent: refused.
  EXPECT_EQ(do_write(l.grad, 0, block, kWriteVerify16).asc, kAscInvalidOpcode);
}

TEST(ServedLu, WriteSameRepeatsTheBlockAndStampsLbas) {
  Lus l("role=weights;size=4K");
  std::vector<std::byte> pattern(512, std::byte{0xab});
  auto c = cdb16(kWriteSame16, 0x02);  // LBDATA
  c[13] = 4;                           // NUMBER OF LOGICAL BLOCKS: 4 (tgt's 32-bit transfer length is not used)
  ASSERT_EQ(l.weights.execute({c.data(), 1024, 0, {}, pattern}).status, kGood);
  std::vector<std::byte> out(4096);
  do_read(l.weights, 0, out);
  EXPECT_EQ(out[1023], std::byte{0});
  EXPECT_EQ(out[1024 + 3], std::byte{2});  // LBA 2, big-endian
  EXPECT_EQ(out[1536 + 3], std::byte{3});
  EXPECT_EQ(out[1536 + 100], std::byte{0xab});
  EXPECT_EQ(out[3072], std::byte{0});
  // Grad LUs do not take WRITE SAME.
  EXPECT_EQ(l.grad.execute({c.data(), 0, 512, {}, pattern}).asc, kAscInvalidOpcode);
}

TEST(ServedLu, SynchronizeCacheWritesACheckpoint) {
  Lus l("role=grad;size=4K;init=uniform:1");
  const std::string path = l.shard->path();
  EXPECT_FALSE(checkpoint_exists(path));
  const auto sync = cdb16(kSynchronizeCache16);
  EXPECT_EQ(l.grad.execute({sync.data(), 0, 0, {}, {}}).status, kGood);
  EXPECT_TRUE(checkpoint_exists(path));
  EXPECT_EQ(l.shard->counters().checkpoints.load(), 1u);
  // Nothing changed since: a second sync shares the first write.
  EXPECT_EQ(l.status.execute({sync.data(), 0, 0, {}, {}}).status, kGood);
  EXPECT_EQ(l.shard->counters().checkpoints.load(), 1u);
  const auto immed = cdb16(kSynchronizeCache16, 0x02);
  EXPECT_EQ(l.grad.execute({immed.data(), 0, 0, {}, {}}).asc, kAscInvalidFieldInCdb);
  // A FUA write is durable when it completes; a WRITE of 0 blocks is no push.
  const auto w0 = cdb16(kWrite16);
  EXPECT_EQ(l.grad.execute({w0.data(), 0, 0, {}, {}}).status, kGood);
  EXPECT_EQ(l.shard->counters().pushes.load(), 0u);
  ASSERT_EQ(do_write(l.grad, 0, std::vector<std::byte>(512, std::byte{1}), kWrite16, 0x08).status, kGood);
  EXPECT_EQ(l.shard->counters().checkpoints.load(), 2u);
}

TEST(ServedLu, RegistrySharesOneShardPerCanonicalPath) {
  TempDir dir;
  auto& reg = ShardRegistry::instance();
  auto a = reg.attach(dir.file("m.ckpt"), unit::options("role=grad;size=4K"));
  auto b = reg.attach(dir.file("./m.ckpt"), unit::options("role=weights"));
  auto c = reg.attach(dir.file("x/../m.ckpt"), unit::options("role=status;size=8K"));
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(a.value(), b.value());
  // "x" does not exist, so x/.. cannot be resolved: refused, not guessed.
  ASSERT_TRUE(!c.ok());
  c = reg.attach(dir.file("m.ckpt"), unit::options("role=status;size=8K"));
  ASSERT_TRUE(!c.ok());
  EXPECT_NE(c.message().find("already open with other options: size=8K differs from size=4K"), std::string::npos);
  auto missing = reg.attach("/nonexistent-dir/m.ckpt", unit::options("role=grad;size=4K"));
  ASSERT_TRUE(!missing.ok());
}

}  // namespace
}  // namespace blockps
