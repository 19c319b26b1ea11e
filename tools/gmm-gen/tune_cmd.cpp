// gmm-gen tune: the command line of the tuning library (gmmgen/tune/tune.h): sweeps tilings (and
// ISA families) of a problem on a group-size distribution, shows progress, keeps the fastest and
// writes a tuning table (docs/tuning.md), with a CSV and an SVG heatmap when asked.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <thread>

#include "commands.h"
#include "gmmgen/bench/bench.h"
#include "gmmgen/tune/report.h"
#include "gmmgen/tune/tune.h"

namespace gmmgen::cli {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using tune::Sweep;
using tune::Variant;

std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

struct TuneOptions {
  SpecOptions specs;
  KernelFilter filter;
  std::string dist = "uniform", space, isa, table, csv, svg;
  int64_t m = 4096;
  int jobs = 0;       // unless given: the machine's cores
  double budget = 0;  // seconds; unless given: none
  int threads = 0;    // unless given: the runtime's default
  int reps = 5;
  CLI::Option *jobs_given = nullptr, *budget_given = nullptr, *threads_given = nullptr;
};

// A bar redrawn in place on a terminal; otherwise one flushed line per variant.
class Progress {
 public:
  Progress() : tty_(isatty(STDOUT_FILENO) == 1) {}
  void start(size_t total) { total_ = total, done_ = 0; }
  void status(const std::string& what, double best, double left) {
    if (tty_) draw(what, best, left);
  }
  void variant(const Variant& v, double heuristic_gflops, double best, double left) {
    ++done_;
    if (tty_) {
      draw(label(v) + "  " + outcome(v, heuristic_gflops), best, left);
      return;
    }
    std::printf("[%*zu/%zu] %-36s %s\n", int(std::to_string(total_).size()), done_, total_,
                label(v).c_str(), outcome(v, heuristic_gflops).c_str());
    std::fflush(stdout);
  }
  void retimed(const Variant& h) {
    if (tty_) return;
    // "[again]" in place of "[i/n]", the label column where the other lines have it.
    const int prefix = int(2 * std::to_string(total_).size() + 3);
    std::printf("[again] %-*s %s\n", std::max(1, 36 + prefix - 7), label(h).c_str(),
                outcome(h, 0).c_str());
    std::fflush(stdout);
  }
  void end() {
    if (tty_) std::printf("\n");
    std::fflush(stdout);
  }
  // The tuning library's callbacks, drawing here.
  tune::Progress callbacks() {
    tune::Progress p;
    p.status = [this](const std::string& what, double best, double left) {
      status(what, best, left);
    };
    p.variant = [this](const Variant& v, double h, double best, double left) {
      variant(v, h, best, left);
    };
    p.retimed = [this](const Variant& h) { retimed(h); };
    return p;
  }

  static std::string label(const Variant& v) {
    std::string s = tune::tiling_text(v.spec.tiling);
    if (v.spec.isa != Isa::kNative) s += ",isa=" + std::string(to_string(v.spec.isa));
    return v.heuristic ? s + " (heuristic)" : s;
  }
  static std::string outcome(const Variant& v, double heuristic_gflops) {
    char buf[160];
    const std::string compile = v.cached ? "cached" : "compiled in " + fixed(v.compile_s, 1) + " s";
    switch (v.state) {
      case Variant::State::kOk:
        if (heuristic_gflops > 0)
          std::snprintf(buf, sizeof buf, "%9.1f GFLOP/s  x%.2f  (%s)", v.gflops,
                        v.gflops / heuristic_gflops, compile.c_str());
        else
          std::snprintf(buf, sizeof buf, "%9.1f GFLOP/s  (%s)", v.gflops, compile.c_str());
        return buf;
      case Variant::State::kMismatch:
        return "MISMATCH (wrong results; reported as a bug): " + v.failure;
      case Variant::State::kFailed:
        return "failed: " + v.failure.substr(0, v.failure.find('\n'));
      default:
        return "not run";
    }
  }

 private:
  void draw(const std::string& what, double best, double left) {
    constexpr int kWidth = 24;
    const int filled = total_ ? int(kWidth * done_ / total_) : 0;
    std::string bar(size_t(filled), '#');
    bar.resize(kWidth, '.');
    char tail[96] = "";
    if (best > 0) std::snprintf(tail, sizeof tail, "  best %.1f GFLOP/s", best);
    if (left >= 0)
      std::snprintf(tail + std::strlen(tail), sizeof tail - std::strlen(tail), "  %.0f s left",
                    left);
    std::printf("\r\033[K[%s] %zu/%zu  %s%s", bar.c_str(), done_, total_, what.c_str(), tail);
    std::fflush(stdout);
  }
  bool tty_;
  size_t total_ = 0, done_ = 0;
};

void print_top(const Sweep& sw) {
  std::vector<const Variant*> ok;
  for (const Variant& v : sw.cands.variants)
    if (v.state == Variant::State::kOk) ok.push_back(&v);
  std::stable_sort(ok.begin(), ok.end(),
                   [](const Variant* a, const Variant* b) { return a->gflops > b->gflops; });
  const double h = sw.heuristic_gflops();
  std::printf("top %zu of %zu timed (%zu candidates) in %.0f s%s:\n",
              std::min<size_t>(5, ok.size()), sw.attempted(), sw.cands.variants.size(), sw.seconds,
              sw.stopped_by_budget ? ", stopped at the budget" : "");
  std::printf("  %-4s %6s %6s %6s  %-10s %10s %9s\n", "rank", "tm", "tk", "tn", "isa", "GFLOP/s",
              "speed-up");
  for (size_t i = 0; i < ok.size() && i < 5; ++i) {
    const Variant& v = *ok[i];
    const std::string su = h > 0 ? "x" + fixed(v.gflops / h, 2) : "-";
    std::printf("  %-4zu %6lld %6lld %6lld  %-10s %10.1f %9s%s\n", i + 1,
                (long long)v.spec.tiling.tm, (long long)v.spec.tiling.tk,
                (long long)v.spec.tiling.tn, std::string(to_string(v.spec.isa)).c_str(), v.gflops,
                su.c_str(), v.heuristic ? "  (heuristic)" : "");
  }
  if (h > 0)
    std::printf("  speed-up: over the heuristic's %s (%.1f GFLOP/s)\n",
                tune::tiling_text(sw.heuristic()->spec.tiling).c_str(), h);
  else if (sw.heuristic())
    std::printf("  the heuristic's %s did not run: %s\n",
                tune::tiling_text(sw.heuristic()->spec.tiling).c_str(),
                Progress::outcome(*sw.heuristic(), 0).c_str());
}

int run_tune(const TuneOptions& o) {
  // The options, named as given; tune::run checks the rest before anything is compiled.
  if (o.m < 1 || o.m > INT32_MAX)
    throw InvalidArgument("--m=" + std::to_string(o.m) + " must be in [1, 2^31)");
  const auto given = [](const CLI::Option* opt) { return opt && opt->count() > 0; };
  if (given(o.jobs_given) && (o.jobs < 1 || o.jobs > 256))
    throw InvalidArgument("-j " + std::to_string(o.jobs) + " must be in [1, 256]");
  if (given(o.budget_given) && !(std::isfinite(o.budget) && o.budget > 0))
    throw InvalidArgument("--budget " + fixed(o.budget, 1) + " must be a number of seconds > 0");
  if (given(o.threads_given) && (o.threads < 1 || o.threads > 4096))
    throw InvalidArgument("--threads " + std::to_string(o.threads) + " must be in [1, 4096]");
  if (o.reps < 1 || o.reps > 1000)
    throw InvalidArgument("--reps " + std::to_string(o.reps) + " must be in [1, 1000]");
  tune::Request rq;
  rq.space = o.space.empty() ? tune::Space{} : tune::parse_space(o.space);
  rq.isas = o.isa.empty() ? std::vector<Isa>{} : tune::parse_isa_list(o.isa);
  if (!o.csv.empty()) tune::check_output_path("--csv", o.csv);
  if (!o.svg.empty()) tune::check_output_path("--svg", o.svg);
  if (!o.table.empty()) tune::check_output_path("--table", o.table);
  rq.specs = o.filter.apply(o.specs.specs());
  rq.m = o.m, rq.dist = o.dist, rq.jobs = o.jobs, rq.budget = o.budget, rq.reps = o.reps;
  rq.table = o.table, rq.csv = o.csv, rq.svg = o.svg;

  RuntimeOptions ro;
  ro.num_threads = o.threads, ro.jit = true, ro.log = false;
  Runtime rt(ro);
  Progress progress;
  tune::Hooks hooks;
  hooks.progress = progress.callbacks();
  hooks.started = [&](const tune::Result& r) {
    std::printf(
        "cpu:       %s\nisa:       %s\ncompiler:  %s\nthreads:   %d (timing), -j %d "
        "(compiling)\nbudget:    %s\ntable:     %s\n",
        r.machine.cpu.c_str(), r.machine.isa.c_str(), r.machine.compiler.c_str(), rt.num_threads(),
        r.jobs, o.budget > 0 ? (fixed(o.budget, 0) + " s").c_str() : "none", r.table_path.c_str());
    std::fflush(stdout);
  };
  hooks.sweep_started = [&](const Sweep& sw) {
    std::printf("\n%s\n  M=%lld, %s: %.1f rows/group (bucket %s); %zu candidates",
                tuning::problem_text(sw.problem).c_str(), (long long)sw.work.m,
                sw.work.shape.c_str(), sw.rows_per_group,
                tuning::to_string(tuning::bucket_of(sw.rows_per_group)).c_str(),
                sw.cands.variants.size());
    if (sw.cands.pruned_scratch || sw.cands.pruned_cache)
      std::printf(" (pruned: %d over the scratch limit, %d over the L2 cache)",
                  sw.cands.pruned_scratch, sw.cands.pruned_cache);
    std::printf("\n");
    std::fflush(stdout);
    progress.start(sw.cands.variants.size());
  };
  hooks.sweep_done = [&](const Sweep& sw) {
    progress.end();
    print_top(sw);
    if (!sw.best()) std::printf("  no variant ran correctly: no table entry\n");
  };
  const tune::Result r = tune::run(rt, rq, hooks);

  std::printf("\n");
  if (!r.tuned.entries.empty())
    std::printf("table: %zu entr%s written to %s (%zu in all)\n", r.tuned.entries.size(),
                r.tuned.entries.size() == 1 ? "y" : "ies", r.table_path.c_str(), r.table_entries);
  if (!o.csv.empty()) std::printf("csv:   %s\n", o.csv.c_str());
  if (!o.svg.empty()) std::printf("svg:   %s\n", o.svg.c_str());
  std::printf("total: %.0f s\n", r.seconds);
  if (r.mismatches)
    std::printf("%d variant(s) computed wrong results (MISMATCH above): a bug; please report it\n",
                r.mismatches);
  return r.mismatches || r.unresolved ? 1 : 0;
}

}  // namespace

Command add_tune(CLI::App& app) {
  auto o = std::make_shared<TuneOptions>();
  CLI::App* cmd = app.add_subcommand(
      "tune", "Sweep tilings of a problem, keep the fastest, write a tuning table (+ CSV, SVG)");
  o->specs.add_to(*cmd);
  o->filter.add_to(*cmd);
  // --isa takes a list of families here: the spec's own --isa flag gives way to it.
  cmd->remove_option(cmd->get_option("--isa"));
  cmd->add_option(
      "--isa", o->isa,
      "ISA families to sweep, comma-separated (native, avx512bf16, avx512vnni, avx512, avx2, "
      "generic; each one this CPU runs) [the spec's isa]");
  cmd->add_option("--dist", o->dist,
                  "Group sizes: uniform | zipf | tiny | decode | sizes:a,b,... [uniform]");
  cmd->add_option("--m", o->m, "Rows M [4096]");
  cmd->add_option("--space", o->space,
                  "Tilings to sweep: \"tm=16,32,64;tk=128,256;tn=64\" (a key left out takes the "
                  "family's default values) [tm 16..512, tk 32..512, tn nr..256, powers of two, "
                  "pruned by the scratch limit and the L2 cache]");
  o->jobs_given = cmd->add_option("-j,--jobs", o->jobs, "Parallel compiles [the machine's cores]");
  o->budget_given = cmd->add_option(
      "--budget", o->budget, "Seconds for the whole sweep; it stops with what it has [no limit]");
  cmd->add_option("--table", o->table,
                  "Tuning table to write or merge into [<cache>/tuning/<cpu model>.json, which "
                  "the runtime reads]");
  cmd->add_option("--csv", o->csv, "Also write every timed variant to this CSV file");
  cmd->add_option("--svg", o->svg,
                  "Also write a heatmap of GFLOP/s over (tm, tn) per tk to this SVG file");
  o->threads_given = cmd->add_option(
      "--threads", o->threads,
      "Threads of each timed run [the runtime's default: GMMGEN_NUM_THREADS or cores]");
  cmd->add_option("--reps", o->reps, "Timed runs after warm-up; the median is kept [5]");
  cmd->footer(
      "The heuristic's tiling (the runtime's untuned choice) is timed first and again at the\n"
      "end (its faster run is the reference of the speed-ups), the space nearest it first.\n"
      "Batches of -j variants are compiled in parallel through the disk cache\n"
      "(a repeated sweep compiles nothing), then timed one at a time with the bench machinery\n"
      "(warm-up, median of --reps runs, output checked against the float64 reference; a wrong\n"
      "variant is reported, never kept). With --budget, a batch starts only if the times\n"
      "measured so far say it ends in time. The fastest variant becomes the table entry for the\n"
      "problem and the power-of-two bucket of its mean rows per group; later calls of that\n"
      "problem whose rows per group fall in the bucket use it (GMMGEN_LOG=info shows which).\n"
      "Example:\n"
      "  gmm-gen tune --spec op=gmm,lhs=f32,rhs=f32,out=f32,k=4096,n=512,g=128 --m 2048 \\\n"
      "      --dist tiny -j 2 --budget 120 --svg s3.svg --csv s3.csv");
  return {cmd, [o] { return run_tune(*o); }};
}

}  // namespace gmmgen::cli
