// moe_example: runs the MoE layer forward and backward through the gmm-gen runtime and prints
// tokens/s and GFLOP/s (median of --iters timed runs after one warm-up run).
//   moe_example [--tokens T] [--d-model D] [--d-ff F] [--experts E] [--top-k K]
//               [--unmerged] [--quant none|fp8-block|int8-channel] [--iters N]
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>

#include "moe_layer.h"

int main(int argc, char** argv) {
  moe::Config c;
  int iters = 5;
  bool unmerged = false;
  CLI::App app{"MoE layer forward + backward on the gmm-gen runtime"};
  app.add_option("--tokens", c.tokens, "tokens T")->check(CLI::PositiveNumber);
  app.add_option("--d-model", c.d_model, "model width D")->check(CLI::PositiveNumber);
  app.add_option("--d-ff", c.d_ff, "expert hidden width F")->check(CLI::PositiveNumber);
  app.add_option("--experts", c.experts, "experts E")->check(CLI::PositiveNumber);
  app.add_option("--top-k", c.top_k, "experts per token")->check(CLI::PositiveNumber);
  app.add_flag("--unmerged", unmerged, "two gmms for w0 and w1 instead of one merged w0|w1");
  std::string quant = "none";
  app.add_option("--quant", quant,
                 "expert products: none (f32), fp8-block (e4m3 1x128 activations, 128x128 "
                 "weights, e5m2 gradients), int8-channel (i8 per row x i8 per column)")
      ->check(CLI::IsMember({"none", "fp8-block", "int8-channel"}));
  app.add_option("--iters", iters, "timed iterations")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  c.merged = !unmerged;
  c.quant = moe::parse_quant(quant);
  if (c.top_k > c.experts) {
    std::fprintf(stderr, "--top-k=%lld must not exceed --experts=%lld\n", (long long)c.top_k,
                 (long long)c.experts);
    return 2;
  }

  gmmgen::Runtime rt;
  moe::Layer layer(rt, c, moe::Weights::random(c, 1));
  std::mt19937_64 rng(2);
  std::normal_distribution<float> n01;
  std::vector<float> x(c.tokens * c.d_model), dy(c.tokens * c.d_model);
  for (auto& v : x) v = n01(rng);
  for (auto& v : dy) v = n01(rng);

  layer.forward(x);  // warm-up: compiles (or loads) every kernel once
  layer.backward(dy);
  std::vector<double> fwd, bwd;
  for (int i = 0; i < iters; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    layer.forward(x);
    const auto t1 = std::chrono::steady_clock::now();
    layer.backward(dy);
    const auto t2 = std::chrono::steady_clock::now();
    fwd.push_back(std::chrono::duration<double>(t1 - t0).count());
    bwd.push_back(std::chrono::duration<double>(t2 - t1).count());
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double f = median(fwd), b = median(bwd);
  std::printf("MoE layer: T=%lld D=%lld F=%lld E=%lld top-k=%lld %s, quant %s, %d threads\n",
              (long long)c.tokens, (long long)c.d_model, (long long)c.d_ff, (long long)c.experts,
              (long long)c.top_k, c.merged ? "merged w0|w1" : "separate w0, w1",
              moe::to_string(c.quant), rt.num_threads());
  std::printf("forward : %8.2f ms  %10.0f tokens/s  %7.2f GFLOP/s\n", f * 1e3, double(c.tokens) / f,
              layer.forward_flops() / f * 1e-9);
  std::printf("backward: %8.2f ms  %10.0f tokens/s  %7.2f GFLOP/s\n", b * 1e3, double(c.tokens) / b,
              layer.backward_flops() / b * 1e-9);
  const gmmgen::RuntimeStats s = rt.stats();
  std::printf("runtime : %lld lookups, %lld compiles (%.2f s), %lld disk hits\n",
              (long long)s.lookups, (long long)s.compiles, s.compile_seconds,
              (long long)s.disk_hits);
  return 0;
}
