// The thread pool: every item once, on several threads, and nested calls kept on the calling
// thread (a quantizer called from a kernel's work item must not start a second crew).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "exec/thread_pool.h"

namespace gmmgen {
namespace {

TEST(ThreadPool, RunsEveryItemOnce) {
  ThreadPool pool(3);
  std::vector<std::atomic<int>> seen(1000);
  pool.parallel_for(1000, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) seen[size_t(i)].fetch_add(1);
  });
  for (size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(1, seen[i].load()) << "item " << i;
}

// Workers poll for the next job a while before they sleep: jobs back to back meet them polling,
// a job after a pause meets them asleep. Either way every item runs once, and every job's items
// are done when parallel_for returns.
TEST(ThreadPool, JobsBackToBackAndAfterAPauseRunEveryItemOnce) {
  ThreadPool pool(3);
  for (int job = 0; job < 300; ++job) {
    const int64_t count = 1 + job % 37;
    std::vector<std::atomic<int>> seen(static_cast<size_t>(count));
    pool.parallel_for(count, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) seen[size_t(i)].fetch_add(1);
    });
    for (size_t i = 0; i < seen.size(); ++i)
      ASSERT_EQ(1, seen[i].load()) << "job " << job << " item " << i;
    if (job % 100 == 99) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

TEST(ThreadPool, NestedCallsRunOnTheCallingThread) {
  ThreadPool outer(2), inner(2);
  std::mutex mutex;
  int nested_elsewhere = 0, nested_items = 0;
  std::set<std::thread::id> outer_threads;
  outer.parallel_for(64, [&](int64_t b, int64_t e) {
    const std::thread::id me = std::this_thread::get_id();
    for (int64_t i = b; i < e; ++i) {
      // Slow enough items that both threads of `outer` take some.
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      for (ThreadPool* p : {&inner, &outer, &process_pool()})
        p->parallel_for(8, [&](int64_t ib, int64_t ie) {
          const std::lock_guard<std::mutex> lock(mutex);
          nested_items += int(ie - ib);
          nested_elsewhere += std::this_thread::get_id() != me;
        });
    }
    const std::lock_guard<std::mutex> lock(mutex);
    outer_threads.insert(me);
  });
  EXPECT_EQ(64 * 3 * 8, nested_items);
  EXPECT_EQ(0, nested_elsewhere);
  EXPECT_EQ(2u, outer_threads.size());  // the outer call itself did use both threads
}

// A child forked after the parent used the quantizers' pool has none of its threads: the child's
// first call must start a pool of its own, not wait for the parent's workers forever.
TEST(ThreadPool, ForkedChildGetsAPoolOfItsOwn) {
  std::atomic<int64_t> items{0};
  process_pool().parallel_for(64, [&](int64_t b, int64_t e) { items += e - b; });
  ASSERT_EQ(items.load(), 64);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::atomic<int64_t> n{0};
    process_pool().parallel_for(64, [&](int64_t b, int64_t e) { n += e - b; });
    _exit(n.load() == 64 ? 0 : 1);
  }
  int status = 0;
  pid_t done = 0;
  for (int i = 0; i < 600 && (done = waitpid(child, &status, WNOHANG)) == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  if (done == 0) {
    kill(child, SIGKILL);
    waitpid(child, &status, 0);
    FAIL() << "the forked child's parallel_for did not return within 30 s";
  }
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

}  // namespace
}  // namespace gmmgen
