// A C++ consumer: one emitted gmm kernel called by its alias and, with CXX_CONSUMER_RUNTIME,
// through gmmgen::Runtime from the bundle's table (compiling disabled), each checked against a
// plain double loop on random ragged groups.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "cxx_kernels.h"
#ifdef CXX_CONSUMER_RUNTIME
#include "gmmgen/runtime.hpp"
#endif

namespace {
constexpr int M = 45, K = 96, N = 40, G = 3;

double worst_error(const std::vector<float>& lhs, const std::vector<float>& rhs,
                   const std::vector<int32_t>& sizes, const std::vector<float>& out) {
  double worst = 0;
  int row = 0;
  for (int g = 0; g < G; ++g)
    for (int i = 0; i < sizes[g]; ++i, ++row)
      for (int n = 0; n < N; ++n) {
        double want = 0;
        for (int k = 0; k < K; ++k) want += double(lhs[row * K + k]) * rhs[(g * K + k) * N + n];
        worst = std::max(worst, std::abs(want - out[row * N + n]));
      }
  for (; row < M; ++row)
    for (int n = 0; n < N; ++n) worst = std::max(worst, double(std::abs(out[row * N + n])));
  return worst;
}
}  // namespace

int main() {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> lhs(M * K), rhs(G * K * N), out(M * N, 3.0f);
  for (auto& v : lhs) v = dist(rng);
  for (auto& v : rhs) v = dist(rng);
  const std::vector<int32_t> sizes{20, 0, 19};  // 6 rows in no group

  gmmgen_args a{};
  a.abi_version = GMMGEN_ABI_VERSION;
  a.m = M, a.lhs = lhs.data(), a.rhs = rhs.data(), a.group_sizes = sizes.data();
  a.out = out.data();
  char err[512];
  if (cxx_gmm(&a, err, sizeof err) != GMMGEN_OK) return std::fprintf(stderr, "%s\n", err), 1;
  const double by_alias = worst_error(lhs, rhs, sizes, out);
  double by_runtime = 0;
#ifdef CXX_CONSUMER_RUNTIME
  gmmgen::RuntimeOptions options;
  options.jit = false;  // the compiled-in kernel must serve the call
  gmmgen::Runtime rt(options);
  rt.register_kernels(cxx_kernels_kernels, cxx_kernels_kernel_count);
  std::fill(out.begin(), out.end(), 3.0f);
  using gmmgen::DType, gmmgen::TensorView;
  rt.gmm(TensorView::matrix(lhs.data(), DType::kF32, M, K),
         TensorView::batch(rhs.data(), DType::kF32, G, K, N), sizes,
         TensorView::matrix(out.data(), DType::kF32, M, N));
  by_runtime = worst_error(lhs, rhs, sizes, out);
  if (rt.stats().registry_hits != 1) return std::fprintf(stderr, "not served by the table\n"), 1;
#endif
  std::printf("cxx_consumer: C++%ld, worst |error| by alias %.3g, by runtime %.3g\n",
              long(__cplusplus), by_alias, by_runtime);
  return by_alias < 1e-4 && by_runtime < 1e-4 ? 0 : 1;
}
