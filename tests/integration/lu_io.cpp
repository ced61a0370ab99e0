// blockps_lu_io: a tiny libiscsi client for shell tests (test_ps_scripts.sh). One command per run:
//
//   blockps_lu_io URL info                        prints "capacity=BYTES block=BYTES"
//   blockps_lu_io URL write  OFFSET LENGTH SEED   writes the float pattern SEED (0: zeros)
//   blockps_lu_io URL verify OFFSET LENGTH SEED   exit 0 when the LU holds the pattern, 1 when not
//   blockps_lu_io URL differs OFFSET LENGTH SEED  exit 0 when the LU does NOT hold the pattern, 1 when it does
//   blockps_lu_io URL read   OFFSET LENGTH        raw bytes to stdout
//   blockps_lu_io URL pushpull OFFSET LENGTH SEED  push the pattern, then READ the range back (in a mode=sync
//                                                 shard the READ waits for the round), print "pulled" and exit
//   blockps_lu_io URL rounds OFFSET LENGTH SEED N  N times: push the pattern, READ the range back; prints
//                                                 "round I MS" after each (a sync worker's training loop)
//   blockps_lu_io URL sync                        SYNCHRONIZE CACHE (a checkpoint, for blockps LUs)
//   blockps_lu_io URL control TEXT                 WRITE TEXT, NUL-padded to 512 bytes, at 0 (a status LU's
//                                                 control lines); exit 1 with the sense on CHECK CONDITION
//   blockps_lu_io URL pushloop OFFSET LENGTH SEED  WRITEs of the pattern at queue depth 8, back to back, for up
//                                                 to 30 s or until the target stops answering (exit 0 either
//                                                 way: for tests that stop a target under load)
//
// A push is the pattern in WRITEs of at most 256 KiB, as libblockps sends them over libiscsi (see push()).
// Sizes take K/M suffixes. The pattern is finite f32 values in [-1, 1) from a seeded generator, so it is valid
// data for a weights or grad LU. Exit status: 0/1 as above, 2 on any error (message on stderr).
// It logs in as $BLOCKPS_INITIATOR_IQN (default iqn.2026-11.io.blockps:lu-io).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "client/transport/iscsi_lun.h"
#include "contract/scsi_codes.h"
#include "tests/support/lu_pipeline.h"

namespace {

using blockps::IscsiLun;
using blockps::ScsiResult;

constexpr int kError = 2;

bool parse_size(const std::string& text, std::uint64_t& out) {
  if (text.empty()) return false;
  std::size_t pos = 0;
  unsigned long long v = 0;
  try {
    v = std::stoull(text, &pos, 0);
  } catch (...) {
    return false;
  }
  std::string suffix = text.substr(pos);
  if (suffix == "K" || suffix == "k")
    v <<= 10;
  else if (suffix == "M" || suffix == "m")
    v <<= 20;
  else if (suffix == "G" || suffix == "g")
    v <<= 30;
  else if (!suffix.empty())
    return false;
  out = v;
  return true;
}

std::vector<std::byte> float_pattern(std::size_t bytes, std::uint64_t seed) {
  std::vector<std::byte> out(bytes);
  if (seed == 0) return out;
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (std::size_t i = 0; i + sizeof(float) <= bytes; i += sizeof(float)) {
    float f = dist(gen);
    std::memcpy(out.data() + i, &f, sizeof f);
  }
  return out;
}

// A push as libblockps sends it over libiscsi: WRITEs of at most blockps::kLibiscsiImmediateWriteBytes, which need no
// Data-Out PDU (with larger ones a target's NOP-In can break libiscsi 1.19's session: kLibiscsiImmediateWriteBytes).
ScsiResult push(IscsiLun& lun, std::uint64_t offset, std::vector<std::byte>& data) {
  std::vector<blockps::LuCommand> commands;
  for (std::uint64_t at = 0; at < data.size(); at += blockps::kLibiscsiImmediateWriteBytes) {
    const std::uint64_t n = std::min<std::uint64_t>(blockps::kLibiscsiImmediateWriteBytes, data.size() - at);
    commands.push_back({blockps::IoDirection::write, offset + at, {{data.data() + at, static_cast<std::size_t>(n)}}});
  }
  return lun.run_commands(commands, {.depth = 4}).error;
}

int fail(const std::string& msg) {
  std::cerr << "blockps_lu_io: " << msg << "\n";
  return kError;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    return fail("usage: blockps_lu_io URL info|write|verify|differs|read|sync|control [OFFSET LENGTH [SEED] | TEXT]");
  }
  const std::string url = argv[1];
  const std::string cmd = argv[2];
  std::uint64_t offset = 0, length = 0, seed = 0;
  const bool needs_range = cmd == "write" || cmd == "verify" || cmd == "differs" || cmd == "read" ||
                           cmd == "pushloop" || cmd == "pushpull" || cmd == "rounds";
  const bool needs_seed = cmd == "write" || cmd == "verify" || cmd == "differs" || cmd == "pushloop" ||
                          cmd == "pushpull" || cmd == "rounds";
  if (needs_range && (argc < 5 || !parse_size(argv[3], offset) || !parse_size(argv[4], length))) {
    return fail(cmd + " needs OFFSET LENGTH (bytes, K/M/G suffixes allowed)");
  }
  if (needs_seed && (argc < 6 || !parse_size(argv[5], seed))) return fail(cmd + " needs a SEED");

  IscsiLun lun;
  const char* initiator = std::getenv("BLOCKPS_INITIATOR_IQN");
  blockps::Status s = lun.connect(url, initiator != nullptr ? initiator : "iqn.2026-11.io.blockps:lu-io");
  if (!s.ok()) return fail(s.message());

  if (cmd == "info") {
    std::cout << "capacity=" << lun.capacity_bytes() << " block=" << lun.block_size() << "\n";
    return 0;
  }
  if (cmd == "sync") {
    ScsiResult r = lun.synchronize_cache();
    return r.ok() ? 0 : fail("SYNCHRONIZE CACHE: " + r.describe());
  }
  if (cmd == "control") {
    if (argc < 4 || std::strlen(argv[3]) > 512) return fail("control needs TEXT of at most 512 bytes");
    std::vector<std::byte> block(512);
    std::memcpy(block.data(), argv[3], std::strlen(argv[3]));
    ScsiResult r = lun.write(0, block);
    if (r.ok()) return 0;
    std::cerr << "control write refused: " << r.describe() << "\n";
    return r.status == blockps::scsi::kCheckCondition ? 1 : kError;
  }
  if (cmd == "write") {
    ScsiResult r = lun.write(offset, float_pattern(length, seed));
    return r.ok() ? 0 : fail("WRITE: " + r.describe());
  }
  if (cmd == "pushpull") {
    auto grad = float_pattern(length, seed);
    if (ScsiResult r = push(lun, offset, grad); !r.ok()) return fail("WRITE: " + r.describe());
    std::cout << "pushed" << std::endl;
    std::vector<std::byte> back(length);
    if (ScsiResult r = lun.read(offset, back); !r.ok()) return fail("READ: " + r.describe());
    std::cout << "pulled" << std::endl;
    return 0;
  }
  if (cmd == "rounds") {
    std::uint64_t rounds = 0;
    if (argc < 7 || !parse_size(argv[6], rounds)) return fail("rounds needs OFFSET LENGTH SEED N");
    auto grad = float_pattern(length, seed);
    std::vector<std::byte> back(length);
    for (std::uint64_t i = 0; i < rounds; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      if (ScsiResult r = push(lun, offset, grad); !r.ok())
        return fail("round " + std::to_string(i) + " WRITE: " + r.describe());
      if (ScsiResult r = lun.read(offset, back); !r.ok())
        return fail("round " + std::to_string(i) + " READ: " + r.describe());
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
      std::cout << "round " << i << " " << ms.count() << std::endl;
    }
    return 0;
  }
  if (cmd == "pushloop") {
    const std::vector<std::byte> pattern = float_pattern(length, seed);
    blockps::testing::PipelineSpec spec;
    spec.direction = blockps::IoDirection::write;
    spec.request_bytes = static_cast<std::uint32_t>(std::min<std::uint64_t>(length, 1u << 20));
    spec.queue_depth = 8;
    spec.range_offset = offset;
    spec.range_bytes = length;
    spec.seconds = 30;
    spec.write_source = pattern;
    const blockps::testing::PipelineResult r = blockps::testing::run_pipeline(lun, spec);
    std::cerr << "blockps_lu_io: pushloop: " << r.requests << " writes"
              << (r.ok() ? std::string() : ", then: " + r.error.describe()) << "\n";
    return 0;
  }
  std::vector<std::byte> data(length);
  if (!needs_range) return fail("unknown command " + cmd);
  ScsiResult r = lun.read(offset, data);
  if (!r.ok()) return fail("READ: " + r.describe());
  if (cmd == "read") {
    std::fwrite(data.data(), 1, data.size(), stdout);
    return 0;
  }
  const bool same = data == float_pattern(length, seed);
  if (cmd == "verify") {
    if (!same) std::cerr << "blockps_lu_io: " << url << " does not hold pattern " << seed << "\n";
    return same ? 0 : 1;
  }
  if (cmd == "differs") return same ? 1 : 0;
  return fail("unknown command " + cmd);
}
