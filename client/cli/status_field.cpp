#include "client/cli/status_field.h"

#include <span>

#include "contract/status_page.h"

namespace blockps::cli {
namespace {

namespace sp = status_page;

// Every pointer of contract/status_page.h (tests/integration/cli/test_cli.cpp checks that none is missing here).
constexpr const char* kFields[] = {
    sp::kFormatField,
    sp::kShard,
    sp::kShardPath,
    sp::kShardOptions,
    sp::kShardSettings,
    sp::kShardSize,
    sp::kShardDtype,
    sp::kShardBlock,
    sp::kShardElements,
    sp::kShardBlocks,
    sp::kShardOpt,
    sp::kShardLr,
    sp::kShardMode,
    sp::kShardDevice,
    sp::kShardEngine,
    sp::kShardCheckpointS,
    sp::kShardStartedUnix,
    sp::kPushes,
    sp::kPushBytes,
    sp::kPulls,
    sp::kPullBytes,
    sp::kWeightWrites,
    sp::kWeightWriteBytes,
    sp::kIoErrors,
    sp::kAggregationTotalNs,
    sp::kAggregationMeanNs,
    sp::kAggregationMaxNs,
    sp::kAggregationLatency,
    sp::kModelBlockSteps,
    sp::kCheckpointCount,
    sp::kCheckpointErrors,
    sp::kCheckpointLastUnix,
    sp::kCheckpointLastError,
    sp::kCheckpointBlockSteps,
    sp::kRounds,
    sp::kRoundsMode,
    sp::kRoundsWorkers,
    sp::kRoundsMaxWorkers,
    sp::kRoundsMinWorkers,
    sp::kRoundsStragglerMs,
    sp::kRoundsWorkerTimeoutMs,
    sp::kRoundsMin,
    sp::kRoundsMax,
    sp::kRoundsClosed,
    sp::kRoundsOpen,
    sp::kRoundsLiveWorkers,
    sp::kRoundsStragglersDropped,
    sp::kRoundsWorkersDropped,
    sp::kRoundsRecentDrops,
    sp::kRoundsParkedCommands,
    sp::kRoundsDegraded,
    sp::kRoundsDegradedReason,
    sp::kRoundsApplyFailures,
    sp::kRoundsRoundLatency,
    sp::kRoundsApplyLatency,
    sp::kJob,
    sp::kJobHolder,
    sp::kJobClaimedUnix,
    sp::kJobSessions,
    sp::kJobLastActiveMsAgo,
    sp::kJobClaimIdleS,
    sp::kJobLapsed,
    sp::kJobRefused,
    sp::kJobTakeovers,
    sp::kPlace,
    sp::kPlaceModel,
    sp::kPlaceIndex,
    sp::kPlaceCount,
    sp::kPlaceLayout,
    sp::kPlaceText,
    sp::kInit,
    sp::kInitState,
    sp::kInitBy,
    sp::kRefusalsRecent,
};

// The fields whose value holds members the contract names by key alone: latency objects, and arrays of objects.
constexpr const char* kLatencyKeys[] = {sp::latency::kCount,  sp::latency::kP50Ns, sp::latency::kP90Ns,
                                        sp::latency::kP99Ns,  sp::latency::kMaxNs, sp::latency::kTotalCount,
                                        sp::latency::kTotalNs};
constexpr const char* kLiveWorkerKeys[] = {sp::live_worker::kIqn,         sp::live_worker::kSession,
                                           sp::live_worker::kPushes,      sp::live_worker::kLastPushMsAgo,
                                           sp::live_worker::kJoinedMsAgo, sp::live_worker::kRoundsBehind};
constexpr const char* kRefusalKeys[] = {sp::refusal::kIqn,    sp::refusal::kSession, sp::refusal::kLu,
                                        sp::refusal::kReason, sp::refusal::kUnixMs,  sp::refusal::kCount};
struct Container {
  const char* field;
  bool array;                         // elements "/N" first
  std::span<const char* const> keys;  // empty: any key (the contract names none)
};
const Container kContainers[] = {
    {sp::kAggregationLatency, false, kLatencyKeys}, {sp::kRoundsRoundLatency, false, kLatencyKeys},
    {sp::kRoundsApplyLatency, false, kLatencyKeys}, {sp::kRoundsLiveWorkers, true, kLiveWorkerKeys},
    {sp::kRefusalsRecent, true, kRefusalKeys},      {sp::kRoundsRecentDrops, true, {}},
};

// `rest` (what follows a container's pointer) names a member of it: "/KEY", or "/N" and "/N/KEY" of an array.
bool names_a_member(const Container& c, std::string_view rest) {
  if (!rest.starts_with('/')) return false;
  rest.remove_prefix(1);
  if (c.array) {
    const std::size_t digits = rest.find_first_not_of("0123456789");
    if (digits == 0) return false;
    if (digits == std::string_view::npos) return true;  // the element itself
    if (rest[digits] != '/') return false;
    rest.remove_prefix(digits + 1);
  }
  if (c.keys.empty()) return !rest.empty();
  for (std::string_view key : c.keys)
    if (rest == key) return true;
  return false;
}

}  // namespace

bool is_status_page_field(std::string_view pointer) {
  for (std::string_view field : kFields)
    if (pointer == field) return true;
  for (const Container& c : kContainers)
    if (pointer.starts_with(c.field) && names_a_member(c, pointer.substr(std::string_view(c.field).size())))
      return true;
  return false;
}

std::string status_page_fields() {
  std::string list;
  for (const char* field : kFields) list += (list.empty() ? "" : ", ") + std::string(field);
  return list;
}

Result<std::string> status_page_field(const nlohmann::json& page, const std::string& pointer,
                                      const std::string& source) {
  const auto missing = [&] {
    return Status::Error(StatusCode::mismatch, source + ": the status page has no " + pointer +
                                                   " (a field of another mode, or a module older than this command)");
  };
  nlohmann::json::json_pointer p;
  try {
    p = nlohmann::json::json_pointer(pointer);
  } catch (const nlohmann::json::exception&) {
    return missing();  // not a pointer at all: is_status_page_field refused it before
  }
  // contains() throws for an array index that is not a number ("/rounds/live_workers/x").
  bool has = false;
  try {
    has = page.contains(p);
  } catch (const nlohmann::json::exception&) {
    has = false;
  }
  if (!has) return missing();
  const nlohmann::json& value = page[p];
  return value.is_string() ? value.get<std::string>() : value.dump();
}

Result<nlohmann::json> parse_status_page(std::string_view text, const std::string& source) {
  text = text.substr(0, text.find('\0'));  // the status LU pads the page with NULs
  nlohmann::json page = nlohmann::json::parse(text, nullptr, false);
  if (page.is_discarded() || !page.is_object())
    return Status::Error(StatusCode::mismatch,
                         source + ": not a status page (not a JSON object; is this a blockps status LU?)");
  return page;
}

}  // namespace blockps::cli
