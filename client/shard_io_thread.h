// One shard as libblockps reaches it: the I/O thread that owns the shard's three LU sessions (libiscsi contexts are
// not thread-safe, and one thread per shard is what lets every shard's queue stay full at once), the jobs queued
// for it, and the stream of exchanges on its grad LU (docs/ARCHITECTURE.md, "The client"). Private to the library:
// Cluster (client/cluster.cpp) makes one per shard and posts its operations' parts here.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "blockps/cluster.h"
#include "client/job_and_place.h"
#include "client/request_plan.h"
#include "client/send_order.h"
#include "client/trace.h"
#include "client/transport/aligned_buffer.h"
#include "client/transport/lu_transport.h"
#include "contract/control_lines.h"
#include "contract/limits.h"
#include "contract/log.h"
#include "contract/scsi_codes.h"
#include "contract/status_page.h"

namespace blockps {
namespace detail {

// What an asynchronous operation waits for: one part per shard that has work in it.
struct OperationState {
  std::mutex mutex;
  std::condition_variable finished_cv;
  std::size_t parts_left = 0;
  bool finished = false;
  std::optional<Status> first_error;
  CompletionCallback on_done;

  void part_done(Status s) {
    CompletionCallback callback;
    Status outcome = Status::Ok();
    {
      std::lock_guard lock(mutex);
      if (!s.ok() && !first_error) first_error = std::move(s);
      if (--parts_left != 0) return;
      finished = true;
      outcome = first_error ? *first_error : Status::Ok();
      callback = std::move(on_done);
    }
    finished_cv.notify_all();
    if (callback) callback(outcome);
  }
};

// A refusal the shard recorded up to this long before a command was issued may be that command's: the shard's clock
// and the worker's need not agree to the millisecond (refusals older than that are another command's).
constexpr std::int64_t kRefusalClockSlackMs = 30'000;

// Now, in milliseconds since the Unix epoch (the shard's refusals carry the same clock).
std::int64_t unix_ms_now();

// The answers of a shard that its status page explains (client/job_and_place.h), or none.
std::optional<ShardAnswer> shard_answer(const LuFailure& f, LuRole role, IoDirection direction);

class ShardIoThread;
// The status page: JSON, NUL padded to the LU's capacity. Called on the shard's I/O thread or before it runs.
Result<std::string> read_status_page(ShardIoThread& shard);

class ShardIoThread {
 public:
  // `asking`: who this worker is, for the sentences of refusals (its `shard` is filled in here).
  ShardIoThread(const ShardSpec& spec, QueueLimits limits, SendOrder send_order, AskingWorker asking)
      : spec_(spec), limits_(limits), send_order_(send_order), asking_(std::move(asking)) {
    asking_.shard = "shard '" + spec_.name + "'";
  }
  ~ShardIoThread() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    work_cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  const ShardSpec& spec() const { return spec_; }

  // Connects the shard's three LUs. Called before start(), possibly on another thread than the I/O thread.
  Status connect(const TransportOptions& options) {
    for (LuRole role : {LuRole::grad, LuRole::weights, LuRole::status}) {
      auto t = open_lu_transport(spec_.lu(role), options);
      if (!t.ok()) return Status::Error(StatusCode::connect, lu_name(role) + ": " + t.message());
      lus_[static_cast<int>(role)] = std::move(t.value());
    }
    return Status::Ok();
  }

  LuTransport& lu(LuRole role) { return *lus_[static_cast<int>(role)]; }
  std::string lu_name(LuRole role) const {
    return "shard '" + spec_.name + "' " + std::string(to_string(role)) + " LU (" + spec_.lu(role).text + ")";
  }

  void start() {
    // Every completed command goes to the trace (if any) and, on the grad LU, to the batch of exchanges that runs
    // (run_exchanges): both are told on this shard's I/O thread, which runs the batch.
    for (LuRole role : {LuRole::grad, LuRole::weights}) {
      lu(role).observe_commands([this, role](const LuCommand& c, auto issued, auto completed, bool ok) {
        if (trace_ != nullptr) trace_->command(command_lane_, c, issued, completed);
        if (role == LuRole::grad && running_exchanges_ != nullptr) {
          if (ok && running_exchanges_->completes(c)) log_recovery(LuRole::grad);
          running_exchanges_->completed(c, ok);
        }
      });
    }
    thread_ = std::thread([this] { serve(); });
  }

  // Queues a job for the I/O thread; its outcome finishes one part of `op`.
  void post(std::function<Status()> job, std::shared_ptr<OperationState> op) {
    {
      std::lock_guard lock(mutex_);
      jobs_.push_back({std::move(job), std::move(op), std::nullopt});
    }
    work_cv_.notify_one();
  }

  // One exchange's commands on this shard's grad LU (each block's WRITE, then its READ after it). Exchanges join the
  // shard's stream as they are queued (run_exchanges), so that the WRITEs of the next exchange go out while the READs
  // of the ones before are still coming back or parked: run one at a time, each exchange drained the link before the
  // next filled it, and a stream of small exchanges (DistributedOptimizer's 1 MiB buckets, a host's chunks) used each
  // direction of the link half the time (bench/RESULTS.md, "Hosts with several ranks"); run as batches, the next
  // batch waited for the slowest round of the one before.
  void post_exchange(ShardCommands part, std::shared_ptr<OperationState> op) {
    {
      std::lock_guard lock(mutex_);
      jobs_.push_back({{}, std::move(op), std::move(part)});
    }
    work_cv_.notify_one();
  }
  // Where run_traced() records its spans (Cluster's trace, the shard's lane) and every command of the grad and
  // weights LUs (`command_lane`); none by default. Before start().
  void trace_to(Trace* trace, int lane, int command_lane) {
    trace_ = trace;
    trace_lane_ = lane;
    command_lane_ = command_lane;
  }

  // Runs commands on one LU (on the I/O thread). `model_offsets[i]` is where command i's first byte is in
  // the model, for the message. A refusal the shard gives for a reason of its own (RESERVATION CONFLICT, NOT READY,
  // HARDWARE ERROR, a refused control write) is explained from its status page, read then (never before: not on
  // the way of a push), unless `explain` is false (the status page's own read).
  Status run(LuRole role, const std::vector<LuCommand>& commands, const std::vector<std::uint64_t>& model_offsets,
             bool explain = true) {
    std::vector<LuCommand> batch(commands);
    return run_growing(role, batch, model_offsets, nullptr, explain);
  }

  // run(), where `feed` (none: nullptr) appends to `commands` and to `model_offsets` while they run.
  Status run_growing(LuRole role, std::vector<LuCommand>& commands, const std::vector<std::uint64_t>& model_offsets,
                     CommandFeed* feed, bool explain = true) {
    const std::int64_t issued_unix_ms = unix_ms_now();
    const std::optional<LuFailure> f = lu(role).run_growing(commands, limits_, feed);
    log_recovery(role);
    if (!f) return Status::Ok();
    std::string where = lu_name(role) + ": ";
    if (f->command < commands.size()) {
      const LuCommand& c = commands[f->command];
      where += std::string(c.direction == IoDirection::write ? "write" : "read") + " of " + std::to_string(c.bytes()) +
               " bytes at shard byte offset " + std::to_string(c.offset);
      if (f->command < model_offsets.size())
        where += " (model byte offset " + std::to_string(model_offsets[f->command]) + ")";
    }
    std::string reason = f->reason();
    const IoDirection direction = f->command < commands.size() ? commands[f->command].direction : IoDirection::write;
    if (const std::optional<ShardAnswer> answer = explain ? shard_answer(*f, role, direction) : std::nullopt) {
      if (std::string why = explain_from_page(*answer, issued_unix_ms); !why.empty()) reason += ": " + why;
    }
    return Status::Error(f->status.code(), where + " failed: " + reason);
  }

  // run(), as a span named `what` with the bytes it moved on this shard's lane of the cluster's trace (if any).
  Status run_traced(const char* what, LuRole role, const std::vector<LuCommand>& commands,
                    const std::vector<std::uint64_t>& model_offsets) {
    std::vector<LuCommand> batch(commands);
    return run_growing_traced(what, role, batch, model_offsets, nullptr);
  }

  // run_growing(), traced as run_traced() is (the span covers the batch as it grew).
  Status run_growing_traced(const char* what, LuRole role, std::vector<LuCommand>& commands,
                            const std::vector<std::uint64_t>& model_offsets, CommandFeed* feed) {
    if (trace_ == nullptr) return run_growing(role, commands, model_offsets, feed);
    const auto begin = Trace::Clock::now();
    Status s = run_growing(role, commands, model_offsets, feed);
    std::uint64_t bytes = 0;
    for (const LuCommand& c : commands) bytes += c.bytes();
    trace_->span(what, trace_lane_, begin, Trace::Clock::now(), bytes);
    return s;
  }

  // The sentence the shard's status page gives for `answer` to a command issued at `issued_unix_ms`; "" when the
  // page cannot be read or says nothing of it.
  std::string explain_from_page(ShardAnswer answer, std::int64_t issued_unix_ms) {
    auto text = read_status_page(*this);
    if (!text.ok()) return {};
    const nlohmann::json page = nlohmann::json::parse(text.value(), nullptr, false);
    if (page.is_discarded() || !page.is_object()) return {};
    AskingWorker who = asking_;
    who.since_unix_ms = issued_unix_ms - kRefusalClockSlackMs;
    return explain_answer(page, answer, who);
  }

  // One control write of `lines` to the status LU; the transport's failure as it is (the tenancy reads the page
  // itself to say why).
  std::optional<LuFailure> write_control(std::string_view lines) {
    AlignedBuffer page;
    std::vector<LuCommand> write;
    if (!control_command(lines, page, write)) return LuFailure::io(0, "no memory for a control write");
    return lu(LuRole::status).run(write, limits_);
  }
  // The same, failed as run() fails (the refusal explained from the page).
  Status control(std::string_view lines) {
    AlignedBuffer page;
    std::vector<LuCommand> write;
    if (!control_command(lines, page, write))
      return Status::Error(StatusCode::unknown, "no memory for a control write");
    return run(LuRole::status, write, {});
  }

  // Waits `duration` on the I/O thread (a claim waited out: client/tenancy.cpp), answering what the targets send its
  // sessions meanwhile, as an idle I/O thread does: a wait longer than tgtd's nop_interval x nop_count must not lose
  // the sessions that are to join the job after it.
  void wait_keeping_sessions(std::chrono::duration<double> duration) {
    const auto until =
        std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::nanoseconds>(duration);
    for (auto now = std::chrono::steady_clock::now(); now < until; now = std::chrono::steady_clock::now()) {
      std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(kKeepAliveInterval, until - now));
      keep_sessions_alive();
    }
  }

  // From the next exchange the stream takes in on (Cluster::prefer_send_order).
  void set_send_order(SendOrder order) {
    std::lock_guard lock(mutex_);
    send_order_ = order;
  }

  // The job this worker's sentences name; changed by Cluster::claim, on this I/O thread.
  void set_job(const std::string& job) { asking_.job = job; }

  // One log line (contract/log.h: the caller's sink, stderr by default) for each kind of recovery the LU's commands
  // needed since the last such lines (the counters say how often, over the cluster's life: Cluster::recovery_counters).
  // A recovery is not an error, but a worker that reconnects every step, or loses pushes, must be able to see it
  // without a debugger. Called when a batch ends, and before an exchange of a stream is finished (its caller, told the
  // exchange is done, has seen the lines).
  void log_recovery(LuRole role) {
    const LuQueueCounters after = lu(role).queue_counters();
    const LuQueueCounters before = std::exchange(logged_[static_cast<int>(role)], after);
    const auto line = [&](std::uint64_t delta, const std::string& what) {
      if (delta > 0) log_line(lu_name(role) + ": " + what + " (" + std::to_string(delta) + ")");
    };
    std::string lost = lu(role).last_session_loss();
    std::replace(lost.begin(), lost.end(), '\n', ' ');  // libiscsi's messages may hold line breaks: one line
    line(after.reconnects - before.reconnects,
         "session lost and logged in again" + (lost.empty() ? std::string() : ", the last time because " + lost));
    line(after.unanswered_writes_dropped - before.unanswered_writes_dropped,
         "WRITEs (pushes) given up: the session was lost before their answer, so they are not sent again and "
         "their gradients may be missing from the shard");
    line(after.unit_attentions_resent - before.unit_attentions_resent,
         "commands sent again after a UNIT ATTENTION (the shard's LUs changed or its tgtd restarted)");
  }

 private:
  // A control write of `lines`: one WRITE from `page`, NUL-padded to whole blocks of the status LU (at least one
  // NUL after the lines: the shard reads up to it). False when `page` could not be allocated.
  bool control_command(std::string_view lines, AlignedBuffer& page, std::vector<LuCommand>& write) {
    const std::uint64_t bytes = control::control_write_bytes(lines.size(), lu(LuRole::status).block_size());
    page = make_aligned_buffer(static_cast<std::size_t>(bytes));  // zeroed: the NUL padding
    if (!page) return false;
    std::memcpy(page.get(), lines.data(), lines.size());
    write = {{IoDirection::write, 0, {{page.get(), static_cast<std::size_t>(bytes)}}}};
    return true;
  }

  struct Job {
    std::function<Status()> work;  // or, for an exchange:
    std::shared_ptr<OperationState> op;
    std::optional<ShardCommands> exchange;
  };
  // A shard's stream of exchanges takes in no more exchanges once it holds this many commands: it ends when they
  // have completed, and the next stream starts with the exchanges queued meanwhile. It bounds the memory of one
  // stream's bookkeeping (about 150 bytes a command); at 256 KiB a command it is 16 GiB each way, many steps of
  // any model, so the one drain it costs is rare.
  static constexpr std::size_t kMaxStreamCommands = std::size_t{1} << 16;

  // The exchanges of the stream that runs: how many of each one's commands are still to complete with success. An
  // exchange whose commands all did is finished at once (`on_finished`), not when the stream ends (one that fails,
  // or has no commands, is finished by serve() when the stream ends).
  struct ExchangeCompletions {
    std::vector<std::size_t> left;  // by exchange (LuCommand::tag)
    std::vector<bool> failed;       // by exchange: a command failed, so the stream's outcome is this exchange's
    std::function<void(std::size_t)> on_finished;
    // Whether `c`, completing with success, is the last command its exchange waits for.
    bool completes(const LuCommand& c) const { return c.tag < left.size() && left[c.tag] == 1 && !failed[c.tag]; }
    void completed(const LuCommand& c, bool ok) {
      if (c.tag >= left.size()) return;
      if (!ok)
        failed[c.tag] = true;
      else if (--left[c.tag] == 0 && !failed[c.tag])
        on_finished(c.tag);
    }
  };

  // How often the I/O thread answers what the targets sent its idle sessions (LuTransport::keep_alive). tgtd sends
  // a NOP-In every nop_interval seconds (whole seconds, at least 1) and drops a session after nop_count of them go
  // unanswered, and only an answer to its latest NOP-In counts. Answered within half a second, each NOP-In is
  // answered before the next one is sent, whatever the drift between tgtd's timer and ours: a session stays
  // alive for any nop_count >= 1. The cost is a few polls that do not block, twice a second.
  static constexpr std::chrono::milliseconds kKeepAliveInterval{500};

  // On the I/O thread, the only one that touches the LUs after start(). Every LU, not only those that are idle
  // with the worker: the weights and status sessions wait while exchanges keep the grad LU busy step after step.
  void keep_sessions_alive() {
    for (LuRole role : {LuRole::grad, LuRole::weights, LuRole::status}) keep_lu_alive(role);
  }
  void keep_lu_alive(LuRole role) {
    const std::unique_ptr<LuTransport>& lu = lus_[static_cast<int>(role)];
    if (lu == nullptr) return;
    try {
      lu->keep_alive();
    } catch (const std::exception&) {  // e.g. bad_alloc for a message: the next run() finds the session as it is
    }
  }

  void serve() {
    using Clock = std::chrono::steady_clock;
    Clock::time_point keep_alive_due = Clock::now() + kKeepAliveInterval;
    for (;;) {
      // Between batches too, not only when the queue is empty: a worker whose steps come faster than the interval
      // never leaves the I/O thread waiting that long.
      if (Clock::now() >= keep_alive_due) {
        keep_sessions_alive();
        keep_alive_due = Clock::now() + kKeepAliveInterval;
      }
      std::vector<Job> batch;
      {
        std::unique_lock lock(mutex_);
        if (!work_cv_.wait_until(lock, keep_alive_due, [&] { return stopping_ || !jobs_.empty(); }))
          continue;                 // nothing to run for a while: keep the sessions alive (above), outside the mutex
        if (jobs_.empty()) return;  // stopping, and every queued job is done
        batch.push_back(std::move(jobs_.front()));  // an exchange's stream takes in the next ones as it runs
        jobs_.pop_front();
      }
      Status s = Status::Ok();
      std::vector<bool> finished(batch.size(), false);  // exchanges finished while the batch ran
      try {
        s = batch.front().exchange ? run_exchanges(batch, finished) : batch.front().work();
      } catch (const std::exception& e) {  // e.g. bad_alloc: an error value, never an escape
        s = Status::Error("shard '" + spec_.name + "': " + e.what());
      }
      running_exchanges_ = nullptr;  // run_exchanges()'s, gone with its frame
      // A failure fails every exchange of the batch not finished yet: they were in flight together, and which of
      // their commands completed is not known.
      for (std::size_t i = 0; i < batch.size(); ++i)
        if (!finished[i]) batch[i].op->part_done(s);
    }
  }

  // The exchanges of `batch` as one stream of commands on the grad LU: those queued while it runs join it (Stream), so
  // that an exchange queued while an earlier one's READs are parked at a sync shard (until the slowest worker's
  // push of their blocks) goes out at once, instead of waiting for a batch that ends only with its slowest round
  // (bench/RESULTS.md, "Where the link time goes": 458-608 ms a shard and step). Each exchange is finished (its op's
  // part done, `finished`) as soon as its own commands completed, not with the whole stream: a forward that waits for
  // the first layers' weights (DistributedOptimizer's early_forward) need not wait for the rest. The commands go out
  // in the order queued (client/transport/command_order.h); a sync shard admits a round's WRITEs in any order, so
  // another worker's other order holds nobody.
  Status run_exchanges(std::vector<Job>& batch, std::vector<bool>& finished) {
    ExchangeCompletions completions{{}, {}, [&](std::size_t j) {
                                      finished[j] = true;
                                      batch[j].op->part_done(Status::Ok());
                                    }};
    Stream stream(*this, batch, finished, completions);
    for (std::size_t j = 0; j < batch.size(); ++j) stream.add(j, stream.commands);
    running_exchanges_ = &completions;  // serve() clears it once the batch is over, also after an exception
    return run_growing_traced("exchange", LuRole::grad, stream.commands, stream.model_offsets, &stream);
  }

  // The commands of a stream of exchanges, and what joins it while it runs: one queued exchange each time every WRITE
  // of the stream has gone out (CommandOrder::wants_more), so that the exchanges still queued behind the WRITEs in
  // flight (the credit window, [client] exchange_writes) are sent in `send_order_`; only the exchanges ahead of the
  // first job of another kind, which waits for the stream's end; while the stream holds fewer than
  // kMaxStreamCommands. Also keeps the shard's other sessions alive while the stream keeps the grad LU busy.
  struct Stream final : CommandFeed {
    Stream(ShardIoThread& shard, std::vector<Job>& batch, std::vector<bool>& finished, ExchangeCompletions& completions)
        : shard(shard), batch(batch), finished(finished), completions(completions) {}
    ShardIoThread& shard;
    std::vector<Job>& batch;
    std::vector<bool>& finished;
    ExchangeCompletions& completions;
    std::vector<LuCommand> commands;
    std::vector<std::uint64_t> model_offsets;
    std::chrono::steady_clock::time_point keep_alive_due = std::chrono::steady_clock::now() + kKeepAliveInterval;

    // Appends exchange batch[j]'s commands to `into` (the stream's commands), its READs' predecessors renumbered.
    void add(std::size_t j, std::vector<LuCommand>& into) {
      ShardCommands& part = *batch[j].exchange;
      const std::size_t base = into.size();
      for (LuCommand& c : part.commands) {
        if (c.after != kNoPredecessor) c.after += base;
        c.tag = static_cast<std::uint32_t>(j);
        into.push_back(std::move(c));
      }
      completions.left.push_back(part.commands.size());
      completions.failed.push_back(false);
      model_offsets.insert(model_offsets.end(), part.model_offsets.begin(), part.model_offsets.end());
      part.commands.clear();  // moved into the stream
    }

    void more(std::vector<LuCommand>& growing) override {
      if (std::chrono::steady_clock::now() >= keep_alive_due) {
        for (LuRole role : {LuRole::weights, LuRole::status}) shard.keep_lu_alive(role);
        keep_alive_due = std::chrono::steady_clock::now() + kKeepAliveInterval;
      }
      if (growing.size() >= kMaxStreamCommands) return;
      std::lock_guard lock(shard.mutex_);
      const std::optional<std::size_t> next = shard.next_exchange();
      if (!next) return;
      batch.push_back(std::move(shard.jobs_[*next]));
      shard.jobs_.erase(shard.jobs_.begin() + static_cast<std::ptrdiff_t>(*next));
      finished.push_back(false);
      add(batch.size() - 1, growing);
    }
  };

  // Under mutex_: the queued exchange to send next (an index into jobs_, client/send_order.h), among those ahead of the
  // first job of another kind; none when the queue starts with such a job or is empty.
  std::optional<std::size_t> next_exchange() const {
    std::vector<QueuedExchange> queued;
    for (const Job& job : jobs_) {
      if (!job.exchange) break;
      const std::vector<std::uint64_t>& offsets = job.exchange->model_offsets;
      queued.push_back(
          {job.exchange->commands, offsets.empty() ? UINT64_MAX : *std::min_element(offsets.begin(), offsets.end())});
    }
    if (queued.empty()) return std::nullopt;
    return next_to_send(queued, send_order_);
  }

  ShardSpec spec_;
  QueueLimits limits_;
  SendOrder send_order_;  // under mutex_
  AskingWorker asking_;
  std::unique_ptr<LuTransport> lus_[3];
  LuQueueCounters logged_[3];  // by LuRole: each LU's counters when log_recovery() last looked (I/O thread)
  std::thread thread_;
  std::mutex mutex_;
  std::condition_variable work_cv_;
  std::deque<Job> jobs_;
  bool stopping_ = false;
  Trace* trace_ = nullptr;
  int trace_lane_ = 0;
  int command_lane_ = 0;
  ExchangeCompletions* running_exchanges_ = nullptr;  // while run_exchanges() runs, on the I/O thread
};

// The shard I/O threads of a cluster, in its file's order.
using ShardIoThreads = std::vector<std::unique_ptr<ShardIoThread>>;
// Runs job(shard, index) on the I/O threads of the shards `which` (where their sessions may be used) and waits for
// all; the first failure, or ok.
Status run_on_shards(ShardIoThreads& shards, const std::vector<std::size_t>& which,
                     const std::function<Status(ShardIoThread&, std::size_t)>& job);
// 0 .. shards.size() - 1.
std::vector<std::size_t> all_shards(const ShardIoThreads& shards);

}  // namespace detail

}  // namespace blockps
