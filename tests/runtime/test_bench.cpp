// The benchmark's own checks: a correct kernel reports a speed and agrees with the baselines;
// a fast wrong kernel reports none.
#include <gtest/gtest.h>

#include "gmmgen/bench/bench.h"
#include "gmmgen/runtime.hpp"
#include "gmmgen/spec.h"
#include "test_kernels.h"

namespace gmmgen {
namespace {

struct BenchCase {
  RuntimeOptions opts;
  KernelSpec spec;
  bench::Workload work;
  bench::Machine machine;
  BenchCase() {
    opts.jit = false;  // the compiled-in test kernels serve every call
    opts.num_threads = 2;
    // The test set's first kernel: f32, k=37, n=29, g=5 (K % tk != 0, odd N).
    spec = parse_text(test_kernels_kernels[0].info()->spec);
    work.shape = "custom";
    work.m = 61;
    work.group_sizes = bench::group_sizes("zipf", int32_t(spec.g), 53, 7);  // sum < m
    machine.threads = 2;
    machine.peak_gflops = 100;
  }
};

TEST(Bench, CorrectKernelReportsSpeedAndAgreesWithEveryBaseline) {
  BenchCase c;
  for (auto kind :
       {bench::BaselineKind::kNone, bench::BaselineKind::kOneDnn, bench::BaselineKind::kOpenBlas}) {
    Runtime rt(c.opts);
    rt.register_kernels(test_kernels_kernels, 1);
    bench::Options o;
    o.reps = 3, o.threads = 2, o.baseline = kind;
    const bench::Row row = bench::run(rt, c.spec, c.work, o, c.machine);
    SCOPED_TRACE(bench::to_string(kind));
    EXPECT_TRUE(row.ok) << row.failure;
    EXPECT_GT(row.gflops, 0);
    EXPECT_GT(row.ms, 0);
    EXPECT_DOUBLE_EQ(row.flops, 2.0 * 53 * c.spec.k * c.spec.n);
    EXPECT_NEAR(row.peak_fraction, row.gflops / 100, 1e-12);
    if (bench::baseline_available(kind) && kind != bench::BaselineKind::kNone) {
      EXPECT_GT(row.baseline_gflops, 0);
      EXPECT_NEAR(row.ratio, row.gflops / row.baseline_gflops, 1e-9);
    }
    const auto j = row.to_json();
    for (const char* key : {"shape", "op", "lhs", "rhs", "out", "ms", "gflops", "baseline",
                            "baseline_gflops", "ratio", "peak_gflops", "peak_fraction"})
      EXPECT_TRUE(j.contains(key)) << key;
    EXPECT_TRUE(j["gflops"].is_number());
  }
}

// Returns at once and writes nothing: as fast as a kernel gets, and wrong.
int run_nothing(const gmmgen_args*, void*, int64_t, int64_t) {
  return GMMGEN_OK;
}

TEST(Bench, FastWrongKernelReportsNoSpeed) {
  BenchCase c;
  gmmgen_kernel_entry wrong = test_kernels_kernels[0];
  wrong.run_items = &run_nothing;
  for (auto kind : {bench::BaselineKind::kNone, bench::BaselineKind::kOneDnn}) {
    Runtime rt(c.opts);
    rt.register_kernels(&wrong, 1);
    bench::Options o;
    o.reps = 1, o.baseline = kind;
    const bench::Row row = bench::run(rt, c.spec, c.work, o, c.machine);
    EXPECT_FALSE(row.ok);
    EXPECT_NE(row.failure, "");
    EXPECT_EQ(row.gflops, 0);
    EXPECT_EQ(row.ratio, 0);
    EXPECT_TRUE(row.to_json()["gflops"].is_null());
    EXPECT_TRUE(row.to_json()["ratio"].is_null());
  }
}

}  // namespace
}  // namespace gmmgen
