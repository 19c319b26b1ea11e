// Host-side cost of a cached runtime dispatch, side by side with calling the kernel directly.
//   gmmgen_bench_dispatch [--benchmark_repetitions=N ...]
// BM_DirectKernelCall: the kernel's own plan + run, no runtime (the baseline).
// BM_RuntimeLookup:    Runtime::kernel(spec) on a warm in-memory table.
// BM_RuntimeDispatch:  Runtime::gmm end to end (spec from views, lookup, plan, run on the pool).
// The problem has M = 0 rows, so the kernel itself does (almost) nothing and the difference is
// the runtime's host overhead.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <vector>

#include "gmmgen/runtime.hpp"
#include "smoke_kernels.h"

namespace {

using namespace gmmgen;

struct Setup {
  Runtime rt;
  const gmmgen_kernel_entry& k;
  KernelSpec spec;
  std::vector<float> lhs, rhs, out;
  std::vector<int32_t> sizes;
  Setup()
      : rt(options()),
        k(smoke_kernels_kernels[0]),
        spec(parse_text(smoke_kernels_kernels[0].info()->spec)),
        lhs(16),
        rhs(spec.g_local * spec.k * spec.n, 1.0f),
        out(16),
        sizes(spec.g, 0) {
    rt.register_kernels(smoke_kernels_kernels, smoke_kernels_kernel_count);
  }
  static RuntimeOptions options() {
    RuntimeOptions o;
    o.cache_dir = std::filesystem::temp_directory_path() / "gmmgen_bench_cache";
    o.jit = false;  // everything is compiled in
    return o;
  }
  gmmgen_args args() {
    gmmgen_args a{};
    a.abi_version = GMMGEN_ABI_VERSION;
    a.m = 0;
    a.lhs = lhs.data(), a.rhs = rhs.data(), a.out = out.data();
    a.group_sizes = sizes.data();
    return a;
  }
};

Setup& setup() {
  static Setup s;
  return s;
}

void BM_DirectKernelCall(benchmark::State& state) {
  Setup& s = setup();
  const gmmgen_args a = s.args();
  alignas(64) static unsigned char ws[4096];
  for (auto _ : state) {
    int64_t items = 0;
    s.k.plan(&a, ws, sizeof ws, &items, nullptr, 0);
    s.k.run_items(&a, ws, 0, items);
    benchmark::DoNotOptimize(items);
  }
}
BENCHMARK(BM_DirectKernelCall);

void BM_RuntimeLookup(benchmark::State& state) {
  Setup& s = setup();
  for (auto _ : state) benchmark::DoNotOptimize(&s.rt.kernel(s.spec));
}
BENCHMARK(BM_RuntimeLookup);

void BM_RuntimeDispatch(benchmark::State& state) {
  Setup& s = setup();
  GmmOptions o;
  o.tiling = s.spec.tiling;
  const TensorView lhs = TensorView::matrix(s.lhs.data(), DType::kF32, 0, s.spec.k);
  const TensorView rhs =
      TensorView::batch(s.rhs.data(), DType::kF32, s.spec.g_local, s.spec.k, s.spec.n);
  const TensorView out = TensorView::matrix(s.out.data(), DType::kF32, 0, s.spec.n);
  for (auto _ : state) s.rt.gmm(lhs, rhs, s.sizes, out, o);
}
BENCHMARK(BM_RuntimeDispatch);

}  // namespace

BENCHMARK_MAIN();
