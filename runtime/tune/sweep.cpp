// The sweep: compiling a batch of variants in parallel through the Runtime, timing each with the
// bench machinery within the budget, and the table entry of the fastest.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

#include "gmmgen/tune/tune.h"

namespace gmmgen::tune {

const Variant* Sweep::heuristic() const {
  return cands.variants.empty() ? nullptr : &cands.variants.front();
}

double Sweep::heuristic_gflops() const {
  const Variant* h = heuristic();
  return h && h->state == Variant::State::kOk ? h->gflops : 0;
}

const Variant* Sweep::best() const {
  const Variant* b = nullptr;
  for (const Variant& v : cands.variants)
    if (v.state == Variant::State::kOk && (!b || v.gflops > b->gflops)) b = &v;
  return b;
}

size_t Sweep::attempted() const {
  return size_t(std::count_if(cands.variants.begin(), cands.variants.end(),
                              [](const auto& v) { return v.state != Variant::State::kNotRun; }));
}

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Compiles variants in parallel: -j threads ask the runtime that times them for their kernels
// (it builds distinct kernels at once, each once, through its disk cache).
class Compiler {
 public:
  Compiler(int jobs, Runtime& rt) : jobs_(jobs), rt_(rt) {}
  bool cached(const KernelSpec& s) const { return rt_.cached(s); }
  int jobs() const { return jobs_; }
  // Builds every variant of the batch; a failure is recorded in its variant.
  void build(const std::vector<Variant*>& batch) {
    std::atomic<size_t> next{0};
    const auto work = [&] {
      for (size_t i; (i = next++) < batch.size();) {
        Variant& v = *batch[i];
        const auto t0 = Clock::now();
        try {
          rt_.kernel(v.spec);
        } catch (const std::exception& e) {
          v.state = Variant::State::kFailed;
          v.failure = e.what();
        }
        v.compile_s = seconds_since(t0);
      }
    };
    std::vector<std::thread> threads;
    for (size_t w = 1; w < std::min(batch.size(), size_t(jobs_)); ++w) threads.emplace_back(work);
    work();
    for (auto& t : threads) t.join();
  }

 private:
  int jobs_;
  Runtime& rt_;
};

}  // namespace

void run_sweep(Runtime& rt, Sweep& sw, const SweepOptions& o, const Progress& progress) {
  const auto t0 = Clock::now();
  const double share = o.budget;
  const bench::Options& bo = o.timing;
  const bench::Machine& machine = o.machine;
  Compiler compiler(std::max(1, o.jobs), rt);
  auto& vs = sw.cands.variants;
  const auto status = [&](const std::string& what, double left) {
    if (progress.status) progress.status(what, sw.best() ? sw.best()->gflops : 0, left);
  };
  const auto done = [&](const Variant& v, double left) {
    if (progress.variant)
      progress.variant(v, sw.heuristic_gflops(), sw.best() ? sw.best()->gflops : 0, left);
  };
  const auto stop = [&] {
    if (progress.stop && progress.stop()) sw.stopped_by_caller = true;
    return sw.stopped_by_caller;
  };
  // Measured means, for the budget: wall time of a batch that compiled something, and of one
  // variant's timing (operands, warm-up, repeats, check).
  double compile_walls = 0, bench_walls = 0;
  int compile_batches = 0, benched = 0;
  constexpr double kFirstCompileGuess = 5;  // seconds, before any compile was timed
  const auto left = [&] { return share > 0 ? std::max(0.0, share - seconds_since(t0)) : -1.0; };
  size_t next = 0;
  while (next < vs.size() && !stop()) {
    size_t n = std::min(vs.size() - next, size_t(compiler.jobs()));
    std::vector<Variant*> batch;
    for (size_t i = 0; i < n; ++i) batch.push_back(&vs[next + i]);
    for (Variant* v : batch) v->cached = compiler.cached(v->spec);
    if (share > 0 && benched > 0) {
      const double bench_est = bench_walls / benched;
      const double compile_est =
          compile_batches ? compile_walls / compile_batches : kFirstCompileGuess;
      // The largest prefix of the batch that fits in what is left.
      while (n > 0) {
        const bool compiles = std::any_of(batch.begin(), batch.begin() + long(n),
                                          [](const Variant* v) { return !v->cached; });
        if (seconds_since(t0) + (compiles ? compile_est : 0) + bench_est * double(n) <= share)
          break;
        --n;
      }
      if (n == 0) {
        sw.stopped_by_budget = true;
        break;
      }
      batch.resize(n);
    }
    const bool compiles =
        std::any_of(batch.begin(), batch.end(), [](const Variant* v) { return !v->cached; });
    status(compiles ? "compiling " + std::to_string(n) + " variant(s)" : "loading", left());
    const auto tc = Clock::now();
    compiler.build(batch);
    if (compiles) compile_walls += seconds_since(tc), ++compile_batches;
    for (Variant* v : batch) {
      if (v->state == Variant::State::kFailed) {
        done(*v, left());
        continue;
      }
      if (stop()) break;
      if (share > 0 && benched > 0 && seconds_since(t0) + bench_walls / benched > share) {
        sw.stopped_by_budget = true;
        break;
      }
      status("timing " + tiling_text(v->spec.tiling), left());
      const auto tb = Clock::now();
      try {
        const bench::Row r = bench::run(rt, v->spec, sw.work, bo, machine);
        v->state = r.ok ? Variant::State::kOk : Variant::State::kMismatch;
        v->gflops = r.gflops, v->ms = r.ms, v->failure = r.failure;
      } catch (const std::exception& e) {
        v->state = Variant::State::kFailed;
        v->failure = e.what();
      }
      bench_walls += seconds_since(tb), ++benched;
      done(*v, left());
    }
    if (sw.stopped_by_budget || sw.stopped_by_caller) break;
    next += n;
  }
  // The heuristic's tiling ran first, in the coldest conditions of the process (thread pool,
  // page faults, clocks): timed again at the end, its faster run is kept, so that a speed-up is
  // never owed to the order of the sweep.
  Variant& h = vs.front();
  const bool time_left =
      share == 0 || (benched > 0 && seconds_since(t0) + bench_walls / benched <= share);
  if (h.state == Variant::State::kOk && vs.size() > 1 && time_left && !stop()) {
    status("timing the heuristic's tiling again", left());
    try {
      const bench::Row r = bench::run(rt, h.spec, sw.work, bo, machine);
      if (!r.ok) h.state = Variant::State::kMismatch, h.failure = r.failure;
      if (r.ok && r.gflops > h.gflops) h.gflops = r.gflops, h.ms = r.ms;
    } catch (const std::exception& e) {
      h.state = Variant::State::kFailed, h.failure = e.what();
    }
    if (progress.retimed) progress.retimed(h);
  }
  sw.seconds = seconds_since(t0);
}

std::optional<tuning::Entry> table_entry(const Sweep& sw, int threads) {
  const Variant* best = sw.best();
  if (!best) return std::nullopt;
  tuning::Entry e;
  e.spec = best->spec;
  e.rows_per_group = tuning::bucket_of(sw.rows_per_group);
  e.gflops = best->gflops;
  e.baseline_gflops = sw.heuristic_gflops();
  e.m = sw.work.m, e.dist = sw.work.shape, e.threads = threads;
  return e;
}

}  // namespace gmmgen::tune
