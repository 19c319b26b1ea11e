#include "moe_layer.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

namespace moe {
namespace {

using gmmgen::DType;
using gmmgen::TensorView;

float sigmoid(float v) {
  return 1.0f / (1.0f + std::exp(-v));
}

TensorView mat(const std::vector<float>& v, int64_t rows, int64_t cols, int64_t ld = 0) {
  return TensorView::matrix(v.data(), DType::kF32, rows, cols, ld);
}
TensorView mat_at(const float* p, int64_t rows, int64_t cols, int64_t ld) {
  return TensorView::matrix(p, DType::kF32, rows, cols, ld);
}
TensorView bat(const std::vector<float>& v, int64_t b, int64_t rows, int64_t cols) {
  return TensorView::batch(v.data(), DType::kF32, b, rows, cols);
}

}  // namespace

Weights Weights::random(const Config& c, uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto fill = [&](std::vector<float>& v, size_t n, double fan_in) {
    std::normal_distribution<float> d(0.0f, float(1.0 / std::sqrt(fan_in)));
    v.resize(n);
    for (auto& x : v) x = d(rng);
  };
  Weights w;
  fill(w.router, c.d_model * c.experts, double(c.d_model));
  fill(w.w0, c.experts * c.d_model * c.d_ff, double(c.d_model));
  fill(w.w1, c.experts * c.d_model * c.d_ff, double(c.d_model));
  fill(w.wo, c.experts * c.d_ff * c.d_model, double(c.d_ff));
  return w;
}

Layer::Layer(gmmgen::Runtime& rt, Config c, const Weights& w)
    : rt_(rt), c_(c), router_(w.router), w0_(w.w0), w1_(w.w1), wo_(w.wo) {
  if (c_.merged) {  // w01[e] = [w0[e] | w1[e]] along N
    const int64_t D = c_.d_model, F = c_.d_ff;
    w01_.resize(c_.experts * D * 2 * F);
    for (int64_t e = 0; e < c_.experts; ++e)
      for (int64_t d = 0; d < D; ++d) {
        std::copy_n(&w0_[(e * D + d) * F], F, &w01_[(e * D + d) * 2 * F]);
        std::copy_n(&w1_[(e * D + d) * F], F, &w01_[(e * D + d) * 2 * F + F]);
      }
  }
}

std::vector<float> Layer::forward(const std::vector<float>& x) {
  const int64_t T = c_.tokens, D = c_.d_model, F = c_.d_ff, E = c_.experts, K = c_.top_k;
  const int64_t R = T * K;  // sorted rows: one per (token, chosen expert)
  x_ = x;

  // Router: logits [T, E] = x @ router, a dense product = gmm with one group.
  logits_.assign(T * E, 0.0f);
  const int32_t all_tokens[] = {int32_t(T)};
  rt_.gmm(mat(x_, T, D), bat(router_, 1, D, E), all_tokens, mat(logits_, T, E));

  // Top-k per token (ties to the lower expert id); weights = softmax over the chosen logits.
  std::vector<int64_t> chosen(R);
  std::vector<float> weight(R);
  for (int64_t t = 0; t < T; ++t) {
    const float* l = &logits_[t * E];
    std::vector<int64_t> order(E);
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + K, order.end(),
                      [&](int64_t a, int64_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); });
    float sum = 0.0f;
    for (int64_t j = 0; j < K; ++j) sum += weight[t * K + j] = std::exp(l[order[j]] - l[order[0]]);
    for (int64_t j = 0; j < K; ++j) {
      chosen[t * K + j] = order[j];
      weight[t * K + j] /= sum;
    }
  }

  // group_sizes = tokens per expert; rows sorted by expert (stable: token order within).
  group_sizes_.assign(E, 0);
  for (int64_t e : chosen) ++group_sizes_[e];
  std::vector<int64_t> next(E, 0);
  for (int64_t e = 1; e < E; ++e) next[e] = next[e - 1] + group_sizes_[e - 1];
  token_of_.resize(R), expert_of_.resize(R), weight_of_.resize(R);
  for (int64_t i = 0; i < R; ++i) {
    const int64_t row = next[chosen[i]]++;
    token_of_[row] = i / K, expert_of_[row] = chosen[i], weight_of_[row] = weight[i];
  }
  xs_.resize(R * D);
  for (int64_t r = 0; r < R; ++r) std::copy_n(&x_[token_of_[r] * D], D, &xs_[r * D]);

  // h0 | h1 [R, 2F]: one merged product, or two products writing strided halves (no copies).
  h01_.assign(R * 2 * F, 0.0f);
  if (c_.merged) {
    rt_.gmm(mat(xs_, R, D), bat(w01_, E, D, 2 * F), group_sizes_, mat(h01_, R, 2 * F));
  } else {
    rt_.gmm(mat(xs_, R, D), bat(w0_, E, D, F), group_sizes_, mat_at(h01_.data(), R, F, 2 * F));
    rt_.gmm(mat(xs_, R, D), bat(w1_, E, D, F), group_sizes_, mat_at(h01_.data() + F, R, F, 2 * F));
  }

  // a = silu(h0) * h1 * routing weight.
  a_.resize(R * F);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t f = 0; f < F; ++f) {
      const float h0 = h01_[r * 2 * F + f], h1 = h01_[r * 2 * F + F + f];
      a_[r * F + f] = h0 * sigmoid(h0) * h1 * weight_of_[r];
    }

  // ys = a @ wo[expert]; y[t] = sum of its k rows.
  std::vector<float> ys(R * D);
  rt_.gmm(mat(a_, R, F), bat(wo_, E, F, D), group_sizes_, mat(ys, R, D));
  std::vector<float> y(T * D, 0.0f);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t d = 0; d < D; ++d) y[token_of_[r] * D + d] += ys[r * D + d];
  return y;
}

Gradients Layer::backward(const std::vector<float>& dy) {
  const int64_t T = c_.tokens, D = c_.d_model, F = c_.d_ff, E = c_.experts, K = c_.top_k;
  const int64_t R = T * K;
  Gradients g;

  // Through wo: da = dys @ wo^T, dwo = a^T dys, per expert.
  std::vector<float> dys(R * D), da(R * F);
  for (int64_t r = 0; r < R; ++r) std::copy_n(&dy[token_of_[r] * D], D, &dys[r * D]);
  g.dwo.assign(E * F * D, 0.0f);
  rt_.gmm_vjp(mat(dys, R, D), mat(a_, R, F), bat(wo_, E, F, D), group_sizes_, mat(da, R, F),
              bat(g.dwo, E, F, D));

  // Through a = silu(h0) * h1 * w: dh0, dh1, and the routing weights' gradient.
  std::vector<float> dh01(R * 2 * F), dweight(R, 0.0f);
  for (int64_t r = 0; r < R; ++r) {
    const float w = weight_of_[r];
    for (int64_t f = 0; f < F; ++f) {
      const float h0 = h01_[r * 2 * F + f], h1 = h01_[r * 2 * F + F + f];
      const float s = sigmoid(h0), silu = h0 * s, d = da[r * F + f];
      dh01[r * 2 * F + f] = d * w * h1 * s * (1.0f + h0 * (1.0f - s));
      dh01[r * 2 * F + F + f] = d * w * silu;
      dweight[r] += d * silu * h1;
    }
  }

  // Through h0 | h1 = xs @ [w0 | w1].
  std::vector<float> dxs(R * D);
  if (c_.merged) {
    std::vector<float> dw01(E * D * 2 * F);
    rt_.gmm_vjp(mat(dh01, R, 2 * F), mat(xs_, R, D), bat(w01_, E, D, 2 * F), group_sizes_,
                mat(dxs, R, D), bat(dw01, E, D, 2 * F));
    g.dw0.resize(E * D * F), g.dw1.resize(E * D * F);
    for (int64_t e = 0; e < E; ++e)
      for (int64_t d = 0; d < D; ++d) {
        std::copy_n(&dw01[(e * D + d) * 2 * F], F, &g.dw0[(e * D + d) * F]);
        std::copy_n(&dw01[(e * D + d) * 2 * F + F], F, &g.dw1[(e * D + d) * F]);
      }
  } else {
    std::vector<float> dxs1(R * D);
    g.dw0.resize(E * D * F), g.dw1.resize(E * D * F);
    rt_.gmm_vjp(mat_at(dh01.data(), R, F, 2 * F), mat(xs_, R, D), bat(w0_, E, D, F), group_sizes_,
                mat(dxs, R, D), bat(g.dw0, E, D, F));
    rt_.gmm_vjp(mat_at(dh01.data() + F, R, F, 2 * F), mat(xs_, R, D), bat(w1_, E, D, F),
                group_sizes_, mat(dxs1, R, D), bat(g.dw1, E, D, F));
    for (int64_t i = 0; i < R * D; ++i) dxs[i] += dxs1[i];
  }

  // Unsort: each token gathers the gradients of its k rows.
  g.dx.assign(T * D, 0.0f);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t d = 0; d < D; ++d) g.dx[token_of_[r] * D + d] += dxs[r * D + d];

  // Router: softmax over the chosen logits; unchosen logits get no gradient.
  std::vector<float> dlogits(T * E, 0.0f);
  std::vector<float> dot(T, 0.0f);
  for (int64_t r = 0; r < R; ++r) dot[token_of_[r]] += weight_of_[r] * dweight[r];
  for (int64_t r = 0; r < R; ++r)
    dlogits[token_of_[r] * E + expert_of_[r]] = weight_of_[r] * (dweight[r] - dot[token_of_[r]]);
  // drouter = x^T dlogits (tgmm with one group); dx += dlogits @ router^T (accumulating gmm).
  const int32_t all_tokens[] = {int32_t(T)};
  g.drouter.assign(D * E, 0.0f);
  rt_.tgmm(mat(x_, T, D), mat(dlogits, T, E), all_tokens, bat(g.drouter, 1, D, E));
  const TensorView dx_view = mat(g.dx, T, D);
  gmmgen::GmmOptions acc;
  acc.transpose_rhs = true;
  acc.existing_out = &dx_view;
  acc.accumulate = true;
  rt_.gmm(mat(dlogits, T, E), bat(router_, 1, D, E), all_tokens, dx_view, acc);
  return g;
}

double Layer::forward_flops() const {
  const double R = double(c_.tokens * c_.top_k), D = double(c_.d_model), F = double(c_.d_ff);
  return 2.0 * (double(c_.tokens) * D * double(c_.experts) + R * D * 2 * F + R * F * D);
}

// Backward: each grouped product costs two (dlhs and drhs), the router two as well.
double Layer::backward_flops() const {
  return 2.0 * forward_flops();
}

}  // namespace moe
