// The benchmark's own checks: a correct kernel reports a speed and agrees with the baselines;
// a fast wrong kernel reports none. Quantized rows: quantized inputs, a check that catches a
// kernel with slightly wrong scales, a baseline on the dequantized operands, and --quant.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <tuple>

#include "gmmgen/bench/bench.h"
#include "gmmgen/codes.h"
#include "gmmgen/heuristics.h"
#include "gmmgen/platform.hpp"
#include "gmmgen/runtime.hpp"
#include "gmmgen/spec.h"
#include "jit/toolchain.h"
#include "runtime_fixtures.h"
#include "scratch.h"
#include "smoke_kernels.h"
#include "smoke_quant.h"

namespace gmmgen {
namespace {

// `gmm-gen bench ARGS...` on the shared test cache.
ProcessResult bench_cli(const std::vector<std::string>& args) {
  std::vector<std::string> argv{"env", "GMMGEN_CACHE_DIR=" + testing::shared_test_cache().string(),
                                GMMGEN_CLI, "bench"};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_process(argv);
}

using testing::Scratch;

struct BenchCase {
  RuntimeOptions opts;
  KernelSpec spec;
  bench::Workload work;
  bench::Machine machine;
  BenchCase() {
    opts.jit = false;  // the compiled-in test kernels serve every call
    opts.num_threads = 2;
    // The test set's first kernel: f32, k=37, n=29, g=5 (K % tk != 0, odd N).
    spec = parse_text(smoke_kernels_kernels[0].info()->spec);
    work.shape = "custom";
    work.m = 61;
    work.group_sizes = bench::group_sizes("zipf", int32_t(spec.g), 53, 7);  // sum < m
    machine.threads = 2;
    machine.peak_gflops = 100;
  }
  // One row of that kernel on a runtime of the test set: 3 timed runs on 2 threads.
  bench::Row run(bench::BaselineKind baseline = bench::BaselineKind::kNone) const {
    Runtime rt(opts);
    rt.register_kernels(smoke_kernels_kernels, 1);
    bench::Options o;
    o.reps = 3, o.threads = 2, o.baseline = baseline;
    return bench::run(rt, spec, work, o, machine);
  }
};

TEST(Bench, CorrectKernelReportsSpeedAndAgreesWithEveryBaseline) {
  BenchCase c;
  for (auto kind :
       {bench::BaselineKind::kNone, bench::BaselineKind::kOneDnn, bench::BaselineKind::kOpenBlas}) {
    const bench::Row row = c.run(kind);
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
    // The group sizes of the call (a zipf draw summing to 53 of m = 61), so that another program
    // can make the same call.
    EXPECT_EQ(j["group_sizes"].get<std::vector<int32_t>>(), c.work.group_sizes);
    // Float rows keep the JSON they had: no quantization fields.
    EXPECT_FALSE(row.quantized);
    for (const char* key : {"lhs_quant", "rhs_quant", "baseline_dtype", "vs_float"})
      EXPECT_FALSE(j.contains(key)) << key;
  }
}

// A row reports the fraction of its product path's peak and of its roofline, max(flops / path
// peak, bytes / bandwidth) with the bytes of the cost model, and which bound applies; without a
// measured path peak it reports neither.
TEST(Bench, RooflineIsTheLargerOfComputeAndMemoryTime) {
  BenchCase c;
  const double bytes = double(cost_estimate(c.spec).bytes.at(c.work.m));
  EXPECT_DOUBLE_EQ(bytes, 61.0 * (37 + 29) * 4 + 5.0 * 37 * 29 * 4);
  // (path peak GFLOP/s, bandwidth GB/s, the bound they make): 113,738 flops over 37,564 bytes.
  for (auto [peak, bandwidth, bound] :
       {std::tuple{1.0, 1000.0, "compute"}, std::tuple{1e6, 0.001, "memory"}}) {
    c.machine.path_peak_gflops = {{bench::path_key(c.spec), peak}};
    c.machine.bandwidth_gbs = bandwidth;
    const bench::Row row = c.run();
    ASSERT_TRUE(row.ok) << row.failure;
    EXPECT_EQ(row.path, "f32-fma");
    EXPECT_DOUBLE_EQ(row.bytes, bytes);
    EXPECT_DOUBLE_EQ(row.path_peak_gflops, peak);
    EXPECT_NEAR(row.path_fraction, row.gflops / peak, 1e-12);
    const double compute_ms = row.flops / (peak * 1e6), memory_ms = bytes / (bandwidth * 1e6);
    EXPECT_DOUBLE_EQ(row.roofline_ms, std::max(compute_ms, memory_ms));
    EXPECT_NEAR(row.roofline_fraction, row.roofline_ms / row.ms, 1e-12);
    EXPECT_EQ(row.bound, bound);
    const auto j = row.to_json();
    EXPECT_EQ(j["bound"], bound);
    EXPECT_EQ(j["path"], "f32-fma");
    EXPECT_DOUBLE_EQ(j["roofline_fraction"].get<double>(), row.roofline_fraction);
  }
  c.machine.path_peak_gflops.clear();
  c.machine.peak_gflops = 0;  // nor the f32 FMA peak of the host family, which is this path
  const bench::Row row = c.run();
  EXPECT_EQ(row.path_peak_gflops, 0);
  EXPECT_EQ(row.bound, "");
  const auto j = row.to_json();
  for (const char* key :
       {"path_peak_gflops", "path_fraction", "roofline_ms", "roofline_fraction", "bound"})
    EXPECT_TRUE(j[key].is_null()) << key;
}

// bench measures the f32 peak and the bandwidth again after its rows and, where either rose,
// sets every row's shares of the machine's figures again: they follow the figures they are given.
TEST(Bench, RowsTakeTheMachinesFiguresAgain) {
  BenchCase c;
  const std::string key = bench::path_key(c.spec);
  c.machine.peak_gflops = 10;
  c.machine.path_peak_gflops = {{key, 1.0}};
  c.machine.bandwidth_gbs = 1000;
  bench::Row row = c.run();
  ASSERT_TRUE(row.ok) << row.failure;
  EXPECT_EQ(row.bound, "compute");
  EXPECT_NEAR(row.peak_fraction, row.gflops / 10, 1e-12);
  row.quantize_gbs = 2;  // as a row with a quantizer has
  c.machine.peak_gflops = 20;
  c.machine.path_peak_gflops = {{key, 1e6}};
  c.machine.bandwidth_gbs = 0.001;
  bench::set_machine_figures(row, c.machine, key);
  EXPECT_DOUBLE_EQ(row.peak_gflops, 20);
  EXPECT_NEAR(row.peak_fraction, row.gflops / 20, 1e-12);
  EXPECT_DOUBLE_EQ(row.path_peak_gflops, 1e6);
  EXPECT_NEAR(row.path_fraction, row.gflops / 1e6, 1e-12);
  EXPECT_DOUBLE_EQ(row.roofline_ms, row.bytes / (0.001 * 1e6));
  EXPECT_NEAR(row.roofline_fraction, row.roofline_ms / row.ms, 1e-12);
  EXPECT_EQ(row.bound, "memory");
  EXPECT_DOUBLE_EQ(row.quantize_bandwidth_fraction, 2 / 0.001);
  c.machine.path_peak_gflops.clear();
  c.machine.peak_gflops = 0;  // no peak for the row's path (the host family's f32 FMA) any more
  bench::set_machine_figures(row, c.machine, key);
  EXPECT_EQ(row.path_peak_gflops, 0);
  EXPECT_EQ(row.path_fraction, 0);
  EXPECT_EQ(row.roofline_fraction, 0);
  EXPECT_EQ(row.bound, "");
  EXPECT_DOUBLE_EQ(row.quantize_bandwidth_fraction, 2 / 0.001);
}

// The product path of each kind of kernel on each family: the instruction its products run on.
TEST(Bench, ProductPathFollowsTheFamilysInstructions) {
  const struct {
    const char* spec;
    Isa isa;
    const char* path;
  } cases[] = {
      {"op=gmm,lhs=f32,rhs=f32,out=f32,k=64,n=64,g=2,tm=32,tk=64,tn=64", Isa::kAvx512Bf16,
       "f32-fma"},
      {"op=gmm,lhs=bf16,rhs=bf16,out=f32,k=64,n=64,g=2,tm=32,tk=64,tn=64", Isa::kAvx512Bf16,
       "bf16-dot"},
      {"op=tgmm,lhs=bf16,rhs=bf16,out=f32,k=64,n=64,g=2,tm=32,tk=64,tn=64", Isa::kAvx512Bf16,
       "bf16-dot"},
      {"op=gmm,lhs=bf16,rhs=bf16,out=f32,k=64,n=64,g=2,tm=32,tk=64,tn=64", Isa::kAvx512, "f32-fma"},
      {"op=gmm,lhs=bf16,rhs=bf16,out=f32,k=64,n=64,g=2,tm=32,tk=64,tn=64", Isa::kAvx2, "f32-fma"},
      {"op=gmm,lhs=bf16,rhs=bf16,out=f32,k=64,n=64,g=2,tm=32,tk=64,tn=64", Isa::kAmx, "amx-tiles"},
      {"op=tgmm,lhs=bf16,rhs=bf16,out=f32,k=64,n=64,g=2,tm=32,tk=64,tn=64", Isa::kAmx, "amx-tiles"},
      {"op=gmm,lhs=bf16,rhs=i4,out=f32,rhs_quant=block:32,k=64,n=64,g=2,tm=32,tk=64,tn=64",
       Isa::kAmx, "amx-tiles"},
      {"op=gmm,lhs=i8,rhs=i8,out=f32,lhs_quant=channel,rhs_quant=channel,k=64,n=64,g=2,tm=32,tk=64,"
       "tn=64",
       Isa::kAvx512Bf16, "int-dot"},
      {"op=gmm,lhs=i8,rhs=i4,out=f32,lhs_quant=block:32,rhs_quant=block:32,k=64,n=64,g=2,tm=32,tk="
       "64,tn=64",
       Isa::kAvx2, "int-dot"},
      {"op=gmm,lhs=i8,rhs=i4,out=f32,lhs_quant=block:32,rhs_quant=block:32,k=64,n=64,g=2,tm=32,tk="
       "64,tn=64",
       Isa::kAmx, "amx-int-tiles"},
      // Row tiles or scale blocks not in whole 32-deep steps: the integer dot product.
      {"op=gmm,lhs=i8,rhs=i8,out=f32,lhs_quant=block:16,rhs_quant=channel,k=64,n=64,g=2,tm=32,tk="
       "64,"
       "tn=64",
       Isa::kAmx, "int-dot"},
      {"op=gmm,lhs=i8,rhs=i8,out=f32,lhs_quant=channel,rhs_quant=channel,k=64,n=64,g=2,tm=40,tk=64,"
       "tn=64",
       Isa::kAmx, "int-dot"},
      {"op=gmm,lhs=i8,rhs=i8,out=f32,lhs_quant=channel,rhs_quant=channel,k=64,n=64,g=2,tm=32,tk=64,"
       "tn=64",
       Isa::kAvx512, "f32-fma"},
      // avx512vnni: VNNI's integer dot product, and no bf16 pairs.
      {"op=gmm,lhs=i8,rhs=i8,out=f32,lhs_quant=channel,rhs_quant=channel,k=64,n=64,g=2,tm=32,tk=64,"
       "tn=64",
       Isa::kAvx512Vnni, "int-dot"},
      {"op=gmm,lhs=bf16,rhs=bf16,out=f32,k=64,n=64,g=2,tm=32,tk=64,tn=64", Isa::kAvx512Vnni,
       "f32-fma"},
      {"op=gmm,lhs=bf16,rhs=i8,out=f32,rhs_quant=channel,k=64,n=64,g=2,tm=32,tk=64,tn=64",
       Isa::kAvx512Vnni, "f32-fma"},
      {"op=gmm,lhs=bf16,rhs=i8,out=f32,rhs_quant=channel,k=64,n=64,g=2,tm=32,tk=64,tn=64",
       Isa::kAvx512Bf16, "bf16-dot"},
      // amx pairs codes only on its tiles (its vdpbf16ps is slower than its FMA): fp8 activations,
      // a tgmm, and a tiling not in whole 32-deep steps widen to f32.
      {"op=gmm,lhs=f8e4m3,rhs=f8e4m3,out=f32,lhs_quant=block:128,rhs_quant=block:128,k=128,n=64,g="
       "2,tm=32,tk=128,tn=64",
       Isa::kAvx512Bf16, "bf16-dot"},
      {"op=gmm,lhs=f8e4m3,rhs=f8e4m3,out=f32,lhs_quant=block:128,rhs_quant=block:128,k=128,n=64,g="
       "2,tm=32,tk=128,tn=64",
       Isa::kAmx, "f32-fma"},
      {"op=tgmm,lhs=f8e4m3,rhs=f8e5m2,out=f32,lhs_quant=block:128,rhs_quant=block:128,k=64,n=64,g="
       "2,tm=128,tk=64,tn=64",
       Isa::kAmx, "f32-fma"},
      {"op=gmm,lhs=bf16,rhs=i4,out=f32,rhs_quant=block:32,k=64,n=64,g=2,tm=40,tk=64,tn=64",
       Isa::kAmx, "f32-fma"},
      {"op=gmm,lhs=f32,rhs=f32,out=f32,k=64,n=64,g=2,tm=32,tk=64,tn=64", Isa::kGeneric, "f32-fma"},
  };
  for (const auto& t : cases) {
    KernelSpec s = parse_text(t.spec);
    s.isa = t.isa;
    EXPECT_EQ(to_string(product_path(s, isa_family(t.isa))), t.path)
        << t.spec << " isa=" << to_string(t.isa);
  }
}

// The paths the rows use are measured once each, with the read bandwidth; a path the host has
// gets a positive peak.
TEST(Bench, MeasuresThePeakOfEachPathARowUses) {
  bench::Machine m;
  m.threads = 2;
  const KernelSpec f32 =
      parse_text("op=gmm,lhs=f32,rhs=f32,out=f32,k=64,n=64,g=2,tm=16,tk=64,tn=16");
  bench::measure_paths(m, {f32, f32});
  ASSERT_EQ(m.path_peak_gflops.size(), 1u);
  EXPECT_EQ(m.path_peak_gflops.begin()->first, "f32-fma " + std::string(to_string(host_isa())));
  EXPECT_GT(m.path_peak_gflops.begin()->second, 0);
  EXPECT_GT(m.bandwidth_gbs, 0);
  const auto j = m.to_json();
  EXPECT_GT(j["path_peak_gflops"][bench::path_key(f32)].get<double>(), 0);
  EXPECT_GT(j["bandwidth_gbs"].get<double>(), 0);
  // The host family's f32 FMA peak is the machine's, when describe_machine measured it.
  bench::Machine again;
  again.threads = 2, again.peak_gflops = 123, again.bandwidth_gbs = 4;
  bench::measure_paths(again, {f32});
  EXPECT_TRUE(again.path_peak_gflops.empty());  // nothing measured: the machine's peak is it
  EXPECT_EQ(again.path_peak(bench::path_key(f32)), 123);
  EXPECT_EQ(again.to_json()["path_peak_gflops"][bench::path_key(f32)], 123);
  EXPECT_EQ(again.bandwidth_gbs, 4);  // measured once
}

// AMX tiles get a measured peak where the host has them (tdpbf16ps does 16 x 16 x 32 products an
// instruction: far above the f32 FMA peak; tdpbssd 16 x 16 x 64, above tdpbf16ps), none
// elsewhere; a family without tiles has none.
TEST(Bench, MeasuresTheTilePeakWhereTheHostHasTiles) {
  const double tiles =
      bench::measure_path_peak_gflops(ProductPath::kTiles, isa_family(Isa::kAmx), 1);
  const double int_tiles =
      bench::measure_path_peak_gflops(ProductPath::kIntTiles, isa_family(Isa::kAmx), 1);
  if (isa_family(host_isa()).tiles) {
    EXPECT_GT(tiles, 2 * bench::measure_peak_gflops(1));
    EXPECT_GT(int_tiles, 1.2 * tiles);
  } else {
    EXPECT_EQ(tiles, 0);
    EXPECT_EQ(int_tiles, 0);
  }
  for (const ProductPath p : {ProductPath::kTiles, ProductPath::kIntTiles})
    EXPECT_EQ(bench::measure_path_peak_gflops(p, isa_family(Isa::kAvx512Bf16), 1), 0);
}

// Returns at once and writes nothing: as fast as a kernel gets, and wrong.
int run_nothing(const gmmgen_args*, void*, int64_t, int64_t) {
  return GMMGEN_OK;
}

TEST(Bench, FastWrongKernelReportsNoSpeed) {
  BenchCase c;
  gmmgen_kernel_entry wrong = smoke_kernels_kernels[0];
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

// ---- Quantized rows ----------------------------------------------------------------------------

// The compiled-in quantized kernel of the smoke_quant test set with this spec text.
const gmmgen_kernel_entry& quant_kernel(const std::string& text) {
  const KernelSpec want = parse_text(text);
  for (int32_t i = 0; i < smoke_quant_kernel_count; ++i)
    if (parse_text(smoke_quant_kernels[i].info()->spec) == want) return smoke_quant_kernels[i];
  throw std::runtime_error("no smoke_quant kernel " + text);
}

bench::Workload workload(const KernelSpec& s, int64_t m, const char* dist, uint64_t seed) {
  bench::Workload w;
  w.shape = "custom";
  w.m = m;
  w.group_sizes = bench::group_sizes(dist, int32_t(s.g), m - 3, seed);  // rows past the groups
  return w;
}

// Plain-output, unsharded kernels of the smoke_quant set: fp8 block (1xB lhs, BxC rhs), i8 x i8
// per channel (exact i32 products), i4 x i4 into f16 with transposed weights, bf16 x nf4 blocks,
// f32 x t2, and tgmm with fp8 and i8 blocks of global rows (group boundaries inside blocks).
const char* const kQuantSpecs[] = {
    "op=gmm,lhs=f8e4m3,rhs=f8e4m3,out=bf16,lhs_quant=block:32,rhs_quant=block:32x32,k=200,n=66,"
    "g=4,tm=16,tk=64,tn=32",
    "op=gmm,lhs=i8,rhs=i8,out=f32,lhs_quant=channel,rhs_quant=channel,k=200,n=66,g=4,tm=16,tk=64,"
    "tn=32",
    "op=gmm,lhs=i4,rhs=i4,out=f16,lhs_quant=channel,rhs_quant=block:32,k=201,n=35,g=3,tm=8,tk=64,"
    "tn=16,transpose_rhs=1",
    "op=gmm,lhs=bf16,rhs=nf4,out=bf16,rhs_quant=block:64,k=130,n=48,g=3,tm=16,tk=64,tn=32,"
    "transpose_rhs=1",
    "op=gmm,lhs=f32,rhs=t2,out=f32,rhs_quant=channel,k=128,n=66,g=3,tm=16,tk=64,tn=32",
    "op=tgmm,lhs=f8e4m3,rhs=f8e5m2,out=f32,lhs_quant=block:128,rhs_quant=block:128,k=96,n=80,g=4,"
    "tm=64,tk=64,tn=32",
    "op=tgmm,lhs=i8,rhs=i8,out=f32,lhs_quant=block:32,rhs_quant=block:32,k=48,n=40,g=4,tm=16,"
    "tk=32,tn=16",
};

TEST(BenchQuant, QuantizedRowsCheckAgainstTheDequantizedReferenceAndBaselines) {
  bench::Machine machine;
  machine.threads = 2, machine.peak_gflops = 100;
  for (const char* text : kQuantSpecs) {
    const KernelSpec spec = parse_text(text);
    RuntimeOptions ro;
    ro.jit = false, ro.num_threads = 2;
    Runtime rt(ro);
    rt.register_kernels(&quant_kernel(text), 1);
    // tgmm: 150 rows in blocks of 32 or 128 global rows, zipf groups (one empty).
    const bench::Workload w = workload(spec, spec.op == Op::kTgmm ? 150 : 70, "zipf", 3);
    for (auto kind : {bench::BaselineKind::kNone, bench::BaselineKind::kOneDnn,
                      bench::BaselineKind::kOpenBlas}) {
      SCOPED_TRACE(std::string(text) + " " + bench::to_string(kind));
      bench::Options o;
      o.reps = 1, o.threads = 2, o.baseline = kind;
      const bench::Row row = bench::run(rt, spec, w, o, machine);
      EXPECT_TRUE(row.ok) << row.failure;
      EXPECT_TRUE(row.quantized);
      EXPECT_GT(row.gflops, 0);
      const DType act = spec.lhs == DType::kBF16 ? DType::kBF16 : DType::kF32;
      EXPECT_EQ(bench::activation_dtype(spec), act);
      EXPECT_EQ(row.baseline_dtype, std::string(to_string(act)));
      if (kind != bench::BaselineKind::kNone && bench::baseline_available(kind)) {
        // oneDNN's bf16 matmul needs AVX-512: on other CPUs the row has no baseline and says
        // why (and the table prints "-").
        if (kind == bench::BaselineKind::kOneDnn && act == DType::kBF16 &&
            !__builtin_cpu_supports("avx512bw")) {
          EXPECT_TRUE(row.baseline_gflops > 0 ||
                      row.baseline.find("(unavailable: oneDNN has no bf16 x bf16 -> f32 matmul "
                                        "on this CPU") != std::string::npos)
              << row.baseline;
        } else {
          EXPECT_GT(row.baseline_gflops, 0);
        }
      }
      const auto j = row.to_json();
      EXPECT_EQ(j["lhs_quant"], to_string(spec.lhs_quant));
      EXPECT_EQ(j["rhs_quant"], to_string(spec.rhs_quant));
      EXPECT_EQ(j["baseline_dtype"], to_string(act));
      EXPECT_TRUE(j.contains("vs_float"));
      EXPECT_TRUE(j["vs_float"].is_null());  // nobody timed the float kernel here
      // gmm on lhs codes: the quantizer on f32 activations alone, and the call quantizing them.
      if (spec.op == Op::kGmm && codes::is_quantized(spec.lhs)) {
        EXPECT_GT(row.quantize_ms, 0);
        EXPECT_NEAR(row.quantize_gbs, 70.0 * spec.k * 4 / (row.quantize_ms * 1e6),
                    1e-9 * row.quantize_gbs);
        EXPECT_GT(row.end_to_end_ms, 0);
        EXPECT_GT(row.end_to_end_bf16_ms, 0);
        EXPECT_NEAR(row.end_to_end_gflops, row.flops / (row.end_to_end_ms * 1e6),
                    1e-9 * row.end_to_end_gflops);
        EXPECT_EQ(row.end_to_end_ratio > 0, row.baseline_gflops > 0);
        EXPECT_EQ(row.quantize_bandwidth_fraction, 0);  // no bandwidth measured here
        for (const char* key : {"quantize_ms", "quantize_gbs", "end_to_end_ms", "end_to_end_gflops",
                                "end_to_end_bf16_ms"})
          EXPECT_TRUE(j[key].is_number()) << key;
        EXPECT_TRUE(j["end_to_end_vs_float"].is_null());
      } else {
        EXPECT_EQ(row.end_to_end_ms, 0);
        EXPECT_FALSE(j.contains("end_to_end_ms"));
      }
    }
  }
}

// The float kernel timed beside a quantized row is that row's float counterpart (any tiling);
// anything else is refused before a kernel runs.
TEST(BenchQuant, FloatKernelBesideARowIsItsFloatCounterpart) {
  bench::Machine machine;
  machine.threads = 2, machine.peak_gflops = 100;
  const KernelSpec spec = parse_text(kQuantSpecs[0]);
  RuntimeOptions ro;
  ro.jit = false, ro.num_threads = 2;
  Runtime rt(ro);
  rt.register_kernels(&quant_kernel(kQuantSpecs[0]), 1);
  bench::Options o;
  o.reps = 1, o.baseline = bench::BaselineKind::kNone;
  const bench::Workload w = workload(spec, 70, "uniform", 5);
  KernelSpec other_out = bench::float_counterpart(spec);
  other_out.out = other_out.out == DType::kF32 ? DType::kBF16 : DType::kF32;
  for (const KernelSpec* f : std::initializer_list<const KernelSpec*>{&spec, &other_out})
    EXPECT_THROW(bench::run(rt, spec, w, o, machine, f), InvalidArgument);
  const KernelSpec counterpart = bench::float_counterpart(spec);
  BenchCase c;
  EXPECT_THROW(bench::run(rt, c.spec, c.work, o, c.machine, &counterpart), InvalidArgument);
}

// A kernel that reads every rhs scale 1 + 2^-7 too large: the output is 0.8% off, far below any
// eye's notice and far above the check's bound.
struct MisScaled {
  static inline const gmmgen_kernel_entry* real = nullptr;
  static inline int64_t count = 0;  // rhs scales of the call
  static inline std::vector<float> scales;
  static int plan(const gmmgen_args* a, void* ws, int64_t bytes, int64_t* items, char* err,
                  size_t len) {
    scales.assign(a->rhs_scale, a->rhs_scale + count);
    for (float& s : scales) s *= 1.0f + 1.0f / 128;
    return real->plan(a, ws, bytes, items, err, len);
  }
  static int run_items(const gmmgen_args* a, void* ws, int64_t begin, int64_t end) {
    gmmgen_args b = *a;
    b.rhs_scale = scales.data();
    return real->run_items(&b, ws, begin, end);
  }
};

TEST(BenchQuant, SlightlyWrongQuantizedKernelIsCaughtAndReportsNoSpeed) {
  bench::Machine machine;
  machine.threads = 2, machine.peak_gflops = 100;
  // i8 x i8 per channel (the tight bound of exact integer products; rhs scales [G, N]) and
  // bf16 x nf4 with 64-blocks ([G, N, ceil(K/64)] with transposed weights).
  struct Case {
    const char* text;
    int64_t scales;
  };
  const Case cases[] = {{kQuantSpecs[1], 4 * 66}, {kQuantSpecs[3], 3 * 48 * 3}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    const KernelSpec spec = parse_text(c.text);
    MisScaled::real = &quant_kernel(c.text);
    MisScaled::count = c.scales;
    gmmgen_kernel_entry wrong = *MisScaled::real;
    wrong.plan = &MisScaled::plan;
    wrong.run_items = &MisScaled::run_items;
    RuntimeOptions ro;
    ro.jit = false, ro.num_threads = 2;
    Runtime rt(ro);
    rt.register_kernels(&wrong, 1);
    bench::Options o;
    o.reps = 1, o.threads = 2, o.baseline = bench::BaselineKind::kNone;
    const bench::Row row = bench::run(rt, spec, workload(spec, 70, "uniform", 5), o, machine);
    EXPECT_FALSE(row.ok);
    EXPECT_NE(row.failure.find("float64 reference"), std::string::npos) << row.failure;
    EXPECT_EQ(row.gflops, 0);
    EXPECT_TRUE(row.to_json()["gflops"].is_null());
    EXPECT_TRUE(row.to_json()["vs_float"].is_null());
  }
}

TEST(BenchQuant, PresetsAndTheirFloatCounterparts) {
  const auto all = bench::parse_quant_set("default");
  ASSERT_EQ(all.size(), bench::quant_presets().size());
  EXPECT_EQ(all.size(), 8u);
  KernelSpec base;
  base.op = Op::kGmm, base.out = DType::kF32;
  base.k = 1024, base.n = 1408, base.g = base.g_local = 8;
  for (const auto& p : all) {
    SCOPED_TRACE(p.name);
    const KernelSpec q = bench::with_quant(base, p);
    EXPECT_NO_THROW(validate(q));
    EXPECT_TRUE(bench::is_quantized(q));
    const KernelSpec f = bench::float_counterpart(q);
    EXPECT_FALSE(bench::is_quantized(f));
    const DType act = p.lhs == DType::kBF16 ? DType::kBF16 : DType::kF32;
    EXPECT_EQ(f.lhs, act);
    EXPECT_EQ(f.rhs, act);
    EXPECT_EQ(f.out, DType::kF32);
    EXPECT_EQ(f.lhs_quant.kind, QuantKind::kNone);
    EXPECT_EQ(f.rhs_quant.kind, QuantKind::kNone);
    EXPECT_EQ(f.k, q.k);
    EXPECT_EQ(f.n, q.n);
  }
  // Block FP8: 1x128 activations, 128x128 weights, compared with f32 x f32.
  const auto fp8 = bench::parse_quant_set("fp8-block");
  ASSERT_EQ(fp8.size(), 1u);
  EXPECT_EQ(fp8[0].lhs, DType::kF8E4M3);
  EXPECT_EQ(fp8[0].lhs_quant, (Quant{QuantKind::kBlock, 128, 0}));
  EXPECT_EQ(fp8[0].rhs_quant, (Quant{QuantKind::kBlock, 128, 128}));
  // Pairs, and duplicates dropped (int8-channel is i8@channel/i8@channel).
  const auto set = bench::parse_quant_set("bf16/i4@block:128,int8-channel,i8@channel/i8@channel");
  ASSERT_EQ(set.size(), 2u);
  EXPECT_EQ(set[0].lhs, DType::kBF16);
  EXPECT_EQ(set[0].rhs, DType::kI4);
  EXPECT_EQ(set[0].rhs_quant, (Quant{QuantKind::kBlock, 128, 0}));
  EXPECT_EQ(set[0].lhs_quant.kind, QuantKind::kNone);
  EXPECT_EQ(set[1].name, "int8-channel");
}

// The weight gradient of block-FP8 activations: gmm_vjp's drhs tgmm reads them in blocks of B
// rows and dout as f8e5m2 in blocks of B; presets whose backward takes float activations have none.
TEST(BenchQuant, WeightGradientOfBlockFp8) {
  KernelSpec tgmm;
  tgmm.op = Op::kTgmm, tgmm.lhs = tgmm.rhs = tgmm.out = DType::kF32;
  tgmm.k = 1024, tgmm.n = 1408, tgmm.g = tgmm.g_local = 8;
  tgmm.tiling = default_tiling(tgmm);
  for (const auto& p : bench::parse_quant_set("default,f8e5m2@block:64/f8e4m3@block:64x64")) {
    SCOPED_TRACE(p.name);
    const auto grad = bench::weight_gradient(tgmm, p);
    if (p.name != "fp8-block" && p.name != "f8e5m2@block:64/f8e4m3@block:64x64") {
      EXPECT_FALSE(grad.has_value());
      continue;
    }
    ASSERT_TRUE(grad.has_value());
    const int64_t b = p.name == "fp8-block" ? 128 : 64;
    EXPECT_EQ(grad->op, Op::kTgmm);
    EXPECT_EQ(grad->lhs, p.lhs);
    EXPECT_EQ(grad->rhs, DType::kF8E5M2);
    EXPECT_EQ(grad->out, DType::kF32);
    EXPECT_EQ(grad->lhs_quant, (Quant{QuantKind::kBlock, b, 0}));
    EXPECT_EQ(grad->rhs_quant, (Quant{QuantKind::kBlock, b, 0}));
    EXPECT_EQ(grad->k, tgmm.k);
    EXPECT_EQ(grad->n, tgmm.n);
    EXPECT_NO_THROW(validate(*grad));
    const KernelSpec f = bench::float_counterpart(*grad);
    EXPECT_EQ(f.lhs, DType::kF32);
    EXPECT_EQ(f.rhs, DType::kF32);
    EXPECT_EQ(f.op, Op::kTgmm);
  }
}

void expect_quant_error(const std::string& text, std::initializer_list<const char*> words) {
  SCOPED_TRACE(text);
  try {
    bench::parse_quant_set(text);
    ADD_FAILURE() << "no error";
  } catch (const InvalidArgument& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("--quant", 0), 0u) << msg;  // names the option first
    for (const char* w : words) EXPECT_NE(msg.find(w), std::string::npos) << w << " in: " << msg;
  }
}

TEST(BenchQuant, QuantErrorsNameTheOptionAndTheRule) {
  expect_quant_error("fp9-block", {"'fp9-block'", "is not one of", "fp8-block", "LHS[@SCHEME]"});
  expect_quant_error("", {"empty item"});
  expect_quant_error("fp8-block,,int8-channel", {"empty item"});
  expect_quant_error("fp8-block,", {"empty item"});
  expect_quant_error("bf16/i8@channel/i8", {"is not one of"});
  expect_quant_error("bf16/bf16", {"quantizes neither operand"});
  expect_quant_error("bf17/i8@channel", {"'bf17/i8@channel'", "lhs"});
  expect_quant_error("bf16/i8@block:100", {"rhs_quant", "power of two"});
  expect_quant_error("nf4@channel/i8@channel", {"nf4", "lhs"});
  expect_quant_error("f8e4m3@block:128x128/f8e4m3@block:128", {"lhs_quant"});
  expect_quant_error("bf16/i8", {"rhs"});  // i8 codes need scales
}

// The CLI: --quant without --shapes, or a bad --quant, fails before any timing.
TEST(BenchQuant, CliRejectsBadQuantBeforeRunning) {
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--quant", "default", "--spec",
                                 "op=gmm,lhs=f32,rhs=f32,out=f32,k=8,n=8,g=1"},
        std::vector<std::string>{"--shapes", "S1", "--quant", "int3-channel"},
        std::vector<std::string>{"--shapes", "S1", "--quant", "", "--reps", "1", "--baseline",
                                 "none"}}) {
    const ProcessResult r = bench_cli(args);
    EXPECT_NE(r.status, 0) << r.output;
    EXPECT_NE(r.output.find("--quant"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("GFLOP/s"), std::string::npos) << r.output;  // nothing was timed
  }
}

// --shapes takes the family and the tiling (--isa, --tm, --tk, --tn) for every row; a spec
// option the standard shapes set would be ignored, so it is an error before anything is timed.
TEST(BenchShapes, TakeIsaAndTilingRejectOtherSpecOptions) {
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--shapes", "S1", "--lhs", "bf16"},
        std::vector<std::string>{"--shapes", "S1", "-k", "64"},
        std::vector<std::string>{"--shapes", "S1", "--spec", "k=8,n=8,g=1"}}) {
    const ProcessResult r = bench_cli(args);
    EXPECT_EQ(r.status, 2) << r.output;
    EXPECT_NE(r.output.find(args[2]), std::string::npos) << r.output;  // names the option
    EXPECT_EQ(r.output.find("GFLOP/s"), std::string::npos) << r.output;
  }
  const Scratch dir("gmmgen_bench");
  const std::string json = (dir.path / "rows.json").string();
  const ProcessResult r = bench_cli({"--shapes", "S1", "--isa", "generic", "--tm", "64", "--tn",
                                     "32", "--filter", "gmm_bf16*", "--quant", "bf16/i8@channel",
                                     "--reps", "1", "--baseline", "none", "--json", json});
  ASSERT_EQ(r.status, 0) << r.output;
  // Without a baseline the table's base GF/s and ratio columns say "-", not a zero.
  int table_rows = 0;
  std::istringstream lines(r.output);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream fields(line);
    std::vector<std::string> f{std::istream_iterator<std::string>(fields), {}};
    if (f.size() < 8 || f[0] != "S1") continue;
    ++table_rows;
    EXPECT_EQ(f[5], "-") << line;
    EXPECT_EQ(f[6], "-") << line;
    // Then % peak, the product path (generic: scalar f32 FMA), % of its peak, % of the roofline
    // and the bound.
    ASSERT_GE(f.size(), 12u) << line;
    EXPECT_EQ(f[8], "f32-fma") << line;
    EXPECT_EQ(f[9].back(), '%') << line;
    EXPECT_EQ(f[10].back(), '%') << line;
    EXPECT_TRUE(f[11] == "compute" || f[11] == "memory") << line;
  }
  EXPECT_NE(r.output.find("path peak: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("(f32-fma generic, measured)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("bandwidth: "), std::string::npos) << r.output;
  EXPECT_EQ(table_rows, 2) << r.output;
  std::ifstream in(json);
  const auto j = nlohmann::json::parse(in);
  ASSERT_EQ(j["rows"].size(), 2u);  // the float counterpart, then the quantized row
  for (const auto& row : j["rows"]) {
    const std::string kernel = row["kernel"];
    EXPECT_NE(kernel.find("_t64x"), std::string::npos) << kernel;
    EXPECT_NE(kernel.find("x32_"), std::string::npos) << kernel;
    EXPECT_NE(kernel.find("_generic_"), std::string::npos) << kernel;
  }
}

// --shapes --quant fp8-block also times the weight gradient (tgmm on fp8 codes) beside gmm-gen's
// f32 tgmm, and checks it against the float64 reference like every row.
TEST(BenchShapes, QuantFp8BlockAddsTheWeightGradient) {
  const Scratch dir("gmmgen_bench");
  const std::string json = (dir.path / "rows.json").string();
  const ProcessResult r = bench_cli({"--shapes", "S1", "--filter", "tgmm*", "--quant", "fp8-block",
                                     "--reps", "1", "--baseline", "none", "--json", json});
  ASSERT_EQ(r.status, 0) << r.output;
  std::ifstream in(json);
  const auto j = nlohmann::json::parse(in);
  ASSERT_EQ(j["rows"].size(), 2u) << r.output;  // f32 tgmm, then the fp8 one
  EXPECT_EQ(j["rows"][0]["op"], "tgmm");
  EXPECT_EQ(j["rows"][0]["lhs"], "f32");
  const auto& q = j["rows"][1];
  EXPECT_EQ(q["op"], "tgmm");
  EXPECT_EQ(q["lhs"], "f8e4m3");
  EXPECT_EQ(q["rhs"], "f8e5m2");
  EXPECT_EQ(q["lhs_quant"], "block:128");
  EXPECT_EQ(q["rhs_quant"], "block:128");
  EXPECT_TRUE(q["ok"].get<bool>()) << q.dump();
  EXPECT_GT(q["vs_float"].get<double>(), 0.0);
}

// ---- A/B -----------------------------------------------------------------------------------

// run_ab checks both sides' outputs first: a slightly wrong B gets no times, and two specs that
// differ in more than the tiling are refused.
TEST(BenchAb, WrongSideIsCaughtAndProblemsMustMatch) {
  bench::Machine machine;
  machine.threads = 2, machine.peak_gflops = 100;
  const KernelSpec spec = parse_text(kQuantSpecs[1]);
  MisScaled::real = &quant_kernel(kQuantSpecs[1]);
  MisScaled::count = 4 * 66;
  gmmgen_kernel_entry wrong = *MisScaled::real;
  wrong.plan = &MisScaled::plan;
  wrong.run_items = &MisScaled::run_items;
  RuntimeOptions ro;
  ro.jit = false, ro.num_threads = 2;
  Runtime good(ro), bad(ro);
  good.register_kernels(MisScaled::real, 1);
  bad.register_kernels(&wrong, 1);
  bench::Options o;
  o.reps = 3, o.threads = 2, o.baseline = bench::BaselineKind::kNone;
  const bench::Workload w = workload(spec, 70, "uniform", 5);
  const bench::AbRow same = bench::run_ab(good, spec, good, spec, w, o, machine);
  EXPECT_TRUE(same.ok) << same.failure;
  EXPECT_EQ(same.rounds, 4);  // 3 rounded up to pairs of rounds, one of each order
  EXPECT_GT(same.a_ms, 0);
  EXPECT_GT(same.b_ms, 0);
  EXPECT_LE(same.ratio_p25, same.ratio);
  EXPECT_LE(same.ratio, same.ratio_p75);
  const bench::AbRow r = bench::run_ab(good, spec, bad, spec, w, o, machine);
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.failure.rfind("B: ", 0), 0u) << r.failure;
  EXPECT_EQ(r.b_ms, 0);
  EXPECT_TRUE(r.to_json()["ratio"].is_null());
  KernelSpec other = spec;
  other.n = 64;
  EXPECT_THROW(bench::run_ab(good, spec, good, other, w, o, machine), InvalidArgument);
}

// A kernel that runs `real` and notes the side and output of every call it plans, in order.
struct PlannedCall {
  int side;
  const void* out;
};
std::vector<PlannedCall> planned_calls;
template <int Side>
struct OutputsSeen {
  static inline const gmmgen_kernel_entry* real = nullptr;
  static int plan(const gmmgen_args* a, void* ws, int64_t bytes, int64_t* items, char* err,
                  size_t len) {
    if (ws) planned_calls.push_back({Side, a->out});  // not the workspace-size probe
    return real->plan(a, ws, bytes, items, err, len);
  }
};

// The timed rounds: A first in even rounds and B first in odd ones, and the first call of every
// round writes one output, the second another, whichever side makes it (an output per side gave
// that side its memory's speed too).
TEST(BenchAb, SidesShareTheTimedOutputs) {
  bench::Machine machine;
  machine.threads = 2, machine.peak_gflops = 100;
  const KernelSpec spec = parse_text(kQuantSpecs[1]);
  gmmgen_kernel_entry a = quant_kernel(kQuantSpecs[1]), b = a;
  OutputsSeen<0>::real = OutputsSeen<1>::real = &quant_kernel(kQuantSpecs[1]);
  a.plan = &OutputsSeen<0>::plan;
  b.plan = &OutputsSeen<1>::plan;
  RuntimeOptions ro;
  ro.jit = false, ro.num_threads = 2;
  Runtime rt_a(ro), rt_b(ro);
  rt_a.register_kernels(&a, 1);
  rt_b.register_kernels(&b, 1);
  bench::Options o;
  o.reps = 3, o.threads = 2, o.baseline = bench::BaselineKind::kNone;
  planned_calls.clear();
  const bench::AbRow r =
      bench::run_ab(rt_a, spec, rt_b, spec, workload(spec, 70, "uniform", 5), o, machine);
  ASSERT_TRUE(r.ok) << r.failure;
  ASSERT_EQ(r.rounds, 4);  // 3 rounded up to pairs of rounds, one of each order
  ASSERT_GE(planned_calls.size(), 8u);
  const PlannedCall* round = planned_calls.data() + planned_calls.size() - 8;  // the last 4 rounds
  EXPECT_NE(round[0].out, round[1].out);
  for (int i = 0; i < 4; ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(round[2 * i].side, i % 2);
    EXPECT_EQ(round[2 * i + 1].side, 1 - i % 2);
    EXPECT_EQ(round[2 * i].out, round[0].out);
    EXPECT_EQ(round[2 * i + 1].out, round[1].out);
  }
}

// The command line: a tiling side and another gmm-gen's kernel (this very build's, emitted and
// compiled by the side), each against this one's; bad sides are refused before any timing.
TEST(BenchAb, CliTimesTwoSidesInAlternatingRounds) {
  const Scratch dir("gmmgen_bench");
  const std::string json = (dir.path / "ab.json").string();
  const std::string spec = "op=gmm,lhs=f32,rhs=f32,out=f32,k=40,n=24,g=3,tm=16,tk=16,tn=8";
  for (const std::string& side : {std::string("tiling=8x16x8"), std::string(GMMGEN_CLI)}) {
    SCOPED_TRACE(side);
    const ProcessResult r = bench_cli(
        {"--spec", spec, "--m", "50", "--reps", "3", "--ab", "this", side, "--json", json});
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_NE(r.output.find("B/A"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("GFLOP/s"), std::string::npos) << r.output;  // not the usual table
    std::ifstream in(json);
    const auto j = nlohmann::json::parse(in);
    ASSERT_EQ(j["rows"].size(), 1u);
    const auto& row = j["rows"][0];
    EXPECT_TRUE(row["ok"].get<bool>()) << row.dump();
    EXPECT_EQ(row["side_a"], "this");
    EXPECT_EQ(row["side_b"], side);
    EXPECT_EQ(row["rounds"], 4);
    EXPECT_GT(row["a_ms"].get<double>(), 0);
    EXPECT_GT(row["b_ms"].get<double>(), 0);
    EXPECT_NE(row["kernel_a"].get<std::string>().find("_t16x16x8_"), std::string::npos);
    const std::string kb = row["kernel_b"];
    EXPECT_NE(kb.find(side == GMMGEN_CLI ? "_t16x16x8_" : "_t8x16x8_"), std::string::npos) << kb;
  }
  // A quantized row runs alone: its float counterpart only serves `vs float`.
  const ProcessResult q = bench_cli({"--spec", std::string(kQuantSpecs[1]), "--m", "50", "--reps",
                                     "1", "--ab", "this", "tiling=16x32x16", "--json", json});
  ASSERT_EQ(q.status, 0) << q.output;
  std::ifstream qin(json);
  const auto qj = nlohmann::json::parse(qin);
  ASSERT_EQ(qj["rows"].size(), 1u) << q.output;
  EXPECT_EQ(qj["rows"][0]["lhs"], "i8");
  for (const std::vector<std::string>& bad :
       {std::vector<std::string>{"this", "tiling=8x16"},
        std::vector<std::string>{"this", (dir.path / "no-gmm-gen").string()},
        std::vector<std::string>{"cxx=", "this"}}) {
    const ProcessResult r = bench_cli({"--spec", spec, "--m", "50", "--ab", bad[0], bad[1]});
    EXPECT_EQ(r.status, 2) << r.output;
    EXPECT_NE(r.output.find("--ab"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("B/A"), std::string::npos) << r.output;
  }
}

// Beside --spec, --isa and --tm/--tk/--tn override the family and the tiling of each row (the
// spec's own tiling too), as they do beside --shapes; any other spec option is an error before
// anything is timed.
TEST(BenchSpec, TakeIsaAndTilingOverridesRejectOtherSpecOptions) {
  const Scratch dir("gmmgen_bench");
  const std::string json = (dir.path / "rows.json").string();
  for (const std::string& spec : {std::string("op=gmm,lhs=f32,rhs=f32,out=f32,k=40,n=24,g=3"),
                                  std::string("op=gmm,lhs=f32,rhs=f32,out=f32,k=40,n=24,g=3,"
                                              "tm=32,tk=8,tn=16")}) {
    SCOPED_TRACE(spec);
    const ProcessResult r =
        bench_cli({"--spec", spec, "--m", "50", "--isa", "generic", "--tm", "16", "--tk", "16",
                   "--tn", "8", "--reps", "1", "--baseline", "none", "--json", json});
    ASSERT_EQ(r.status, 0) << r.output;
    std::ifstream in(json);
    const auto j = nlohmann::json::parse(in);
    ASSERT_EQ(j["rows"].size(), 1u) << r.output;
    const std::string kernel = j["rows"][0]["kernel"];
    EXPECT_NE(kernel.find("_t16x16x8_"), std::string::npos) << kernel;
    EXPECT_NE(kernel.find("_generic_"), std::string::npos) << kernel;
  }
  const ProcessResult bad = bench_cli({"--spec", "op=gmm,lhs=f32,rhs=f32,out=f32,k=40,n=24,g=3",
                                       "--m", "50", "--lhs", "bf16", "--reps", "1"});
  EXPECT_EQ(bad.status, 2) << bad.output;
  EXPECT_NE(bad.output.find("--lhs with --spec"), std::string::npos) << bad.output;
  EXPECT_EQ(bad.output.find("GFLOP/s"), std::string::npos) << bad.output;
}

// A quantized --spec row runs after gmm-gen's kernel on its float counterpart (bf16 x bf16 here)
// and reports `vs float`: its GFLOP/s over that kernel's, timed beside it, in the table and the
// JSON.
TEST(BenchQuant, CliQuantizedRowReportsVsFloat) {
  const Scratch dir("gmmgen_bench");
  const std::string json = (dir.path / "rows.json").string();
  const ProcessResult r =
      bench_cli({"--spec", "op=gmm,lhs=bf16,rhs=i8,rhs_quant=channel,out=f32,k=96,n=40,g=3", "--m",
                 "50", "--reps", "1", "--threads", "2", "--baseline", "none", "--json", json});
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("vs float"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("bf16xi8@channel->f32"), std::string::npos) << r.output;
  std::ifstream in(json);
  const auto j = nlohmann::json::parse(in);
  const auto& rows = j["rows"];
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0]["lhs"], "bf16");
  EXPECT_EQ(rows[0]["rhs"], "bf16");
  EXPECT_FALSE(rows[0].contains("vs_float"));
  EXPECT_EQ(rows[1]["rhs"], "i8");
  EXPECT_EQ(rows[1]["rhs_quant"], "channel");
  EXPECT_EQ(rows[1]["baseline_dtype"], "bf16");
  // The float kernel is timed again beside the quantized one, round robin.
  EXPECT_GT(rows[1]["float_gflops"].get<double>(), 0);
  EXPECT_NEAR(rows[1]["vs_float"].get<double>(),
              rows[1]["gflops"].get<double>() / rows[1]["float_gflops"].get<double>(), 1e-9);
  EXPECT_EQ(r.output.find("end to end:"), std::string::npos) << r.output;  // bf16 activations
}

// A row whose kernel reads i8 activations also times gmmgen_quantize on f32 activations alone, and
// Runtime::gmm quantizing them in the call: a table of its own below the rows, and the JSON.
// --huge-pages puts the operands (and the bandwidth probe's buffer) on mappings advised
// MADV_HUGEPAGE; the rows still check, and the header and JSON say which pages were asked for.
TEST(BenchCli, HugePagesAreAskedForAndReported) {
  const Scratch dir("gmmgen_bench");
  const std::string json = (dir.path / "rows.json").string();
  for (const bool huge : {false, true}) {
    SCOPED_TRACE(huge);
    std::vector<std::string> args = {
        "--spec",     "op=gmm,lhs=f32,rhs=i4,rhs_quant=block:32,out=f32,k=96,n=40,g=3",
        "--m",        "50",
        "--reps",     "1",
        "--baseline", "none",
        "--json",     json};
    if (huge) args.push_back("--huge-pages");
    const ProcessResult r = bench_cli(args);
    ASSERT_EQ(r.status, 0) << r.output;
    std::ifstream in(json);
    const auto j = nlohmann::json::parse(in);
    const std::string pages = j["machine"]["pages"];
    EXPECT_EQ(pages.rfind(huge ? "2 MiB asked" : "the allocator's", 0), 0u) << pages;
    EXPECT_NE(pages.find("transparent huge pages: "), std::string::npos) << pages;
    EXPECT_NE(r.output.find("pages:     " + pages), std::string::npos) << r.output;
    ASSERT_EQ(j["rows"].size(), 2u);  // the f32 counterpart, then the quantized row
    for (const auto& row : j["rows"]) EXPECT_TRUE(row["ok"].get<bool>()) << row.dump();
  }
}

// --offset starts the operands and outputs that many bytes past a 64-byte boundary, as numpy
// places its large arrays (16): the rows still check against the float64 reference (bf16 pairs
// and 4-bit codes packed from runs that start inside a line), and the header and JSON say the
// offset. An offset other than 0, 16, 32 or 48 is refused by name before anything runs.
TEST(BenchCli, OffsetOperandsStillCheckAndAreReported) {
  const Scratch dir("gmmgen_bench");
  const std::string json = (dir.path / "rows.json").string();
  const ProcessResult r =
      bench_cli({"--spec", "op=gmm,lhs=bf16,rhs=i4,rhs_quant=block:32,out=f32,k=96,n=40,g=3", "--m",
                 "50", "--reps", "1", "--baseline", "none", "--offset", "16", "--json", json});
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("offset:    16 bytes past a 64-byte boundary"), std::string::npos)
      << r.output;
  std::ifstream in(json);
  const auto j = nlohmann::json::parse(in);
  EXPECT_EQ(j["machine"]["operand_offset"].get<int>(), 16);
  ASSERT_EQ(j["rows"].size(), 2u);  // the bf16 counterpart, then the quantized row
  for (const auto& row : j["rows"]) EXPECT_TRUE(row["ok"].get<bool>()) << row.dump();

  const ProcessResult bad = bench_cli({"--shapes", "S4", "--offset", "8", "--json", json + "2"});
  EXPECT_NE(bad.status, 0) << bad.output;
  EXPECT_NE(bad.output.find("--offset"), std::string::npos) << bad.output;
  EXPECT_FALSE(std::filesystem::exists(json + "2"));
}

TEST(BenchQuant, CliTimesQuantizedActivationsEndToEnd) {
  const Scratch dir("gmmgen_bench");
  const std::string json = (dir.path / "rows.json").string();
  const ProcessResult r = bench_cli(
      {"--spec", "op=gmm,lhs=i8,rhs=i8,lhs_quant=channel,rhs_quant=channel,out=f32,k=96,n=40,g=3",
       "--m", "50", "--reps", "1", "--threads", "2", "--baseline", "none", "--json", json});
  ASSERT_EQ(r.status, 0) << r.output;
  const size_t block = r.output.find("end to end:");
  ASSERT_NE(block, std::string::npos) << r.output;
  EXPECT_NE(r.output.find("quant ms", block), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("i8@channelxi8@channel->f32", block), std::string::npos) << r.output;
  std::ifstream in(json);
  const auto j = nlohmann::json::parse(in);
  ASSERT_EQ(j["rows"].size(), 2u);
  EXPECT_FALSE(j["rows"][0].contains("end_to_end_ms"));  // the f32 counterpart
  const auto& q = j["rows"][1];
  EXPECT_NEAR(q["quantize_gbs"].get<double>(),
              50.0 * 96 * 4 / (q["quantize_ms"].get<double>() * 1e6), 1e-9);
  EXPECT_NEAR(q["quantize_bandwidth_fraction"].get<double>(),
              q["quantize_gbs"].get<double>() / j["machine"]["bandwidth_gbs"].get<double>(), 1e-9);
  EXPECT_NEAR(q["end_to_end_gflops"].get<double>(),
              2.0 * 50 * 96 * 40 / (q["end_to_end_ms"].get<double>() * 1e6), 1e-9);
  EXPECT_NEAR(q["end_to_end_vs_float"].get<double>(),
              q["end_to_end_gflops"].get<double>() / q["float_gflops"].get<double>(), 1e-9);
  EXPECT_TRUE(q["end_to_end_ratio"].is_null());  // no baseline
}

}  // namespace
}  // namespace gmmgen
