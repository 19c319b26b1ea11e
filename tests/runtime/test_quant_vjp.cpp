// The backward pass of a quantized forward (docs/quantization.md, seeds 000 and 004) through
// Runtime::gmm_vjp with GmmVjpOptions::quant: block FP8 (lhs 1x128 / 128x1 by dual quantization,
// weights 128x128, dout quantized by the runtime in e5m2, e4m3 or not at all), and per-channel
// int8 weights whose scales are folded into dout. dlhs and drhs are compared with a float64
// reference of the dequantized operands the kernels actually read (dout's codes recomputed here
// with the same quantizer), and, more loosely, with the unquantized float64 VJP. Ragged groups
// with empty ones, group boundaries inside 128-row blocks, K and N not multiples of the block, an
// expert shard (group_offset); bad input is rejected before any output is written.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <limits>
#include <optional>
#include <ostream>
#include <random>

#include "gmmgen/codes.h"
#include "gmmgen/quantize.hpp"
#include "gmmgen/runtime.hpp"
#include "runtime_fixtures.h"
#include "test_data.h"

namespace gmmgen {
namespace {

namespace fs = std::filesystem;

using testing::randn;
constexpr double kU = testing::kF32Roundoff;

class QuantVjpTest : public testing::SharedCacheRuntimeTest {};

// The exact value of each code of an 8-bit-code matrix [rows, cols] times its scale, scales
// [.., ..] indexed by `scale_at(r, c)`.
template <class F>
std::vector<double> decode(const std::vector<uint8_t>& codes, DType d, int64_t rows, int64_t cols,
                           F&& scale_at) {
  std::vector<double> v(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      v[size_t(r * cols + c)] = codes::decode(d, codes[size_t(r * cols + c)]) * scale_at(r, c);
  return v;
}

// A problem: M rows in G groups of which experts [offset, offset + G_local) are held; x [M, K],
// weights [G_local, K, N] (stored [G_local, N, K] when transposed), dout [M, N].
struct VjpProblem {
  int64_t m, k, n, g_local;
  int32_t offset;
  bool transposed;
  std::vector<int32_t> sizes;
  std::vector<int32_t> group;  // local group of each row, -1 outside the active groups
  std::vector<float> x, w, dout;

  VjpProblem(int64_t m_, int64_t k_, int64_t n_, std::vector<int32_t> sizes_, int32_t offset_,
             int64_t g_local_, bool t, uint64_t seed)
      : m(m_),
        k(k_),
        n(n_),
        g_local(g_local_),
        offset(offset_),
        transposed(t),
        sizes(std::move(sizes_)),
        group(size_t(m_), -1) {
    std::mt19937_64 rng(seed);
    x = randn(m * k, 1.0, rng);
    w = randn(g_local * k * n, 0.05, rng);
    dout = randn(m * n, 0.5, rng);
    int64_t r = 0;
    for (int32_t g = 0; g < int32_t(sizes.size()); ++g)
      for (int32_t i = 0; i < sizes[size_t(g)]; ++i, ++r)
        if (g >= offset && g < offset + g_local) group[size_t(r)] = g - offset;
  }
  // Weight element (j, kk, nn) in whichever layout it is stored.
  int64_t w_index(int64_t j, int64_t kk, int64_t nn) const {
    return transposed ? (j * n + nn) * k + kk : (j * k + kk) * n + nn;
  }
};

// Per-element error bound of an f32 kernel summing `terms` products whose float64 sum is `sum`
// and absolute sum `abs_sum`: each product is scaled once (the f32 product of the two block
// scales, and its product with the f32 block sum: 2 roundings), passes through at most `terms`
// f32 additions (recursive summation: (terms - 1) u |p|), and the result is rounded once more,
// so |err| <= u |sum| + (terms + 3) u sum|p| (the bound of docs/quantization.md's checker).
double vjp_bound(double sum, double abs_sum, int64_t terms) {
  return kU * std::fabs(sum) + double(terms + 3) * kU * abs_sum + 1e-30;
}

// dlhs [M, K] and drhs (rhs's layout) against float64 sums over the operands as the kernels read
// them: dlhs[r, kk] = sum_n dl[r, n] * wv(j, kk, n), drhs[j, kk, nn] = sum_r xv[r, kk] * dr[r, nn].
template <class W>
void expect_exact_vjp(const VjpProblem& p, const std::vector<float>& dlhs,
                      const std::vector<float>& drhs, const std::vector<double>& dl,
                      const std::vector<double>& xv, const std::vector<double>& dr, W&& wv,
                      const std::string& what) {
  for (int64_t r = 0; r < p.m; ++r) {
    const int32_t j = p.group[size_t(r)];
    for (int64_t kk = 0; kk < p.k; ++kk) {
      const float got = dlhs[size_t(r * p.k + kk)];
      if (j < 0) {
        ASSERT_EQ(0.0f, got) << what << ": dlhs row " << r << " is in no active group";
        continue;
      }
      double sum = 0, abs_sum = 0;
      for (int64_t nn = 0; nn < p.n; ++nn) {
        const double t = dl[size_t(r * p.n + nn)] * wv(j, kk, nn);
        sum += t, abs_sum += std::fabs(t);
      }
      ASSERT_LE(std::fabs(got - sum), vjp_bound(sum, abs_sum, p.n))
          << what << ": dlhs[" << r << ", " << kk << "] = " << got << ", reference " << sum;
    }
  }
  int64_t start = 0;
  for (int32_t g = 0; g < p.offset; ++g) start += p.sizes[size_t(g)];
  for (int64_t j = 0; j < p.g_local; ++j) {
    const int64_t rows = p.sizes[size_t(p.offset + j)];
    for (int64_t kk = 0; kk < p.k; ++kk)
      for (int64_t nn = 0; nn < p.n; ++nn) {
        double sum = 0, abs_sum = 0;
        for (int64_t r = start; r < start + rows; ++r) {
          const double t = xv[size_t(r * p.k + kk)] * dr[size_t(r * p.n + nn)];
          sum += t, abs_sum += std::fabs(t);
        }
        const float got = drhs[size_t(p.w_index(j, kk, nn))];
        ASSERT_LE(std::fabs(got - sum), vjp_bound(sum, abs_sum, rows))
            << what << ": drhs[" << j << "][" << kk << ", " << nn << "] = " << got << ", reference "
            << sum;
      }
    start += rows;
  }
}

// Relative Frobenius distance of dlhs and drhs from the unquantized float64 VJP (rows outside the
// active groups: zero on both sides).
std::pair<double, double> distance_to_float_vjp(const VjpProblem& p, const std::vector<float>& dlhs,
                                                const std::vector<float>& drhs) {
  double e1 = 0, n1 = 0, e2 = 0, n2 = 0;
  for (int64_t r = 0; r < p.m; ++r) {
    const int32_t j = p.group[size_t(r)];
    for (int64_t kk = 0; kk < p.k && j >= 0; ++kk) {
      double sum = 0;
      for (int64_t nn = 0; nn < p.n; ++nn)
        sum += double(p.dout[size_t(r * p.n + nn)]) * p.w[size_t(p.w_index(j, kk, nn))];
      e1 += std::pow(dlhs[size_t(r * p.k + kk)] - sum, 2), n1 += sum * sum;
    }
  }
  int64_t start = 0;
  for (int32_t g = 0; g < p.offset; ++g) start += p.sizes[size_t(g)];
  for (int64_t j = 0; j < p.g_local; ++j) {
    const int64_t rows = p.sizes[size_t(p.offset + j)];
    for (int64_t kk = 0; kk < p.k; ++kk)
      for (int64_t nn = 0; nn < p.n; ++nn) {
        double sum = 0;
        for (int64_t r = start; r < start + rows; ++r)
          sum += double(p.x[size_t(r * p.k + kk)]) * p.dout[size_t(r * p.n + nn)];
        e2 += std::pow(drhs[size_t(p.w_index(j, kk, nn))] - sum, 2), n2 += sum * sum;
      }
    start += rows;
  }
  return {std::sqrt(e1 / n1), std::sqrt(e2 / n2)};
}

// The unit roundoff of a float format with `p` significand bits (the implicit one included):
// RNE's relative error on normal values is at most 2^-p.
double unit_roundoff(std::optional<DType> d) {
  if (!d) return kU;
  return *d == DType::kF8E4M3 ? 0x1p-4 : 0x1p-3;  // e4m3: 4 bits, e5m2: 3 bits
}

struct Fp8Case {
  bool transposed;
  std::optional<DType> grad;
  int64_t wb_k = 128, wb_n = 128;  // the weights' block:BxC (B along K, C along N)
  int64_t dout_pad = 0;            // dout rows N + dout_pad apart, the padding NaN
};
// Names the parameter in test names (the default prints the struct's bytes, padding included).
void PrintTo(const Fp8Case& c, std::ostream* os) {
  *os << (c.transposed ? "transposed" : "plain") << ", grad "
      << (c.grad ? to_string(*c.grad) : "f32") << ", weights block:" << c.wb_k << "x" << c.wb_n
      << ", dout ld N+" << c.dout_pad;
}

class QuantVjpFp8 : public QuantVjpTest, public ::testing::WithParamInterface<Fp8Case> {};

TEST_P(QuantVjpFp8, BlockFp8MatchesTheDequantizedReferenceAndApproximatesTheFloatVjp) {
  const Fp8Case c = GetParam();
  constexpr int64_t B = 128;  // activations and gradients: 1x128 and 128x1
  const int64_t BK = c.wb_k, BN = c.wb_n;
  // K = 200 and N = 136 are not multiples of 128 (partial last blocks along both weight axes);
  // groups of 70, 0, 150, 0, 61 rows put boundaries at rows 70 and 220, inside 128-row blocks;
  // experts 1..4 of 5 are held (group_offset 1), so rows 0..69 belong to no active group, and
  // 9 rows to no group at all.
  VjpProblem p(290, 200, 136, {70, 0, 150, 0, 61}, 1, 4, c.transposed, 3 + c.transposed);
  const int64_t M = p.m, K = p.k, N = p.n, G = p.g_local;

  // The activation, quantized row-wise (for the forward, not used here) and column-wise (for
  // drhs) in one pass.
  DualQuantizeOptions dq;
  dq.dtype = DType::kF8E4M3, dq.scheme = {QuantKind::kBlock, B, 0};
  const int64_t mb = (M + B - 1) / B, nb = (N + B - 1) / B;
  const int64_t wkb = (K + BK - 1) / BK, wnb = (N + BN - 1) / BN;  // weight scale blocks
  std::vector<uint8_t> x_row(size_t(M * K)), x_col(size_t(M * K));
  std::vector<float> x_row_s(size_t(M * ((K + B - 1) / B))), x_col_s(size_t(mb * K));
  quantize_dual(p.x.data(), M, K, 0, dq, x_row.data(), 0, x_row_s.data(), 0, x_col.data(), 0,
                x_col_s.data(), 0);
  // The weights in BKxBN blocks: scales [G, ceil(K/BK), ceil(N/BN)], or [G, ceil(N/BN),
  // ceil(K/BK)] for weights stored [G, N, K] (axis cols: the contraction axis runs along the
  // stored rows).
  QuantizeOptions wq;
  wq.dtype = DType::kF8E4M3, wq.scheme = {QuantKind::kBlock, BK, BN};
  wq.axis = c.transposed ? QuantAxis::kCols : QuantAxis::kRows;
  const int64_t wr = c.transposed ? N : K, wc = c.transposed ? K : N;
  std::vector<uint8_t> w_codes(size_t(G * K * N));
  std::vector<float> w_s(size_t(G * wkb * wnb));
  for (int64_t j = 0; j < G; ++j)
    quantize(p.w.data() + j * K * N, wr, wc, 0, wq, w_codes.data() + j * K * N, 0,
             w_s.data() + j * wkb * wnb, 0);

  std::vector<float> dlhs(size_t(M * K), std::nanf("")), drhs(size_t(G * K * N), std::nanf(""));
  GmmVjpOptions o;
  o.transpose_rhs = c.transposed;
  o.group_offset = p.offset;
  QuantVjp& q = o.quant.emplace();
  q.lhs_scales = {{QuantKind::kBlock, B, 0}, x_col_s.data(), 0};
  q.rhs_scales = {{QuantKind::kBlock, BK, BN}, w_s.data(), 0};
  q.grad_dtype = c.grad;
  const TensorView w_view = c.transposed
                                ? TensorView::batch(w_codes.data(), DType::kF8E4M3, G, N, K)
                                : TensorView::batch(w_codes.data(), DType::kF8E4M3, G, K, N);
  // dout, packed or strided (the runtime must read neither the padding nor past it).
  std::vector<float> dout_store(size_t(M * (N + c.dout_pad)), std::nanf(""));
  for (int64_t r = 0; r < M; ++r)
    std::copy_n(&p.dout[size_t(r * N)], N, &dout_store[size_t(r * (N + c.dout_pad))]);
  rt_->gmm_vjp(TensorView::matrix(dout_store.data(), DType::kF32, M, N, N + c.dout_pad),
               TensorView::matrix(x_col.data(), DType::kF8E4M3, M, K), w_view, p.sizes,
               TensorView::matrix(dlhs.data(), DType::kF32, M, K),
               c.transposed ? TensorView::batch(drhs.data(), DType::kF32, G, N, K)
                            : TensorView::batch(drhs.data(), DType::kF32, G, K, N),
               o);

  // dout as the kernels read it: the runtime's dual quantization, recomputed here.
  std::vector<double> dl(p.dout.begin(), p.dout.end()), dr = dl;
  if (c.grad) {
    DualQuantizeOptions gq;
    gq.dtype = *c.grad, gq.scheme = {QuantKind::kBlock, B, 0};
    std::vector<uint8_t> rc(size_t(M * N)), cc(size_t(M * N));
    std::vector<float> rs(size_t(M * nb)), cs(size_t(mb * N));
    quantize_dual(p.dout.data(), M, N, 0, gq, rc.data(), 0, rs.data(), 0, cc.data(), 0, cs.data(),
                  0);
    dl = decode(rc, *c.grad, M, N,
                [&](int64_t r, int64_t nn) { return rs[size_t(r * nb + nn / B)]; });
    dr = decode(cc, *c.grad, M, N,
                [&](int64_t r, int64_t nn) { return cs[size_t((r / B) * N + nn)]; });
  }
  const std::vector<double> xv = decode(x_col, DType::kF8E4M3, M, K, [&](int64_t r, int64_t kk) {
    return x_col_s[size_t((r / B) * K + kk)];
  });
  auto wv = [&](int64_t j, int64_t kk, int64_t nn) {
    const double s = c.transposed ? w_s[size_t((j * wnb + nn / BN) * wkb + kk / BK)]
                                  : w_s[size_t((j * wkb + kk / BK) * wnb + nn / BN)];
    return codes::decode(DType::kF8E4M3, w_codes[size_t(p.w_index(j, kk, nn))]) * s;
  };
  const std::string what = std::string(c.transposed ? "transposed" : "plain") + ", grad " +
                           (c.grad ? std::string(to_string(*c.grad)) : "f32") +
                           ", weights block:" + std::to_string(BK) + "x" + std::to_string(BN);
  expect_exact_vjp(p, dlhs, drhs, dl, xv, dr, wv, what);

  // Against the unquantized VJP: every product a*b carries the relative rounding errors of its two
  // quantized factors, at most u_a + u_b (+ u_a u_b) each, so even if they all added up in one
  // direction the result would be within that of the absolute sums; on random data they are
  // independent and of mean zero, and RNE's relative error is close to uniform on [-u, u] (RMS
  // u / sqrt(3)), so the relative Frobenius error is about sqrt(u_a^2 + u_b^2) / sqrt(3). The
  // check allows sqrt(u_a^2 + u_b^2): sqrt(3) of margin, and still fails on any wrong scale.
  const double u_w = unit_roundoff(DType::kF8E4M3), u_g = unit_roundoff(c.grad);
  const double tol = std::sqrt(u_w * u_w + u_g * u_g);
  const auto [e_dlhs, e_drhs] = distance_to_float_vjp(p, dlhs, drhs);
  EXPECT_LT(e_dlhs, tol) << what << ": dlhs relative Frobenius error vs the float VJP";
  EXPECT_LT(e_drhs, tol) << what << ": drhs relative Frobenius error vs the float VJP";
  RecordProperty("dlhs_rel_error_" + what, std::to_string(e_dlhs));
  RecordProperty("drhs_rel_error_" + what, std::to_string(e_drhs));
}

// Square 128x128 weight blocks (DeepGEMM's), and 64x128 / 128x32 ones: read transposed,
// block:BxC serves as block:CxB, which only a non-square block tells apart. One dout is strided.
INSTANTIATE_TEST_SUITE_P(GradDtypes, QuantVjpFp8,
                         ::testing::Values(Fp8Case{false, DType::kF8E5M2},
                                           Fp8Case{true, DType::kF8E5M2, 128, 128, 8},
                                           Fp8Case{false, DType::kF8E4M3, 64, 128},
                                           Fp8Case{true, std::nullopt, 128, 32}),
                         [](const auto& info) {
                           const Fp8Case& c = info.param;
                           return std::string(c.transposed ? "Transposed" : "Plain") + "_" +
                                  (c.grad ? std::string(to_string(*c.grad)) : "f32") + "_w" +
                                  std::to_string(c.wb_k) + "x" + std::to_string(c.wb_n) +
                                  (c.dout_pad ? "_strided_dout" : "");
                         });

// Per-channel int8 weights (one scale per expert and output column N, the contraction axis of
// dlhs): the runtime folds the scales into dout (dout'[r, n] = dout[r, n] * s[j, n], in f32) and
// reads the codes with scale 1. The activation given is its dequantized f32 value.
TEST_F(QuantVjpTest, ChannelInt8WeightsFoldTheirScalesIntoDout) {
  for (const std::optional<DType> grad :
       {std::optional<DType>{}, std::optional<DType>{DType::kF8E5M2}}) {
    VjpProblem p(150, 72, 40, {33, 0, 64, 50}, 0, 4, false, 21);
    const int64_t M = p.m, K = p.k, N = p.n, G = p.g_local;
    QuantizeOptions wq;
    wq.dtype = DType::kI8, wq.scheme = {QuantKind::kChannel, 0, 0}, wq.axis = QuantAxis::kRows;
    std::vector<uint8_t> w_codes(size_t(G * K * N));
    std::vector<float> w_s(size_t(G * N));
    for (int64_t j = 0; j < G; ++j)
      quantize(p.w.data() + j * K * N, K, N, 0, wq, w_codes.data() + j * K * N, 0,
               w_s.data() + j * N, 0);
    std::vector<float> dlhs(size_t(M * K), std::nanf("")), drhs(size_t(G * K * N), std::nanf(""));
    GmmVjpOptions o;
    QuantVjp& q = o.quant.emplace();
    q.rhs_scales = {{QuantKind::kChannel, 0, 0}, w_s.data(), 0};
    q.grad_dtype = grad;
    q.grad_block = 32;
    rt_->gmm_vjp(TensorView::matrix(p.dout.data(), DType::kF32, M, N),
                 TensorView::matrix(p.x.data(), DType::kF32, M, K),
                 TensorView::batch(w_codes.data(), DType::kI8, G, K, N), p.sizes,
                 TensorView::matrix(dlhs.data(), DType::kF32, M, K),
                 TensorView::batch(drhs.data(), DType::kF32, G, K, N), o);

    // dout' as the runtime forms it (f32 products), then, with a gradient dtype, its row-wise
    // codes (dlhs) and dout's column-wise codes (drhs).
    std::vector<float> folded(size_t(M * N), 0.0f);
    for (int64_t r = 0; r < M; ++r)
      for (int64_t nn = 0; nn < N && p.group[size_t(r)] >= 0; ++nn)
        folded[size_t(r * N + nn)] =
            p.dout[size_t(r * N + nn)] * w_s[size_t(p.group[size_t(r)] * N + nn)];
    std::vector<double> dl(folded.begin(), folded.end()), dr(p.dout.begin(), p.dout.end());
    if (grad) {
      QuantizeOptions gq;
      gq.dtype = *grad, gq.scheme = {QuantKind::kBlock, 32, 0}, gq.axis = QuantAxis::kCols;
      const int64_t nb = (N + 31) / 32, mb = (M + 31) / 32;
      std::vector<uint8_t> rc(size_t(M * N)), cc(size_t(M * N));
      std::vector<float> rs(size_t(M * nb)), cs(size_t(mb * N));
      quantize(folded.data(), M, N, 0, gq, rc.data(), 0, rs.data(), 0);
      gq.axis = QuantAxis::kRows;
      quantize(p.dout.data(), M, N, 0, gq, cc.data(), 0, cs.data(), 0);
      dl = decode(rc, *grad, M, N,
                  [&](int64_t r, int64_t nn) { return rs[size_t(r * nb + nn / 32)]; });
      dr = decode(cc, *grad, M, N,
                  [&](int64_t r, int64_t nn) { return cs[size_t((r / 32) * N + nn)]; });
    }
    const std::vector<double> xv(p.x.begin(), p.x.end());
    auto codes_only = [&](int64_t j, int64_t kk, int64_t nn) {
      return codes::decode(DType::kI8, w_codes[size_t(p.w_index(j, kk, nn))]);
    };
    const std::string what =
        std::string("i8 channel, grad ") + (grad ? std::string(to_string(*grad)) : "f32");
    expect_exact_vjp(p, dlhs, drhs, dl, xv, dr, codes_only, what);
    // int8 weights: relative error 2^-8 of the column's max at most; dout in e5m2: 2^-3.
    const double u_g = unit_roundoff(grad), tol = std::sqrt(0x1p-16 + u_g * u_g) + 0x1p-8;
    const auto [e_dlhs, e_drhs] = distance_to_float_vjp(p, dlhs, drhs);
    EXPECT_LT(e_dlhs, tol) << what;
    EXPECT_LT(e_drhs, tol) << what;
  }
}

// dout times the weights' channel scales past the f32 range has no code: with a gradient dtype
// the call is rejected (naming the element and the scale) before anything is written; with an
// f32 gradient the product is computed as it is.
TEST_F(QuantVjpTest, FoldedDoutPastTheF32RangeIsRejected) {
  VjpProblem p(150, 72, 40, {33, 0, 64, 50}, 0, 4, false, 23);
  const int64_t M = p.m, K = p.k, N = p.n, G = p.g_local;
  QuantizeOptions wq;
  wq.dtype = DType::kI8, wq.scheme = {QuantKind::kChannel, 0, 0}, wq.axis = QuantAxis::kRows;
  std::vector<uint8_t> w_codes(size_t(G * K * N));
  std::vector<float> w_s(size_t(G * N));
  for (int64_t j = 0; j < G; ++j)
    quantize(p.w.data() + j * K * N, K, N, 0, wq, w_codes.data() + j * K * N, 0, w_s.data() + j * N,
             0);
  // Row 100 is in group 3 (groups of 33, 0, 64 and 50 rows).
  w_s[size_t(3 * N + 5)] = 4.0f;
  std::vector<float> dout = p.dout;
  dout[size_t(100 * N + 5)] = 3e38f;
  for (const std::optional<DType> grad :
       {std::optional<DType>{DType::kF8E5M2}, std::optional<DType>{}}) {
    std::vector<float> dlhs(size_t(M * K), std::nanf("")), drhs(size_t(G * K * N), std::nanf(""));
    GmmVjpOptions o;
    QuantVjp& q = o.quant.emplace();
    q.rhs_scales = {{QuantKind::kChannel, 0, 0}, w_s.data(), 0};
    q.grad_dtype = grad;
    q.grad_block = 32;
    auto call = [&] {
      rt_->gmm_vjp(TensorView::matrix(dout.data(), DType::kF32, M, N),
                   TensorView::matrix(p.x.data(), DType::kF32, M, K),
                   TensorView::batch(w_codes.data(), DType::kI8, G, K, N), p.sizes,
                   TensorView::matrix(dlhs.data(), DType::kF32, M, K),
                   TensorView::batch(drhs.data(), DType::kF32, G, K, N), o);
    };
    if (!grad) {
      call();
      // dlhs[100, k] takes inf times a nonzero code of w[3][k][5]: inf.
      int64_t k = 0;
      while (w_codes[size_t(p.w_index(3, k, 5))] == 0) ++k;
      EXPECT_TRUE(std::isinf(dlhs[size_t(100 * K + k)])) << "an f32 gradient keeps the product";
      continue;
    }
    try {
      call();
      ADD_FAILURE() << "accepted a folded dout past the f32 range";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("dout[100, 5]="), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("quant.rhs_scales[3, 5]=4"), std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find("overflows f32"), std::string::npos) << e.what();
    }
    for (float v : dlhs) ASSERT_TRUE(std::isnan(v)) << "dlhs written";
    for (float v : drhs) ASSERT_TRUE(std::isnan(v)) << "drhs written";
  }
}

// Bad input: an error naming the argument and the rule, both outputs untouched.
TEST_F(QuantVjpTest, BadInputIsRejectedBeforeAnythingIsWritten) {
  constexpr int64_t B = 32;
  VjpProblem p(100, 40, 48, {30, 0, 50}, 0, 3, false, 9);
  const int64_t M = p.m, K = p.k, N = p.n, G = p.g_local;
  DualQuantizeOptions dq;
  dq.dtype = DType::kF8E4M3, dq.scheme = {QuantKind::kBlock, B, 0};
  std::vector<uint8_t> x_row(size_t(M * K)), x_col(size_t(M * K));
  std::vector<float> x_row_s(size_t(M * 2)), x_col_s(size_t(4 * K));
  quantize_dual(p.x.data(), M, K, 0, dq, x_row.data(), 0, x_row_s.data(), 0, x_col.data(), 0,
                x_col_s.data(), 0);
  QuantizeOptions wq;
  wq.dtype = DType::kF8E4M3, wq.scheme = {QuantKind::kBlock, B, B}, wq.axis = QuantAxis::kRows;
  std::vector<uint8_t> w_codes(size_t(G * K * N));
  std::vector<float> w_s(size_t(G * 2 * 2));
  for (int64_t j = 0; j < G; ++j)
    quantize(p.w.data() + j * K * N, K, N, 0, wq, w_codes.data() + j * K * N, 0, w_s.data() + j * 4,
             0);
  std::vector<float> dlhs(size_t(M * K), std::nanf("")), drhs(size_t(G * K * N), std::nanf(""));

  auto call = [&](const GmmVjpOptions& o, const std::vector<float>& dout,
                  DType rhs_dtype = DType::kF8E4M3) {
    rt_->gmm_vjp(TensorView::matrix(dout.data(), DType::kF32, M, N),
                 TensorView::matrix(x_col.data(), DType::kF8E4M3, M, K),
                 TensorView::batch(w_codes.data(), rhs_dtype, G, K, N), p.sizes,
                 TensorView::matrix(dlhs.data(), DType::kF32, M, K),
                 TensorView::batch(drhs.data(), DType::kF32, G, K, N), o);
  };
  GmmVjpOptions good;
  QuantVjp& gq = good.quant.emplace();
  gq.lhs_scales = {{QuantKind::kBlock, B, 0}, x_col_s.data(), 0};
  gq.rhs_scales = {{QuantKind::kBlock, B, B}, w_s.data(), 0};
  gq.grad_block = B;
  auto expect_rejected = [&](const std::function<void()>& fn, const std::string& needle) {
    try {
      fn();
      ADD_FAILURE() << "accepted; expected an error containing: " << needle;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
    for (float v : dlhs) ASSERT_TRUE(std::isnan(v)) << "dlhs written for: " << needle;
    for (float v : drhs) ASSERT_TRUE(std::isnan(v)) << "drhs written for: " << needle;
  };
  auto with = [&](auto&& edit) {
    GmmVjpOptions o = good;
    edit(*o.quant);
    return o;
  };
  expect_rejected(
      [&] {
        call(with([](QuantVjp& q) { q.rhs_scales.scheme = {QuantKind::kBlock, B, 0}; }), p.dout);
      },
      "quant.rhs_scales=block:32: 1-D blocks along K");
  expect_rejected([&] { call(with([](QuantVjp& q) { q.grad_dtype = DType::kI8; }), p.dout); },
                  "quant.grad_dtype=i8 must be f8e5m2, f8e4m3 or none");
  expect_rejected([&] { call(with([](QuantVjp& q) { q.grad_block = 100; }), p.dout); },
                  "quant.grad_block=100 must be a power of two in [16, 8192]");
  expect_rejected(
      [&] {
        call(with([](QuantVjp& q) {
               q.grad_calibration = {Calibration::Kind::kFixed, 2.0, 1.0};
             }),
             p.dout);
      },
      "quant.grad_calibration=fixed:2:1: lo < hi required");
  expect_rejected([&] { call(with([](QuantVjp& q) { q.lhs_scales.data = nullptr; }), p.dout); },
                  "quant.lhs_scales.data is NULL");
  expect_rejected([&] { call(with([](QuantVjp& q) { q.rhs_scales.ld = 1; }), p.dout); },
                  "quant.rhs_scales.ld=1 must be 0 (packed) or >= 2");
  expect_rejected(
      [&] {
        call(with([](QuantVjp& q) { q.lhs_scales.scheme = {QuantKind::kBlock, B, B}; }), p.dout);
      },
      "quant.lhs_scales=block:32x32: drhs's tgmm reads lhs in Bx1 blocks");
  // A NaN scale the call reads: a block of rows of group 2 (rows 30..79); expert 2's weights.
  std::vector<float> bad_x = x_col_s, bad_w = w_s;
  bad_x[size_t(K + 3)] = std::nanf("");
  expect_rejected(
      [&] { call(with([&](QuantVjp& q) { q.lhs_scales.data = bad_x.data(); }), p.dout); },
      "quant.lhs_scales[43]=nan: a scale must be finite and > 0");
  bad_w[size_t(2 * 4 + 1)] = -1.0f;
  expect_rejected(
      [&] { call(with([&](QuantVjp& q) { q.rhs_scales.data = bad_w.data(); }), p.dout); },
      "quant.rhs_scales[9]=-1");
  std::vector<float> bad_dout = p.dout;
  bad_dout[size_t(3 * N + 4)] = std::numeric_limits<float>::infinity();
  expect_rejected([&] { call(good, bad_dout); }, "dout[3, 4]=inf is not finite");
  // Quantized weights without GmmVjpOptions::quant.
  GmmVjpOptions plain;
  expect_rejected([&] { call(plain, p.dout, DType::kI8); },
                  "rhs dtype i8 holds codes that need scales: pass GmmVjpOptions::quant");
  // dlhs over the activation drhs reads after dlhs is written.
  expect_rejected(
      [&] {
        rt_->gmm_vjp(TensorView::matrix(p.dout.data(), DType::kF32, M, N),
                     TensorView::matrix(dlhs.data(), DType::kF32, M, K),
                     TensorView::batch(w_codes.data(), DType::kF8E4M3, G, K, N), p.sizes,
                     TensorView::matrix(dlhs.data(), DType::kF32, M, K),
                     TensorView::batch(drhs.data(), DType::kF32, G, K, N),
                     with([](QuantVjp& q) { q.lhs_scales = {}; }));
      },
      "dlhs overlaps lhs");

  // A NaN scale of expert 1, which has no rows, is never read: no error, nothing leaks.
  bad_w = w_s;
  for (int i = 0; i < 4; ++i) bad_w[size_t(4 + i)] = std::nanf("");
  call(with([&](QuantVjp& q) { q.rhs_scales.data = bad_w.data(); }), p.dout);
  for (float v : dlhs) ASSERT_TRUE(std::isfinite(v));
  for (float v : drhs) ASSERT_TRUE(std::isfinite(v));
  for (int64_t i = K * N; i < 2 * K * N; ++i) ASSERT_EQ(0.0f, drhs[size_t(i)]) << "empty expert";
}

}  // namespace
}  // namespace gmmgen
