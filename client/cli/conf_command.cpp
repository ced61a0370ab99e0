// `blockps conf expand FILE`: a shard config as tgt-admin reads it (client/cli/targets_conf.h), for
// scripts/ps-up.sh (which loads it), scripts/attach.sh (which reads its LUNs) and an operator checking a file.
#include <iostream>

#include "client/cli/commands.h"
#include "client/cli/targets_conf.h"

namespace blockps::cli {

int run_conf_expand(const std::string& file) {
  const Result<std::string> text = read_input(file, "shard config");
  if (!text.ok()) {
    print_error(text.message());
    return kExitFailed;
  }
  const Result<std::string> expanded = expand_shard_lines(*text, file);
  if (!expanded.ok()) {
    print_error(expanded.message());
    return kExitFailed;
  }
  std::cout << *expanded;
  return std::cout.flush() ? kExitOk : kExitFailed;
}

}  // namespace blockps::cli
