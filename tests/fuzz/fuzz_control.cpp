// libFuzzer target: control lines written to a shard's status LU (lr=, checkpoint, reset-rounds, job=, takeover,
// release, place= ...), on a mode=sync shard so that every keyword has something to act on, from one of two sessions
// or from one the shard never admitted (so jobs are claimed, joined, refused and taken over). Any text gets "" or a
// reason, never a crash.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <variant>

#include "ps_backend/config/lu_options.h"
#include "ps_backend/control/status_page_writer.h"
#include "ps_backend/shard/served_shard.h"
#include "tests/fuzz/fuzz_dir.h"

namespace {

std::shared_ptr<blockps::ServedShard>& shard() {
  // Made before the shard, so removed after it (the shard writes a last checkpoint into it at exit).
  static blockps::fuzz::FuzzDir dir("control");
  static std::shared_ptr<blockps::ServedShard> s = [] {
    const auto opts = blockps::parse_lu_options(
        "role=status;size=64K;block=16K;opt=momentum;mode=sync;workers=2;min_workers=1;checkpoint_s=0", 512);
    auto created = blockps::ServedShard::create(dir.path + "/model.ckpt", opts.value());
    if (!created.ok()) {
      std::fprintf(stderr, "cannot make the shard: %s\n", created.message().c_str());
      std::abort();
    }
    return std::move(created).value();
  }();
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const blockps::WorkerRef sessions[] = {{1, 7, "iqn.2026-11.io.blockps:fuzz-a"},
                                                {1, 8, "iqn.2026-11.io.blockps:fuzz-b"}};
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const blockps::WorkerRef* sender = size % 3 == 2 ? nullptr : &sessions[size % 3];
  (void)shard()->control(text, sender);
  (void)blockps::render_status_page(*shard());
  return 0;
}
