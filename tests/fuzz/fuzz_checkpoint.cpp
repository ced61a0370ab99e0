// libFuzzer target: the checkpoint loader, on a file holding the input. A CRC-32 and an end marker close the
// file, and mutated inputs almost never carry a valid one; each input is therefore also tried with a valid CRC
// and end marker appended (the input standing for everything before them), so that the success path and the
// trailing-bytes check are reached too. Any file gets a loaded shard or a reason, never a crash. Shards above
// kMaxShardBytes are not built (a header may rightly describe a big shard); their header is still checked.
#include <unistd.h>
#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <variant>

#include "aggregator/model_shard.h"
#include "ps_backend/checkpoint/checkpoint.h"
#include "tests/fuzz/fuzz_dir.h"

namespace {

// A shard larger than this is not built (the header is still parsed and checked).
constexpr std::uint64_t kMaxShardBytes = std::uint64_t{4} << 20;

void write_file(const std::string& path, const std::uint8_t* data, std::size_t size, bool with_trailer) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  if (with_trailer) {
    const auto crc = static_cast<std::uint32_t>(crc32_z(crc32_z(0, nullptr, 0), data, size));
    out.write(reinterpret_cast<const char*>(&crc), sizeof crc);
    out.write("BLKPSEND", 8);
  }
}

void load(const std::string& path) {
  const auto header = blockps::read_checkpoint_header(path);
  const blockps::CheckpointHeader* h = header.ok() ? &header.value() : nullptr;
  if (h == nullptr) return;
  const blockps::ShardGeometry& g = h->config.geometry;
  if (!blockps::check_geometry(g).ok() || g.bytes > kMaxShardBytes) return;
  blockps::ModelShard shard(g, h->config.optimizer, nullptr);
  (void)blockps::load_checkpoint(path, shard);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static blockps::fuzz::FuzzDir dir("checkpoint");
  const std::string path = dir.path + "/model.ckpt";
  write_file(path, data, size, false);
  load(path);
  write_file(path, data, size, true);
  load(path);
  return 0;
}
