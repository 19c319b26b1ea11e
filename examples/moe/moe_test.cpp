// The MoE layer against a naive per-token dense implementation in float64: forward output and
// the gradients of sum(y * dy) with respect to x, the router and every expert weight.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <random>

#include "moe_layer.h"

namespace {

struct Naive {
  std::vector<double> y, dx, drouter, dw0, dw1, dwo;
};

// Token by token, expert by expert, no grouping and no sorting.
Naive naive(const moe::Config& c, const moe::Weights& w, const std::vector<float>& x,
            const std::vector<float>& dy) {
  const int64_t T = c.tokens, D = c.d_model, F = c.d_ff, E = c.experts, K = c.top_k;
  Naive r;
  r.y.assign(T * D, 0), r.dx.assign(T * D, 0), r.drouter.assign(D * E, 0);
  r.dw0.assign(E * D * F, 0), r.dw1.assign(E * D * F, 0), r.dwo.assign(E * F * D, 0);
  for (int64_t t = 0; t < T; ++t) {
    const float* xt = &x[t * D];
    const float* dyt = &dy[t * D];
    std::vector<double> logits(E, 0);
    for (int64_t e = 0; e < E; ++e)
      for (int64_t d = 0; d < D; ++d) logits[e] += double(xt[d]) * w.router[d * E + e];
    std::vector<int64_t> order(E);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return logits[a] > logits[b]; });
    std::vector<double> wt(K);
    double sum = 0;
    for (int64_t j = 0; j < K; ++j) sum += wt[j] = std::exp(logits[order[j]] - logits[order[0]]);
    for (auto& v : wt) v /= sum;
    std::vector<double> dwt(K, 0);
    for (int64_t j = 0; j < K; ++j) {
      const int64_t e = order[j];
      std::vector<double> h0(F, 0), h1(F, 0), g(F), dg(F, 0);
      for (int64_t f = 0; f < F; ++f)
        for (int64_t d = 0; d < D; ++d) {
          h0[f] += double(xt[d]) * w.w0[(e * D + d) * F + f];
          h1[f] += double(xt[d]) * w.w1[(e * D + d) * F + f];
        }
      for (int64_t f = 0; f < F; ++f) g[f] = h0[f] / (1 + std::exp(-h0[f])) * h1[f];
      for (int64_t d = 0; d < D; ++d) {
        double o = 0;
        for (int64_t f = 0; f < F; ++f) o += g[f] * w.wo[(e * F + f) * D + d];
        r.y[t * D + d] += wt[j] * o;
        dwt[j] += o * dyt[d];
        for (int64_t f = 0; f < F; ++f) {
          dg[f] += wt[j] * w.wo[(e * F + f) * D + d] * dyt[d];
          r.dwo[(e * F + f) * D + d] += wt[j] * g[f] * dyt[d];
        }
      }
      for (int64_t f = 0; f < F; ++f) {
        const double s = 1 / (1 + std::exp(-h0[f]));
        const double dh0 = dg[f] * h1[f] * s * (1 + h0[f] * (1 - s)), dh1 = dg[f] * h0[f] * s;
        for (int64_t d = 0; d < D; ++d) {
          r.dw0[(e * D + d) * F + f] += xt[d] * dh0;
          r.dw1[(e * D + d) * F + f] += xt[d] * dh1;
          r.dx[t * D + d] += w.w0[(e * D + d) * F + f] * dh0 + w.w1[(e * D + d) * F + f] * dh1;
        }
      }
    }
    double dot = 0;
    for (int64_t j = 0; j < K; ++j) dot += wt[j] * dwt[j];
    for (int64_t j = 0; j < K; ++j) {
      const double dl = wt[j] * (dwt[j] - dot);
      const int64_t e = order[j];
      for (int64_t d = 0; d < D; ++d) {
        r.drouter[d * E + e] += xt[d] * dl;
        r.dx[t * D + d] += w.router[d * E + e] * dl;
      }
    }
  }
  return r;
}

void expect_close(const std::vector<double>& want, const std::vector<float>& got,
                  const char* what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  double scale = 0;
  for (double v : want) scale = std::max(scale, std::fabs(v));
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::fabs(want[i] - got[i]));
  // f32 kernels against float64: relative to the tensor's largest entry.
  EXPECT_LE(worst, 2e-5 * scale) << what << ": worst |diff| " << worst << " at scale " << scale;
  ::testing::Test::RecordProperty(what, std::to_string(worst / scale));
}

class MoeTest : public ::testing::TestWithParam<bool> {};

TEST_P(MoeTest, ForwardAndGradientsMatchNaiveDense) {
  moe::Config c;
  c.tokens = 53, c.d_model = 24, c.d_ff = 20, c.experts = 7, c.top_k = 3;
  c.merged = GetParam();
  const moe::Weights w = moe::Weights::random(c, 11);
  std::mt19937_64 rng(5);
  std::normal_distribution<float> n01;
  std::vector<float> x(c.tokens * c.d_model), dy(c.tokens * c.d_model);
  for (auto& v : x) v = n01(rng);
  for (auto& v : dy) v = n01(rng);

  gmmgen::RuntimeOptions o;
  o.cache_dir =
      std::filesystem::temp_directory_path() / ("gmmgen_moe_test_" + std::to_string(::getpid()));
  o.num_threads = 2;
  gmmgen::Runtime rt(o);
  moe::Layer layer(rt, c, w);
  const std::vector<float> y = layer.forward(x);
  const moe::Gradients g = layer.backward(dy);
  const Naive ref = naive(c, w, x, dy);
  expect_close(ref.y, y, "y");
  expect_close(ref.dx, g.dx, "dx");
  expect_close(ref.drouter, g.drouter, "drouter");
  expect_close(ref.dw0, g.dw0, "dw0");
  expect_close(ref.dw1, g.dw1, "dw1");
  expect_close(ref.dwo, g.dwo, "dwo");
  std::filesystem::remove_all(o.cache_dir);
}

INSTANTIATE_TEST_SUITE_P(Merged, MoeTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "merged" : "separate"; });

}  // namespace
