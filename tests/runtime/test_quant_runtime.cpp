// Quantized products end to end (docs/quantization.md): f32 data quantized by the runtime's
// quantizers, multiplied by JIT-compiled kernels through Runtime::gmm / tgmm, and compared with a
// float64 reference on the decoded operands, at the shapes of the seeds' ecosystems (G=8, M=512,
// K=256, N=512 int8/int4 with blocks of 16 and 128 and per channel; block FP8 1x128 x 128x128 at K
// in {128, 256, 384, 1024}), with ragged groups (empty ones included), saturation and all-zero
// blocks.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>

#include "gmmgen/codes.h"
#include "gmmgen/heuristics.h"
#include "gmmgen/platform.hpp"
#include "gmmgen/quantize.hpp"
#include "gmmgen/runtime.hpp"
#include "gmmgen/spec.h"
#include "gmmgen/verify/checker.h"
#include "gmmgen/verify/numeric.h"
#include "runtime_fixtures.h"
#include "test_data.h"

namespace gmmgen {
namespace {

namespace fs = std::filesystem;

class QuantRuntime : public testing::SharedCacheRuntimeTest {};

// A quantized [rows, cols] matrix (or `batch` of them, one after the other): codes, scales and
// the exact decoded values.
struct QMatrix {
  DType dtype;
  Quant scheme;
  int64_t batch, rows, cols, ld, scale_rows, scale_cols;
  std::vector<uint8_t> codes;
  std::vector<float> scales;
  std::vector<double> value;  // [batch, rows, cols]: decode(code) * scale, exact

  // Quantizes x [batch, rows, cols] matrix by matrix along `axis`.
  QMatrix(const std::vector<float>& x, int64_t b, int64_t r, int64_t c, DType d, Quant q,
          QuantAxis axis, Calibration cal = {})
      : dtype(d), scheme(q), batch(b), rows(r), cols(c), ld(packed_codes_ld(d, c)) {
    const ScaleShape ss = scale_shape(q, axis, r, c);
    scale_rows = ss.rows, scale_cols = ss.cols;
    const int64_t per = codes::elements_per_byte(d);
    codes.assign(size_t(b * r * ld / per + 1), 0);
    scales.assign(size_t(std::max<int64_t>(1, b * ss.rows * ss.cols)), 1.0f);
    QuantizeOptions o;
    o.dtype = d, o.scheme = q, o.axis = axis, o.calibration = cal;
    for (int64_t i = 0; i < b; ++i)
      quantize(x.data() + i * r * c, r, c, 0, o, codes.data() + i * r * ld / per, ld,
               q.kind == QuantKind::kNone ? nullptr : scales.data() + i * ss.rows * ss.cols, 0);
    // Decode with the scale each element's block has (axis and scheme as in quantize()).
    value.resize(size_t(b * r * c));
    for (int64_t i = 0; i < b; ++i)
      for (int64_t y = 0; y < r; ++y)
        for (int64_t z = 0; z < c; ++z) {
          const double v = codes::decode(d, codes::get_code(codes.data(), (i * r + y) * ld + z,
                                                            bits_of(d) >= 8 ? 8 : bits_of(d)));
          value[size_t((i * r + y) * c + z)] = v * scale_of(i, y, z, axis);
        }
  }

  double scale_of(int64_t i, int64_t y, int64_t z, QuantAxis axis) const {
    const float* s = scales.data() + i * scale_rows * scale_cols;
    const bool rows_axis = axis == QuantAxis::kRows;  // blocks run down the rows
    switch (scheme.kind) {
      case QuantKind::kNone:
        return 1.0;
      case QuantKind::kTensor:
        return s[0];
      case QuantKind::kChannel:
        return s[rows_axis ? z : y];
      case QuantKind::kBlock:
        if (scheme.block_n) {
          const int64_t by = rows_axis ? scheme.block_k : scheme.block_n;
          const int64_t bz = rows_axis ? scheme.block_n : scheme.block_k;
          return s[(y / by) * scale_cols + z / bz];
        }
        return rows_axis ? s[(y / scheme.block_k) * scale_cols + z]
                         : s[y * scale_cols + z / scheme.block_k];
    }
    return 1.0;
  }
};

using testing::randn;

std::vector<int32_t> ragged_sizes(int32_t g, int64_t m, std::mt19937_64& rng) {
  std::vector<int32_t> s(size_t(g), 0);
  int64_t left = m - 3;  // three rows belong to no group
  for (int32_t i = 0; i < g; ++i) {
    if (i == 1 || i == g - 2) continue;  // two empty groups
    const int64_t take = i == g - 1 ? left : int64_t(rng() % uint64_t(left / 2 + 1));
    s[size_t(i)] = int32_t(take);
    left -= take;
  }
  return s;
}

// out [m, n] against the float64 reference of lhs [m, k] x rhs[g] [k, n]; `terms` is the count
// of f32 additions the kernel's error bound allows per element (K for float products, the scale
// blocks along K for exact integer products).
void expect_gmm_matches(const std::vector<float>& out, const QMatrix& lhs, const QMatrix& rhs,
                        const std::vector<int32_t>& sizes, int64_t terms, const std::string& what) {
  const int64_t m = lhs.rows, k = lhs.cols, n = rhs.cols;
  std::vector<int32_t> group(size_t(m), -1);
  for (size_t g = 0, r0 = 0; g < sizes.size(); r0 += size_t(sizes[g]), ++g)
    for (size_t r = r0; r < r0 + size_t(sizes[g]); ++r) group[r] = int32_t(g);
  double worst = 0;
  for (int64_t r = 0; r < m; ++r)
    for (int64_t c = 0; c < n; ++c) {
      const float got = out[size_t(r * n + c)];
      if (group[size_t(r)] < 0) {
        ASSERT_EQ(0.0f, got) << what << " row " << r << " is in no group";
        continue;
      }
      double sum = 0, abs_sum = 0;
      for (int64_t kk = 0; kk < k; ++kk) {
        const double p =
            lhs.value[size_t(r * k + kk)] * rhs.value[size_t((group[size_t(r)] * k + kk) * n + c)];
        sum += p, abs_sum += std::fabs(p);
      }
      const double bound = std::ldexp(1.0, -24) * std::fabs(sum) +
                           double(terms + 3) * std::ldexp(1.0, -24) * abs_sum + 1e-30;
      const double err = std::fabs(double(got) - sum);
      ASSERT_LE(err, bound) << what << " out[" << r << ", " << c << "] = " << got << ", reference "
                            << sum;
      worst = std::max(worst, err / bound);
    }
  ::testing::Test::RecordProperty(what, std::to_string(worst));
}

TEST_F(QuantRuntime, PeerShapesInt8AndInt4WithBlocksOf16And128AndChannels) {
  const int32_t G = 8;
  const int64_t M = 512, K = 256, N = 512;
  std::mt19937_64 rng(7);
  const auto sizes = ragged_sizes(G, M, rng);
  const auto x = randn(M * K, 1.0, rng);
  const auto w = randn(G * K * N, 0.05, rng);
  struct Case {
    DType rhs;
    Quant lq, rq;
  };
  const Case cases[] = {
      {DType::kI8, {QuantKind::kChannel, 0, 0}, {QuantKind::kChannel, 0, 0}},
      {DType::kI8, {QuantKind::kBlock, 16, 0}, {QuantKind::kBlock, 16, 0}},
      {DType::kI8, {QuantKind::kBlock, 128, 0}, {QuantKind::kBlock, 128, 0}},
      {DType::kI4, {QuantKind::kChannel, 0, 0}, {QuantKind::kBlock, 16, 0}},
      {DType::kI4, {QuantKind::kBlock, 128, 0}, {QuantKind::kBlock, 128, 0}},
      {DType::kI4, {QuantKind::kBlock, 16, 0}, {QuantKind::kChannel, 0, 0}},
  };
  for (const Case& c : cases) {
    const QMatrix lhs(x, 1, M, K, DType::kI8, c.lq, QuantAxis::kCols);
    const QMatrix rhs(w, G, K, N, c.rhs, c.rq, QuantAxis::kRows);
    std::vector<float> out(size_t(M * N), std::nanf(""));
    GmmOptions o;
    o.lhs_scales = {c.lq, lhs.scales.data(), 0};
    o.rhs_scales = {c.rq, rhs.scales.data(), 0};
    rt_->gmm(TensorView::matrix(lhs.codes.data(), DType::kI8, M, K),
             TensorView::batch(rhs.codes.data(), c.rhs, G, K, N), sizes,
             TensorView::matrix(out.data(), DType::kF32, M, N), o);
    const int64_t sb = std::min(c.lq.block_k ? c.lq.block_k : K, c.rq.block_k ? c.rq.block_k : K);
    expect_gmm_matches(
        out, lhs, rhs, sizes, (K + sb - 1) / sb,
        "i8 x " + std::string(to_string(c.rhs)) + " " + to_string(c.lq) + " x " + to_string(c.rq));
  }
}

// x [rows, cols] as `act` elements (f32, or bf16 bit patterns of values x already holds exactly),
// rows ld apart (0: packed), the padding NaN.
std::vector<unsigned char> activations(const std::vector<float>& x, DType act, int64_t rows,
                                       int64_t cols, int64_t ld) {
  const int64_t row = ld ? ld : cols, size = act == DType::kBF16 ? 2 : 4;
  std::vector<unsigned char> a(size_t(rows * row * size));
  for (int64_t i = 0; i < rows * row; ++i) store_element(act, a.data(), i, NAN);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) store_element(act, a.data(), r * row + c, x[r * cols + c]);
  return a;
}

// GmmOptions::quantize_lhs: f32 and bf16 activations quantized by the call (on the runtime's
// threads) give the bits of quantize() (of the f32 values) followed by gmm on those codes (the
// kernels of the test above), so the float64 reference of the decoded codes too; bad input is
// refused before out is written.
TEST_F(QuantRuntime, GmmQuantizesF32AndBf16ActivationsInTheCall) {
  const int32_t G = 8;
  const int64_t M = 512, K = 256, N = 512;
  std::mt19937_64 rng(7);
  const auto sizes = ragged_sizes(G, M, rng);
  const auto x = randn(M * K, 1.0, rng);
  const auto w = randn(G * K * N, 0.05, rng);
  std::vector<float> x_bf16(x.size());  // x's values rounded to bf16
  for (size_t i = 0; i < x.size(); ++i) x_bf16[i] = float(round_to(DType::kBF16, x[i]));
  struct Case {
    DType act, lhs, rhs;
    Quant lq, rq;
    int64_t ld;  // lhs's leading dimension (0: packed)
    Calibration cal{};
  };
  const Quant channel{QuantKind::kChannel, 0, 0}, block16{QuantKind::kBlock, 16, 0},
      block128{QuantKind::kBlock, 128, 0}, tensor{QuantKind::kTensor, 0, 0};
  const Calibration fixed{Calibration::Kind::kFixed, -2.0, 2.5};
  const Case cases[] = {
      {DType::kF32, DType::kI8, DType::kI8, channel, channel, 0},
      {DType::kF32, DType::kI8, DType::kI8, block16, block16, K + 5},
      {DType::kF32, DType::kI8, DType::kI4, block128, block128, 0},
      {DType::kBF16, DType::kI8, DType::kI8, channel, channel, K + 3},
      {DType::kBF16, DType::kI8, DType::kI8, block16, block16, 0},
      {DType::kBF16, DType::kI8, DType::kI8, tensor, channel, 0},
      {DType::kBF16, DType::kI8, DType::kI8, channel, channel, 0, fixed},
      {DType::kBF16, DType::kI8, DType::kI4, block128, block128, K + 1},
      {DType::kBF16, DType::kF8E4M3, DType::kF8E4M3, block128, {QuantKind::kBlock, 128, 128}, 0}};
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(to_string(c.act)) + " -> " + std::string(to_string(c.lhs)) + " " +
                 to_string(c.lq) + " " + to_string(c.cal) + " ld=" + std::to_string(c.ld));
    const std::vector<float>& xv = c.act == DType::kBF16 ? x_bf16 : x;
    const QMatrix lhs(xv, 1, M, K, c.lhs, c.lq, QuantAxis::kCols, c.cal);
    const QMatrix rhs(w, G, K, N, c.rhs, c.rq, QuantAxis::kRows);
    const TensorView weights = TensorView::batch(rhs.codes.data(), c.rhs, G, K, N);
    std::vector<float> want(size_t(M * N), std::nanf("")), got(want);
    GmmOptions o;
    o.lhs_scales = {c.lq, lhs.scales.data(), 0};
    o.rhs_scales = {c.rq, rhs.scales.data(), 0};
    rt_->gmm(TensorView::matrix(lhs.codes.data(), c.lhs, M, K), weights, sizes,
             TensorView::matrix(want.data(), DType::kF32, M, N), o);
    const std::vector<unsigned char> xs = activations(xv, c.act, M, K, c.ld);
    GmmOptions fused;
    fused.rhs_scales = o.rhs_scales;
    fused.quantize_lhs = LhsQuantization{c.lhs, c.lq, c.cal};
    EXPECT_EQ(rt_->gmm_spec(TensorView::matrix(xs.data(), c.act, M, K, c.ld), weights, sizes,
                            TensorView::matrix(got.data(), DType::kF32, M, N), fused),
              rt_->gmm_spec(TensorView::matrix(lhs.codes.data(), c.lhs, M, K), weights, sizes,
                            TensorView::matrix(want.data(), DType::kF32, M, N), o));
    rt_->gmm(TensorView::matrix(xs.data(), c.act, M, K, c.ld), weights, sizes,
             TensorView::matrix(got.data(), DType::kF32, M, N), fused);
    ASSERT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * 4));
    const int64_t sb = std::min(c.lq.block_k ? c.lq.block_k : K, c.rq.block_k ? c.rq.block_k : K);
    expect_gmm_matches(got, lhs, rhs, sizes, (K + sb - 1) / sb, "fused " + to_string(c.lq));
  }

  // Refused, out untouched: a float lhs that is not f32 or bf16, scales given for it, a value
  // that is not finite in it (found in the pass that quantizes it: channel and block scales,
  // tensor scales' maximum; with fixed calibration by a scan first), a scheme the kernels do not
  // take for lhs.
  const QMatrix rhs(w, G, K, N, DType::kI8, {QuantKind::kChannel, 0, 0}, QuantAxis::kRows);
  const TensorView weights = TensorView::batch(rhs.codes.data(), DType::kI8, G, K, N);
  std::vector<float> bad_x = x;
  bad_x[size_t(300 * K + 7)] = std::nanf("");
  std::vector<float> inf_x = x;  // the first in row order is named, a NaN is not lost to an inf
  inf_x[size_t(511 * K + 255)] = std::nanf("");
  inf_x[size_t(100 * K + 255)] = INFINITY;
  inf_x[size_t(400 * K)] = -INFINITY;
  const std::vector<uint16_t> x16(size_t(M * K), 0x3c00);  // f16 ones
  // The same in bf16: NaN and inf bit patterns, the first in row order named.
  std::vector<unsigned char> bad_b = activations(x_bf16, DType::kBF16, M, K, 0), inf_b = bad_b;
  store_element(DType::kBF16, bad_b.data(), 300 * K + 7, NAN);
  store_element(DType::kBF16, inf_b.data(), 511 * K + 255, NAN);
  store_element(DType::kBF16, inf_b.data(), 100 * K + 255, INFINITY);
  store_element(DType::kBF16, inf_b.data(), 400 * K, -INFINITY);
  std::vector<float> out(size_t(M * N), -3.0f);
  const float one = 1.0f;
  struct Bad {
    TensorView lhs;
    Scales lhs_scales;
    Quant scheme;
    const char* message;
    Calibration calibration{};
  };
  const Bad bad[] = {
      {TensorView::matrix(x16.data(), DType::kF16, M, K), {}, channel, "lhs must hold f32 or bf16"},
      {TensorView::matrix(x.data(), DType::kF32, M, K),
       {channel, &one, 0},
       channel,
       "lhs_scales must be empty"},
      {TensorView::matrix(bad_x.data(), DType::kF32, M, K), {}, channel, "x[300, 7]=nan"},
      {TensorView::matrix(bad_x.data(), DType::kF32, M, K), {}, block16, "x[300, 7]=nan"},
      {TensorView::matrix(bad_x.data(), DType::kF32, M, K), {}, tensor, "x[300, 7]=nan"},
      {TensorView::matrix(bad_x.data(), DType::kF32, M, K), {}, channel, "x[300, 7]=nan", fixed},
      {TensorView::matrix(inf_x.data(), DType::kF32, M, K), {}, block16, "x[100, 255]=inf"},
      {TensorView::matrix(inf_x.data(), DType::kF32, M, K), {}, tensor, "x[100, 255]=inf"},
      {TensorView::matrix(bad_b.data(), DType::kBF16, M, K), {}, block16, "x[300, 7]=nan"},
      {TensorView::matrix(bad_b.data(), DType::kBF16, M, K), {}, channel, "x[300, 7]=nan", fixed},
      {TensorView::matrix(inf_b.data(), DType::kBF16, M, K), {}, channel, "x[100, 255]=inf"},
      {TensorView::matrix(inf_b.data(), DType::kBF16, M, K), {}, tensor, "x[100, 255]=inf"},

      {TensorView::matrix(x.data(), DType::kF32, M, K), {}, Quant{}, "lhs_quant"}};
  for (const Bad& b : bad) {
    GmmOptions f;
    f.rhs_scales = {channel, rhs.scales.data(), 0};
    f.lhs_scales = b.lhs_scales;
    f.quantize_lhs = LhsQuantization{DType::kI8, b.scheme, b.calibration};
    try {
      rt_->gmm(b.lhs, weights, sizes, TensorView::matrix(out.data(), DType::kF32, M, N), f);
      ADD_FAILURE() << "no error; expected one naming " << b.message
                    << " (lhs_quant=" << to_string(b.scheme) << ")";
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find(b.message), std::string::npos) << e.what();
    }
    for (float v : out) ASSERT_EQ(-3.0f, v) << b.message;
  }
  // No rows: nothing to quantize, nothing written.
  GmmOptions f;
  f.rhs_scales = {channel, rhs.scales.data(), 0};
  f.quantize_lhs = LhsQuantization{DType::kI8, {QuantKind::kTensor, 0, 0}, {}};
  const std::vector<int32_t> no_rows(size_t(G), 0);
  EXPECT_NO_THROW(rt_->gmm(TensorView::matrix(x.data(), DType::kF32, 0, K), weights, no_rows,
                           TensorView::matrix(out.data(), DType::kF32, 0, N), f));
}

// A contraction longer than one i32 chunk of the integer dot product (2^16 products of codes):
// per-channel scales, so the whole of K is one scale block summed as two chunks, and codes near
// their extremes (most at +-127) so that each chunk's sums are as large as they get. The
// activations are bf16 values: quantized by the call from bf16 (rows of an odd length, past every
// whole vector), they give the bits of the codes made here.
TEST_F(QuantRuntime, IntegerProductsLongerThanOneI32Chunk) {
  const int32_t G = 2;
  const int64_t M = 6, K = 70001, N = 40;
  std::mt19937_64 rng(11);
  const std::vector<int32_t> sizes{4, 1};  // the last row is in no group
  std::vector<float> x = randn(M * K, 1.0, rng), w = randn(G * K * N, 1.0, rng);
  for (auto* v : {&x, &w})
    for (float& f : *v) f = f < -0.2f ? -1.0f : f > 0.2f ? 1.0f : f;  // mostly +-absmax
  for (float& f : x) f = float(round_to(DType::kBF16, f));
  const std::vector<unsigned char> x_bf16 = activations(x, DType::kBF16, M, K, 0);
  const Quant channel{QuantKind::kChannel, 0, 0};
  for (DType rhs_dtype : {DType::kI8, DType::kI4}) {
    const QMatrix lhs(x, 1, M, K, DType::kI8, channel, QuantAxis::kCols);
    const QMatrix rhs(w, G, K, N, rhs_dtype, channel, QuantAxis::kRows);
    std::vector<float> out(size_t(M * N), std::nanf(""));
    GmmOptions o;
    o.lhs_scales = {channel, lhs.scales.data(), 0};
    o.rhs_scales = {channel, rhs.scales.data(), 0};
    rt_->gmm(TensorView::matrix(lhs.codes.data(), DType::kI8, M, K),
             TensorView::batch(rhs.codes.data(), rhs_dtype, G, K, N), sizes,
             TensorView::matrix(out.data(), DType::kF32, M, N), o);
    expect_gmm_matches(out, lhs, rhs, sizes, 2, "i8 x " + std::string(to_string(rhs_dtype)));
    std::vector<float> fused_out(out.size(), std::nanf(""));
    GmmOptions fused;
    fused.rhs_scales = o.rhs_scales;
    fused.quantize_lhs = LhsQuantization{DType::kI8, channel, {}};
    rt_->gmm(TensorView::matrix(x_bf16.data(), DType::kBF16, M, K),
             TensorView::batch(rhs.codes.data(), rhs_dtype, G, K, N), sizes,
             TensorView::matrix(fused_out.data(), DType::kF32, M, N), fused);
    EXPECT_EQ(0, std::memcmp(out.data(), fused_out.data(), out.size() * 4));
  }
}

TEST_F(QuantRuntime, BlockFp8OneBy128TimesOneTwentyEightSquaredAtEveryK) {
  const int32_t G = 8;
  const int64_t M = 512, N = 512;
  std::mt19937_64 rng(11);
  for (int64_t K : {128, 256, 384, 1024}) {
    const auto sizes = ragged_sizes(G, M, rng);
    auto x = randn(M * K, 3.0, rng);
    // An all-zero block of lhs (row 5, the second block of K when there is one).
    for (int64_t kk = 0; kk < 128; ++kk) x[size_t(5 * K + (K > 128 ? 128 : 0) + kk)] = 0.0f;
    const auto w = randn(G * K * N, 0.02, rng);
    const Quant lq{QuantKind::kBlock, 128, 0}, rq{QuantKind::kBlock, 128, 128};
    const QMatrix lhs(x, 1, M, K, DType::kF8E4M3, lq, QuantAxis::kCols);
    const QMatrix rhs(w, G, K, N, DType::kF8E4M3, rq, QuantAxis::kRows);
    EXPECT_EQ(1.0f, lhs.scales[size_t(5 * lhs.scale_cols + (K > 128 ? 1 : 0))]) << "all-zero block";
    std::vector<float> out(size_t(M * N), std::nanf(""));
    GmmOptions o;
    o.lhs_scales = {lq, lhs.scales.data(), 0};
    o.rhs_scales = {rq, rhs.scales.data(), 0};
    rt_->gmm(TensorView::matrix(lhs.codes.data(), DType::kF8E4M3, M, K),
             TensorView::batch(rhs.codes.data(), DType::kF8E4M3, G, K, N), sizes,
             TensorView::matrix(out.data(), DType::kF32, M, N), o);
    expect_gmm_matches(out, lhs, rhs, sizes, K, "block fp8 K=" + std::to_string(K));
  }
}

TEST_F(QuantRuntime, Fp8SaturatesAtAndAboveItsMaximum) {
  const int32_t G = 2;
  const int64_t M = 16, K = 64, N = 32;
  std::mt19937_64 rng(3);
  auto x = randn(M * K, 100.0, rng);
  x[0] = 448.0f, x[1] = 449.0f, x[2] = -1e6f, x[3] = 464.0f;  // at, just above, far above
  const auto w = randn(G * K * N, 1.0, rng);
  // fp8 with no scales: a plain saturating cast.
  const QMatrix lhs(x, 1, M, K, DType::kF8E4M3, {}, QuantAxis::kCols);
  EXPECT_EQ(448.0, lhs.value[0]);
  EXPECT_EQ(448.0, lhs.value[1]);
  EXPECT_EQ(-448.0, lhs.value[2]);
  EXPECT_EQ(448.0, lhs.value[3]);
  const QMatrix rhs(w, G, K, N, DType::kF8E5M2, {}, QuantAxis::kRows);
  const std::vector<int32_t> sizes{9, 6};
  std::vector<float> out(size_t(M * N), std::nanf(""));
  rt_->gmm(TensorView::matrix(lhs.codes.data(), DType::kF8E4M3, M, K),
           TensorView::batch(rhs.codes.data(), DType::kF8E5M2, G, K, N), sizes,
           TensorView::matrix(out.data(), DType::kF32, M, N));
  expect_gmm_matches(out, lhs, rhs, sizes, K, "saturated fp8");
  // Fixed calibration clips to [lo, hi] before the scale max(|lo|, |hi|) / 127 applies.
  const QMatrix clipped(x, 1, M, K, DType::kI8, {QuantKind::kTensor, 0, 0}, QuantAxis::kCols,
                        {Calibration::Kind::kFixed, -50.0, 50.0});
  EXPECT_NEAR(50.0, clipped.value[1], 1e-5);
  EXPECT_NEAR(-50.0, clipped.value[2], 1e-5);
}

TEST_F(QuantRuntime, TgmmBlocksOfGlobalRowsStraddleGroupBoundaries) {
  // The backward pass's drhs: activations and gradients quantized column-wise (128x1 blocks
  // along M) by the dual quantizer; groups of 100 rows cut through the 128-row blocks.
  const int32_t G = 4;
  const int64_t M = 450, K = 96, N = 80;
  std::mt19937_64 rng(5);
  const auto x = randn(M * K, 1.0, rng), dy = randn(M * N, 0.1, rng);
  const Quant q{QuantKind::kBlock, 128, 0};
  DualQuantizeOptions d;
  d.dtype = DType::kF8E4M3, d.scheme = q;
  std::vector<uint8_t> row_codes(size_t(M * K)), col_codes(size_t(M * K));
  std::vector<float> row_scales(size_t(M * 1)), col_scales(size_t(4 * K));
  quantize_dual(x.data(), M, K, 0, d, row_codes.data(), 0, row_scales.data(), 0, col_codes.data(),
                0, col_scales.data(), 0);
  const QMatrix lhs(x, 1, M, K, DType::kF8E4M3, q, QuantAxis::kRows);
  EXPECT_EQ(lhs.codes.size() - 1, col_codes.size());
  EXPECT_TRUE(std::equal(col_codes.begin(), col_codes.end(), lhs.codes.begin()))
      << "dual quantization's column-wise codes are quantize()'s";
  const QMatrix rhs(dy, 1, M, N, DType::kF8E5M2, q, QuantAxis::kRows);
  const std::vector<int32_t> sizes{100, 0, 150, 190};  // 10 rows in no group
  std::vector<float> out(size_t(G * K * N), std::nanf(""));
  TgmmOptions o;
  o.lhs_scales = {q, col_scales.data(), 0};
  o.rhs_scales = {q, rhs.scales.data(), 0};
  rt_->tgmm(TensorView::matrix(col_codes.data(), DType::kF8E4M3, M, K),
            TensorView::matrix(rhs.codes.data(), DType::kF8E5M2, M, N), sizes,
            TensorView::batch(out.data(), DType::kF32, G, K, N), o);
  int64_t r0 = 0;
  for (int32_t g = 0; g < G; ++g) {
    for (int64_t kk = 0; kk < K; ++kk)
      for (int64_t n = 0; n < N; ++n) {
        double sum = 0, abs_sum = 0;
        for (int64_t r = r0; r < r0 + sizes[size_t(g)]; ++r) {
          const double p = lhs.value[size_t(r * K + kk)] * rhs.value[size_t(r * N + n)];
          sum += p, abs_sum += std::fabs(p);
        }
        const double got = out[size_t((g * K + kk) * N + n)];
        const double bound =
            std::ldexp(1.0, -24) * (std::fabs(sum) + double(sizes[size_t(g)] + 3) * abs_sum);
        ASSERT_LE(std::fabs(got - sum), bound + 1e-30)
            << "out[" << g << "][" << kk << ", " << n << "] = " << got << ", reference " << sum;
      }
    r0 += sizes[size_t(g)];
  }
}

// The scale folds (a block's partial product times its scales, added to the accumulators) are
// written as fused multiply-adds, so the bits of a quantized product do not depend on the compiler:
// GCC contracts a product and a sum written apart, clang++ does not. One ISA family (isa=native:
// the host's best, and each explicit family; the full tier: the bits change only with the
// templates), compiled by g++ and by clang++, on the same inputs: gmm folding inside the
// micro-kernel (blocks shorter than tk, with and without lhs scales), tgmm folding per row
// (fold_row), and a float product with converted operands and output (f16 and bf16, accumulating).
// The kernels are cached in $GMMGEN_TEST_CACHE_DIR when set (shared by .ci/test's builds; the cache
// key covers the compiler), else in a private folder.
class CompilerIndependence : public ::testing::TestWithParam<Isa> {};

TEST_P(CompilerIndependence, SameBitsFromGccAndClang) {
  const Isa isa = GetParam();
  if (!host_supports(isa)) GTEST_SKIP() << "this CPU cannot run isa=" << to_string(isa);
  const std::string compilers[] = {testing::on_path("g++"), testing::on_path("clang++")};
  if (compilers[0].empty() || compilers[1].empty()) GTEST_SKIP() << "needs both g++ and clang++";
  const char* specs[] = {
      "op=gmm,lhs=bf16,rhs=nf4,out=f32,rhs_quant=block:32,k=200,n=72,g=3,tm=16,tk=64,tn=64",
      "op=gmm,lhs=f8e4m3,rhs=i4,out=f32,lhs_quant=block:16,rhs_quant=block:32,k=136,n=40,g=3,"
      "tm=16,tk=64,tn=32",
      "op=tgmm,lhs=f8e4m3,rhs=f8e5m2,out=f32,lhs_quant=block:16,rhs_quant=block:16,k=40,n=36,g=3,"
      "tm=24,tk=32,tn=32",
      "op=gmm,lhs=f16,rhs=bf16,out=bf16,k=200,n=72,g=3,tm=16,tk=64,tn=64,out_mode=accumulate",
  };
  const char* old = std::getenv("GMMGEN_CXX");
  const std::string saved = old ? old : "";
  for (const char* text : specs) {
    KernelSpec spec = parse_text(std::string(text) + ",isa=" + std::string(to_string(isa)));
    CheckCase c;
    c.label = "ragged";
    c.m = 61;
    c.group_sizes = {17, 0, 40};  // sum < m; the last group starts mid-tile
    c.seed = 5;
    uint64_t digest[2] = {0, 0};
    for (int i = 0; i < 2; ++i) {
      setenv("GMMGEN_CXX", compilers[i].c_str(), 1);
      const char* shared = std::getenv("GMMGEN_TEST_CACHE_DIR");
      const fs::path dir =
          shared && *shared ? fs::path(shared) : testing::make_private_dir("gmmgen_test_cxx");
      ASSERT_FALSE(dir.empty());
      {
        RuntimeOptions o;
        o.cache_dir = dir;
        o.num_threads = 2;
        Runtime rt(o);
        const CheckResult r = check_kernel(rt.kernel(spec), spec, c);
        EXPECT_TRUE(r.ok) << compilers[i] << ": " << r.failure;
        digest[i] = r.output_digest;
      }
      std::error_code ec;
      if (!(shared && *shared)) fs::remove_all(dir, ec);
    }
    EXPECT_EQ(digest[0], digest[1])
        << text << " isa=" << to_string(isa) << ": g++ and clang++ kernels give different bits";
  }
  if (old)
    setenv("GMMGEN_CXX", saved.c_str(), 1);
  else
    unsetenv("GMMGEN_CXX");
}

std::string isa_name(const ::testing::TestParamInfo<Isa>& info) {
  return std::string(to_string(info.param));
}

INSTANTIATE_TEST_SUITE_P(Best, CompilerIndependence, ::testing::Values(Isa::kNative), isa_name);
INSTANTIATE_TEST_SUITE_P(Families, CompilerIndependence,
                         ::testing::Values(Isa::kAvx512Bf16, Isa::kAvx512Vnni, Isa::kAvx512,
                                           Isa::kAvx2, Isa::kGeneric),
                         isa_name);

}  // namespace
}  // namespace gmmgen
