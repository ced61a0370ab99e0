// The checkpoint file's format on its own (contract/checkpoint_file.h), without a shard: what the PS and the
// worker's Python package both rely on.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "contract/checkpoint_file.h"
#include "tests/support/temp_dir.h"

namespace blockps {
namespace {

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

void put_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// A shard's contents as the tests hold them: per block a step, and weights and slots over the whole shard.
struct Contents {
  CheckpointGeometry geometry;
  std::vector<std::uint64_t> steps;
  std::vector<float> weights;
  std::vector<std::vector<float>> state;
};

Contents sample(const CheckpointGeometry& g) {
  Contents c{g, {}, {}, {}};
  for (std::uint64_t b = 0; b < g.blocks(); ++b) c.steps.push_back(10 + b);
  for (std::uint64_t i = 0; i < g.elements; ++i) c.weights.push_back(0.5f * static_cast<float>(i));
  for (std::uint32_t s = 0; s < g.state_slots; ++s) {
    c.state.emplace_back();
    for (std::uint64_t i = 0; i < g.elements; ++i) c.state.back().push_back(-1.0f - static_cast<float>(s * 100 + i));
  }
  return c;
}

CheckpointBlockSource source(const Contents& c) {
  return [&c](std::uint64_t b, CheckpointBlockRecord& r) {
    const std::uint64_t first = b * c.geometry.block_elements, n = c.geometry.elements_in_block(b);
    r.step = c.steps[b];
    r.weights = {c.weights.data() + first, n};
    for (std::uint32_t s = 0; s < c.geometry.state_slots; ++s) r.state[s] = {c.state[s].data() + first, n};
    return Status::Ok();
  };
}

// Reads `path` with `g` (or the header's geometry when none is given) into Contents; the status of the read.
Status read_into(const std::string& path, Contents& out, std::optional<CheckpointGeometry> g = std::nullopt) {
  const auto body_geometry = [&](const CheckpointFileHeader& h) -> Result<CheckpointGeometry> {
    const std::optional<CheckpointGeometry> use = g ? g : h.geometry;
    if (!use) return Status::Error(StatusCode::invalid_argument, "no geometry");
    out = Contents{*use, std::vector<std::uint64_t>(use->blocks()), std::vector<float>(use->elements),
                   std::vector<std::vector<float>>(use->state_slots, std::vector<float>(use->elements))};
    return *use;
  };
  return read_checkpoint_file(path, body_geometry, [&](const CheckpointBlockRecord& r) {
    const std::uint64_t first = r.index * out.geometry.block_elements;
    out.steps[r.index] = r.step;
    std::copy(r.weights.begin(), r.weights.end(), out.weights.begin() + static_cast<std::ptrdiff_t>(first));
    for (std::uint32_t s = 0; s < out.geometry.state_slots; ++s)
      std::copy(r.state[s].begin(), r.state[s].end(), out.state[s].begin() + static_cast<std::ptrdiff_t>(first));
    return Status::Ok();
  });
}

// The file's header as JSON text and where its body starts.
std::pair<std::string, std::size_t> header_of(const std::string& file) {
  std::uint32_t len = 0;
  std::memcpy(&len, file.data() + 8, 4);
  return {file.substr(12, len), 12 + len};
}

// A file with `header` and the body bytes `body`, closed with a valid CRC and end marker.
std::string framed(const std::string& header, const std::string& body) {
  const auto len = static_cast<std::uint32_t>(header.size());
  std::string out = "BLKPSCK1";
  out.append(reinterpret_cast<const char*>(&len), 4);
  out += header;
  out += body;
  const auto crc = static_cast<std::uint32_t>(
      crc32_z(crc32_z(0, nullptr, 0), reinterpret_cast<const Bytef*>(out.data()), out.size()));
  out.append(reinterpret_cast<const char*>(&crc), 4);
  return out + "BLKPSEND";
}

const CheckpointGeometry kGeometry{10, 4, 2};  // 3 blocks: 4, 4 and 2 elements; Adam's two slots

TEST(CheckpointFile, RoundTripKeepsOptionsTenancyGeometryStepsWeightsAndState) {
  testing::TempDir dir;
  ASSERT_EQ(dir.create("blockps-contract-").message(), "");
  const std::string path = dir.path("m.ckpt");
  const Contents written = sample(kGeometry);
  const ShardTenancy tenancy{"run-a", 1700000000, parse_place("m-1 0/2 stripe").value()};
  ASSERT_EQ(write_checkpoint_file(path, "size=40;block=16;opt=adam", kGeometry, tenancy, source(written)).message(),
            "");
  EXPECT_TRUE(checkpoint_exists(path));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));

  const Result<CheckpointFileHeader> header = read_checkpoint_file_header(path);
  ASSERT_TRUE(header.ok()) << header.message();
  EXPECT_EQ(header->options, "size=40;block=16;opt=adam");
  EXPECT_EQ(header->blocks, 3u);
  EXPECT_GT(header->created_unix, 0u);
  EXPECT_EQ(header->tenancy, tenancy);
  ASSERT_TRUE(header->geometry);
  EXPECT_EQ(*header->geometry, kGeometry);

  Contents read;
  ASSERT_EQ(read_into(path, read).message(), "");
  EXPECT_EQ(read.steps, written.steps);
  EXPECT_EQ(read.weights, written.weights);
  EXPECT_EQ(read.state, written.state);

  // Without state slots (sgd) and with one block shorter than block_elements.
  const CheckpointGeometry small{3, 8, 0};
  const Contents plain = sample(small);
  ASSERT_EQ(write_checkpoint_file(path, "size=12;block=32;opt=sgd", small, {}, source(plain)).message(), "");
  ASSERT_EQ(read_into(path, read).message(), "");
  EXPECT_EQ(read.weights, plain.weights);
  EXPECT_EQ(read_checkpoint_file_header(path)->tenancy, ShardTenancy{});
}

TEST(CheckpointFile, ACopyIsTheSameBytes) {
  testing::TempDir dir;
  ASSERT_EQ(dir.create("blockps-contract-").message(), "");
  const Contents c = sample(kGeometry);
  ASSERT_EQ(write_checkpoint_file(dir.path("a"), "opt=adam", kGeometry, {}, source(c)).message(), "");
  ASSERT_EQ(copy_checkpoint(dir.path("a"), dir.path("b")).message(), "");
  EXPECT_EQ(file_bytes(dir.path("b")), file_bytes(dir.path("a")));
  EXPECT_EQ(copy_checkpoint(dir.path("a"), dir.path("gone/b")).message(),
            "cannot create " + dir.path("gone/b.tmp") + ": No such file or directory");
}

TEST(CheckpointFile, AFlippedByteIsACrcMismatch) {
  testing::TempDir dir;
  ASSERT_EQ(dir.create("blockps-contract-").message(), "");
  const std::string path = dir.path("m.ckpt");
  const Contents c = sample(kGeometry);
  ASSERT_EQ(write_checkpoint_file(path, "opt=adam", kGeometry, {}, source(c)).message(), "");
  std::string bytes = file_bytes(path);
  bytes[bytes.size() - 12 - 5] ^= 0x5a;  // in the last block's state
  put_file(path, bytes);
  Contents read;
  const Status s = read_into(path, read);
  EXPECT_EQ(s.code(), StatusCode::invalid_argument);
  EXPECT_EQ(s.message(), path + ": checkpoint CRC mismatch (file corrupt)");
}

TEST(CheckpointFile, ATruncatedFileIsRefusedWhereverItEnds) {
  testing::TempDir dir;
  ASSERT_EQ(dir.create("blockps-contract-").message(), "");
  const std::string path = dir.path("m.ckpt");
  const Contents c = sample(kGeometry);
  ASSERT_EQ(write_checkpoint_file(path, "opt=adam", kGeometry, {}, source(c)).message(), "");
  const std::string whole = file_bytes(path);
  const std::size_t body = header_of(whole).second;
  for (const std::size_t keep :
       {std::size_t{0}, std::size_t{10}, body - 1, body, body + 20, whole.size() - 12, whole.size() - 1}) {
    put_file(path, whole.substr(0, keep));
    Contents read;
    const Status s = read_into(path, read);
    EXPECT_EQ(s.code(), StatusCode::invalid_argument) << keep;
    const bool named = s.message().find("truncated") != std::string::npos ||
                       s.message().find("not a blockps checkpoint") != std::string::npos;
    EXPECT_TRUE(named) << keep << ": " << s.message();
  }
  put_file(path, whole + "x");
  Contents read;
  EXPECT_EQ(read_into(path, read).message(), path + ": checkpoint has trailing bytes");
}

// A header may claim any geometry: the body must fit in the file before a buffer of that size is allocated.
TEST(CheckpointFile, AHugeGeometryInASmallFileIsTruncatedNotAllocated) {
  testing::TempDir dir;
  ASSERT_EQ(dir.create("blockps-contract-").message(), "");
  const std::string path = dir.path("m.ckpt");
  put_file(path, framed(R"({"format":2,"options":"","blocks":1,"elements":1152921504606846976,)"
                        R"("block_elements":1152921504606846976,"state_slots":2})",
                        std::string(8, '\0')));
  Contents unused;
  const Status s = read_checkpoint_file(
      path, [](const CheckpointFileHeader& h) -> Result<CheckpointGeometry> { return *h.geometry; },
      [](const CheckpointBlockRecord&) { return Status::Ok(); });
  EXPECT_NE(s.message().find("checkpoint truncated"), std::string::npos) << s.message();
}

// Files written before the geometry was recorded (format 1, and format 2 before issue 49): the header has the
// options text only, and the reader gives the geometry (the PS derives it from the options).
TEST(CheckpointFile, AnOldHeaderWithoutGeometryIsReadWithTheReadersGeometry) {
  testing::TempDir dir;
  ASSERT_EQ(dir.create("blockps-contract-").message(), "");
  const std::string path = dir.path("m.ckpt");
  const Contents c = sample(kGeometry);
  ASSERT_EQ(write_checkpoint_file(path, "opt=adam", kGeometry, {}, source(c)).message(), "");
  const std::string body = file_bytes(path).substr(header_of(file_bytes(path)).second);
  const std::string body_only = body.substr(0, body.size() - 12);
  for (const std::string header : {R"({"format":1,"options":"size=40;block=16;opt=adam","blocks":3,"created":5})",
                                   R"({"format":2,"options":"size=40;block=16;opt=adam","blocks":3,"job":"j",)"
                                   R"("claimed":7,"place":"m 0/1 stripe"})"}) {
    put_file(path, framed(header, body_only));
    const Result<CheckpointFileHeader> h = read_checkpoint_file_header(path);
    ASSERT_TRUE(h.ok()) << h.message();
    EXPECT_FALSE(h->geometry) << header;
    EXPECT_EQ(h->blocks, 3u);
    EXPECT_EQ(h->options, "size=40;block=16;opt=adam");
    Contents read;
    ASSERT_EQ(read_into(path, read, kGeometry).message(), "") << header;
    EXPECT_EQ(read.weights, c.weights);
    EXPECT_EQ(read.state, c.state);
    EXPECT_EQ(read.steps, c.steps);
  }
  EXPECT_EQ(read_checkpoint_file_header(path)->tenancy.job, "j");
  // The reader's geometry must give the header's block count.
  Contents read;
  EXPECT_EQ(read_into(path, read, CheckpointGeometry{10, 5, 2}).message(),
            path + ": checkpoint block count 3 does not match elements=10 block_elements=5 state_slots=2 (2 blocks)");
}

TEST(CheckpointFile, AGeometryOtherThanTheRecordedOneIsRefused) {
  testing::TempDir dir;
  ASSERT_EQ(dir.create("blockps-contract-").message(), "");
  const std::string path = dir.path("m.ckpt");
  const Contents c = sample(kGeometry);
  ASSERT_EQ(write_checkpoint_file(path, "opt=adam", kGeometry, {}, source(c)).message(), "");
  Contents read;
  EXPECT_EQ(read_into(path, read, CheckpointGeometry{10, 4, 1}).message(),
            path + ": checkpoint records geometry elements=10 block_elements=4 state_slots=2, read as " +
                "elements=10 block_elements=4 state_slots=1");
  // A header whose geometry and block count disagree, or whose geometry is not numbers, is refused as it is read.
  const std::pair<std::string, std::string> cases[] = {
      {R"({"format":2,"options":"","blocks":2,"elements":10,"block_elements":4,"state_slots":2})",
       "block count 2 does not match its geometry elements=10 block_elements=4 state_slots=2 (3 blocks)"},
      {R"({"format":2,"options":"","blocks":3,"elements":10,"block_elements":"4","state_slots":2})",
       "geometry elements=10 block_elements=\"4\" state_slots=2 is not whole numbers"},
      {R"({"format":2,"options":"","blocks":3,"elements":10,"block_elements":4,"state_slots":3})",
       "state_slots=3 is not whole numbers (state_slots 0..2)"},
      {R"({"format":2,"options":"","blocks":0,"elements":0,"block_elements":4,"state_slots":0})",
       "geometry elements=0 block_elements=4 state_slots=0 is unusable"},
      {R"({"format":2,"options":"","blocks":3,"elements":10,"block_elements":4})", "state_slots=missing"},
      {R"({"format":2,"options":"","blocks":-1})", "block count -1 is not a number"},
      {R"({"format":3,"options":"","blocks":1})", "checkpoint format 3 is not 1..2"},
  };
  for (const auto& [json, expected] : cases) {
    put_file(path, framed(json, ""));
    const Result<CheckpointFileHeader> r = read_checkpoint_file_header(path);
    ASSERT_FALSE(r.ok()) << json;
    EXPECT_EQ(r.status().code(), StatusCode::invalid_argument);
    EXPECT_NE(r.message().find(expected), std::string::npos) << r.message();
  }
}

// The writer refuses a record that is not its block's length, and a source's refusal, leaving the old file.
TEST(CheckpointFile, ARefusedWriteKeepsTheOldFile) {
  testing::TempDir dir;
  ASSERT_EQ(dir.create("blockps-contract-").message(), "");
  const std::string path = dir.path("m.ckpt");
  const Contents c = sample(kGeometry);
  ASSERT_EQ(write_checkpoint_file(path, "opt=adam", kGeometry, {}, source(c)).message(), "");
  const std::string before = file_bytes(path);
  const Status short_record =
      write_checkpoint_file(path, "opt=adam", kGeometry, {}, [&](std::uint64_t b, CheckpointBlockRecord& r) {
        Status s = source(c)(b, r);
        if (b == 2) r.state[1] = r.state[1].first(1);
        return s;
      });
  EXPECT_EQ(short_record.message(),
            path + ": checkpoint not written: block 2's record is not 2 weights and 2 state slots of as many values");
  const Status refused = write_checkpoint_file(
      path, "opt=adam", kGeometry, {}, [](std::uint64_t, CheckpointBlockRecord&) { return Status::Error("gone"); });
  EXPECT_EQ(refused.message(), "gone");
  EXPECT_EQ(write_checkpoint_file(path, "", CheckpointGeometry{0, 4, 0}, {}, source(c)).code(),
            StatusCode::invalid_argument);
  EXPECT_EQ(file_bytes(path), before);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
}

TEST(CheckpointFile, AnEmptyOrMissingFileIsNoCheckpoint) {
  testing::TempDir dir;
  ASSERT_EQ(dir.create("blockps-contract-").message(), "");
  EXPECT_FALSE(checkpoint_exists(dir.path("none")));
  put_file(dir.path("empty"), "");
  EXPECT_FALSE(checkpoint_exists(dir.path("empty")));
  EXPECT_EQ(read_checkpoint_file_header(dir.path("none")).status().code(), StatusCode::io);
  put_file(dir.path("text"), "not a checkpoint at all");
  EXPECT_EQ(read_checkpoint_file_header(dir.path("text")).message(),
            dir.path("text") + " is not a blockps checkpoint (bad magic)");
}

}  // namespace
}  // namespace blockps
