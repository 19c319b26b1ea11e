// A whole tuning run: plan, check, sweep every problem within a shared budget, write the table and
// the reports.
#include <algorithm>
#include <chrono>
#include <thread>

#include "gmmgen/errors.hpp"
#include "gmmgen/tune/report.h"
#include "gmmgen/tune/tune.h"

namespace gmmgen::tune {

Result run(Runtime& rt, const Request& rq, const Hooks& hooks) {
  using Clock = std::chrono::steady_clock;
  const auto seconds_since = [](Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  // Everything is checked before anything is compiled or written.
  if (rq.specs.empty()) throw InvalidArgument("tune: no spec given");
  if (!rq.csv.empty()) check_output_path("csv", rq.csv.string());
  if (!rq.svg.empty()) check_output_path("svg", rq.svg.string());
  if (!rq.table.empty()) check_output_path("table", rq.table.string());
  Result r;
  const int64_t l2 = l2_bytes();
  for (const KernelSpec& spec : rq.specs) {
    bench::Workload work;
    work.shape = rq.dist;
    work.m = rq.m;
    work.group_sizes = bench::group_sizes(rq.dist, int32_t(spec.g), rq.m, 12345);
    Sweep sw = plan_sweep(spec, work, rq.space, rq.isas, l2);
    const bool repeat = std::any_of(r.sweeps.begin(), r.sweeps.end(), [&](const Sweep& s) {
      return SameProblem{}(s.problem, sw.problem) && s.isas == sw.isas;
    });
    if (!repeat) r.sweeps.push_back(std::move(sw));
  }
  r.jobs = rq.jobs > 0 ? rq.jobs : int(std::max(1u, std::thread::hardware_concurrency()));
  r.machine = bench::describe_machine(rt.num_threads(), false);
  const tuning::Device device{r.machine.cpu, r.machine.isa, r.machine.compiler};
  r.table_path = rq.table.empty() ? default_table_path(rt.cache_dir(), r.machine.cpu) : rq.table;
  tuning::Table table = existing_table(r.table_path, device, "table");
  r.tuned.device = device;
  if (hooks.started) hooks.started(r);

  SweepOptions so;
  so.jobs = r.jobs, so.machine = r.machine;
  so.timing.threads = rt.num_threads(), so.timing.reps = rq.reps;
  so.timing.baseline = bench::BaselineKind::kNone;
  const auto t0 = Clock::now();
  for (size_t i = 0; i < r.sweeps.size(); ++i) {
    Sweep& sw = r.sweeps[i];
    // What is left of the budget, shared equally by the problems not swept yet.
    so.budget = 0;
    if (rq.budget > 0)
      so.budget = std::max(1e-9, rq.budget - seconds_since(t0)) / double(r.sweeps.size() - i);
    if (hooks.sweep_started) hooks.sweep_started(sw);
    run_sweep(rt, sw, so, hooks.progress);
    for (const Variant& v : sw.cands.variants) r.mismatches += v.state == Variant::State::kMismatch;
    if (const auto e = table_entry(sw, rt.num_threads()))
      r.tuned.entries.push_back(*e);
    else
      ++r.unresolved;
    if (hooks.sweep_done) hooks.sweep_done(sw);
    if (sw.stopped_by_caller) {
      r.interrupted = true;  // nothing is written: a table of half-run sweeps would mislead
      r.seconds = seconds_since(t0);
      return r;
    }
  }
  if (!r.tuned.entries.empty()) {
    write_table(r.table_path, table, r.tuned, rq.table.empty());
    r.table_entries = table.entries.size();
  }
  if (!rq.csv.empty()) write_file(rq.csv, csv_text(r.sweeps), false);
  if (!rq.svg.empty()) write_file(rq.svg, svg_text(r.sweeps), false);
  r.seconds = seconds_since(t0);
  return r;
}

}  // namespace gmmgen::tune
