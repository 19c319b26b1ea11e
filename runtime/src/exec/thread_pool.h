// A fixed pool of worker threads running independent work items (a kernel's grid steps, rows of
// a quantizer's input).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace gmmgen {

class ThreadPool {
 public:
  // threads >= 1; the calling thread counts as one, so threads - 1 workers are started.
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return int(workers_.size()) + 1; }

  // Runs fn(begin, end) over [0, count) in chunks, on the workers and the calling thread, and
  // returns when all chunks are done. If another job holds the pool, or the caller is itself
  // running a chunk of some pool's job (a nested call), the caller runs every chunk itself. The
  // split never changes results: items are independent by contract.
  void parallel_for(int64_t count, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void worker_loop();
  void run_chunks();

  std::vector<std::thread> workers_;
  std::mutex job_mutex_;  // held by the one caller whose job the workers serve

  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::atomic<uint64_t> generation_{0};  // written under mutex_; polled without it
  bool stop_ = false;
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t count_ = 0;
  std::atomic<int64_t> next_{0};
  std::atomic<int> active_{0};  // workers still inside the current job: as generation_
};

// $GMMGEN_NUM_THREADS, else every core: the threads of a Runtime not told otherwise. Throws
// InvalidArgument unless the variable is unset, empty or a whole number in [1, 4096].
int default_threads();

// The pool of work outside any Runtime (the quantizers of gmmgen/quantize.hpp): default_threads()
// threads, started on first use in each process (a forked child starts its own).
ThreadPool& process_pool();

}  // namespace gmmgen
