// gmm-gen bench --ab SIDE_A SIDE_B: two kernels of each row's problem timed in alternating rounds.
#pragma once

#include <string>
#include <vector>

#include "gmmgen/bench/bench.h"
#include "gmmgen/runtime.hpp"

namespace gmmgen::cli {

struct AbJob {
  KernelSpec spec;  // tiled as the row would run
  bench::Workload work;
};

// Each side, one of:
//   this             this gmm-gen's kernel of the row (the runtime's: compiled in, cached or JIT)
//   tiling=TMxTKxTN  this gmm-gen's kernel at that tiling
//   cxx=COMPILER     this gmm-gen's kernel, emitted and compiled by COMPILER
//   PATH             the kernel emitted by another gmm-gen (an executable, or a build folder with
//                    bin/gmm-gen), compiled here with this runtime's compiler and flags
// Checks both outputs of every row against the float64 reference, prints one line per row (A and
// B ms, the median of B/A over the rounds and its 25th-75th percentiles), writes the JSON to
// `json` unless empty, and returns the exit status (1 if a kernel computed wrong results).
// Throws InvalidArgument naming --ab for a bad side.
int run_ab(const std::vector<std::string>& sides, const std::vector<AbJob>& jobs,
           const RuntimeOptions& ro, Runtime& rt, const bench::Options& o, const std::string& json);

}  // namespace gmmgen::cli
