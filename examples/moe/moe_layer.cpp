#include "moe_layer.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <stdexcept>

#include "gmmgen/quantize.hpp"

namespace moe {
namespace {

using gmmgen::DType;
using gmmgen::QuantKind;
using gmmgen::TensorView;

constexpr int64_t kBlock = 128;  // fp8-block: 1x128 / 128x1 activation blocks, 128x128 weights
const gmmgen::Quant kRowBlocks{QuantKind::kBlock, kBlock, 0};
const gmmgen::Quant kWeightBlocks{QuantKind::kBlock, kBlock, kBlock};
const gmmgen::Quant kChannel{QuantKind::kChannel, 0, 0};

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

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

}  // namespace

Quant parse_quant(const std::string& text) {
  for (Quant q : {Quant::kNone, Quant::kFp8Block, Quant::kInt8Channel})
    if (text == to_string(q)) return q;
  throw std::invalid_argument("quant=" + text + " is not one of: none, fp8-block, int8-channel");
}

const char* to_string(Quant q) {
  switch (q) {
    case Quant::kFp8Block:
      return "fp8-block";
    case Quant::kInt8Channel:
      return "int8-channel";
    default:
      return "none";
  }
}

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
  const int64_t D = c_.d_model, F = c_.d_ff;
  if (c_.merged) {  // w01[e] = [w0[e] | w1[e]] along N
    w01_.resize(c_.experts * D * 2 * F);
    for (int64_t e = 0; e < c_.experts; ++e)
      for (int64_t d = 0; d < D; ++d) {
        std::copy_n(&w0_[(e * D + d) * F], F, &w01_[(e * D + d) * 2 * F]);
        std::copy_n(&w1_[(e * D + d) * F], F, &w01_[(e * D + d) * 2 * F + F]);
      }
  }
  if (c_.quant == Quant::kNone) return;
  if (c_.merged) {
    qw01_ = quantize_weight(w01_, D, 2 * F);
  } else {
    qw0_ = quantize_weight(w0_, D, F);
    qw1_ = quantize_weight(w1_, D, F);
  }
  qwo_ = quantize_weight(wo_, F, D);
}

// ---- Quantized operands ---------------------------------------------------------------------

Layer::QWeight Layer::quantize_weight(const std::vector<float>& w, int64_t k, int64_t n) const {
  gmmgen::QuantizeOptions o;
  o.dtype = c_.quant == Quant::kFp8Block ? DType::kF8E4M3 : DType::kI8;
  o.scheme = c_.quant == Quant::kFp8Block ? kWeightBlocks : kChannel;
  o.axis = gmmgen::QuantAxis::kRows;  // [K, N]: the contraction axis runs down the rows
  const gmmgen::ScaleShape ss = gmmgen::scale_shape(o.scheme, o.axis, k, n);
  const int64_t per = ss.rows * ss.cols;
  QWeight q;
  q.k = k, q.n = n;
  q.codes.resize(c_.experts * k * n);
  q.scales.resize(c_.experts * per);
  for (int64_t e = 0; e < c_.experts; ++e)
    gmmgen::quantize(&w[e * k * n], k, n, 0, o, &q.codes[e * k * n], 0, &q.scales[e * per], 0);
  return q;
}

std::vector<float> Layer::dequantize_weight(const QWeight& q) const {
  gmmgen::QuantizeOptions o;
  o.dtype = c_.quant == Quant::kFp8Block ? DType::kF8E4M3 : DType::kI8;
  o.scheme = c_.quant == Quant::kFp8Block ? kWeightBlocks : kChannel;
  o.axis = gmmgen::QuantAxis::kRows;
  const gmmgen::ScaleShape ss = gmmgen::scale_shape(o.scheme, o.axis, q.k, q.n);
  std::vector<float> w(c_.experts * q.k * q.n);
  for (int64_t e = 0; e < c_.experts; ++e)
    gmmgen::dequantize(&q.codes[e * q.k * q.n], 0, &q.scales[e * ss.rows * ss.cols], 0, q.k, q.n, o,
                       &w[e * q.k * q.n], 0);
  return w;
}

TensorView Layer::weight_view(const QWeight& q) const {
  return TensorView::batch(q.codes.data(),
                           c_.quant == Quant::kFp8Block ? DType::kF8E4M3 : DType::kI8, c_.experts,
                           q.k, q.n);
}

gmmgen::Scales Layer::weight_scales(const QWeight& q) const {
  return {c_.quant == Quant::kFp8Block ? kWeightBlocks : kChannel, q.scales.data(), 0};
}

void Layer::quantize_activation(const std::vector<float>& act, int64_t cols, QAct& fwd, QAct& bwd,
                                std::vector<float>& bwd_value) const {
  const int64_t R = int64_t(act.size()) / cols;
  if (c_.quant == Quant::kFp8Block) {
    // One pass over act: 1x128 blocks along C for the forward, 128x1 blocks along R (rows of
    // every expert, global) for the weight gradient.
    gmmgen::DualQuantizeOptions o;
    o.dtype = DType::kF8E4M3, o.scheme = kRowBlocks;
    fwd.scheme = bwd.scheme = kRowBlocks;
    fwd.codes.resize(R * cols), bwd.codes.resize(R * cols);
    fwd.scales.resize(R * ceil_div(cols, kBlock)), bwd.scales.resize(ceil_div(R, kBlock) * cols);
    gmmgen::quantize_dual(act.data(), R, cols, 0, o, fwd.codes.data(), 0, fwd.scales.data(), 0,
                          bwd.codes.data(), 0, bwd.scales.data(), 0);
  } else if (c_.quant == Quant::kInt8Channel) {
    gmmgen::QuantizeOptions o;
    o.dtype = DType::kI8, o.scheme = kChannel, o.axis = gmmgen::QuantAxis::kCols;  // per row
    fwd.scheme = kChannel;
    fwd.codes.resize(R * cols), fwd.scales.resize(R);
    gmmgen::quantize(act.data(), R, cols, 0, o, fwd.codes.data(), 0, fwd.scales.data(), 0);
    bwd_value.resize(R * cols);
    gmmgen::dequantize(fwd.codes.data(), 0, fwd.scales.data(), 0, R, cols, o, bwd_value.data(), 0);
  }
}

void Layer::expert_gmm(const std::vector<float>& act, const QAct& fwd, int64_t cols,
                       const std::vector<float>& w, const QWeight& qw, int64_t n, float* out,
                       int64_t out_ld) {
  const int64_t R = int64_t(act.size()) / cols, E = c_.experts;
  const TensorView o = mat_at(out, R, n, out_ld);
  if (c_.quant == Quant::kNone) {
    rt_.gmm(mat(act, R, cols), bat(w, E, cols, n), group_sizes_, o);
    return;
  }
  gmmgen::GmmOptions opt;
  opt.lhs_scales = {fwd.scheme, fwd.scales.data(), 0};
  opt.rhs_scales = weight_scales(qw);
  const DType d = c_.quant == Quant::kFp8Block ? DType::kF8E4M3 : DType::kI8;
  rt_.gmm(TensorView::matrix(fwd.codes.data(), d, R, cols), weight_view(qw), group_sizes_, o, opt);
}

void Layer::expert_vjp(const float* dout, int64_t n, int64_t dout_ld, const std::vector<float>& act,
                       const QAct& bwd, const std::vector<float>& bwd_value, int64_t cols,
                       const std::vector<float>& w, const QWeight& qw, std::vector<float>& dact,
                       std::vector<float>& dw) {
  const int64_t R = int64_t(act.size()) / cols, E = c_.experts;
  const TensorView d = mat_at(dout, R, n, dout_ld);
  if (c_.quant == Quant::kNone) {
    rt_.gmm_vjp(d, mat(act, R, cols), bat(w, E, cols, n), group_sizes_, mat(dact, R, cols),
                bat(dw, E, cols, n));
    return;
  }
  gmmgen::GmmVjpOptions o;
  gmmgen::QuantVjp& q = o.quant.emplace();
  q.rhs_scales = weight_scales(qw);
  if (c_.quant == Quant::kFp8Block) {
    // dout to e5m2 (1x128 for dact, 128x1 for dw) by the runtime; act's 128x1 codes from the
    // forward's dual quantization.
    q.lhs_scales = {bwd.scheme, bwd.scales.data(), 0};
    q.grad_dtype = DType::kF8E5M2, q.grad_block = kBlock;
    rt_.gmm_vjp(d, TensorView::matrix(bwd.codes.data(), DType::kF8E4M3, R, cols), weight_view(qw),
                group_sizes_, mat(dact, R, cols), bat(dw, E, cols, n), o);
  } else {
    // Channel scales folded into dout by the runtime; dw from the dequantized activation.
    q.grad_dtype.reset();
    rt_.gmm_vjp(d, mat(bwd_value, R, cols), weight_view(qw), group_sizes_, mat(dact, R, cols),
                bat(dw, E, cols, n), o);
  }
}

Weights Layer::effective_weights() const {
  Weights w;
  w.router = router_;
  if (c_.quant == Quant::kNone) {
    w.w0 = w0_, w.w1 = w1_, w.wo = wo_;
    return w;
  }
  const int64_t D = c_.d_model, F = c_.d_ff;
  if (c_.merged) {
    const std::vector<float> w01 = dequantize_weight(qw01_);
    w.w0.resize(c_.experts * D * F), w.w1.resize(c_.experts * D * F);
    for (int64_t e = 0; e < c_.experts; ++e)
      for (int64_t d = 0; d < D; ++d) {
        std::copy_n(&w01[(e * D + d) * 2 * F], F, &w.w0[(e * D + d) * F]);
        std::copy_n(&w01[(e * D + d) * 2 * F + F], F, &w.w1[(e * D + d) * F]);
      }
  } else {
    w.w0 = dequantize_weight(qw0_), w.w1 = dequantize_weight(qw1_);
  }
  w.wo = dequantize_weight(qwo_);
  return w;
}

std::vector<float> Layer::effective_input(const std::vector<float>& x) const {
  if (c_.quant == Quant::kNone) return x;
  // Rows are quantized on their own (1x128 blocks or one scale per row), so the sorted copies
  // of a token's row have the codes of the token's row.
  const int64_t T = int64_t(x.size()) / c_.d_model, D = c_.d_model;
  gmmgen::QuantizeOptions o;
  o.dtype = c_.quant == Quant::kFp8Block ? DType::kF8E4M3 : DType::kI8;
  o.scheme = c_.quant == Quant::kFp8Block ? kRowBlocks : kChannel;
  o.axis = gmmgen::QuantAxis::kCols;
  const gmmgen::ScaleShape ss = gmmgen::scale_shape(o.scheme, o.axis, T, D);
  std::vector<uint8_t> codes(T * D);
  std::vector<float> scales(ss.rows * ss.cols), out(T * D);
  gmmgen::quantize(x.data(), T, D, 0, o, codes.data(), 0, scales.data(), 0);
  gmmgen::dequantize(codes.data(), 0, scales.data(), 0, T, D, o, out.data(), 0);
  return out;
}

// ---- Forward and backward -------------------------------------------------------------------

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
  QAct xs_fwd;
  quantize_activation(xs_, D, xs_fwd, xs_bwd_, xs_hat_);
  if (c_.merged) {
    expert_gmm(xs_, xs_fwd, D, w01_, qw01_, 2 * F, h01_.data(), 2 * F);
  } else {
    expert_gmm(xs_, xs_fwd, D, w0_, qw0_, F, h01_.data(), 2 * F);
    expert_gmm(xs_, xs_fwd, D, w1_, qw1_, F, h01_.data() + F, 2 * F);
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
  QAct a_fwd;
  quantize_activation(a_, F, a_fwd, a_bwd_, a_hat_);
  expert_gmm(a_, a_fwd, F, wo_, qwo_, D, ys.data(), D);
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
  expert_vjp(dys.data(), D, D, a_, a_bwd_, a_hat_, F, wo_, qwo_, da, g.dwo);

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
    expert_vjp(dh01.data(), 2 * F, 2 * F, xs_, xs_bwd_, xs_hat_, D, w01_, qw01_, dxs, dw01);
    g.dw0.resize(E * D * F), g.dw1.resize(E * D * F);
    for (int64_t e = 0; e < E; ++e)
      for (int64_t d = 0; d < D; ++d) {
        std::copy_n(&dw01[(e * D + d) * 2 * F], F, &g.dw0[(e * D + d) * F]);
        std::copy_n(&dw01[(e * D + d) * 2 * F + F], F, &g.dw1[(e * D + d) * F]);
      }
  } else {
    std::vector<float> dxs1(R * D);
    g.dw0.resize(E * D * F), g.dw1.resize(E * D * F);
    expert_vjp(dh01.data(), F, 2 * F, xs_, xs_bwd_, xs_hat_, D, w0_, qw0_, dxs, g.dw0);
    expert_vjp(dh01.data() + F, F, 2 * F, xs_, xs_bwd_, xs_hat_, D, w1_, qw1_, dxs1, g.dw1);
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
