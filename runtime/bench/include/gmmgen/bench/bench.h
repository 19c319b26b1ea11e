// gmm-gen bench (DESIGN §5, §10): times a kernel side by side with a per-group baseline in one
// run, checks it, and reports GFLOP/s, the ratio to the baseline and the fraction of the
// machine's measured FMA peak.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gmmgen/runtime.hpp"
#include "gmmgen/spec.h"

namespace gmmgen::bench {

// A problem to time: rows and group sizes for a spec's K, N, G.
struct Workload {
  std::string shape;  // S1..S4, or "custom"
  int64_t m = 0;
  std::vector<int32_t> group_sizes;  // [G]
};

// Group sizes of a named distribution (DESIGN §5): uniform | zipf (s = 1.2 over 7/8 of the
// groups, every 8th empty) | tiny (1..2*mean-1 rows, ~M/G on average) | decode (each row picks a
// group at random) | sizes:a,b,... (explicit). The sum is m, except for explicit sizes, whose sum
// must not exceed it. Throws InvalidArgument naming the rule.
std::vector<int32_t> group_sizes(const std::string& dist, int32_t g, int64_t m, uint64_t seed);

// The standard shapes of DESIGN §10 (S1..S4) for an op and dtypes: the spec (heuristic tiling)
// and its workload.
struct Shape {
  KernelSpec spec;
  Workload work;
};
Shape standard_shape(const std::string& name, Op op, DType lhs, DType rhs, DType out);
std::vector<std::string> standard_shape_names();

enum class BaselineKind { kOneDnn, kOpenBlas, kNone };
BaselineKind parse_baseline(const std::string& name);  // onednn | openblas | none
std::string to_string(BaselineKind k);
bool baseline_available(BaselineKind k);

struct Machine {
  std::string cpu;       // lscpu's model name
  std::string flags;     // the CPU's feature flags
  std::string isa;       // the best ISA family gmm-gen has for it
  std::string compiler;  // the compiler kernels are built with
  int threads = 1;
  double peak_gflops = 0;  // f32 FMA peak with `threads` threads, measured
  nlohmann::ordered_json to_json() const;
};

// Measures the f32 FMA peak with a register-only loop of the host's best family.
double measure_peak_gflops(int threads);
Machine describe_machine(int threads);

struct Options {
  int threads = 2;
  int reps = 7;  // timed runs after warm-up; the median is reported
  BaselineKind baseline = BaselineKind::kOneDnn;
  uint64_t seed = 1;
};

struct Row {
  std::string shape, op, lhs, rhs, out, kernel;
  int64_t m = 0, k = 0, n = 0, g = 0;
  double flops = 0;  // 2 * rows in groups * K * N
  double ms = 0, gflops = 0;
  std::string baseline;
  double baseline_ms = 0, baseline_gflops = 0, ratio = 0;
  double peak_gflops = 0, peak_fraction = 0;
  bool ok = true;  // the output matched the float64 reference (sampled) and the baseline
  std::string failure;
  nlohmann::ordered_json to_json() const;
};

// Runs one spec on one workload: the kernel (through the runtime, compiled or cached) and the
// baseline, each warmed up, then timed `reps` times; both outputs are checked.
Row run(Runtime& rt, const KernelSpec& spec, const Workload& work, const Options& o,
        const Machine& machine);

}  // namespace gmmgen::bench
