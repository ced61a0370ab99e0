#include "ps_backend/shard/served_lu.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <vector>

#include "contract/log.h"
#include "ps_backend/control/status_page_writer.h"

namespace blockps {
namespace {

using namespace scsi;

bool is_verify(std::uint8_t op) { return op == kVerify10 || op == kVerify12 || op == kVerify16; }

// What an LU of each role serves: the one place that says it (indexed by LuRole).
struct RoleBehaviour {
  enum class Reads { weights, status_page } reads;
  enum class Writes { push, assign, control } writes;
  // WRITE AND VERIFY: the data read back is what was written (a grad LU's READ gives weights, never the
  // gradient it was sent).
  bool verifies_writes;
  // WRITE SAME and ORWRITE rewrite weights in place: served (GOOD) on the weights LU, else refused this way.
  LuOutcome rewrite_refusal;
};
const RoleBehaviour kRoleBehaviour[] = {
    /* grad */ {RoleBehaviour::Reads::weights, RoleBehaviour::Writes::push, false,
                check_condition(kIllegalRequest, kAscInvalidOpcode)},
    /* weights */ {RoleBehaviour::Reads::weights, RoleBehaviour::Writes::assign, true, good()},
    /* status */
    {RoleBehaviour::Reads::status_page, RoleBehaviour::Writes::control, true,
     check_condition(kDataProtect, kAscWriteProtect)},
};
const RoleBehaviour& behaviour_of(LuRole role) { return kRoleBehaviour[static_cast<std::size_t>(role)]; }

std::uint64_t get_be(const std::uint8_t* p, int bytes) {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v = v << 8 | p[i];
  return v;
}

void put_be(std::byte* p, std::uint64_t v, int bytes) {
  for (int i = bytes - 1; i >= 0; --i, v >>= 8) p[i] = static_cast<std::byte>(v & 0xff);
}

}  // namespace

ServedLu::ServedLu(LuRole role, std::shared_ptr<ServedShard> shard, std::uint32_t lu_block_bytes,
                   std::vector<std::string> admins)
    : role_(role),
      shard_(std::move(shard)),
      lu_block_bytes_(lu_block_bytes),
      admission_(role, *shard_, std::move(admins)) {}

bool ServedLu::runs_on_caller(bool write, std::uint64_t len, std::uint32_t limit) const {
  if (limit == 0 || len > limit || role_ == LuRole::status) return false;
  const ModelShard& model = shard_->model();
  if (model.device().is_gpu()) return false;
  return !write || !shard_->holds_commands(role_) || model.geometry().block_bytes <= limit;
}

std::uint64_t ServedLu::capacity_bytes() const {
  return behaviour_of(role_).reads == RoleBehaviour::Reads::status_page ? kStatusLuBytes
                                                                        : shard_->model().geometry().bytes;
}

LuOutcome ServedLu::execute(const TargetCommand& cmd) {
  try {
    const std::uint8_t op = cmd.cdb[0];
    const AdmissionVerdict* admitted = AdmissionGate::concerns(role_, op) ? cmd.admitted : nullptr;
    if (admitted) {
      if (const std::optional<LuOutcome> refusal = admitted->answer()) return *refusal;
    } else if (admission_.checks_writers() && writes_data(op)) {
      return access_denied();  // a control write the gate never saw has no known sender: nothing fails open
    }
    const WorkerRef* sender = admitted ? &admitted->sender : nullptr;
    if (is_read(op)) {
      const std::size_t len = std::min<std::size_t>(cmd.transfer_length, cmd.in.size());
      return read(cmd.offset, cmd.in.first(len));
    }
    if (writes_data(op)) {
      if (is_write_verify(op) && !behaviour_of(role_).verifies_writes)
        return check_condition(kIllegalRequest, kAscInvalidOpcode);
      const std::size_t len = std::min<std::size_t>(cmd.transfer_length, cmd.out.size());
      const bool fua = forces_unit_access(cmd.cdb);
      const LuOutcome w = write(cmd.offset, cmd.out.first(len), fua, cmd.handle, sender);
      return (w.status != kGood || !is_write_verify(op)) ? w : verify(cmd.offset, cmd.out.first(len));
    }
    if (is_verify(op)) {
      // BYTCHK (byte 1, bits 1-2): 00b nothing to compare in memory; 01b the data sent is the range; 11b one
      // block sent, compared with every block of the range (tgt lets 01b and 11b through and does not set the
      // transfer length: the range comes from the CDB).
      const std::uint8_t bytchk = (cmd.cdb[1] >> 1) & 0x03;
      if (bytchk == 0 || cmd.out.empty()) return good();
      if (bytchk == 0x01) return verify(cmd.offset, cmd.out);
      if (bytchk != 0x03 || cmd.out.size() < lu_block_bytes_)
        return check_condition(kIllegalRequest, kAscInvalidFieldInCdb);
      const std::uint64_t blocks = op == kVerify10   ? get_be(cmd.cdb + 7, 2)
                                   : op == kVerify12 ? get_be(cmd.cdb + 6, 4)
                                                     : get_be(cmd.cdb + 10, 4);
      for (std::uint64_t b = 0; b < blocks; ++b)
        if (LuOutcome r = verify(cmd.offset + b * lu_block_bytes_, cmd.out.first(lu_block_bytes_)); r.status != kGood)
          return r;
      return good();
    }
    switch (op) {
      case kWriteSame10:
      case kWriteSame16:
        return write_same(cmd);
      case kOrWrite16:
        return or_write(cmd);
      case kPreFetch10:
      case kPreFetch16:
        return good();  // everything is in memory already
      case kSynchronizeCache10:
      case kSynchronizeCache16:
        return synchronize_cache(cmd);
      default:
        return check_condition(kIllegalRequest, kAscInvalidOpcode);
    }
  } catch (...) {
    shard_->counters().io_errors.fetch_add(1, std::memory_order_relaxed);
    try {
      throw;
    } catch (const std::exception& e) {
      log_line_noexcept("command failed: ", e.what());
    } catch (...) {
      log_line_noexcept("command failed: ", "unknown exception");
    }
    return target_failure();
  }
}

LuOutcome ServedLu::read(std::uint64_t offset, std::span<std::byte> out) {
  if (offset > capacity_bytes() || out.size() > capacity_bytes() - offset)
    return check_condition(kIllegalRequest, kAscLbaOutOfRange);
  if (behaviour_of(role_).reads == RoleBehaviour::Reads::status_page) {
    // The page is made afresh for each READ; read it in one command (it is far smaller than the LU).
    const std::string page = render_status_page(*shard_);
    std::fill(out.begin(), out.end(), std::byte{0});
    // A READ of no blocks may come without a buffer: memcpy must not see its null pointer (found by fuzz_command).
    if (offset < page.size() && !out.empty()) {
      const std::size_t n = std::min<std::size_t>(out.size(), page.size() - offset);
      std::memcpy(out.data(), page.data() + offset, n);
    }
    return good();
  }
  const std::size_t esize = wire_size(shard_->model().geometry().dtype);
  if (offset % esize || out.size() % esize) return check_condition(kIllegalRequest, kAscInvalidFieldInCdb);
  return shard_->pull(offset, out, role_);
}

LuOutcome ServedLu::write(std::uint64_t offset, std::span<const std::byte> data, bool fua, const void* handle,
                          const WorkerRef* sender) {
  const RoleBehaviour::Writes meaning = behaviour_of(role_).writes;
  if (meaning == RoleBehaviour::Writes::control) return control(data, sender);
  if (offset > capacity_bytes() || data.size() > capacity_bytes() - offset)
    return check_condition(kIllegalRequest, kAscLbaOutOfRange);
  const std::size_t esize = wire_size(shard_->model().geometry().dtype);
  if (offset % esize || data.size() % esize) return check_condition(kIllegalRequest, kAscInvalidFieldInCdb);
  if (data.empty()) return good();  // a WRITE of 0 blocks is no push
  return meaning == RoleBehaviour::Writes::push ? shard_->push(offset, data, handle, fua)
                                                : shard_->assign(offset, data, fua);
}

LuOutcome ServedLu::control(std::span<const std::byte> data, const WorkerRef* sender) {
  const std::string_view text(reinterpret_cast<const char*>(data.data()), data.size());
  if (blockps::Status obeyed = shard_->control(text, sender); !obeyed.ok()) {
    // A line that is wrong is the writer's error; a checkpoint it asked for that cannot be written is the
    // medium's, as for SYNCHRONIZE CACHE.
    if (obeyed.code() != StatusCode::invalid_argument) {
      log_line(shard_->path() + ": control failed: " + obeyed.message());
      return check_condition(kMediumError, kAscWriteError);
    }
    log_line(shard_->path() + ": refused " + obeyed.message());
    return check_condition(kIllegalRequest, kAscInvalidFieldInParameterList);
  }
  return good();
}

LuOutcome ServedLu::verify(std::uint64_t offset, std::span<const std::byte> expected) {
  std::vector<std::byte> actual(expected.size());
  if (LuOutcome r = read(offset, actual); r.status != kGood) return r;
  // VERIFY of no blocks has no buffers (null data): memcmp must not see them (UBSan, tests/integration conformance).
  if (!expected.empty() && std::memcmp(actual.data(), expected.data(), expected.size()) != 0)
    return check_condition(kMiscompare, kAscMiscompareDuringVerify);
  return good();
}

LuOutcome ServedLu::write_same(const TargetCommand& cmd) {
  if (const LuOutcome& refusal = behaviour_of(role_).rewrite_refusal; refusal.status != kGood) return refusal;
  const std::uint64_t cap = capacity_bytes();
  if (cmd.offset > cap) return check_condition(kIllegalRequest, kAscLbaOutOfRange);
  // The length comes from the CDB: tgt's transfer length is 32 bits and wraps for WRITE SAME(16) of 4 GiB or
  // more. NUMBER OF LOGICAL BLOCKS 0 means "to the end of the LU".
  const std::uint64_t blocks = cmd.cdb[0] == kWriteSame10 ? get_be(cmd.cdb + 7, 2) : get_be(cmd.cdb + 10, 4);
  const std::uint64_t total = blocks ? blocks * lu_block_bytes_ : cap - cmd.offset;
  if (total > cap - cmd.offset) return check_condition(kIllegalRequest, kAscLbaOutOfRange);
  const bool unmap = cmd.cdb[1] & 0x08;
  const std::uint8_t lbdata = cmd.cdb[1] & 0x06;  // 0x02 LBDATA, 0x04 PBDATA: stamp each block's LBA
  std::vector<std::byte> pattern(lu_block_bytes_, std::byte{0});
  if (!unmap && cmd.out.size() >= lu_block_bytes_) std::memcpy(pattern.data(), cmd.out.data(), lu_block_bytes_);

  // Expand into a bounded buffer and assign it piecewise.
  constexpr std::uint64_t kChunk = 1 << 20;
  std::vector<std::byte> chunk(static_cast<std::size_t>(std::min<std::uint64_t>(kChunk, total)));
  for (std::uint64_t done = 0; done < total;) {
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(chunk.size(), total - done));
    for (std::size_t b = 0; b < n; b += lu_block_bytes_) {
      std::memcpy(chunk.data() + b, pattern.data(), lu_block_bytes_);
      const std::uint64_t lba = (cmd.offset + done + b) / lu_block_bytes_;
      if (!unmap && lbdata == 0x02) put_be(chunk.data() + b, lba, 4);
      if (!unmap && lbdata == 0x04) put_be(chunk.data() + b, lba, 8);
    }
    if (LuOutcome r = write(cmd.offset + done, {chunk.data(), n}, false); r.status != kGood) return r;
    done += n;
  }
  return good();
}

LuOutcome ServedLu::or_write(const TargetCommand& cmd) {
  if (const LuOutcome& refusal = behaviour_of(role_).rewrite_refusal; refusal.status != kGood) return refusal;
  const std::size_t len = std::min<std::size_t>(cmd.transfer_length, cmd.out.size());
  std::vector<std::byte> merged(len);
  if (LuOutcome r = read(cmd.offset, merged); r.status != kGood) return r;
  for (std::size_t i = 0; i < len; ++i) merged[i] |= cmd.out[i];
  return write(cmd.offset, merged, false);
}

LuOutcome ServedLu::synchronize_cache(const TargetCommand& cmd) {
  // IMMED (byte 1 bit 1) asks for completion before the data is durable; a checkpoint cannot promise that
  // afterwards, so it is refused as tgt's rdwr does.
  if (cmd.cdb[1] & 0x02) return check_condition(kIllegalRequest, kAscInvalidFieldInCdb);
  if (!shard_->checkpoint().ok()) return check_condition(kMediumError, kAscWriteError);
  return good();
}

}  // namespace blockps
