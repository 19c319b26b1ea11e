#include "exec/thread_pool.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <string_view>

#include "gmmgen/errors.hpp"
#include "gmmgen/spec.h"

namespace gmmgen {
namespace {

// Whether this thread is running a chunk of a pool's job: a parallel_for it calls then runs inline
// (a quantizer called from a kernel's work item must not start a second crew of threads).
thread_local int t_in_chunk = 0;

struct InChunk {
  InChunk() { ++t_in_chunk; }
  ~InChunk() { --t_in_chunk; }
  InChunk(const InChunk&) = delete;
  InChunk& operator=(const InChunk&) = delete;
};

}  // namespace

int default_threads() {
  if (const char* v = std::getenv("GMMGEN_NUM_THREADS"); v && *v) {
    // Digits only: strtol alone would take " 4" or "+4".
    const std::string_view s(v);
    char* end = nullptr;
    const long n = s.find_first_not_of("0123456789") == std::string_view::npos && s.size() <= 4
                       ? std::strtol(v, &end, 10)
                       : 0;
    if (n < 1 || n > 4096)
      throw InvalidArgument("GMMGEN_NUM_THREADS=" + quote_value(v) +
                            " must be a whole number in [1, 4096] (digits only; unset or empty: "
                            "every core)");
    return int(n);
  }
  return int(std::max(1u, std::thread::hardware_concurrency()));
}

ThreadPool& process_pool() {
  // Made on first use in each process: a child forked after the parent made its pool has none of
  // the parent's threads, and waiting for them would never end. Never destroyed (a quantizer may
  // run during static destruction; the workers end with the process).
  static std::mutex mutex;
  static ThreadPool* pool = nullptr;
  static pid_t owner = 0;
  const std::lock_guard<std::mutex> lock(mutex);
  if (!pool || owner != getpid()) pool = new ThreadPool(default_threads()), owner = getpid();
  return *pool;
}

ThreadPool::ThreadPool(int threads) {
  for (int i = 1; i < std::max(threads, 1); ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

// Guided self-scheduling: each grab takes a share of what is left (at least one item), so early
// grabs are large (little atomic traffic) and the last ones single items: work whose items differ
// in cost (a skewed group holds most rows) still ends on all threads at once.
void ThreadPool::run_chunks() {
  const InChunk in_chunk;
  const int64_t divisor = 2 * int64_t(size());
  for (int64_t begin = next_.load(std::memory_order_relaxed);;) {
    const int64_t left = count_ - begin;
    if (left <= 0) return;
    const int64_t take = std::max<int64_t>(1, left / divisor);
    if (next_.compare_exchange_weak(begin, begin + take, std::memory_order_relaxed))
      (*fn_)(begin, begin + take), begin = next_.load(std::memory_order_relaxed);
  }
}

// Polls of a flag before a thread sleeps on a condition variable: 20-50 us (a pause takes 60-140
// cycles). A job that follows soon (a quantizer's, then its gmm's; the next call of a loop) then
// finds the workers awake, and the caller sees the last chunk end, without a futex wake each.
constexpr int kSpinPolls = 1024;

template <class Ready>
void spin_until(Ready ready) {
  for (int i = 0; i < kSpinPolls && !ready(); ++i) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#else
    std::this_thread::yield();
#endif
  }
}

void ThreadPool::worker_loop() {
  uint64_t seen = 0;
  for (;;) {
    spin_until([&] { return generation_.load(std::memory_order_acquire) != seen; });
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
    }
    run_chunks();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (--active_ == 0) done_.notify_one();
    }
  }
}

void ThreadPool::parallel_for(int64_t count, const std::function<void(int64_t, int64_t)>& fn) {
  if (count <= 0) return;
  if (workers_.empty() || count == 1 || t_in_chunk > 0) {
    const InChunk in_chunk;
    fn(0, count);
    return;
  }
  std::unique_lock<std::mutex> job(job_mutex_, std::try_to_lock);
  if (!job.owns_lock()) {
    const InChunk in_chunk;
    fn(0, count);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    fn_ = &fn;
    count_ = count;
    next_.store(0, std::memory_order_relaxed);
    active_ = int(workers_.size());
    ++generation_;
  }
  wake_.notify_all();
  run_chunks();
  spin_until([&] { return active_.load(std::memory_order_acquire) == 0; });
  std::unique_lock<std::mutex> lock(mutex_);
  done_.wait(lock, [&] { return active_ == 0; });
  fn_ = nullptr;
}

}  // namespace gmmgen
