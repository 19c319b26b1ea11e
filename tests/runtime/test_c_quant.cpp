// Quantized operands through the C API (gmmgen/runtime_c.h): the scales of gmmgen_gmm_options,
// gmmgen_tgmm_options and gmmgen_vjp_quant, against a float64 reference of the operands
// dequantized by gmmgen_dequantize; zero-initialised options meaning what they always meant; bad
// scales rejected with the field named and the output untouched; and the quantized VJP giving the
// C++ API's bits.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gmmgen/runtime.hpp"
#include "gmmgen/runtime_c.h"
#include "runtime_fixtures.h"
#include "test_data.h"

namespace {

namespace fs = std::filesystem;

using gmmgen::testing::randn;
constexpr double kU = gmmgen::testing::kF32Roundoff;

class CQuant : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = gmmgen::testing::shared_test_cache();
    setenv("GMMGEN_CACHE_DIR", dir_.c_str(), 1);
    ASSERT_EQ(GMMGEN_OK, gmmgen_runtime_create(&rt_, err_, sizeof err_)) << err_;
  }
  void TearDown() override {
    gmmgen_runtime_destroy(rt_);
    unsetenv("GMMGEN_CACHE_DIR");
  }
  fs::path dir_;
  gmmgen_runtime* rt_ = nullptr;
  char err_[512] = {0};
};

// A quantized stack of `batch` [rows, cols] matrices (one after the other), by the C API's
// quantizer, and its dequantized f32 values (gmmgen_dequantize).
struct CQuantized {
  int32_t dtype;
  std::string scheme;
  int64_t batch, rows, cols, ld, scales_per;
  std::vector<uint8_t> codes;
  std::vector<float> scales, value;

  CQuantized(const std::vector<float>& x, int64_t b, int64_t r, int64_t c, int32_t d, std::string s,
             int32_t axis, int64_t scale_count)
      : dtype(d), scheme(std::move(s)), batch(b), rows(r), cols(c), scales_per(scale_count) {
    const int per = d == GMMGEN_DTYPE_I4 ? 2 : 1;
    ld = (c + per - 1) / per * per;
    codes.assign(size_t(b * r * ld / per), 0);
    scales.assign(size_t(std::max<int64_t>(1, b * scale_count)), 0.0f);
    value.assign(size_t(b * r * c), 0.0f);
    char err[512];
    for (int64_t i = 0; i < b; ++i) {
      uint8_t* ci = codes.data() + i * r * ld / per;
      float* si = scheme.empty() ? nullptr : scales.data() + i * scale_count;
      const char* sc = scheme.empty() ? "none" : scheme.c_str();
      EXPECT_EQ(GMMGEN_OK, gmmgen_quantize(x.data() + i * r * c, r, c, 0, d, sc, axis, nullptr, ci,
                                           0, si, 0, err, sizeof err))
          << err;
      EXPECT_EQ(GMMGEN_OK, gmmgen_dequantize(ci, 0, si, 0, r, c, d, sc, axis,
                                             value.data() + i * r * c, 0, err, sizeof err))
          << err;
    }
  }
  gmmgen_scales c_scales() const {
    return {scheme.empty() ? nullptr : scheme.c_str(), scheme.empty() ? nullptr : scales.data(), 0};
  }
};

// The bound of an f32 kernel summing `terms` products of dequantized values: docs/quantization.md's
// checker bound, u |sum| + (terms + 3) u sum|p|, plus 2 u sum|p| because the reference's operands
// are the f32 results of gmmgen_dequantize, each within u of the exact decoded value.
double c_bound(double sum, double abs_sum, int64_t terms) {
  return kU * std::fabs(sum) + double(terms + 5) * kU * abs_sum + 1e-30;
}

std::vector<int32_t> group_of_rows(const std::vector<int32_t>& sizes, int64_t m) {
  std::vector<int32_t> g(size_t(m), -1);
  int64_t r = 0;
  for (size_t i = 0; i < sizes.size(); ++i)
    for (int32_t j = 0; j < sizes[i]; ++j) g[size_t(r++)] = int32_t(i);
  return g;
}

struct GmmCase {
  int32_t lhs_dtype;
  const char* lhs_scheme;
  int64_t lhs_scale_count;  // floats of lhs scales (per [M, K])
  int32_t rhs_dtype;
  const char* rhs_scheme;
  int64_t rhs_scale_count;  // floats per expert
  bool transposed;
};

TEST_F(CQuant, GmmScalesMatchTheFloat64ReferenceOfTheDequantizedOperands) {
  const int64_t M = 150, K = 160, N = 96, G = 4;
  const std::vector<int32_t> sizes{40, 0, 70, 30};  // 10 rows in no group
  std::mt19937_64 rng(17);
  const auto x = randn(M * K, 1.0, rng);
  const auto w = randn(G * K * N, 0.05, rng);
  const GmmCase cases[] = {
      // Block FP8: lhs 1x128 [M, 2], weights 128x128 [G, 2, 1].
      {GMMGEN_DTYPE_F8E4M3, "block:128", M * 2, GMMGEN_DTYPE_F8E4M3, "block:128x128", 2, false},
      // int8 per row x int8 per output column, weights stored [G, N, K].
      {GMMGEN_DTYPE_I8, "channel", M, GMMGEN_DTYPE_I8, "channel", N, true},
      // f32 activations (no scales) x int4 weights in 1-D blocks of 32 along K [G, 5, N].
      {GMMGEN_DTYPE_F32, nullptr, 0, GMMGEN_DTYPE_I4, "block:32", 5 * N, false},
      // A tensor-scaled lhs x e5m2 weights in 64x32 blocks, stored [G, N, K]: scales
      // [G, ceil(N/32), ceil(K/64)] = [G, 3, 3].
      {GMMGEN_DTYPE_F8E4M3, "tensor", 1, GMMGEN_DTYPE_F8E5M2, "block:64x32", 9, true},
  };
  for (const GmmCase& c : cases) {
    const std::string what = std::string(c.lhs_scheme ? c.lhs_scheme : "none") + " x " +
                             c.rhs_scheme + (c.transposed ? " transposed" : "");
    // Weights [K, N] quantized along rows (K), or stored [N, K] and quantized along cols.
    std::vector<float> wt = w;
    if (c.transposed)
      for (int64_t j = 0; j < G; ++j)
        for (int64_t kk = 0; kk < K; ++kk)
          for (int64_t n = 0; n < N; ++n)
            wt[size_t((j * N + n) * K + kk)] = w[size_t((j * K + kk) * N + n)];
    const CQuantized rhs(
        wt, G, c.transposed ? N : K, c.transposed ? K : N, c.rhs_dtype, c.rhs_scheme,
        c.transposed ? GMMGEN_QUANT_AXIS_COLS : GMMGEN_QUANT_AXIS_ROWS, c.rhs_scale_count);
    std::vector<float> lhs_f32;
    const CQuantized* lhs_q = nullptr;
    std::unique_ptr<CQuantized> holder;
    if (c.lhs_scheme) {
      holder = std::make_unique<CQuantized>(x, 1, M, K, c.lhs_dtype, c.lhs_scheme,
                                            GMMGEN_QUANT_AXIS_COLS, c.lhs_scale_count);
      lhs_q = holder.get();
    }
    const std::vector<float>& lv = lhs_q ? lhs_q->value : x;
    std::vector<float> out(size_t(M * N), std::nanf(""));
    gmmgen_tensor tl{
        lhs_q ? static_cast<void*>(holder->codes.data()) : const_cast<float*>(x.data()),
        c.lhs_dtype,
        2,
        {M, K, 0},
        0};
    gmmgen_tensor tr{const_cast<uint8_t*>(rhs.codes.data()),
                     c.rhs_dtype,
                     3,
                     {G, c.transposed ? N : K, c.transposed ? K : N},
                     0};
    gmmgen_tensor to{out.data(), GMMGEN_DTYPE_F32, 2, {M, N, 0}, 0};
    gmmgen_gmm_options o{};
    o.transpose_rhs = c.transposed;
    if (lhs_q) o.lhs_scales = lhs_q->c_scales();
    o.rhs_scales = rhs.c_scales();
    ASSERT_EQ(GMMGEN_OK, gmmgen_runtime_gmm(rt_, &tl, &tr, sizes.data(), int32_t(G), &to, &o, err_,
                                            sizeof err_))
        << what << ": " << err_;
    const auto group = group_of_rows(sizes, M);
    for (int64_t r = 0; r < M; ++r)
      for (int64_t n = 0; n < N; ++n) {
        const float got = out[size_t(r * N + n)];
        const int32_t j = group[size_t(r)];
        if (j < 0) {
          ASSERT_EQ(0.0f, got) << what;
          continue;
        }
        double sum = 0, abs_sum = 0;
        for (int64_t kk = 0; kk < K; ++kk) {
          const double wv =
              rhs.value[size_t(c.transposed ? (j * N + n) * K + kk : (j * K + kk) * N + n)];
          const double p = double(lv[size_t(r * K + kk)]) * wv;
          sum += p, abs_sum += std::fabs(p);
        }
        ASSERT_LE(std::fabs(got - sum), c_bound(sum, abs_sum, K))
            << what << ": out[" << r << ", " << n << "] = " << got << ", reference " << sum;
      }
  }
}

// gmmgen_runtime_gmm_quantize_lhs: f32 and bf16 activations quantized by the call give the bits
// of gmmgen_quantize (of the f32 values) + gmmgen_runtime_gmm (fp8 blocks, i8 channels under
// fixed calibration); bad quantizations and a value that is not finite are refused with out
// untouched.
TEST_F(CQuant, GmmQuantizesF32AndBf16ActivationsInTheCall) {
  const int64_t M = 150, K = 256, N = 64, G = 3;
  const std::vector<int32_t> sizes{60, 0, 80};
  std::mt19937_64 rng(29);
  auto x = randn(M * K, 1.0, rng);
  const auto w = randn(G * K * N, 0.05, rng);
  struct Case {
    int32_t dtype;
    const char* scheme;
    const char* calibration;
    int64_t scale_count;
    int32_t rhs_dtype;
    const char* rhs_scheme;
    int64_t rhs_scale_count;
  };
  const Case cases[] = {
      {GMMGEN_DTYPE_F8E4M3, "block:128", nullptr, M * 2, GMMGEN_DTYPE_F8E4M3, "block:128x128", 2},
      {GMMGEN_DTYPE_I8, "channel", "fixed:-2:2", M, GMMGEN_DTYPE_I8, "channel", N}};
  gmmgen_tensor tl{x.data(), GMMGEN_DTYPE_F32, 2, {M, K, 0}, 0};
  // x rounded to bf16 (to nearest, ties to even: x is finite), and those values in f32.
  std::vector<uint16_t> xb(x.size());
  std::vector<float> xw(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const uint32_t u = std::bit_cast<uint32_t>(x[i]);
    xb[i] = uint16_t((u + 0x7fff + ((u >> 16) & 1)) >> 16);
    xw[i] = std::bit_cast<float>(uint32_t(xb[i]) << 16);
  }
  gmmgen_tensor tb{xb.data(), GMMGEN_DTYPE_BF16, 2, {M, K, 0}, 0};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.scheme);
    const CQuantized rhs(w, G, K, N, c.rhs_dtype, c.rhs_scheme, GMMGEN_QUANT_AXIS_ROWS,
                         c.rhs_scale_count);
    std::vector<uint8_t> codes(size_t(M * K));
    std::vector<float> scales(static_cast<size_t>(c.scale_count));
    ASSERT_EQ(GMMGEN_OK,
              gmmgen_quantize(x.data(), M, K, 0, c.dtype, c.scheme, GMMGEN_QUANT_AXIS_COLS,
                              c.calibration, codes.data(), 0, scales.data(), 0, err_, sizeof err_))
        << err_;
    std::vector<float> want(size_t(M * N), std::nanf("")), got(want);
    gmmgen_tensor tq{codes.data(), c.dtype, 2, {M, K, 0}, 0};
    gmmgen_tensor tr{const_cast<uint8_t*>(rhs.codes.data()), c.rhs_dtype, 3, {G, K, N}, 0};
    gmmgen_tensor tw{want.data(), GMMGEN_DTYPE_F32, 2, {M, N, 0}, 0};
    gmmgen_tensor tg{got.data(), GMMGEN_DTYPE_F32, 2, {M, N, 0}, 0};
    gmmgen_gmm_options o{};
    o.lhs_scales = {c.scheme, scales.data(), 0};
    o.rhs_scales = rhs.c_scales();
    ASSERT_EQ(GMMGEN_OK, gmmgen_runtime_gmm(rt_, &tq, &tr, sizes.data(), int32_t(G), &tw, &o, err_,
                                            sizeof err_))
        << err_;
    gmmgen_gmm_options f{};
    f.rhs_scales = rhs.c_scales();
    const gmmgen_lhs_quant q{c.dtype, c.scheme, c.calibration};
    ASSERT_EQ(GMMGEN_OK, gmmgen_runtime_gmm_quantize_lhs(rt_, &tl, &tr, sizes.data(), int32_t(G),
                                                         &tg, &f, &q, err_, sizeof err_))
        << err_;
    ASSERT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)));

    ASSERT_EQ(GMMGEN_OK,
              gmmgen_quantize(xw.data(), M, K, 0, c.dtype, c.scheme, GMMGEN_QUANT_AXIS_COLS,
                              c.calibration, codes.data(), 0, scales.data(), 0, err_, sizeof err_))
        << err_;
    ASSERT_EQ(GMMGEN_OK, gmmgen_runtime_gmm(rt_, &tq, &tr, sizes.data(), int32_t(G), &tw, &o, err_,
                                            sizeof err_))
        << err_;
    std::fill(got.begin(), got.end(), std::nanf(""));
    ASSERT_EQ(GMMGEN_OK, gmmgen_runtime_gmm_quantize_lhs(rt_, &tb, &tr, sizes.data(), int32_t(G),
                                                         &tg, &f, &q, err_, sizeof err_))
        << err_;
    ASSERT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float))) << "bf16";

    // Refused, out untouched.
    std::vector<float> keep(size_t(M * N), -3.0f);
    gmmgen_tensor tk{keep.data(), GMMGEN_DTYPE_F32, 2, {M, N, 0}, 0};
    const gmmgen_lhs_quant bad_dtype{GMMGEN_DTYPE_COUNT_, c.scheme, nullptr},
        bad_block{c.dtype, "block:12", nullptr}, bad_cal{c.dtype, c.scheme, "fixed:2:1"};
    const std::pair<const gmmgen_lhs_quant*, const char*> bad[] = {
        {nullptr, "quant is NULL"},
        {&bad_dtype, "quant.dtype="},
        {&bad_block, "block:12: block size 12 must be a power of two"},
        {&bad_cal, "lo < hi"}};
    for (const auto& [bq, needle] : bad) {
      EXPECT_NE(GMMGEN_OK, gmmgen_runtime_gmm_quantize_lhs(rt_, &tl, &tr, sizes.data(), int32_t(G),
                                                           &tk, &f, bq, err_, sizeof err_));
      EXPECT_NE(std::string(err_).find(needle), std::string::npos) << err_;
    }
    x[size_t(77 * K + 200)] = std::nanf("");
    EXPECT_NE(GMMGEN_OK, gmmgen_runtime_gmm_quantize_lhs(rt_, &tl, &tr, sizes.data(), int32_t(G),
                                                         &tk, &f, &q, err_, sizeof err_));
    EXPECT_NE(std::string(err_).find("x[77, 200]=nan is not finite"), std::string::npos) << err_;
    x[size_t(77 * K + 200)] = 0.25f;
    const uint16_t kept = std::exchange(xb[size_t(90 * K + 3)], uint16_t(0xff80));  // -inf
    EXPECT_NE(GMMGEN_OK, gmmgen_runtime_gmm_quantize_lhs(rt_, &tb, &tr, sizes.data(), int32_t(G),
                                                         &tk, &f, &q, err_, sizeof err_));
    EXPECT_NE(std::string(err_).find("x[90, 3]=-inf is not finite"), std::string::npos) << err_;
    xb[size_t(90 * K + 3)] = kept;
    for (float v : keep) ASSERT_EQ(-3.0f, v);
  }
}

TEST_F(CQuant, TgmmScalesMatchTheFloat64ReferenceOfTheDequantizedOperands) {
  const int64_t M = 300, K = 48, N = 40, G = 3;
  const std::vector<int32_t> sizes{100, 0, 190};  // boundary at row 100, inside block 0 of 128
  std::mt19937_64 rng(23);
  const auto x = randn(M * K, 1.0, rng), dy = randn(M * N, 0.1, rng);
  const int64_t mb = (M + 127) / 128;
  // The activation's column-wise codes from the dual quantizer (the backward's lhs).
  std::vector<uint8_t> row_codes(size_t(M * K)), col_codes(size_t(M * K));
  std::vector<float> row_scales(static_cast<size_t>(M)), col_scales(static_cast<size_t>(mb * K)),
      xv(static_cast<size_t>(M * K));
  ASSERT_EQ(GMMGEN_OK,
            gmmgen_quantize_dual(x.data(), M, K, 0, GMMGEN_DTYPE_F8E4M3, "block:128", nullptr,
                                 row_codes.data(), 0, row_scales.data(), 0, col_codes.data(), 0,
                                 col_scales.data(), 0, err_, sizeof err_))
      << err_;
  ASSERT_EQ(GMMGEN_OK,
            gmmgen_dequantize(col_codes.data(), 0, col_scales.data(), 0, M, K, GMMGEN_DTYPE_F8E4M3,
                              "block:128", GMMGEN_QUANT_AXIS_ROWS, xv.data(), 0, err_, sizeof err_))
      << err_;
  struct Case {
    int32_t lhs_dtype;
    const std::vector<uint8_t>* lhs_codes;
    const std::vector<float>* lhs_scales;
    const std::vector<float>* lhs_value;
    const char* lhs_scheme;
    int32_t rhs_dtype;
    const char* rhs_scheme;
    int64_t rhs_scale_count;
  };
  const CQuantized xi8(x, 1, M, K, GMMGEN_DTYPE_I8, "channel", GMMGEN_QUANT_AXIS_ROWS, K);
  const Case cases[] = {
      {GMMGEN_DTYPE_F8E4M3, &col_codes, &col_scales, &xv, "block:128", GMMGEN_DTYPE_F8E5M2,
       "block:128", mb * N},
      {GMMGEN_DTYPE_I8, &xi8.codes, &xi8.scales, &xi8.value, "channel", GMMGEN_DTYPE_I8, "tensor",
       1},
  };
  for (const Case& c : cases) {
    const std::string what = std::string(c.lhs_scheme) + " x " + c.rhs_scheme;
    const CQuantized rhs(dy, 1, M, N, c.rhs_dtype, c.rhs_scheme, GMMGEN_QUANT_AXIS_ROWS,
                         c.rhs_scale_count);
    std::vector<float> out(size_t(G * K * N), std::nanf(""));
    gmmgen_tensor tl{const_cast<uint8_t*>(c.lhs_codes->data()), c.lhs_dtype, 2, {M, K, 0}, 0};
    gmmgen_tensor tr{const_cast<uint8_t*>(rhs.codes.data()), c.rhs_dtype, 2, {M, N, 0}, 0};
    gmmgen_tensor to{out.data(), GMMGEN_DTYPE_F32, 3, {G, K, N}, 0};
    gmmgen_tgmm_options o{};
    o.lhs_scales = {c.lhs_scheme, c.lhs_scales->data(), 0};
    o.rhs_scales = rhs.c_scales();
    ASSERT_EQ(GMMGEN_OK, gmmgen_runtime_tgmm(rt_, &tl, &tr, sizes.data(), int32_t(G), &to, &o, err_,
                                             sizeof err_))
        << what << ": " << err_;
    int64_t r0 = 0;
    for (int64_t j = 0; j < G; ++j) {
      for (int64_t kk = 0; kk < K; ++kk)
        for (int64_t n = 0; n < N; ++n) {
          double sum = 0, abs_sum = 0;
          for (int64_t r = r0; r < r0 + sizes[size_t(j)]; ++r) {
            const double p =
                double((*c.lhs_value)[size_t(r * K + kk)]) * rhs.value[size_t(r * N + n)];
            sum += p, abs_sum += std::fabs(p);
          }
          const float got = out[size_t((j * K + kk) * N + n)];
          ASSERT_LE(std::fabs(got - sum), c_bound(sum, abs_sum, sizes[size_t(j)]))
              << what << ": out[" << j << "][" << kk << ", " << n << "] = " << got << ", reference "
              << sum;
        }
      r0 += sizes[size_t(j)];
    }
  }
}

// Options of all zeros, and NULL options, still mean no scales: fp8 codes are their values.
TEST_F(CQuant, ZeroInitialisedOptionsMeanNoScales) {
  const int64_t M = 20, K = 32, N = 16, G = 2;
  const std::vector<int32_t> sizes{12, 6};
  std::mt19937_64 rng(5);
  const CQuantized lhs(randn(M * K, 2.0, rng), 1, M, K, GMMGEN_DTYPE_F8E4M3, "",
                       GMMGEN_QUANT_AXIS_COLS, 0);
  const CQuantized rhs(randn(G * K * N, 2.0, rng), G, K, N, GMMGEN_DTYPE_F8E5M2, "",
                       GMMGEN_QUANT_AXIS_ROWS, 0);
  gmmgen_tensor tl{const_cast<uint8_t*>(lhs.codes.data()), GMMGEN_DTYPE_F8E4M3, 2, {M, K, 0}, 0};
  gmmgen_tensor tr{const_cast<uint8_t*>(rhs.codes.data()), GMMGEN_DTYPE_F8E5M2, 3, {G, K, N}, 0};
  std::vector<float> zeros(size_t(M * N), std::nanf("")), null_opts = zeros;
  gmmgen_tensor tz{zeros.data(), GMMGEN_DTYPE_F32, 2, {M, N, 0}, 0};
  gmmgen_tensor tn{null_opts.data(), GMMGEN_DTYPE_F32, 2, {M, N, 0}, 0};
  gmmgen_gmm_options o;
  std::memset(&o, 0, sizeof o);
  ASSERT_EQ(GMMGEN_OK,
            gmmgen_runtime_gmm(rt_, &tl, &tr, sizes.data(), int32_t(G), &tz, &o, err_, sizeof err_))
      << err_;
  ASSERT_EQ(GMMGEN_OK, gmmgen_runtime_gmm(rt_, &tl, &tr, sizes.data(), int32_t(G), &tn, nullptr,
                                          err_, sizeof err_))
      << err_;
  EXPECT_EQ(0, std::memcmp(zeros.data(), null_opts.data(), zeros.size() * sizeof(float)));
  for (int64_t r = 0; r < 18; ++r)
    for (int64_t n = 0; n < N; ++n) {
      double sum = 0, abs_sum = 0;
      for (int64_t kk = 0; kk < K; ++kk) {
        const double p = double(lhs.value[size_t(r * K + kk)]) *
                         rhs.value[size_t(((r < 12 ? 0 : 1) * K + kk) * N + n)];
        sum += p, abs_sum += std::fabs(p);
      }
      ASSERT_LE(std::fabs(zeros[size_t(r * N + n)] - sum), c_bound(sum, abs_sum, K));
    }
  // tgmm with options of zeros: fp8 x fp8 values, no scales.
  std::vector<float> tg(size_t(G * K * N), std::nanf(""));
  gmmgen_tensor tt{tg.data(), GMMGEN_DTYPE_F32, 3, {G, K, N}, 0};
  gmmgen_tensor tdy{const_cast<uint8_t*>(rhs.codes.data()), GMMGEN_DTYPE_F8E5M2, 2, {M, N, 0}, 0};
  gmmgen_tgmm_options to;
  std::memset(&to, 0, sizeof to);
  ASSERT_EQ(GMMGEN_OK, gmmgen_runtime_tgmm(rt_, &tl, &tdy, sizes.data(), int32_t(G), &tt, &to, err_,
                                           sizeof err_))
      << err_;
  for (float v : tg) ASSERT_TRUE(std::isfinite(v));
}

TEST_F(CQuant, BadScalesAreRejectedNamingTheFieldAndLeaveTheOutputUntouched) {
  const int64_t M = 40, K = 64, N = 32, G = 2;
  const std::vector<int32_t> sizes{25, 10};
  std::mt19937_64 rng(8);
  const CQuantized lhs(randn(M * K, 1.0, rng), 1, M, K, GMMGEN_DTYPE_I8, "block:32",
                       GMMGEN_QUANT_AXIS_COLS, M * 2);
  const CQuantized rhs(randn(G * K * N, 1.0, rng), G, K, N, GMMGEN_DTYPE_I8, "channel",
                       GMMGEN_QUANT_AXIS_ROWS, N);
  std::vector<float> out(size_t(M * N), std::nanf(""));
  gmmgen_tensor tl{const_cast<uint8_t*>(lhs.codes.data()), GMMGEN_DTYPE_I8, 2, {M, K, 0}, 0};
  gmmgen_tensor tr{const_cast<uint8_t*>(rhs.codes.data()), GMMGEN_DTYPE_I8, 3, {G, K, N}, 0};
  gmmgen_tensor to{out.data(), GMMGEN_DTYPE_F32, 2, {M, N, 0}, 0};
  gmmgen_gmm_options good{};
  good.lhs_scales = lhs.c_scales();
  good.rhs_scales = rhs.c_scales();
  ASSERT_EQ(GMMGEN_OK, gmmgen_runtime_gmm(rt_, &tl, &tr, sizes.data(), int32_t(G), &to, &good, err_,
                                          sizeof err_))
      << err_;
  const std::vector<float> before = out;
  auto expect_rejected = [&](const gmmgen_gmm_options& o, const std::string& needle) {
    EXPECT_EQ(
        GMMGEN_ERR_INVALID_ARGUMENT,
        gmmgen_runtime_gmm(rt_, &tl, &tr, sizes.data(), int32_t(G), &to, &o, err_, sizeof err_))
        << needle;
    EXPECT_NE(std::string(err_).find(needle), std::string::npos) << err_;
    EXPECT_EQ(0, std::memcmp(before.data(), out.data(), out.size() * sizeof(float))) << needle;
  };
  gmmgen_gmm_options o = good;
  o.lhs_scales.scheme = "block:100";
  expect_rejected(o, "options.lhs_scales.scheme=block:100: block size 100 must be a power of two");
  o = good, o.rhs_scales.scheme = "chanel";
  expect_rejected(o, "options.rhs_scales.scheme=");
  o = good, o.rhs_scales.data = nullptr;
  expect_rejected(o, "options.rhs_scales.data is NULL: scheme channel needs scales");
  o = good, o.lhs_scales = {};
  expect_rejected(o,
                  "options.lhs_scales.scheme is none, but dtype i8 holds codes that need scales");
  o = good, o.lhs_scales.scheme = "";
  expect_rejected(o, "options.lhs_scales.data must be NULL");
  o = good, o.rhs_scales.ld = -1;
  expect_rejected(o, "options.rhs_scales.ld=-1 must be >= 0");
  o = good, o.lhs_scales.scheme = "block:32x32";
  expect_rejected(o, "block:BxB (2-D blocks) is for gmm's rhs");
  o = good, o.rhs_scales.ld = 8;  // below the row length N
  expect_rejected(o, "rhs_scale_ld=8 is below the row length 32");
  // Leading dimensions no memory can have: expert 1's scales would lie 2^62 bytes on, or the
  // index would wrap to before the array. Rejected before a scale is read.
  for (const int64_t huge : {int64_t{1} << 60, INT64_MAX, INT64_MAX / 4 + 1}) {
    o = good, o.rhs_scales.ld = huge;
    expect_rejected(o, "rhs_scale_ld=" + std::to_string(huge) +
                           " makes rhs_scale span more than the address space");
    o = good, o.lhs_scales.ld = huge;
    expect_rejected(o, "lhs_scale_ld=" + std::to_string(huge) +
                           " makes lhs_scale span more than the address space");
  }
  std::vector<float> nan_scales = rhs.scales;
  nan_scales[size_t(N + 3)] = std::nanf("");  // expert 1, column 3: read
  o = good, o.rhs_scales.data = nan_scales.data();
  expect_rejected(o, "rhs_scale[35]=nan: a scale must be finite and > 0");

  // tgmm's fields are named the same way.
  std::vector<float> tg(size_t(G * K * K), std::nanf(""));
  gmmgen_tensor tdy{const_cast<uint8_t*>(lhs.codes.data()), GMMGEN_DTYPE_I8, 2, {M, K, 0}, 0};
  gmmgen_tensor tt2{tg.data(), GMMGEN_DTYPE_F32, 3, {G, K, K}, 0};
  gmmgen_tgmm_options t{};
  t.lhs_scales = {"tensor", lhs.scales.data(), 0};
  t.rhs_scales = {"block:1x", lhs.scales.data(), 0};
  EXPECT_EQ(
      GMMGEN_ERR_INVALID_ARGUMENT,
      gmmgen_runtime_tgmm(rt_, &tl, &tdy, sizes.data(), int32_t(G), &tt2, &t, err_, sizeof err_));
  EXPECT_NE(std::string(err_).find("options.rhs_scales.scheme="), std::string::npos) << err_;
  t.rhs_scales = {};
  EXPECT_EQ(
      GMMGEN_ERR_INVALID_ARGUMENT,
      gmmgen_runtime_tgmm(rt_, &tl, &tdy, sizes.data(), int32_t(G), &tt2, &t, err_, sizeof err_));
  EXPECT_NE(std::string(err_).find("options.rhs_scales.scheme is none, but dtype i8"),
            std::string::npos)
      << err_;
  for (float v : tg) ASSERT_TRUE(std::isnan(v));
}

// gmmgen_runtime_gmm_vjp with a gmmgen_vjp_quant: the C++ API's bits for each gradient dtype,
// and the quant fields' errors.
TEST_F(CQuant, QuantizedVjpMatchesTheCppApiBitForBit) {
  const int64_t M = 200, K = 96, N = 80, G = 3;
  const std::vector<int32_t> sizes{60, 0, 130};
  std::mt19937_64 rng(31);
  const auto x = randn(M * K, 1.0, rng), w = randn(G * K * N, 0.05, rng),
             dout = randn(M * N, 0.5, rng);
  const int64_t mb = (M + 63) / 64;
  std::vector<uint8_t> xr(size_t(M * K)), xc(size_t(M * K));
  std::vector<float> xrs(size_t(M * 2)), xcs(size_t(mb * K));
  ASSERT_EQ(GMMGEN_OK, gmmgen_quantize_dual(x.data(), M, K, 0, GMMGEN_DTYPE_F8E4M3, "block:64",
                                            nullptr, xr.data(), 0, xrs.data(), 0, xc.data(), 0,
                                            xcs.data(), 0, err_, sizeof err_))
      << err_;
  const CQuantized wq(w, G, K, N, GMMGEN_DTYPE_F8E4M3, "block:64x64", GMMGEN_QUANT_AXIS_ROWS, 4);

  gmmgen::RuntimeOptions ro;
  ro.cache_dir = dir_;
  gmmgen::Runtime cpp(ro);
  for (const char* grad : {static_cast<const char*>(nullptr), "f8e4m3", "none"}) {
    std::vector<float> dl_c(size_t(M * K), std::nanf("")), dr_c(size_t(G * K * N), std::nanf(""));
    std::vector<float> dl_cpp = dl_c, dr_cpp = dr_c;
    gmmgen::GmmVjpOptions o;
    gmmgen::QuantVjp& q = o.quant.emplace();
    q.lhs_scales = {gmmgen::parse_quant_scheme("block:64"), xcs.data(), 0};
    q.rhs_scales = {gmmgen::parse_quant_scheme("block:64x64"), wq.scales.data(), 0};
    q.grad_block = 64;
    if (grad && std::string(grad) == "none") q.grad_dtype.reset();
    if (grad && std::string(grad) == "f8e4m3") q.grad_dtype = gmmgen::DType::kF8E4M3;
    using gmmgen::DType;
    using gmmgen::TensorView;
    cpp.gmm_vjp(TensorView::matrix(dout.data(), DType::kF32, M, N),
                TensorView::matrix(xc.data(), DType::kF8E4M3, M, K),
                TensorView::batch(wq.codes.data(), DType::kF8E4M3, G, K, N), sizes,
                TensorView::matrix(dl_cpp.data(), DType::kF32, M, K),
                TensorView::batch(dr_cpp.data(), DType::kF32, G, K, N), o);

    gmmgen_tensor td{const_cast<float*>(dout.data()), GMMGEN_DTYPE_F32, 2, {M, N, 0}, 0};
    gmmgen_tensor tl{xc.data(), GMMGEN_DTYPE_F8E4M3, 2, {M, K, 0}, 0};
    gmmgen_tensor tr{const_cast<uint8_t*>(wq.codes.data()), GMMGEN_DTYPE_F8E4M3, 3, {G, K, N}, 0};
    gmmgen_tensor tdl{dl_c.data(), GMMGEN_DTYPE_F32, 2, {M, K, 0}, 0};
    gmmgen_tensor tdr{dr_c.data(), GMMGEN_DTYPE_F32, 3, {G, K, N}, 0};
    gmmgen_vjp_quant cq{};
    cq.lhs_scales = {"block:64", xcs.data(), 0};
    cq.rhs_scales = {"block:64x64", wq.scales.data(), 0};
    cq.grad_dtype = grad;
    cq.grad_block = 64;
    gmmgen_vjp_options co{};
    co.quant = &cq;
    ASSERT_EQ(GMMGEN_OK, gmmgen_runtime_gmm_vjp(rt_, &td, &tl, &tr, sizes.data(), int32_t(G), &tdl,
                                                &tdr, &co, err_, sizeof err_))
        << err_;
    EXPECT_EQ(0, std::memcmp(dl_c.data(), dl_cpp.data(), dl_c.size() * sizeof(float))) << grad;
    EXPECT_EQ(0, std::memcmp(dr_c.data(), dr_cpp.data(), dr_c.size() * sizeof(float))) << grad;
    for (float v : dl_c) ASSERT_TRUE(std::isfinite(v));

    // The quant fields' errors, outputs untouched.
    const std::vector<float> dl_before = dl_c, dr_before = dr_c;
    auto expect_rejected = [&](const gmmgen_vjp_quant& bad, const std::string& needle) {
      gmmgen_vjp_options bo{};
      bo.quant = &bad;
      EXPECT_EQ(GMMGEN_ERR_INVALID_ARGUMENT,
                gmmgen_runtime_gmm_vjp(rt_, &td, &tl, &tr, sizes.data(), int32_t(G), &tdl, &tdr,
                                       &bo, err_, sizeof err_))
          << needle;
      EXPECT_NE(std::string(err_).find(needle), std::string::npos) << err_;
      EXPECT_EQ(dl_before, dl_c);
      EXPECT_EQ(dr_before, dr_c);
    };
    if (grad) continue;  // once is enough
    gmmgen_vjp_quant b = cq;
    b.grad_dtype = "i8";
    expect_rejected(b, "quant.grad_dtype=i8 must be f8e5m2, f8e4m3 or none");
    b.grad_dtype = "f9";
    expect_rejected(b, "options.quant.grad_dtype");
    b = cq, b.grad_calibration = "fixed:1";
    expect_rejected(b, "options.quant.grad_calibration=");
    b = cq, b.rhs_scales.scheme = "block:64";
    expect_rejected(b, "quant.rhs_scales=block:64: 1-D blocks along K");
    b = cq, b.lhs_scales.scheme = "block:6x";
    expect_rejected(b, "options.quant.lhs_scales.scheme=");
    b = cq, b.lhs_scales.data = nullptr;
    expect_rejected(b, "options.quant.lhs_scales.data is NULL: scheme block:64 needs scales");
  }
}

}  // namespace
