#include "aggregator/cpu_engine.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <stop_token>
#include <system_error>
#include <thread>
#include <vector>

#include "aggregator/cpu_clones.h"
#include "aggregator/update_dispatch.h"

namespace blockps {

namespace {

/// The fused loop for one (optimizer, dtype): one pass reading g, w and the state, writing w and the state.
template <OptimizerKind K, WireDtype D>
BLOCKPS_INLINE_LOOP void fused_update(const StepConstants& constants, float* __restrict w, const void* g,
                                      float* __restrict s0, float* __restrict s1, std::size_t n) {
  // A local copy: otherwise the stores to w (float) might alias the constants and force reloads.
  const StepConstants k = constants;
  constexpr int slots = state_slots(K);
  for (std::size_t i = 0; i < n; ++i) {
    float state0 = 0.0f;
    float state1 = 0.0f;
    if constexpr (slots > 0) state0 = s0[i];
    if constexpr (slots > 1) state1 = s1[i];
    ElementUpdate<K>::apply(k, w[i], load_wire<D>(g, i), state0, state1);
    if constexpr (slots > 0) s0[i] = state0;
    if constexpr (slots > 1) s1[i] = state1;
  }
}

// One call of the fused loop, as update_dispatch.h picks it.
struct FusedUpdate {
  const StepConstants& k;
  float* w;
  const void* g;
  float* s0;
  float* s1;
  std::size_t n;
  template <OptimizerKind K, WireDtype D>
  BLOCKPS_INLINE_LOOP void operator()() const {
    fused_update<K, D>(k, w, g, s0, s1, n);
  }
};

}  // namespace

BLOCKPS_CPU_CLONES void cpu_update(OptimizerKind kind, WireDtype dtype, const StepConstants& k, float* w, const void* g,
                                   float* s0, float* s1, std::size_t n) {
  dispatch_update(kind, dtype, FusedUpdate{k, w, g, s0, s1, n}, [] {});
}

namespace {

// One parallel_for call. It lives on its caller's stack; `workers` counts pool threads that may still touch
// it, and the caller returns only once that is zero and the job is out of the queue.
struct Job {
  Job(const std::function<void(std::size_t)>& task, std::size_t n) : task(&task), n(n) {}

  const std::function<void(std::size_t)>* task;
  std::size_t n;
  std::atomic<std::size_t> next{0};
  unsigned workers = 0;          // guarded by Pool::mutex
  std::condition_variable idle;  // signalled (under Pool::mutex) when workers drops to 0

  // Claims and runs indices until none are left.
  void run_claims() noexcept {
    for (std::size_t i = next.fetch_add(1, std::memory_order_relaxed); i < n;
         i = next.fetch_add(1, std::memory_order_relaxed)) {
      (*task)(i);
    }
  }
};

}  // namespace

struct CpuEngine::Pool {
  std::mutex mutex;
  std::condition_variable_any work;   // a job was queued (or the pool is stopping)
  std::vector<Job*> queue;            // jobs that may still have unclaimed indices, oldest first
  std::vector<std::jthread> threads;  // last: joined (stop requested first) before the rest is destroyed

  void forget(Job* job) {  // mutex held
    std::erase(queue, job);
  }

  void serve(const std::stop_token& stop) {
    std::unique_lock lock(mutex);
    while (work.wait(lock, stop, [this] { return !queue.empty(); })) {
      Job* job = queue.front();
      ++job->workers;
      lock.unlock();
      job->run_claims();
      lock.lock();
      forget(job);  // exhausted: nobody else should join it
      if (--job->workers == 0) job->idle.notify_all();
    }
  }
};

CpuEngine::CpuEngine(unsigned threads) : pool_(new Pool) {
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  // The caller of parallel_for is one of the threads, so the pool holds one fewer.
  for (unsigned i = 1; i < threads; ++i) {
    try {
      pool_->threads.emplace_back([pool = pool_](const std::stop_token& stop) { pool->serve(stop); });
    } catch (const std::system_error&) {
      break;  // the system refused another thread: run with the ones we have
    }
  }
}

CpuEngine::~CpuEngine() { delete pool_; }

unsigned CpuEngine::threads() const { return static_cast<unsigned>(pool_->threads.size()) + 1; }

void CpuEngine::parallel_for(std::size_t n, const std::function<void(std::size_t)>& task) {
  if (n == 0) return;
  if (n == 1 || pool_->threads.empty()) {
    for (std::size_t i = 0; i < n; ++i) task(i);
    return;
  }
  Job job(task, n);
  {
    std::lock_guard lock(pool_->mutex);
    pool_->queue.push_back(&job);
  }
  const std::size_t helpers = std::min(n - 1, pool_->threads.size());
  for (std::size_t i = 0; i < helpers; ++i) pool_->work.notify_one();

  job.run_claims();

  std::unique_lock lock(pool_->mutex);
  pool_->forget(&job);
  job.idle.wait(lock, [&job] { return job.workers == 0; });
}

}  // namespace blockps
