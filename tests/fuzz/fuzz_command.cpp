// libFuzzer target: what an initiator sends a shard, driven through the tgt glue (bs_blockps.c with tgt stubbed, as
// its unit test runs it: tests/unit/ps_backend/tgt_glue/bs_blockps_ut.h) into the real core. Per input, a new shard
// with its grad, weights and status LU in the mode the first bytes choose (async with an optimizer, sync, averaging, or
// ssp:K), then a sequence of commands from a few sessions (any opcode, LBA, transfer length, FUA and data, also
// out of range and misaligned), aborts, sessions ending, tgt's I/O pool running in any order, wakes, path changes
// of an LU, and a store that fails its updates. Nothing an initiator sends may crash, hang or corrupt the shard,
// so after each input it checks (and traps otherwise):
// - every command completed exactly once (or was refused at submission: tgt answers it), GOOD without sense, CHECK
//   CONDITION with sense or RESERVATION CONFLICT without, none the glue held back ran GOOD, and none kept its
//   admission record (which the glue keeps in the command's sense buffer) past its answer;
// - no command stays parked past its LU's close, nor, with worker_timeout_ms=100, past its deadline;
// - no block took more optimizer steps than WRITEs reached the grad LU for it, a block no WRITE reached (grad or
//   weights LU) holds the weights it started with, and a READ of the weights LU returns what the shard holds.
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "ps_backend/config/lu_options.h"
#include "ps_backend/shard/shard_registry.h"
#include "tests/fuzz/fuzz_dir.h"
#include "tests/support/faulty_store.h"
#include "tests/unit/ps_backend/tgt_glue/bs_blockps_ut.h"

namespace {

constexpr std::uint32_t kShardBytes = 16 * 1024, kBlockBytes = 4 * 1024;  // four aggregation blocks
constexpr std::uint32_t kMaxData = 64 * 1024;  // a data buffer's largest size (the status LU is 1 MiB)
constexpr std::size_t kMaxCommands = 48, kMaxActions = 256, kMaxSessionEnds = 32;
constexpr std::uint32_t kStatusLuBytes = 1 << 20;
enum Role { kGrad, kWeights, kStatus, kRoles };
const char* const kRoleNames[kRoles] = {"grad", "weights", "status"};

// SAM status codes as tgt's target_cmd_io_done gets them.
constexpr int kGood = 0x00, kCheckCondition = 0x02, kReservationConflict = 0x18;

// The opcodes an initiator sends a block device most (tgt's opcode numbers); any other byte is sent as well.
constexpr std::uint8_t kRead6 = 0x08, kWrite6 = 0x0a, kRead10 = 0x28, kWrite10 = 0x2a, kWriteVerify10 = 0x2e,
                       kVerify10 = 0x2f, kPreFetch10 = 0x34, kSyncCache10 = 0x35, kWriteSame10 = 0x41, kUnmap = 0x42,
                       kCompareAndWrite = 0x89, kOrWrite16 = 0x8b, kRead16 = 0x88, kWrite16 = 0x8a,
                       kWriteVerify16 = 0x8e, kVerify16 = 0x8f, kPreFetch16 = 0x90, kSyncCache16 = 0x91,
                       kWriteSame16 = 0x93, kRead12 = 0xa8, kWrite12 = 0xaa, kWriteVerify12 = 0xae, kVerify12 = 0xaf,
                       kTestUnitReady = 0x00;
constexpr std::array<std::uint8_t, 25> kOpcodes = {
    kRead10,        kWrite10,       kRead6,         kWrite6,         kRead16,      kWrite16,    kRead12,
    kWrite12,       kRead10,        kWrite10,       kSyncCache10,    kSyncCache16, kUnmap,      kWriteSame10,
    kWriteSame16,   kOrWrite16,     kVerify10,      kVerify12,       kVerify16,    kPreFetch10, kPreFetch16,
    kWriteVerify10, kWriteVerify12, kWriteVerify16, kCompareAndWrite};

bool reads(std::uint8_t op) { return op == kRead6 || op == kRead10 || op == kRead12 || op == kRead16; }
bool sends_data(std::uint8_t op) {
  return !reads(op) && op != kTestUnitReady && op != kSyncCache10 && op != kSyncCache16;
}
bool write_same(std::uint8_t op) { return op == kWriteSame10 || op == kWriteSame16; }
bool writes(std::uint8_t op) {
  return op == kWrite6 || op == kWrite10 || op == kWrite12 || op == kWrite16 || op == kWriteVerify10 ||
         op == kWriteVerify12 || op == kWriteVerify16;
}
// Whether the core may change weights for it: every opcode but those that only read, compare or flush.
bool changes_weights(std::uint8_t op) {
  return !reads(op) && op != kTestUnitReady && op != kSyncCache10 && op != kSyncCache16 && op != kVerify10 &&
         op != kVerify12 && op != kVerify16 && op != kPreFetch10 && op != kPreFetch16;
}

// The CDB's size from its group code (SPC-4 4.2.5.1).
std::size_t cdb_bytes(std::uint8_t op) {
  switch (op >> 5) {
    case 0:
      return 6;
    case 1:
    case 2:
      return 10;
    case 5:
      return 12;
    default:
      return 16;
  }
}

void put_be(std::uint8_t* p, std::uint64_t v, int bytes) {
  for (int i = bytes - 1; i >= 0; --i, v >>= 8) p[i] = static_cast<std::uint8_t>(v);
}

// Sets the LBA and block count where a CDB of this size holds them (READ/WRITE layout).
void put_lba_blocks(std::uint8_t* cdb, std::size_t len, std::uint64_t lba, std::uint32_t blocks) {
  switch (len) {
    case 6:
      cdb[1] = static_cast<std::uint8_t>((cdb[1] & 0xe0) | ((lba >> 16) & 0x1f));
      put_be(cdb + 2, lba, 2);
      cdb[4] = static_cast<std::uint8_t>(blocks);
      break;
    case 10:
      put_be(cdb + 2, lba, 4);
      put_be(cdb + 7, blocks, 2);
      break;
    case 12:
      put_be(cdb + 2, lba, 4);
      put_be(cdb + 6, blocks, 4);
      break;
    default:
      put_be(cdb + 2, lba, 8);
      put_be(cdb + 10, blocks, 4);
      break;
  }
}

// The input, read from the front; past its end every byte is 0.
class Bytes {
 public:
  Bytes(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}
  bool empty() const { return at_ >= size_; }
  std::uint8_t u8() { return at_ < size_ ? data_[at_++] : 0; }
  std::uint16_t u16() { return static_cast<std::uint16_t>(u8() << 8 | u8()); }
  // Up to `n` bytes (fewer at the end: the caller's buffer stays zero there).
  std::pair<const std::uint8_t*, std::size_t> take(std::size_t n) {
    const std::size_t got = std::min(n, size_ - std::min(at_, size_));
    const std::uint8_t* p = data_ + std::min(at_, size_);
    at_ += got;
    return {p, got};
  }

 private:
  const std::uint8_t* data_;
  std::size_t size_, at_ = 0;
};

struct Scratch {
  blockps::fuzz::FuzzDir dir{"command", "/dev/shm"};
  std::string shard = dir.path + "/model.ckpt";
  std::string fault = dir.path + "/fail-updates";
  Scratch() {
    // Every shard's store fails its optimizer updates while `fault` exists (an input that asks for a failing store).
    blockps::ShardRegistry::instance().wrap_stores([file = fault](std::unique_ptr<blockps::ShardStore> store) {
      return blockps::make_faulty_store(std::move(store), file);
    });
  }
  // Nothing of the previous input: no checkpoint to load, no store failing.
  void clear() const {
    for (const std::string& p : {shard, shard + ".tmp", shard + ".lock", fault}) ::unlink(p.c_str());
  }
};

Scratch& scratch() {
  static Scratch s;
  return s;
}

// What the first two bytes choose.
struct Setup {
  std::string bsopts;  // without role=
  unsigned blk_shift = 9;
  bool admins = false, may_fail = false, deadline = false, holds_commands = false;
};

Setup choose(Bytes& in) {
  const std::uint8_t a = in.u8(), b = in.u8(), c = in.u8();
  static const char* const kOptimizers[] = {"sgd", "momentum", "adam", "adamw", "sum"};
  static const char* const kDtypes[] = {"f32", "bf16", "f16", "f32"};
  Setup s;
  s.blk_shift = (a & 0x10) ? 12 : 9;
  s.admins = a & 0x20;
  s.may_fail = a & 0x40;
  std::string rounds =
      ";workers=2;min_workers=" + std::to_string(1 + ((b >> 3) & 1)) + ";push_lead=" + std::to_string((b >> 4) & 3);
  // worker_timeout_ms's least (100 ms): parked commands end by their deadline, which the drain waits for.
  s.deadline = a & 0x80;
  rounds += s.deadline ? ";straggler_ms=1;worker_timeout_ms=100" : ";straggler_ms=600000;worker_timeout_ms=600000";
  std::string mode;
  switch (a & 3) {
    case 0:
      mode = std::string("opt=") + kOptimizers[b % 5];
      break;
    case 1:
      mode = std::string("opt=") + kOptimizers[b % 5] + ";mode=sync" + rounds;
      break;
    case 2:
      mode = "opt=average;mode=sync" + rounds;
      break;
    default:
      mode = std::string("opt=") + kOptimizers[b % 5] + ";mode=ssp:" + std::to_string(b >> 6) + rounds;
      break;
  }
  s.holds_commands = (a & 3) != 0;
  s.deadline = s.deadline && s.holds_commands;
  s.bsopts = "size=16K;block=4K;dtype=" + std::string(kDtypes[(a >> 2) & 3]) + ";" + mode + ";checkpoint_s=0" +
             ((b & 0x40) ? ";init=uniform:1;seed=" + std::to_string(b & 7) : "") +
             // Commands on tgt's main thread (every command here is at most 16K) or all in the I/O pool.
             ((c & 1) ? "" : ";main_thread_bytes=0");
  return s;
}

[[noreturn]] void violated(const char* what) {
  std::fprintf(stderr, "fuzz_command: invariant violated: %s\n", what);
  __builtin_trap();
}

void require(bool ok, const char* what) {
  if (!ok) violated(what);
}

// One command as the fuzzer sent it, and what it may have changed.
struct Sent {
  ut_cmd* cmd;
  Role role;
  std::uint8_t op;
  int submitted;              // bs_cmd_submit's return: non-zero, tgt answered it itself
  std::uint64_t first, last;  // the shard bytes it may write: [first, last)
  bool checked = false;       // its fate was checked (before its memory was reused)
};

class Run {
 public:
  explicit Run(const Setup& setup) : setup_(setup) {}
  ~Run() {
    for (ut_lu* lu : lus_)
      if (lu) ut_lu_delete(lu);
    for (Sent& s : sent_) ut_cmd_free(s.cmd);
  }

  // The three LUs, as tgtadm creates them; false when the options are refused (not a finding: the input chose them).
  bool open() {
    for (int r = 0; r < kRoles; ++r) {
      std::string opts = std::string("role=") + kRoleNames[r] + ";" + setup_.bsopts;
      if (r == kStatus && setup_.admins) opts += ";admins=iqn.2024-01.test:worker-1";
      ut_lu* lu = ut_lu_new(opts.c_str(), setup_.blk_shift, nullptr);
      if (!lu || ut_lu_attach(lu, scratch().shard.c_str()) != 0) return false;
      lus_[r] = lu;
    }
    // Held only while reading: an LU's path change must be able to end the shard.
    const std::shared_ptr<blockps::ServedShard> shard = attached_shard();
    if (!shard) return false;
    initial_.resize(kShardBytes);
    shard->model().read_weights(0, {reinterpret_cast<std::byte*>(initial_.data()), initial_.size()});
    return true;
  }

  void act(Bytes& in) {
    for (std::size_t n = 0; n < kMaxActions && !in.empty(); ++n) {
      const std::uint8_t action = in.u8();
      switch (action % 16) {
        case 9:
          ut_run_pool();
          break;
        case 10:
          ut_run_pool_one(in.u8());
          break;
        case 11:
          ut_lu_wake(lus_[kGrad]);
          break;
        case 12:
          if (!sent_.empty()) ut_abort(sent_[in.u8() % sent_.size()].cmd);
          break;
        case 13:
          end_session(in.u8() % 3);
          break;
        case 14:
          // A path change: tgt closes and opens the LU whatever is in flight on it.
          if (ut_lu_reopen(lus_[in.u8() % kRoles]) != 0) violated("an LU's path change to the same path was refused");
          break;
        case 15:
          if (setup_.may_fail) toggle_fault();
          break;
        default:
          send(in, action);
          break;
      }
    }
  }

  // Everything in flight ends: the pool runs, the wake handler hands parked commands back, and, with a short
  // worker_timeout_ms, those left wait for their deadline; then each LU is deleted as tgt deletes it.
  void drain_and_check() {
    drain();
    check_shard();
    for (ut_lu*& lu : lus_) {
      ut_lu_delete(lu);
      lu = nullptr;
    }
    require(!ut_wake_fd_watched(), "an fd is still watched after every LU was deleted");
    require(ut_pool_queued() == 0, "a command was queued to the I/O pool by an LU's close");
    for (Sent& s : sent_) check_fate(s);
  }

 private:
  std::shared_ptr<blockps::ServedShard> attached_shard() const {
    const auto opts = blockps::parse_lu_options("role=status", 512);
    auto attached = blockps::ShardRegistry::instance().attach(scratch().shard, opts.value());
    return attached.ok() ? std::move(attached).value() : nullptr;
  }

  void end_session(unsigned slot) {
    if (session_ends_ == kMaxSessionEnds) return;
    ++session_ends_;
    ut_end_session(sessions_[slot]);
    sessions_[slot] = next_session_++;  // the worker's next session (tgt never reuses an I_T nexus id)
  }

  void toggle_fault() {
    const std::string& f = scratch().fault;
    if (::access(f.c_str(), F_OK) == 0) {
      ::unlink(f.c_str());
    } else if (std::FILE* file = std::fopen(f.c_str(), "w")) {
      std::fclose(file);
    }
  }

  // target: bits 0-1 the LU (3: grad), 2-3 the session slot (3: the first), 4 reuse a finished command's memory,
  // 5 the data direction flipped, 6 LBA and length as they come (else reduced to the LU's size and a few blocks).
  void send(Bytes& in, std::uint8_t action) {
    const std::uint8_t target = in.u8();
    const Role role = static_cast<Role>((target & 3) == 3 ? kGrad : target & 3);
    const std::uint64_t itn = sessions_[((target >> 2) & 3) == 3 ? 0 : (target >> 2) & 3];
    const std::uint8_t pick = in.u8();
    const std::uint8_t op = pick < 0xe0 ? kOpcodes[pick % kOpcodes.size()] : in.u8();
    const std::size_t len = cdb_bytes(op);
    std::uint8_t cdb[16] = {op};
    const auto [fields, got] = in.take(len - 1);
    std::copy_n(fields, got, cdb + 1);
    const std::uint32_t lu_block = 1u << setup_.blk_shift;
    const std::uint64_t lu_blocks = (role == kStatus ? kStatusLuBytes : kShardBytes) / lu_block;
    std::uint32_t blocks = 0;
    if (!(target & 0x40)) {
      const std::uint64_t lba = in.u16() % (lu_blocks + 2);
      blocks = static_cast<std::uint32_t>(in.u8() % (kMaxData / lu_block / 2 + 2));
      put_lba_blocks(cdb, len, lba, blocks);
    }
    // Data: as much as the CDB asks for (at most kMaxData), or a length of its own (the iSCSI expected length
    // differs from the CDB's), the bytes from the input.
    const std::uint8_t sizing = in.u8();
    std::uint32_t data_len = write_same(op) ? lu_block : std::min<std::uint32_t>(blocks * lu_block, kMaxData);
    if (sizing >= 0xc0) data_len = (sizing & 0x3f) * 256u;
    const bool out = sends_data(op) != ((target & 0x20) != 0);
    std::vector<std::uint8_t> data(data_len);
    if (out) {
      const auto [bytes, n] = in.take(data_len);
      std::copy_n(bytes, n, data.begin());
    }

    ut_cmd* reuse = nullptr;
    if ((target & 0x10) && !sent_.empty()) {
      Sent& old = sent_[action % sent_.size()];
      if (old.submitted != 0 || ut_cmd_fate(old.cmd).completed == 1) {
        check_fate(old);  // tgt frees it now: its fate is final
        reuse = old.cmd;
        old = sent_.back();
        sent_.pop_back();
      }
    }
    if (!reuse && sent_.size() == kMaxCommands) return;
    ut_cmd* cmd = ut_cmd_new_cdb(lus_[role], itn, cdb, len, data.data(), data_len, out ? 1 : 0, reuse);
    Sent s{cmd, role, op, 0, 0, 0};
    if (role != kStatus && changes_weights(op)) {
      // What it may change: a WRITE its range (the offset tgt gives, as far as any of its lengths reach); anything
      // else (WRITE SAME recomputes its length from the CDB, opcodes the core refuses) the whole shard.
      std::uint64_t offset = 0, reach = kShardBytes;
      if (writes(op)) {
        offset = lba_of(cdb, len) * lu_block;
        reach = std::max<std::uint64_t>(std::uint64_t{blocks_of(cdb, len)} * lu_block, data_len);
      }
      s.first = std::min<std::uint64_t>(offset, kShardBytes);
      s.last = std::min<std::uint64_t>(kShardBytes, s.first + reach);
    }
    s.submitted = ut_submit(cmd);
    sent_.push_back(s);
  }

  static std::uint64_t lba_of(const std::uint8_t* cdb, std::size_t len) {
    std::uint64_t v = 0;
    switch (len) {
      case 6:
        return (std::uint64_t{cdb[1] & 0x1fu} << 16) | cdb[2] << 8 | cdb[3];
      case 10:
      case 12:
        for (int i = 2; i < 6; ++i) v = v << 8 | cdb[i];
        return v;
      default:
        for (int i = 2; i < 10; ++i) v = v << 8 | cdb[i];
        return v;
    }
  }

  static std::uint32_t blocks_of(const std::uint8_t* cdb, std::size_t len) {
    switch (len) {
      case 6:
        return cdb[4] ? cdb[4] : 256;
      case 10:
        return static_cast<std::uint32_t>(cdb[7] << 8 | cdb[8]);
      case 12:
        return static_cast<std::uint32_t>(cdb[6]) << 24 | cdb[7] << 16 | cdb[8] << 8 | cdb[9];
      default:
        return static_cast<std::uint32_t>(cdb[10]) << 24 | cdb[11] << 16 | cdb[12] << 8 | cdb[13];
    }
  }

  std::size_t outstanding() const {
    std::size_t n = 0;
    for (const Sent& s : sent_)
      if (s.submitted == 0 && ut_cmd_fate(s.cmd).completed == 0) ++n;
    return n;
  }

  void drain() {
    using Clock = std::chrono::steady_clock;
    // worker_timeout_ms=100, then the keeper's tick (50 ms) and its wake period (200 ms): a command parked longer
    // than this outlived its deadline.
    const auto give_up = Clock::now() + std::chrono::milliseconds(setup_.deadline ? 1000 : 0);
    for (int round = 0;; ++round) {
      const int ran = ut_run_pool();
      ut_wake();
      const std::size_t left = outstanding();
      if (left == 0 && ut_pool_queued() == 0) return;
      if (ran > 0 || ut_pool_queued() > 0) {
        require(round < 10000, "the pool and the wake handler pass commands back and forth without end");
        continue;
      }
      if (Clock::now() >= give_up) {
        require(!setup_.deadline, "a command stayed parked past worker_timeout_ms=100");
        return;  // parked for a round that did not close: the LU's close must end them
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }

  void check_fate(Sent& s) {
    if (s.checked) return;
    s.checked = true;
    const ut_fate f = ut_cmd_fate(s.cmd);
    if (s.submitted != 0) {
      // Refused at submission: tgt answers it (HARDWARE ERROR); the glue must not hold or complete it as well.
      require(!f.async && f.queued == 0 && f.completed == 0, "a command refused at submission was also taken");
      return;
    }
    require(f.async || f.ran_here, "a command the store took was neither asynchronous nor completed at submission");
    require(!f.ran_here || (f.executed == 1 && f.result == kGood),
            "a command completed at submission did not run, or was answered other than GOOD");
    require(f.completed == 1, f.completed == 0 ? "a command never completed" : "a command completed twice");
    require(f.pool_runs == f.queued, "a command queued to the I/O pool did not run exactly once per queueing");
    require(f.executed <= 1, "a command ran twice");
    require(f.sense_left == 0, "the glue left its admission record in an answered command's sense buffer");
    switch (f.result) {
      case kGood:
        require(!f.sense_built, "a GOOD answer carries sense data");
        require(f.executed == 1, "a command the glue held back was answered GOOD without running");
        break;
      case kCheckCondition:
        require(f.sense_built && f.sense_key != 0, "a CHECK CONDITION without sense data");
        break;
      case kReservationConflict:
        require(!f.sense_built, "a RESERVATION CONFLICT with sense data");
        break;
      default:
        violated("a command answered with a status blockps never gives");
    }
    if (f.executed > 0 && s.role != kStatus) {
      for (std::uint64_t b = s.first / kBlockBytes; s.first < s.last && b <= (s.last - 1) / kBlockBytes; ++b) {
        if (s.role == kGrad) ++pushes_[b];
        touched_[b] = true;
      }
    }
  }

  // With everything drained and every LU attached: steps, untouched weights, and the weights LU's READ.
  void check_shard() {
    for (Sent& s : sent_)
      if (s.submitted != 0 || ut_cmd_fate(s.cmd).completed == 1) check_fate(s);
    std::shared_ptr<blockps::ServedShard> shard = attached_shard();
    require(shard != nullptr, "the shard cannot be attached after the input");
    std::vector<std::uint8_t> now(kShardBytes);
    shard->model().read_weights(0, {reinterpret_cast<std::byte*>(now.data()), now.size()});
    for (std::uint64_t b = 0; b < kShardBytes / kBlockBytes; ++b) {
      // Commands still parked never ran, so they changed nothing yet; they fail at the LUs' close.
      require(shard->model().block_step(b) <= pushes_[b], "a block took more optimizer steps than pushes reached it");
      if (!touched_[b])
        require(std::equal(now.begin() + b * kBlockBytes, now.begin() + (b + 1) * kBlockBytes,
                           initial_.begin() + b * kBlockBytes),
                "the weights of a block no WRITE reached changed");
    }
    const std::uint8_t read10[10] = {kRead10,
                                     0,
                                     0,
                                     0,
                                     0,
                                     0,
                                     0,
                                     static_cast<std::uint8_t>((kShardBytes >> setup_.blk_shift) >> 8),
                                     static_cast<std::uint8_t>(kShardBytes >> setup_.blk_shift)};
    ut_cmd* read = ut_cmd_new_cdb(lus_[kWeights], 99, read10, sizeof read10, nullptr, kShardBytes, 0, nullptr);
    const int submitted = ut_submit(read);
    ut_run_pool();
    const ut_fate f = ut_cmd_fate(read);
    std::vector<std::uint8_t> expected(kShardBytes);
    shard->model().read_weights(0, {reinterpret_cast<std::byte*>(expected.data()), expected.size()});
    require(submitted == 0 && f.completed == 1 && f.result == kGood, "a READ of the whole weights LU failed");
    require(std::equal(expected.begin(), expected.end(), ut_cmd_data(read)),
            "a READ of the weights LU differs from the shard's weights");
    ut_cmd_free(read);
  }

  const Setup setup_;
  std::array<ut_lu*, kRoles> lus_{};
  std::vector<std::uint8_t> initial_;
  std::vector<Sent> sent_;
  std::uint64_t sessions_[3] = {1, 2, 3};
  std::uint64_t next_session_ = 4;
  std::size_t session_ends_ = 0;
  std::array<std::uint64_t, kShardBytes / kBlockBytes> pushes_{};
  std::array<bool, kShardBytes / kBlockBytes> touched_{};
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  scratch().clear();
  ut_reset();
  Bytes in(data, size);
  const Setup setup = choose(in);
  Run run(setup);
  if (!run.open()) return 0;
  run.act(in);
  run.drain_and_check();
  return 0;
}
