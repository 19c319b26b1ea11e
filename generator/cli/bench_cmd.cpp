// gmm-gen bench: kernel GFLOP/s side by side with a per-group baseline (DESIGN §5, §10).
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

#include "commands.h"
#include "gmmgen/bench/bench.h"

namespace gmmgen::cli {
namespace {

struct BenchOptions {
  SpecOptions specs;
  std::string shapes, dist = "uniform", baseline, json;
  int64_t m = 4096;
  int threads = 2, reps = 7;
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

int run_bench(const BenchOptions& o) {
  bench::Options opt;
  opt.threads = o.threads, opt.reps = o.reps;
  if (!o.baseline.empty()) {
    opt.baseline = bench::parse_baseline(o.baseline);
  } else {  // the best one found at configure time
    opt.baseline =
        bench::baseline_available(bench::BaselineKind::kOneDnn)     ? bench::BaselineKind::kOneDnn
        : bench::baseline_available(bench::BaselineKind::kOpenBlas) ? bench::BaselineKind::kOpenBlas
                                                                    : bench::BaselineKind::kNone;
  }
  if (o.threads < 1 || o.threads > 4096) throw InvalidArgument("--threads must be in [1, 4096]");
  if (o.reps < 1) throw InvalidArgument("--reps must be >= 1");
  // What to run: the standard shapes for gmm f32, gmm bf16 x bf16 -> f32 and tgmm f32, or the
  // given specs on --m rows split by --dist.
  std::vector<std::pair<KernelSpec, bench::Workload>> jobs;
  if (!o.shapes.empty()) {
    struct Kind {
      Op op;
      DType lhs, rhs, out;
    };
    const Kind kinds[] = {{Op::kGmm, DType::kF32, DType::kF32, DType::kF32},
                          {Op::kGmm, DType::kBF16, DType::kBF16, DType::kF32},
                          {Op::kTgmm, DType::kF32, DType::kF32, DType::kF32}};
    const auto names = o.shapes == "all" ? bench::standard_shape_names() : split(o.shapes);
    for (const Kind& k : kinds)
      for (const auto& name : names) {
        const bench::Shape s = bench::standard_shape(name, k.op, k.lhs, k.rhs, k.out);
        jobs.emplace_back(s.spec, s.work);
      }
  } else {
    for (const auto& spec : o.specs.specs()) {
      bench::Workload w;
      w.shape = "custom";
      w.m = o.m;
      w.group_sizes = bench::group_sizes(o.dist, int32_t(spec.g), o.m, 12345);
      jobs.emplace_back(spec, w);
    }
  }
  for (const auto& [spec, w] : jobs) validate(spec);

  const bench::Machine machine = bench::describe_machine(o.threads);
  std::printf(
      "cpu:       %s\nisa:       %s\ncompiler:  %s\nthreads:   %d\npeak:      %.1f GFLOP/s "
      "(f32 FMA, measured)\nbaseline:  %s\n\n",
      machine.cpu.c_str(), machine.isa.c_str(), machine.compiler.c_str(), machine.threads,
      machine.peak_gflops, bench::to_string(opt.baseline).c_str());
  std::printf("%-5s %-5s %-16s %10s %10s %10s %7s %7s  %s\n", "shape", "op", "lhs x rhs -> out",
              "ms", "GFLOP/s", "base GF/s", "ratio", "% peak", "check");
  std::fflush(stdout);
  RuntimeOptions ro;
  ro.num_threads = o.threads;
  Runtime rt(ro);
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  int failures = 0;
  for (const auto& [spec, w] : jobs) {
    const bench::Row r = bench::run(rt, spec, w, opt, machine);
    const std::string dtypes = r.lhs + "x" + r.rhs + "->" + r.out;
    if (r.ok) {
      std::printf("%-5s %-5s %-16s %10.3f %10.1f %10.1f %7.2f %6.1f%%  ok\n", r.shape.c_str(),
                  r.op.c_str(), dtypes.c_str(), r.ms, r.gflops, r.baseline_gflops, r.ratio,
                  100 * r.peak_fraction);
    } else {
      ++failures;  // a wrong kernel reports no speed
      std::printf("%-5s %-5s %-16s %10s %10s %10s %7s %7s  MISMATCH: %s\n", r.shape.c_str(),
                  r.op.c_str(), dtypes.c_str(), "-", "-", "-", "-", "-", r.failure.c_str());
    }
    std::fflush(stdout);
    rows.push_back(r.to_json());
  }
  if (!o.json.empty()) {
    std::ofstream out(o.json);
    out << nlohmann::ordered_json{{"machine", machine.to_json()}, {"rows", rows}}.dump(2) << "\n";
    if (!out) throw std::runtime_error("cannot write " + o.json);
  }
  return failures ? 1 : 0;
}

}  // namespace

Command add_bench(CLI::App& app) {
  auto o = std::make_shared<BenchOptions>();
  CLI::App* cmd = app.add_subcommand(
      "bench", "Time kernels beside a per-group oneDNN/OpenBLAS baseline; GFLOP/s, ratio, % peak");
  o->specs.add_to(*cmd);
  cmd->add_option("--shapes", o->shapes,
                  "Standard shapes (DESIGN §10): S1,S2,S3,S4 or all; runs gmm f32, gmm bf16 x "
                  "bf16 -> f32 and tgmm f32 on each");
  cmd->add_option("--m", o->m, "Rows M for --spec runs [4096]");
  cmd->add_option("--dist", o->dist,
                  "Group sizes for --spec runs: uniform | zipf | tiny | decode | sizes:a,b,... "
                  "[uniform]");
  cmd->add_option("--threads", o->threads, "Threads of the kernel and of the baseline [2]");
  cmd->add_option("--reps", o->reps, "Timed runs after warm-up; the median is reported [7]");
  cmd->add_option("--baseline", o->baseline,
                  "onednn | openblas | none [the first found at configure time]");
  cmd->add_option("--json", o->json,
                  "Also write {\"machine\": {...}, \"rows\": [...]} to this file");
  cmd->footer(
      "Each row: warm-up, then the median of --reps runs of the kernel and of the baseline\n"
      "(one oneDNN matmul or OpenBLAS sgemm per group, weights [K, N]), both checked against a\n"
      "float64 reference on sampled outputs and against each other; a row that fails reports no\n"
      "speed and the command exits 1. % peak is of the f32 FMA peak measured at start.\n"
      "Example:\n  gmm-gen bench --shapes all --threads 2 --json bench.json\n"
      "  gmm-gen bench --spec op=gmm,lhs=bf16,rhs=bf16,out=f32,k=2048,n=1408,g=64 --m 8192 "
      "--dist zipf");
  return {cmd, [o] { return run_bench(*o); }};
}

}  // namespace gmmgen::cli
