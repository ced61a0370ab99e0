// libFuzzer target: the --bsopts parser (what tgtadm --op new hands the module). Besides "never crashes", it
// checks the property checkpoints rely on: a shard's config that parsed is written back by format_shard_options()
// as text that parses again to the same config.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <variant>

#include "ps_backend/config/lu_options.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::uint64_t bytes = 0;
  if (blockps::parse_byte_size(text, bytes)) (void)blockps::format_byte_size(bytes);

  const auto parsed = blockps::parse_lu_options(text, 512);
  const blockps::LuOptions* opts = parsed.ok() ? &parsed.value() : nullptr;
  // Only a config that describes a shard reaches a checkpoint (an LU may leave size out and take the open
  // shard's).
  if (opts == nullptr || !blockps::check_geometry(opts->config.geometry).ok()) return 0;
  const std::string written = blockps::format_shard_options(opts->config);
  // The shard keys only, as a checkpoint header records them; the LU's role comes from its own bsopts.
  const auto reparsed = blockps::parse_lu_options("role=grad;" + written, 512);
  const blockps::LuOptions* again = reparsed.ok() ? &reparsed.value() : nullptr;
  if (again == nullptr) {
    std::fprintf(stderr, "format_shard_options wrote '%s', which parse_lu_options refuses: %s\n", written.c_str(),
                 reparsed.message().c_str());
    std::abort();
  }
  if (blockps::format_shard_options(again->config) != written) {
    std::fprintf(stderr, "'%s' read back as '%s'\n", written.c_str(),
                 blockps::format_shard_options(again->config).c_str());
    std::abort();
  }
  return 0;
}
