// The posix transport: a block device (or a file standing in for one) opened with O_DIRECT. The page cache
// must not sit in this path: through it, a read after a push would return our own gradient instead of the PS's
// weights. O_DIRECT needs aligned memory; commands whose segments are not aligned go through a bounce buffer.
#include <fcntl.h>
#include <libaio.h>
#include <liburing.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <vector>

#include "client/transport/aligned_buffer.h"
#include "client/transport/command_order.h"
#include "client/transport/lu_transport.h"
#include "contract/scsi_codes.h"

namespace blockps {
namespace {

constexpr std::uint32_t kFileBlockSize = 512;  // a regular file standing in for a device: 512-byte sectors

std::string errno_text(int err) { return errno_message(err) + " (errno " + std::to_string(err) + ")"; }

// A command the kernel failed with `err`. Linux's block layer reports a SCSI RESERVATION CONFLICT as EBADE
// (BLK_STS_RESV_CONFLICT, which sd fails at once without retries): the shard is held by another job.
LuFailure errno_failure(std::size_t command, int err) {
  if (err == EBADE)
    return LuFailure::answered(command, scsi::kReservationConflict, 0,
                               "RESERVATION CONFLICT (" + errno_text(err) + ")");
  return LuFailure::io(command, errno_text(err));
}

// One command ready for the kernel: the iovecs it transfers, and a bounce buffer when the caller's memory
// could not be used as it is.
struct PreparedCommand {
  std::size_t index = 0;
  // A bounced READ's segments, where its bytes go when it completes (a copy: the batch's vector of commands may
  // grow, and move, while the command is in flight).
  std::vector<IoSegment> read_into;
  std::vector<iovec> iov;
  AlignedBuffer bounce;
  std::uint64_t bytes = 0;
};

class PosixTransport final : public LuTransport {
 public:
  ~PosixTransport() override {
    if (aio_ != nullptr) io_destroy(aio_);
    if (uring_ready_) io_uring_queue_exit(&uring_);
    if (fd_ >= 0) ::close(fd_);
  }

  Status open(const std::string& path, const TransportOptions& options) {
    engine_ = options.engine;
    depth_ = options.queue_depth < 1 ? 1 : options.queue_depth;
    name_ = "posix/" + std::string(to_string(engine_)) + " " + path;
    fd_ = ::open(path.c_str(), O_RDWR | O_DIRECT | O_CLOEXEC);
    if (fd_ < 0) return Status::Error(name_ + ": open with O_DIRECT failed: " + errno_text(errno));
    struct stat st {};
    if (::fstat(fd_, &st) != 0) return Status::Error(name_ + ": fstat failed: " + errno_text(errno));
    if (S_ISBLK(st.st_mode)) {
      int sector = 0;
      if (::ioctl(fd_, BLKGETSIZE64, &capacity_) != 0 || ::ioctl(fd_, BLKSSZGET, &sector) != 0 || sector <= 0)
        return Status::Error(name_ + ": cannot read the device's size and sector size: " + errno_text(errno));
      block_size_ = static_cast<std::uint32_t>(sector);
    } else if (S_ISREG(st.st_mode)) {
      capacity_ = static_cast<std::uint64_t>(st.st_size);
      block_size_ = kFileBlockSize;
    } else {
      return Status::Error(name_ + ": not a block device or a regular file");
    }
    if (engine_ == PosixEngine::libaio) {
      if (int r = io_setup(depth_, &aio_); r != 0) {
        aio_ = nullptr;
        return Status::Error(name_ + ": io_setup(" + std::to_string(depth_) + ") failed: " + errno_text(-r));
      }
    } else if (engine_ == PosixEngine::io_uring) {
      if (int r = io_uring_queue_init(static_cast<unsigned>(depth_), &uring_, 0); r != 0)
        return Status::Error(name_ + ": io_uring_queue_init(" + std::to_string(depth_) + ") failed: " + errno_text(-r));
      uring_ready_ = true;
    }
    return Status::Ok();
  }

  const std::string& describe() const override { return name_; }
  std::uint64_t capacity_bytes() const override { return capacity_; }
  std::uint32_t block_size() const override { return block_size_; }

  std::optional<LuFailure> run_growing(std::vector<LuCommand>& commands, QueueLimits limits,
                                       CommandFeed* feed) override {
    if (std::optional<LuFailure> f = refusal(commands, 0)) return f;
    // psync runs the commands one at a time in index order, which keeps every command after its predecessor.
    if (engine_ == PosixEngine::psync) return run_psync(commands, feed);
    limits.depth = std::min(limits.depth < 1 ? 1 : limits.depth, depth_);
    return run_queued(commands, limits, feed);
  }
  LuQueueCounters queue_counters() const override { return counters_; }
  // The kernel's one session per target is joined through the status device's own control write.
  std::optional<LuFailure> join_job(const SessionJoin&) override { return std::nullopt; }

 private:
  // Why commands[first..] cannot run (a length or offset off the sectors, a predecessor that is not earlier), or none.
  std::optional<LuFailure> refusal(std::span<const LuCommand> commands, std::size_t first) const {
    for (std::size_t i = first; i < commands.size(); ++i) {
      const std::uint64_t bytes = commands[i].bytes();
      if (commands[i].offset % block_size_ != 0 || bytes % block_size_ != 0 || bytes == 0)
        return LuFailure::io(i, "offset " + std::to_string(commands[i].offset) + " and length " +
                                    std::to_string(bytes) + " must be non-zero multiples of the sector size " +
                                    std::to_string(block_size_));
    }
    if (std::string why = CommandOrder::check(commands, first); !why.empty()) return LuFailure::io(first, why);
    return std::nullopt;
  }

  // Asks `feed` (if any) for more commands; true when it gave some that may run (those refused: `failure`).
  bool grow(std::vector<LuCommand>& commands, CommandFeed* feed, std::optional<LuFailure>& failure) const {
    if (feed == nullptr || failure) return false;
    const std::size_t known = commands.size();
    feed->more(commands);
    if (commands.size() == known) return false;
    failure = refusal(commands, known);
    return !failure;
  }

  static bool aligned(const IoSegment& s, std::uint32_t block) {
    return reinterpret_cast<std::uintptr_t>(s.data) % kDirectIoAlignment == 0 && s.bytes % block == 0;
  }

  // Builds the iovecs; a write through a bounce buffer is copied into it now.
  std::optional<LuFailure> prepare(const LuCommand& c, std::size_t index, PreparedCommand& p) const {
    p.read_into.clear();
    p.index = index;
    p.bytes = c.bytes();
    p.iov.clear();
    p.bounce.reset();
    bool direct = true;
    for (const IoSegment& s : c.segments) direct = direct && aligned(s, block_size_);
    if (direct) {
      for (const IoSegment& s : c.segments) p.iov.push_back(iovec{s.data, s.bytes});
      return std::nullopt;
    }
    p.bounce = make_aligned_buffer(p.bytes, /*zeroed=*/false);  // filled below (write) or by the read
    if (!p.bounce) return LuFailure::io(index, "out of memory for a bounce buffer");
    if (c.direction == IoDirection::read) p.read_into = c.segments;
    if (c.direction == IoDirection::write) {
      std::size_t at = 0;
      for (const IoSegment& s : c.segments) {
        std::memcpy(p.bounce.get() + at, s.data, s.bytes);
        at += s.bytes;
      }
    }
    p.iov.push_back(iovec{p.bounce.get(), p.bytes});
    return std::nullopt;
  }

  // A completed read through a bounce buffer: hand the bytes to the caller's segments.
  static void finish(PreparedCommand& p) {
    if (!p.bounce) return;
    std::size_t at = 0;
    for (const IoSegment& s : p.read_into) {
      std::memcpy(s.data, p.bounce.get() + at, s.bytes);
      at += s.bytes;
    }
  }

  // Checks a completion's result (bytes transferred or -errno).
  std::optional<LuFailure> check(const PreparedCommand& p, long long result) const {
    if (result < 0) return errno_failure(p.index, static_cast<int>(-result));
    if (static_cast<std::uint64_t>(result) != p.bytes)
      return LuFailure::io(p.index,
                           "short transfer of " + std::to_string(result) + " bytes (past the end of the device?)");
    return std::nullopt;
  }

  std::optional<LuFailure> run_psync(std::vector<LuCommand>& commands, CommandFeed* feed) {
    PreparedCommand p;
    std::optional<LuFailure> refused;
    for (std::size_t i = 0; i < commands.size() || grow(commands, feed, refused); ++i) {
      if (auto f = prepare(commands[i], i, p)) return f;
      std::uint64_t offset = commands[i].offset;
      for (const iovec& v : p.iov) {
        std::size_t done = 0;
        while (done < v.iov_len) {
          auto* base = static_cast<std::byte*>(v.iov_base) + done;
          const ssize_t n = commands[i].direction == IoDirection::write
                                ? ::pwrite(fd_, base, v.iov_len - done, static_cast<off_t>(offset + done))
                                : ::pread(fd_, base, v.iov_len - done, static_cast<off_t>(offset + done));
          if (n < 0 && errno == EINTR) continue;
          if (n < 0) return errno_failure(i, errno);
          if (n == 0) return LuFailure::io(i, "end of the device at byte " + std::to_string(offset + done));
          done += static_cast<std::size_t>(n);
        }
        offset += v.iov_len;
      }
      finish(p);
    }
    return refused;
  }

  // libaio and io_uring: keep up to `limits.depth` commands in flight, in the order of CommandOrder; slot i's user
  // data is its index. A command that waits for another is issued from here when that one's completion has
  // been reaped, for both engines. (io_uring could chain the pair in the kernel with IOSQE_IO_LINK, but a
  // linked READ must be submitted with its WRITE and then holds a slot for the WRITE's whole flight, halving
  // the WRITEs in flight; what the link would save is one io_uring_enter per batch of completions, which this
  // loop makes anyway.)
  std::optional<LuFailure> run_queued(std::vector<LuCommand>& commands, QueueLimits limits, CommandFeed* feed) {
    QueuedBatch q(commands, limits, &counters_, observer_);
    q.growing = &commands;
    q.feed = feed;
    if (feed != nullptr) q.order.will_grow();
    while (true) {
      std::vector<iocb> aio_cbs;  // libaio: this round's control blocks
      aio_cbs.reserve(q.free_slots.size());
      std::size_t batch_first = commands.size();  // the lowest command of this round, for a failed submit
      const int queued = queue_ready(q, aio_cbs, batch_first);
      if (queued > 0) {
        if (std::optional<LuFailure> fatal = submit(q, aio_cbs, queued, batch_first)) return fatal;
      }
      if (q.in_flight == 0) break;
      if (std::optional<LuFailure> fatal = reap(q)) return fatal;
    }
    return q.failure;
  }

  // One batch of run_queued(): its slots (libaio's user data: the slot's address; io_uring's: its index), those
  // free, the order of its commands, what is in flight and its first failure.
  struct QueuedBatch {
    QueuedBatch(std::span<const LuCommand> commands, QueueLimits limits, LuQueueCounters* counters,
                const CommandObserver& observer)
        : commands(commands),
          slots(static_cast<std::size_t>(limits.depth)),
          order(commands, limits, counters, observer),
          events(slots.size()) {
      for (std::size_t i = slots.size(); i-- > 0;) free_slots.push_back(i);
    }
    std::size_t slot_of(void* data) const {
      return static_cast<std::size_t>(static_cast<PreparedCommand*>(data) - slots.data());
    }

    std::span<const LuCommand> commands;  // the batch so far: *growing, re-pointed whenever it grows
    std::vector<LuCommand>* growing = nullptr;
    CommandFeed* feed = nullptr;  // none: the batch does not grow
    std::vector<PreparedCommand> slots;
    std::vector<std::size_t> free_slots;
    CommandOrder order;
    std::size_t first_unissued = 0;  // for the messages of failures that are not one command's
    int in_flight = 0;
    std::optional<LuFailure> failure;
    std::vector<io_event> events;
  };

  // Fills the free slots with the commands CommandOrder gives (io_uring: while its ring has room), as libaio
  // control blocks (`aio_cbs`) or io_uring SQEs; how many. A command that cannot be prepared is the batch's failure.
  int queue_ready(QueuedBatch& q, std::vector<iocb>& aio_cbs, std::size_t& batch_first) {
    int queued = 0;
    while (!q.failure && !q.free_slots.empty()) {
      if (engine_ == PosixEngine::io_uring && io_uring_sq_space_left(&uring_) == 0) break;  // reap first
      std::optional<std::size_t> next = q.order.next();
      if (!next && q.order.wants_more()) {
        const std::size_t known = q.growing->size();
        const bool more = grow(*q.growing, q.feed, q.failure);
        if (q.growing->size() != known) {
          q.commands = *q.growing;  // the vector may have moved
          q.order.grew(q.commands);
        }
        if (more) next = q.order.next();
      }
      if (!next) break;
      q.first_unissued = std::max(q.first_unissued, *next + 1);
      batch_first = std::min(batch_first, *next);
      const std::size_t slot = q.free_slots.back();
      PreparedCommand& p = q.slots[slot];
      if (auto f = prepare(q.commands[*next], *next, p)) {
        q.failure = f;
        break;
      }
      const bool write = q.commands[*next].direction == IoDirection::write;
      const auto offset = static_cast<long long>(q.commands[*next].offset);
      const int niov = static_cast<int>(p.iov.size());
      if (engine_ == PosixEngine::libaio) {
        iocb& cb = aio_cbs.emplace_back();
        if (write)
          io_prep_pwritev(&cb, fd_, p.iov.data(), niov, offset);
        else
          io_prep_preadv(&cb, fd_, p.iov.data(), niov, offset);
        cb.data = &p;  // the slot, found again by its address
      } else {
        io_uring_sqe* sqe = io_uring_get_sqe(&uring_);  // there is room: checked above
        if (write)
          io_uring_prep_writev(sqe, fd_, p.iov.data(), static_cast<unsigned>(niov), static_cast<__u64>(offset));
        else
          io_uring_prep_readv(sqe, fd_, p.iov.data(), static_cast<unsigned>(niov), static_cast<__u64>(offset));
        io_uring_sqe_set_data64(sqe, slot);
      }
      q.free_slots.pop_back();
      ++queued;
    }
    return queued;
  }

  // Hands the `queued` commands to the kernel. libaio: those it refuses never run (their slots come back, the batch
  // fails and issues no more). io_uring: a failed submit leaves the ring unusable, the batch's end (returned).
  std::optional<LuFailure> submit(QueuedBatch& q, std::vector<iocb>& aio_cbs, int queued, std::size_t batch_first) {
    if (engine_ == PosixEngine::io_uring) {
      const int r = io_uring_submit(&uring_);
      if (r < 0) {
        return LuFailure::io(
            batch_first, "io_uring_submit failed: " + errno_text(-r) + " (the ring is unusable; reopen the cluster)");
      }
      q.in_flight += queued;
      return std::nullopt;
    }
    std::vector<iocb*> aio_ptrs;
    for (iocb& cb : aio_cbs) aio_ptrs.push_back(&cb);
    int submitted = 0;
    while (submitted < queued) {
      const int r = io_submit(aio_, queued - submitted, aio_ptrs.data() + submitted);
      if (r == -EINTR || r == -EAGAIN) continue;
      if (r <= 0) {
        // The unsubmitted ones never run: give their slots back and stop issuing.
        for (int k = submitted; k < queued; ++k) {
          const auto slot = q.slot_of(aio_ptrs[static_cast<std::size_t>(k)]->data);
          if (!q.failure) q.failure = LuFailure::io(q.slots[slot].index, "io_submit failed: " + errno_text(-r));
          q.free_slots.push_back(slot);
        }
        break;
      }
      submitted += r;
    }
    q.in_flight += submitted;
    return std::nullopt;
  }

  // Waits for at least one completion and takes in every one there is: its data to the caller, its successors
  // ready, its slot free, a failure kept (the lowest command's). Returned: a wait that failed, the batch's end
  // (commands may still be in flight). Interrupted by a signal: nothing taken, the caller loops.
  std::optional<LuFailure> reap(QueuedBatch& q) {
    auto complete = [&](std::size_t slot, long long res) {
      PreparedCommand& p = q.slots[slot];
      --q.in_flight;
      std::optional<LuFailure> f = check(p, res);
      // The data is in the caller's buffer before the observer hears of the command: an exchange may be
      // finished, and its buffer read, from the observer (client/cluster.cpp, run_exchanges).
      if (!f) finish(p);
      q.order.completed(p.index, !f);
      if (f && (!q.failure || f->command < q.failure->command)) q.failure = f;
      q.free_slots.push_back(slot);
    };
    // A batch that grows looks at its feed every kFeedPollInterval while what is in flight waits (parked READs).
    constexpr long kFeedPollNs = std::chrono::nanoseconds(kFeedPollInterval).count();
    if (engine_ == PosixEngine::libaio) {
      timespec poll_interval{0, kFeedPollNs};
      const int n = io_getevents(aio_, 1, static_cast<long>(q.events.size()), q.events.data(),
                                 q.feed != nullptr ? &poll_interval : nullptr);
      if (n == -EINTR || n == 0) return std::nullopt;
      if (n < 0)
        return LuFailure::io(q.first_unissued,
                             "io_getevents failed: " + errno_text(-n) + " (commands may still be in flight)");
      for (int k = 0; k < n; ++k) {
        const io_event& e = q.events[static_cast<std::size_t>(k)];
        complete(q.slot_of(e.data), static_cast<long long>(static_cast<long>(e.res)));
      }
      return std::nullopt;
    }
    io_uring_cqe* cqe = nullptr;
    __kernel_timespec poll_interval{0, kFeedPollNs};
    const int r =
        q.feed != nullptr ? io_uring_wait_cqe_timeout(&uring_, &cqe, &poll_interval) : io_uring_wait_cqe(&uring_, &cqe);
    if (r == -EINTR || r == -ETIME) return std::nullopt;
    if (r < 0)
      return LuFailure::io(q.first_unissued,
                           "io_uring_wait_cqe failed: " + errno_text(-r) + " (commands may still be in flight)");
    do {
      complete(static_cast<std::size_t>(io_uring_cqe_get_data64(cqe)), cqe->res);
      io_uring_cqe_seen(&uring_, cqe);
    } while (io_uring_peek_cqe(&uring_, &cqe) == 0);
    return std::nullopt;
  }

  PosixEngine engine_ = PosixEngine::libaio;
  int depth_ = 16;
  std::string name_;
  int fd_ = -1;
  std::uint64_t capacity_ = 0;
  std::uint32_t block_size_ = 0;
  io_context_t aio_ = nullptr;
  io_uring uring_{};
  bool uring_ready_ = false;
  LuQueueCounters counters_;
};

}  // namespace

Result<std::unique_ptr<LuTransport>> open_posix_transport(const std::string& path, const TransportOptions& options) {
  auto t = std::make_unique<PosixTransport>();
  if (Status s = t->open(path, options); !s.ok()) return s;
  return std::unique_ptr<LuTransport>(std::move(t));
}

}  // namespace blockps
