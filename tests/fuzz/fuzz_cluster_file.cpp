// libFuzzer target: the client's cluster file (TOML through toml++, then our checks). It must return a config
// or an error for any text, never crash or throw.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "blockps/cluster_file.h"
#include "contract/byte_size.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  (void)blockps::parse_cluster_text(text, "fuzz.toml");
  std::uint64_t bytes = 0;
  (void)blockps::parse_byte_size(text, bytes);
  return 0;
}
