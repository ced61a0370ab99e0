#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "contract/scsi_codes.h"
#include "ps_backend/checkpoint/checkpoint.h"
#include "ps_backend/shard/admission_gate.h"
#include "tests/unit/ps_backend/test_support.h"

namespace blockps {
namespace {

using unit::make_shard;
using unit::TempDir;

std::vector<std::byte> floats(std::size_t n, float start, float step) {
  std::vector<std::byte> out(n * 4);
  for (std::size_t i = 0; i < n; ++i) {
    const float v = start + step * static_cast<float>(i);
    std::memcpy(out.data() + 4 * i, &v, 4);
  }
  return out;
}

std::vector<std::byte> read_all(ModelShard& m) {
  std::vector<std::byte> out(m.geometry().bytes);
  m.read_weights(0, out);
  return out;
}

TEST(Checkpoint, RoundTripKeepsWeightsStateAndSteps) {
  TempDir dir;
  const std::string path = dir.file("m.ckpt");
  // 3 blocks of 1K (the last shorter) so per-block steps and state differ.
  auto a = make_shard(path, "role=grad;size=2560;block=1K;opt=adam;lr=0.01;init=uniform:1;seed=5");
  ASSERT_TRUE(a);
  EXPECT_EQ(error_text(a->model().push_gradient(0, floats(640, 0.5f, 0.01f))), "");
  EXPECT_EQ(error_text(a->model().push_gradient(1024, floats(128, -1.0f, 0.02f))), "");  // block 1 only: 2x steps
  ASSERT_EQ(error_text(a->checkpoint()), "");
  const auto before = read_all(a->model());

  // The checkpoint restores the same weights, and further pushes give the same result on both (state and
  // per-block step counts were restored too). A copy of the file: `a` holds the lock on the original.
  std::filesystem::copy_file(path, dir.file("copy.ckpt"));
  auto b = make_shard(dir.file("copy.ckpt"), "role=grad;size=2560;block=1K;opt=adam;lr=0.01");
  ASSERT_TRUE(b);
  EXPECT_EQ(read_all(b->model()), before);
  const auto g = floats(640, 0.25f, -0.003f);
  EXPECT_EQ(error_text(a->model().push_gradient(0, g)), "");
  EXPECT_EQ(error_text(b->model().push_gradient(0, g)), "");
  EXPECT_EQ(read_all(a->model()), read_all(b->model()));
}

// The job that holds the shard and its place survive a restart from the checkpoint: the job's new sessions join
// at once, other jobs are refused, and the shard still knows its place.
// An averaging shard with compress= keeps its residuals (the error feedback of its compressed averages) as one more
// state slot: a shard started from the file goes on with them; a file written without compress= gives zeros.
TEST(Checkpoint, AnAveragingShardWithCompressKeepsItsResiduals) {
  TempDir dir;
  const std::string path = dir.file("avg.ckpt");
  auto a = make_shard(path, "role=grad;size=8K;block=4K;opt=average;mode=sync;workers=2;compress=sign1");
  ASSERT_TRUE(a && a->rounds() && a->rounds()->compressed_averages());
  // Two workers' compressed blocks: their average is no longer one magnitude a chunk, so compressing it leaves a
  // residual (one worker's decoded block would compress back exactly).
  for (std::uint64_t w = 0; w < 2; ++w) {
    std::vector<float> g(1024);
    for (std::size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>((i + w * 3) % 7) - 2.5f * (1.0f + w);
    std::vector<std::byte> packed(compressed_block_bytes(CompressedFormat::sign1, g.size()));
    ASSERT_TRUE(compress(CompressedFormat::sign1, g, {}, packed).ok());
    const WorkerRef worker{1, 7 + w, "iqn.2026-11.io.blockps:w" + std::to_string(w)};
    ASSERT_EQ(a->rounds()->admit_push(&packed, worker, 4096, packed.size()), Admission::run);
    ASSERT_EQ(a->push(4096, packed, &packed).status, scsi::kGood);
  }
  const std::vector<float> residual = a->rounds()->compressed_averages()->residual(1);
  ASSERT_TRUE(std::any_of(residual.begin(), residual.end(), [](float r) { return r != 0.0f; }));
  ASSERT_EQ(error_text(a->checkpoint()), "");
  const Result<CheckpointFileHeader> header = read_checkpoint_file_header(path);
  ASSERT_TRUE(header.ok() && header->geometry) << header.message();
  EXPECT_EQ(header->geometry->state_slots, 1u) << "opt=average keeps no optimizer state: the slot is the residuals'";

  std::filesystem::copy_file(path, dir.file("copy.ckpt"));
  auto b = make_shard(dir.file("copy.ckpt"), "role=grad");
  ASSERT_TRUE(b && b->rounds() && b->rounds()->compressed_averages());
  EXPECT_EQ(b->rounds()->compressed_averages()->residual(1), residual);
  EXPECT_EQ(b->rounds()->compressed_averages()->residual(0), std::vector<float>(1024, 0.0f));

  // The same shard's file without compress=, opened with it: no residuals kept, so they start at zero.
  const std::string plain = dir.file("plain.ckpt");
  auto c = make_shard(plain, "role=grad;size=8K;block=4K;opt=average;mode=sync;workers=1");
  ASSERT_TRUE(c);
  c->note_mutation();
  ASSERT_EQ(error_text(c->checkpoint()), "");
  std::filesystem::copy_file(plain, dir.file("plain-copy.ckpt"));
  auto d = make_shard(dir.file("plain-copy.ckpt"), "role=grad;mode=sync;compress=sign1");
  ASSERT_TRUE(d && d->rounds() && d->rounds()->compressed_averages());
  EXPECT_EQ(d->rounds()->compressed_averages()->residual(1), std::vector<float>(1024, 0.0f));
}

TEST(Checkpoint, HolderAndPlaceRoundTrip) {
  TempDir dir;
  const std::string path = dir.file("m.ckpt");
  const WorkerRef a{1, 10, "iqn.2024-01.test:a"}, b{1, 20, "iqn.2024-01.test:b"};
  {
    auto s = make_shard(path, "role=grad;size=4K");
    ASSERT_EQ(error_text(s->control("job=run-a\nplace=m-3f9a2c01d4e5b677 1/2 range\n", &a)), "");
    EXPECT_TRUE(s->dirty()) << "a new holder and place are changes the next checkpoint must hold";
    ASSERT_EQ(error_text(s->checkpoint()), "");
  }
  const Result<CheckpointHeader> header = read_checkpoint_header(path);
  ASSERT_EQ(error_text(header), "");
  EXPECT_EQ(header->tenancy.job, "run-a");
  EXPECT_GT(header->tenancy.claimed_unix, 0u);
  ASSERT_TRUE(header->tenancy.place);
  EXPECT_EQ(format_place(*header->tenancy.place), "m-3f9a2c01d4e5b677 1/2 range");

  auto s = make_shard(path, "role=grad");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->claim_status().holder, "run-a");
  EXPECT_EQ(s->claim_status().claimed_unix, header->tenancy.claimed_unix);
  EXPECT_EQ(s->claim_status().sessions, 0u);
  ASSERT_TRUE(s->place());
  EXPECT_EQ(*s->place(), *header->tenancy.place);
  int cmd = 0;
  AdmissionGate grad(LuRole::grad, *s);
  EXPECT_EQ(grad.admit(nullptr, &cmd, scsi::kWrite16, 0, 512, b).what, Admission::conflict);
  EXPECT_FALSE(s->control("job=run-b\n", &b).ok());
  EXPECT_EQ(error_text(s->control("job=run-a\n", &b)), "");
  EXPECT_EQ(grad.admit(nullptr, &cmd, scsi::kWrite16, 0, 512, b).what, Admission::run);
  // Released, the next checkpoint records an unclaimed shard (and keeps the place).
  ASSERT_EQ(error_text(s->control("release\n", &b)), "");
  ASSERT_EQ(error_text(s->checkpoint()), "");
  const Result<CheckpointHeader> released = read_checkpoint_header(path);
  ASSERT_EQ(error_text(released), "");
  EXPECT_EQ(released->tenancy.job, "");
  EXPECT_TRUE(released->tenancy.place);
}

// A checkpoint of format 1 (written before shards knew their job and place) loads as unclaimed with no place.
// Made here as that version wrote it: this version's file with its header rewritten to format 1 and the CRC redone.
TEST(Checkpoint, AFormatOneCheckpointLoadsUnclaimedWithNoPlace) {
  TempDir dir;
  const std::string path = dir.file("m.ckpt");
  const WorkerRef a{1, 10, "iqn.2024-01.test:a"};
  std::vector<std::byte> weights;
  {
    auto s = make_shard(path, "role=grad;size=4K;init=uniform:1;seed=3");
    ASSERT_EQ(error_text(s->control("job=run-a\nplace=m 0/1 stripe\n", &a)), "");
    weights = read_all(s->model());
    ASSERT_EQ(error_text(s->checkpoint()), "");
  }
  std::string file;
  {
    std::ifstream in(path, std::ios::binary);
    file.assign((std::istreambuf_iterator<char>(in)), {});
  }
  std::uint32_t len = 0;
  std::memcpy(&len, file.data() + 8, 4);
  nlohmann::json header = nlohmann::json::parse(file.substr(12, len));
  EXPECT_EQ(header["format"], 2);
  EXPECT_EQ(header["job"], "run-a");
  EXPECT_EQ(header["place"], "m 0/1 stripe");
  // The body's geometry, recorded since issue 49 (format 1 files have only the options, as format 2 files had).
  EXPECT_EQ(header["elements"], 1024);
  EXPECT_EQ(header["block_elements"], 65536);
  EXPECT_EQ(header["state_slots"], 0);
  header["format"] = 1;
  for (const char* newer : {"job", "claimed", "place", "elements", "block_elements", "state_slots"})
    header.erase(newer);
  std::string options = header["options"];  // format 1 knew no claim_idle_s
  const std::string claim_key = ";claim_idle_s=30";
  ASSERT_NE(options.find(claim_key), std::string::npos) << options;
  header["options"] = options.erase(options.find(claim_key), claim_key.size());
  const std::string old_header = header.dump();
  const auto old_len = static_cast<std::uint32_t>(old_header.size());
  std::string old = file.substr(0, 8);
  old.append(reinterpret_cast<const char*>(&old_len), 4);
  old += old_header;
  old += file.substr(12 + len, file.size() - 12 - len - 12);  // the blocks, without the trailer
  const auto crc = static_cast<std::uint32_t>(
      crc32_z(crc32_z(0, nullptr, 0), reinterpret_cast<const Bytef*>(old.data()), old.size()));
  old.append(reinterpret_cast<const char*>(&crc), 4);
  old += "BLKPSEND";
  std::ofstream(path, std::ios::binary | std::ios::trunc) << old;

  const Result<CheckpointHeader> read = read_checkpoint_header(path);
  ASSERT_EQ(error_text(read), "");
  EXPECT_EQ(read->tenancy, ShardTenancy{});
  EXPECT_EQ(read->config.claim_idle_s, 30u);
  auto s = make_shard(path, "role=grad");
  ASSERT_TRUE(s);
  EXPECT_EQ(read_all(s->model()), weights);
  EXPECT_EQ(s->claim_status().holder, "");
  EXPECT_FALSE(s->place());
  int cmd = 0;
  EXPECT_EQ(
      AdmissionGate(LuRole::grad, *s).admit(nullptr, &cmd, scsi::kWrite16, 0, 512, {1, 20, "iqn.2024-01.test:b"}).what,
      Admission::run);
  // A format this build does not know is refused, naming it.
  header["format"] = 3;
  const std::string future = header.dump();
  const auto future_len = static_cast<std::uint32_t>(future.size());
  {
    std::ofstream out(dir.file("future.ckpt"), std::ios::binary);
    out.write("BLKPSCK1", 8);
    out.write(reinterpret_cast<const char*>(&future_len), 4);
    out << future;
  }
  const Result<CheckpointHeader> too_new = read_checkpoint_header(dir.file("future.ckpt"));
  ASSERT_FALSE(too_new.ok());
  EXPECT_NE(too_new.message().find("checkpoint format 3 is not 1..2"), std::string::npos) << too_new.message();
}

// The job and place fields are checked like every other field of the header.
TEST(Checkpoint, ABadJobOrPlaceInTheHeaderIsRefusedWithItsName) {
  TempDir dir;
  const std::string path = dir.file("m.ckpt");
  const std::string fields = R"("format":2,"blocks":2,"options":"size=2K;block=1K;opt=sgd")";
  const std::pair<std::string, std::string> cases[] = {
      {"{" + fields + R"(,"job":"has space"})", "job \"has space\" is not a job name"},
      {"{" + fields + R"(,"job":7})", "job 7 is not a job name"},
      {"{" + fields + R"(,"job":"a","claimed":"x"})", "claimed \"x\" is not a Unix time"},
      {"{" + fields + R"(,"place":"m 2/2 stripe"})", "place 'm 2/2 stripe': INDEX/COUNT out of range"},
      {"{" + fields + R"(,"place":1})", "place 1 is not text"},
  };
  for (const auto& [json, expected] : cases) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    const auto len = static_cast<std::uint32_t>(json.size());
    out.write("BLKPSCK1", 8);
    out.write(reinterpret_cast<const char*>(&len), sizeof len);
    out << json;
    out.close();
    const Result<CheckpointHeader> r = read_checkpoint_header(path);
    ASSERT_FALSE(r.ok()) << json;
    EXPECT_NE(r.message().find(expected), std::string::npos) << r.message();
  }
}

// A file the shard did not write (the worker's Python package writes one from a torch model, recording the options
// it was given and the geometry it computed) is checked when the shard loads it: options that do not parse, or that
// give another geometry than the file's body, are refused with the reason.
TEST(Checkpoint, AFileWhoseOptionsDoNotParseOrDoNotGiveItsGeometryIsRefused) {
  TempDir dir;
  const std::string path = dir.file("m.ckpt");
  const std::vector<float> weights(1024, 0.5f);
  const auto write = [&](const std::string& options, std::uint32_t slots) {
    return write_checkpoint_file(path, options, CheckpointGeometry{1024, 256, slots}, {},
                                 [&](std::uint64_t b, CheckpointBlockRecord& r) {
                                   r.weights = std::span<const float>(weights).subspan(b * 256, 256);
                                   for (std::uint32_t s = 0; s < slots; ++s) r.state[s] = r.weights;
                                   return Status::Ok();
                                 });
  };
  ASSERT_EQ(error_text(write("size=4K;block=1K;opt=sgd;mode=sometimes", 0)), "");
  auto r = ServedShard::create(path, unit::options("role=grad"));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find(path + ": checkpoint options: mode=sometimes"), std::string::npos) << r.message();

  ASSERT_EQ(error_text(write("size=4K;block=1K;opt=adam", 0)), "");
  r = ServedShard::create(path, unit::options("role=grad"));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("checkpoint records geometry elements=1024 block_elements=256 state_slots=0, its options "
                             "(size=4K;block=1K;opt=adam) give elements=1024 block_elements=256 state_slots=2"),
            std::string::npos)
      << r.message();

  // Options as given (not all keys, not in the shard's order) are a checkpoint like any other.
  ASSERT_EQ(error_text(write("opt=adam;block=1K;size=4K;lr=0.5", 2)), "");
  auto s = make_shard(path, "role=grad");
  ASSERT_TRUE(s);
  EXPECT_FLOAT_EQ(s->config().optimizer.lr, 0.5f);
  EXPECT_EQ(read_all(s->model()), floats(1024, 0.5f, 0));
}

TEST(Checkpoint, ShapeMismatchIsRefusedWithTheReason) {
  TempDir dir;
  const std::string path = dir.file("m.ckpt");
  ASSERT_EQ(error_text(make_shard(path, "role=grad;size=4K;opt=momentum")->checkpoint()), "");
  auto r = ServedShard::create(path, unit::options("role=grad;size=8K;opt=momentum"));
  ASSERT_TRUE(!r.ok());
  EXPECT_NE(r.message().find("size=8K differs from size=4K"), std::string::npos) << r.message();
  r = ServedShard::create(path, unit::options("role=grad;opt=sgd"));
  ASSERT_TRUE(!r.ok());
  EXPECT_NE(r.message().find("opt=sgd differs from opt=momentum"), std::string::npos);
  // Hyper-parameters may change across a restart; size may be left out (it comes from the checkpoint).
  auto ok = make_shard(path, "role=grad;lr=0.5");
  ASSERT_TRUE(ok);
  EXPECT_FLOAT_EQ(ok->config().optimizer.lr, 0.5f);
  EXPECT_EQ(ok->config().geometry.bytes, 4096u);
}

TEST(Checkpoint, CorruptionIsDetected) {
  TempDir dir;
  const std::string path = dir.file("m.ckpt");
  ASSERT_EQ(error_text(make_shard(path, "role=grad;size=8K;init=normal:1")->checkpoint()), "");
  {  // flip one byte in the weights (the last 12 bytes are the trailer)
    const int fd = ::open(path.c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    const off_t at = ::lseek(fd, 0, SEEK_END) - 100;
    char c = 0;
    ASSERT_EQ(::pread(fd, &c, 1, at), 1);
    c ^= 0x5a;
    ASSERT_EQ(::pwrite(fd, &c, 1, at), 1);
    ::close(fd);
  }
  const auto file_text = [&] {
    std::ifstream in(path, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), {});
  };
  const std::string corrupt = file_text();
  auto r = ServedShard::create(path, unit::options("role=grad"));
  ASSERT_TRUE(!r.ok());
  EXPECT_NE(r.message().find("CRC mismatch"), std::string::npos) << r.message();
  // A shard that failed to open must not overwrite the file it could not load (it may be the only copy).
  EXPECT_EQ(file_text(), corrupt);

  ASSERT_EQ(::truncate(path.c_str(), 100), 0);
  r = ServedShard::create(path, unit::options("role=grad"));
  ASSERT_TRUE(!r.ok());
  EXPECT_NE(r.message().find("truncated"), std::string::npos) << r.message();

  std::ofstream(path) << "not a checkpoint at all";
  r = ServedShard::create(path, unit::options("role=grad"));
  ASSERT_TRUE(!r.ok());
  EXPECT_NE(r.message().find("not a blockps checkpoint"), std::string::npos);
}

// Found by tests/fuzz (fuzz_checkpoint): a header field of another JSON type made json::value() throw out of
// read_checkpoint_header instead of returning the reason.
TEST(Checkpoint, AHeaderFieldOfAnotherTypeIsRefusedWithItsName) {
  TempDir dir;
  const std::string path = dir.file("m.ckpt");
  const auto write_header = [&](const std::string& json) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    const auto len = static_cast<std::uint32_t>(json.size());
    out.write("BLKPSCK1", 8);
    out.write(reinterpret_cast<const char*>(&len), sizeof len);
    out << json;
  };
  const std::string options = R"("options":"size=2K;block=1K;opt=sgd")";
  const std::pair<std::string, std::string> cases[] = {
      {R"({"format":1,"blocks":2,"created":"yesterday",)" + options + "}", "created \"yesterday\""},
      {R"({"format":"1","blocks":2,)" + options + "}", "format \"1\""},
      {R"({"format":1,"blocks":2,"options":5})", "options are 5"},
      {R"({"format":1,"blocks":-2,)" + options + "}", "block count -2"},
      {R"({"format":1,)" + options + "}", "block count missing"},
  };
  for (const auto& [json, expected] : cases) {
    write_header(json);
    Result<CheckpointHeader> r = Status::Error("not read");
    ASSERT_NO_THROW(r = read_checkpoint_header(path)) << json;
    ASSERT_TRUE(!r.ok()) << json;
    EXPECT_NE(r.message().find(expected), std::string::npos) << r.message();
  }
  write_header(R"({"format":1,"blocks":2,)" + options + "}");  // and the same header, well typed, is read
  const auto good = read_checkpoint_header(path);
  ASSERT_TRUE(good.ok()) << good.message();
  EXPECT_EQ(good.value().config.geometry.bytes, 2048u);
}

TEST(Checkpoint, EmptyFileMeansNewShardAndSizeIsThenRequired) {
  TempDir dir;
  const std::string path = dir.file("m.ckpt");
  std::ofstream(path).close();
  EXPECT_FALSE(checkpoint_exists(path));
  auto r = ServedShard::create(path, unit::options("role=grad"));
  ASSERT_TRUE(!r.ok());
  EXPECT_NE(r.message().find("size= is required"), std::string::npos);
  EXPECT_TRUE(make_shard(path, "role=grad;size=4K"));
}

TEST(Checkpoint, FailedWriteKeepsThePreviousFile) {
  TempDir dir;
  const std::string path = dir.file("m.ckpt");
  auto s = make_shard(path, "role=grad;size=4K;init=uniform:1");
  ASSERT_EQ(error_text(s->checkpoint()), "");
  std::ifstream in(path, std::ios::binary);
  const std::string good((std::istreambuf_iterator<char>(in)), {});
  // A directory where the temp file must go makes the write fail; the old checkpoint must survive.
  ASSERT_EQ(::mkdir((path + ".tmp").c_str(), 0755), 0);
  EXPECT_EQ(error_text(s->model().push_gradient(0, floats(16, 1, 0))), "");
  s->note_mutation();
  EXPECT_NE(error_text(s->checkpoint()), "");
  std::ifstream again(path, std::ios::binary);
  EXPECT_EQ(std::string((std::istreambuf_iterator<char>(again)), {}), good);
  EXPECT_EQ(s->counters().checkpoint_errors.load(), 1u);
  ::rmdir((path + ".tmp").c_str());
}

TEST(Checkpoint, InitFromFileMustHaveTheShardSize) {
  TempDir dir;
  const std::string init = dir.file("init.bin");
  {
    std::ofstream out(init, std::ios::binary);
    const auto w = floats(1024, -2, 0.5f);
    out.write(reinterpret_cast<const char*>(w.data()), static_cast<std::streamsize>(w.size()));
  }
  auto s = make_shard(dir.file("a.ckpt"), "role=grad;size=4K;init=file:" + init);
  ASSERT_TRUE(s);
  EXPECT_EQ(read_all(s->model()), floats(1024, -2, 0.5f));
  auto r = ServedShard::create(dir.file("b.ckpt"), unit::options("role=grad;size=8K;init=file:" + init));
  ASSERT_TRUE(!r.ok());
  EXPECT_NE(r.message().find("holds 4096 bytes, the shard needs 8192"), std::string::npos) << r.message();
}

}  // namespace
}  // namespace blockps

namespace blockps {
namespace {

// checkpoint_s=1: a change is on disk within about a second without any SYNCHRONIZE CACHE; no change, no write.
TEST(Checkpoint, PeriodicCheckpointsWriteOnlyWhenSomethingChanged) {
  unit::TempDir dir;
  const std::string path = dir.file("m.ckpt");
  auto s = unit::make_shard(path, "role=grad;size=4K;opt=sum;checkpoint_s=1");
  ASSERT_TRUE(s);
  std::vector<std::byte> g(4096);
  const float one = 1.0f;
  for (std::size_t i = 0; i < g.size(); i += 4) std::memcpy(g.data() + i, &one, 4);
  EXPECT_EQ(error_text(s->model().push_gradient(0, g)), "");
  s->note_mutation();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (s->counters().checkpoints.load() == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_EQ(s->counters().checkpoints.load(), 1u) << "no periodic checkpoint within 5 s";
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  EXPECT_EQ(s->counters().checkpoints.load(), 1u) << "periodic checkpoints rewrote an unchanged shard";
  // What was written is the pushed state.
  s.reset();
  auto back = ServedShard::create(dir.file("./m.ckpt"), unit::options("role=weights"));
  ASSERT_TRUE(back.ok());
  std::vector<std::byte> w(4096);
  back.value()->model().read_weights(0, w);
  EXPECT_EQ(w, g);
}

}  // namespace
}  // namespace blockps

namespace blockps {
namespace {

// Two processes (or two shards of one process that bypass the registry) must not serve one checkpoint file.
TEST(Checkpoint, ASecondOpenerOfTheSameFileIsRefused) {
  unit::TempDir dir;
  auto first = unit::make_shard(dir.file("m.ckpt"), "role=grad;size=4K");
  ASSERT_TRUE(first);
  auto second = ServedShard::create(dir.file("m.ckpt"), unit::options("role=grad;size=4K"));
  ASSERT_TRUE(!second.ok());
  EXPECT_NE(second.message().find("is in use by another process"), std::string::npos) << second.message();
  first.reset();
  EXPECT_TRUE(unit::make_shard(dir.file("m.ckpt"), "role=grad;size=4K"));
}

// A shard that was opened and closed without any change leaves the file as it was (empty): a start that failed
// half-way (a later LU refused) must not leave a checkpoint that then refuses the corrected config.
TEST(Checkpoint, AnUnchangedNewShardWritesNoFinalCheckpoint) {
  unit::TempDir dir;
  const std::string path = dir.file("m.ckpt");
  std::ofstream(path).close();
  unit::make_shard(path, "role=grad;size=64K;init=normal:1").reset();
  EXPECT_FALSE(checkpoint_exists(path));
  EXPECT_TRUE(unit::make_shard(path, "role=grad;size=32K"));
}

}  // namespace
}  // namespace blockps

namespace blockps {
namespace {

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

// A shard at `path` that copies its checkpoints to `copy`, after a push and a checkpoint() that succeeded
// (whatever became of the copy).
std::shared_ptr<ServedShard> pushed_and_checkpointed(const std::string& path, const std::string& copy) {
  auto s = make_shard(path, "role=grad;size=2560;block=1K;opt=adam;checkpoint_copy=" + copy);
  if (!s) return nullptr;
  EXPECT_EQ(error_text(s->model().push_gradient(0, floats(640, 0.5f, 0.01f))), "");
  s->note_mutation();
  EXPECT_EQ(error_text(s->checkpoint()), "");
  return s;
}

// checkpoint_copy=: every checkpoint written is copied there byte for byte, and a shard opened on the copy has
// the checkpoint's weights. A copy onto the checkpoint itself, however spelled, is refused; so is the copy path a
// shard finds recorded in the checkpoint it is opened on, until it gives another one (or none).
TEST(Checkpoint, ACopyHoldsTheSameBytesAndAShardStartsFromIt) {
  TempDir dir;
  const std::string path = dir.file("m.ckpt"), copy = dir.file("copy.ckpt");
  auto s = pushed_and_checkpointed(path, copy);
  ASSERT_TRUE(s);
  ASSERT_FALSE(file_bytes(copy).empty());
  EXPECT_EQ(file_bytes(copy), file_bytes(path));
  EXPECT_EQ(s->counters().checkpoint_errors.load(), 0u);
  EXPECT_FALSE(s->dirty());

  const auto refused = ServedShard::create(
      dir.file("other.ckpt"), unit::options("role=grad;size=4K;checkpoint_copy=" + dir.file("./other.ckpt")));
  EXPECT_EQ(error_text(refused), "checkpoint_copy=" + dir.file("./other.ckpt") +
                                     ": must be none or an absolute path other than the shard's checkpoint");
  const auto recorded = ServedShard::create(copy, unit::options("role=grad"));
  EXPECT_NE(error_text(recorded).find("(the checkpoint records it; give checkpoint_copy=none or another path"),
            std::string::npos)
      << error_text(recorded);
  auto from_copy = make_shard(copy, "role=grad;checkpoint_copy=none");
  ASSERT_TRUE(from_copy);
  EXPECT_EQ(read_all(from_copy->model()), read_all(s->model()));
  EXPECT_EQ(from_copy->config().checkpoint_copy, "");
}

// A copy that cannot be written (its storage gone) fails neither the checkpoint nor the caller: it is counted,
// named on the status page's last_error, and tried again by the next checkpoint even with nothing new to write.
TEST(Checkpoint, AFailedCopyIsCountedAndTriedAgainWithoutFailingTheCheckpoint) {
  TempDir dir;
  const std::string path = dir.file("m.ckpt"), copy = dir.file("nfs/m.ckpt");
  auto s = pushed_and_checkpointed(path, copy);
  ASSERT_TRUE(s);
  EXPECT_TRUE(checkpoint_exists(path));
  EXPECT_EQ(s->counters().checkpoints.load(), 1u);
  EXPECT_EQ(s->counters().checkpoint_errors.load(), 1u);
  EXPECT_EQ(s->last_checkpoint().error,
            "checkpoint copy to " + copy + " failed: cannot create " + copy + ".tmp: No such file or directory");
  EXPECT_TRUE(s->dirty()) << "a copy still to make must bring the periodic and final checkpoints back";

  ASSERT_TRUE(std::filesystem::create_directory(dir.file("nfs")));
  EXPECT_EQ(error_text(s->checkpoint()), "");
  EXPECT_EQ(file_bytes(copy), file_bytes(path));
  EXPECT_EQ(s->counters().checkpoints.load(), 1u) << "the checkpoint itself was current: only the copy was due";
  EXPECT_EQ(s->counters().checkpoint_errors.load(), 1u);
  EXPECT_EQ(s->last_checkpoint().error, "");
  EXPECT_FALSE(s->dirty());
}

}  // namespace
}  // namespace blockps
