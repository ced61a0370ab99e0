// `blockps conf ...`: a shard config as tgt-admin reads it, and what the scripts read from it
// (client/cli/targets_conf.h): `expand`, `value`, `lus` and `for-tgt-admin` for scripts/ps-up.sh (`expand` also for
// an operator checking a file), `shard` for scripts/attach.sh --conf.
#include <iostream>

#include "client/cli/commands.h"
#include "client/cli/targets_conf.h"

namespace blockps::cli {
namespace {

// A shard config as written, or its error printed.
Result<std::string> read_conf(const std::string& file) {
  Result<std::string> text = read_input(file, "shard config");
  if (!text.ok()) print_error(text.message());
  return text;
}

// A shard config as tgt-admin reads it (its blockps-shard lines expanded), or its error printed.
Result<std::string> read_expanded_conf(const std::string& file) {
  const Result<std::string> text = read_conf(file);
  if (!text.ok()) return text;
  Result<std::string> expanded = expand_shard_lines(*text, file);
  if (!expanded.ok()) print_error(expanded.message());
  return expanded;
}

int printed(const std::string& out) {
  std::cout << out;
  return std::cout.flush() ? kExitOk : kExitFailed;
}

}  // namespace

int run_conf_expand(const std::string& file) {
  const Result<std::string> expanded = read_expanded_conf(file);
  return expanded.ok() ? printed(*expanded) : kExitFailed;
}

int run_conf_value(const std::string& file, const std::string& key) {
  // The file as written: top-level keys are the same in its expansion, and a wrong blockps-shard line is
  // ps-up.sh's to name after these.
  const Result<std::string> text = read_conf(file);
  if (!text.ok()) return kExitFailed;
  std::string out;
  for (const std::string& value : top_level_values(*text, key)) out += value + "\n";
  return printed(out);
}

int run_conf_lus(const std::string& file) {
  const Result<std::string> expanded = read_expanded_conf(file);
  if (!expanded.ok()) return kExitFailed;
  const auto or_dash = [](const std::string& field) { return field.empty() ? std::string("-") : field; };
  std::string out;
  for (const TargetLu& lu : target_lus(*expanded))
    out += lu.iqn + " " + or_dash(lu.lun) + " " + or_dash(lu.bs_type) + " " + lu.path + "\n";
  return printed(out);
}

int run_conf_for_tgt_admin(const std::string& file, bool iser) {
  const Result<std::string> expanded = read_expanded_conf(file);
  if (!expanded.ok()) return kExitFailed;
  const std::string for_tcp = without_control_port(*expanded);
  return printed(iser ? with_iser_targets(for_tcp) : for_tcp);
}

int run_conf_shard(const std::string& file) {
  const Result<std::string> text = read_conf(file);
  if (!text.ok()) return kExitFailed;
  const Result<ShardEndpoint> shard = shard_endpoint(*text, file);
  if (!shard.ok()) {
    print_error(shard.message());
    return kExitFailed;
  }
  std::string out = shard->portal + " " + shard->iqn;
  for (const std::string& lun : shard->luns) out += " " + lun;
  return printed(out + "\n");
}

}  // namespace blockps::cli
