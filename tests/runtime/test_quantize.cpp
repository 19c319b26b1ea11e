// The quantizers against a float64 reference written here from docs/quantization.md: the scale
// layouts by their formulas, absmax and fixed scales, and every code by a brute-force search over
// all codes of the dtype (nearest value; ties to even, to the level nearer zero for nf4, to the
// sign of the value for a zero). Outputs are poisoned first, so every bit a call must not write is
// checked too.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "gmmgen/codes.h"
#include "gmmgen/quantize.hpp"
#include "gmmgen/runtime_c.h"
#include "gmmgen/verify/distributions.h"
#include "quant/vector_runs.h"

namespace gmmgen {
namespace {

constexpr DType kQuantized[] = {DType::kF8E4M3, DType::kF8E5M2, DType::kI8,
                                DType::kI4,     DType::kNF4,    DType::kT2};
constexpr uint8_t kCodePoison = 0xA5;
constexpr float kScalePoison = -7.25f;

bool is_fp8(DType d) {
  return d == DType::kF8E4M3 || d == DType::kF8E5M2;
}

// The quantizers' vector code, capped for a scope: tests run each level the host has (AVX-512,
// AVX2, none), so that an AVX-512 host checks the AVX2 code too.
using quant_runs::VectorCode;
constexpr VectorCode kVectorCodes[] = {VectorCode::kAvx512, VectorCode::kAvx2, VectorCode::kScalar};

struct VectorCap {
  explicit VectorCap(VectorCode c) { quant_runs::cap_vector_code(c); }
  ~VectorCap() { quant_runs::cap_vector_code(VectorCode::kAvx512); }
  VectorCap(const VectorCap&) = delete;
  VectorCap& operator=(const VectorCap&) = delete;
};

bool host_runs(VectorCode c) {
  return c <= quant_runs::vector_code();  // uncapped outside a VectorCap
}

const char* name_of(VectorCode c) {
  return c == VectorCode::kAvx512 ? "avx512" : c == VectorCode::kAvx2 ? "avx2" : "scalar";
}

// f(level) under each level the host runs, traced.
template <typename F>
void for_each_vector_code(F&& f) {
  for (VectorCode c : kVectorCodes) {
    if (!host_runs(c)) continue;
    SCOPED_TRACE(std::string("vector code ") + name_of(c));
    const VectorCap cap(c);
    f();
  }
}

// ---- The float64 reference ----------------------------------------------------------------

// Codes a quantizer may produce: every code with a finite value except the ones that only
// exist as bit patterns (i8 -128, i4 -8, t2 11).
bool produced(DType d, unsigned c) {
  if (d == DType::kI8 && c == 0x80) return false;
  if (d == DType::kI4 && c == 8) return false;
  if (d == DType::kT2 && c == 3) return false;
  return std::isfinite(codes::decode(d, uint8_t(c)));
}

// Whether code c beats code b at the same distance from v.
bool wins_tie(DType d, unsigned c, unsigned b, double v) {
  const double qc = codes::decode(d, uint8_t(c)), qb = codes::decode(d, uint8_t(b));
  if (qc == qb) return std::signbit(qc) == std::signbit(v);  // +0 and -0 of fp8
  if (is_fp8(d)) return (c & 1) == 0;                        // even significand
  if (d == DType::kNF4) return std::fabs(qc) < std::fabs(qb);
  return std::fmod(qc, 2.0) == 0.0;  // integers and t2: the even value
}

// The produced codes of d and their values, in code order; `levels`: their distinct values in
// increasing order, and `at_level[i]` the indices (in code order) of the codes of levels[i].
struct CodeTable {
  std::vector<unsigned> codes;
  std::vector<double> values;
  std::vector<double> levels;
  std::vector<std::vector<size_t>> at_level;
};

const CodeTable& code_table(DType d) {
  static CodeTable tables[kNumDTypes];
  CodeTable& t = tables[int(d)];
  if (t.codes.empty()) {
    for (unsigned c = 0; c < (1u << bits_of(d)); ++c)
      if (produced(d, c)) {
        t.codes.push_back(c);
        t.values.push_back(codes::decode(d, uint8_t(c)));
      }
    t.levels = t.values;
    std::sort(t.levels.begin(), t.levels.end());
    t.levels.erase(std::unique(t.levels.begin(), t.levels.end()), t.levels.end());
    t.at_level.resize(t.levels.size());
    for (size_t i = 0; i < t.values.size(); ++i) {
      const auto level = std::lower_bound(t.levels.begin(), t.levels.end(), t.values[i]);
      t.at_level[size_t(level - t.levels.begin())].push_back(i);
    }
  }
  return t;
}

// The nearest of the codes `candidates` (indices into t, in code order) to v clamped to the
// range, ties as above.
uint8_t nearest_code(DType d, const CodeTable& t, double v, const size_t* candidates,
                     size_t count) {
  const double clamped = std::min(std::max(v, t.levels.front()), t.levels.back());
  int best = -1;
  double best_dist = std::numeric_limits<double>::infinity();
  for (size_t n = 0; n < count; ++n) {
    const size_t i = candidates[n];
    const double dist = std::fabs(t.values[i] - clamped);
    if (dist < best_dist || (dist == best_dist && wins_tie(d, t.codes[i], unsigned(best), v)))
      best = int(t.codes[i]), best_dist = dist;
  }
  return uint8_t(best);
}

// The code of v by brute force: the nearest produced value, ties as above. Values beyond the
// range saturate to its ends.
uint8_t brute_force_code(DType d, double v) {
  const CodeTable& t = code_table(d);
  std::vector<size_t> all(t.codes.size());
  std::iota(all.begin(), all.end(), size_t{0});
  return nearest_code(d, t, v, all.data(), all.size());
}

// The same code, from the codes of the nearest levels at or above and below v (the only ones
// that can be nearest): the reference of the tests on large inputs, which check it against
// brute_force_code first.
uint8_t ref_code(DType d, double v) {
  const CodeTable& t = code_table(d);
  const double clamped = std::min(std::max(v, t.levels.front()), t.levels.back());
  const size_t above =  // the first level >= clamped
      size_t(std::lower_bound(t.levels.begin(), t.levels.end(), clamped) - t.levels.begin());
  std::array<size_t, 4> near;  // at most two codes (+0 and -0) a level
  size_t count = 0;
  for (size_t level = above == 0 ? 0 : above - 1; level <= above; ++level)
    for (const size_t i : t.at_level[level]) near.at(count++) = i;
  std::sort(near.begin(), near.begin() + count);
  return nearest_code(d, t, v, near.data(), count);
}

// The scale layout of docs/quantization.md / kernel_abi.h, from its formulas: scale (r, c) of
// element (r, c) at offset i * ld + j of an array [srows, scols] (vectors: one row).
struct RefLayout {
  int64_t srows = 0, scols = 0;  // scheme none: no scales
  std::function<std::pair<int64_t, int64_t>(int64_t, int64_t)> at;
};

int64_t cdiv(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

RefLayout ref_layout(const Quant& q, QuantAxis axis, int64_t rows, int64_t cols) {
  const int64_t b = q.block_k, c2 = q.block_n;
  const bool along_cols = axis == QuantAxis::kCols;
  switch (q.kind) {
    case QuantKind::kTensor:
      return {1, 1, [](int64_t, int64_t) { return std::pair<int64_t, int64_t>{0, 0}; }};
    case QuantKind::kChannel:
      if (along_cols)
        return {1, rows, [](int64_t r, int64_t) { return std::pair<int64_t, int64_t>{0, r}; }};
      return {1, cols, [](int64_t, int64_t c) { return std::pair<int64_t, int64_t>{0, c}; }};
    case QuantKind::kBlock:
      if (along_cols && !c2)
        return {rows, cdiv(cols, b), [=](int64_t r, int64_t c) {
                  return std::pair<int64_t, int64_t>{r, c / b};
                }};
      if (along_cols)
        return {cdiv(rows, c2), cdiv(cols, b), [=](int64_t r, int64_t c) {
                  return std::pair<int64_t, int64_t>{r / c2, c / b};
                }};
      if (!c2)
        return {cdiv(rows, b), cols, [=](int64_t r, int64_t c) {
                  return std::pair<int64_t, int64_t>{r / b, c};
                }};
      return {cdiv(rows, b), cdiv(cols, c2), [=](int64_t r, int64_t c) {
                return std::pair<int64_t, int64_t>{r / b, c / c2};
              }};
    case QuantKind::kNone:
      break;
  }
  return {0, 0, nullptr};
}

struct RefResult {
  std::vector<float> scales;   // [srows * scols], packed
  std::vector<uint8_t> codes;  // [rows * cols], one code per element
  std::vector<float> xhat;     // decode(code) * s, rounded once to f32
  RefLayout layout;
};

RefResult reference(const std::vector<float>& x, int64_t rows, int64_t cols, int64_t ld,
                    const QuantizeOptions& o) {
  RefResult ref;
  const double qmax = codes::qmax(o.dtype);
  const bool fixed = o.calibration.kind == Calibration::Kind::kFixed;
  auto value = [&](int64_t r, int64_t c) {
    const double v = x[r * ld + c];
    return fixed ? std::min(std::max(v, o.calibration.lo), o.calibration.hi) : v;
  };
  const bool scaled = o.scheme.kind != QuantKind::kNone;
  if (scaled) {
    ref.layout = ref_layout(o.scheme, o.axis, rows, cols);
    std::vector<double> amax(size_t(ref.layout.srows * ref.layout.scols), 0.0);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const auto [i, j] = ref.layout.at(r, c);
        double& a = amax[size_t(i * ref.layout.scols + j)];
        a = std::max(a, std::fabs(double(x[r * ld + c])));
      }
    for (double a : amax) {
      double s = fixed ? std::max(std::fabs(o.calibration.lo), std::fabs(o.calibration.hi)) / qmax
                 : a == 0 ? 1.0
                          : a / qmax;
      float f = float(s);
      if (f == 0) f = std::numeric_limits<float>::denorm_min();
      ref.scales.push_back(f);
    }
  }
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      double s = 1.0;
      if (scaled) {
        const auto [i, j] = ref.layout.at(r, c);
        s = ref.scales[size_t(i * ref.layout.scols + j)];
      }
      const uint8_t code = ref_code(o.dtype, value(r, c) / s);
      ref.codes.push_back(code);
      ref.xhat.push_back(float(double(codes::decode(o.dtype, code)) * s));
    }
  return ref;
}

// ---- Test data ----------------------------------------------------------------------------

// Values over several magnitudes (per row and per column, so blocks differ), some exact zeros;
// padding of x (ld > cols) holds NaN, which the quantizer must never read.
std::vector<float> random_matrix(int64_t rows, int64_t cols, int64_t ld, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<float> row_mag(static_cast<size_t>(rows)), col_mag(static_cast<size_t>(cols));
  for (auto& m : row_mag) m = std::ldexp(1.0f, int(rng() % 7) - 3);
  for (auto& m : col_mag) m = std::ldexp(1.0f, int(rng() % 3) - 1);
  std::vector<float> x(size_t(rows * ld), std::nanf(""));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      x[size_t(r * ld + c)] =
          rng() % 10 == 0 ? 0.0f : float(normal(rng, 1.0)) * row_mag[r] * col_mag[c];
  return x;
}

// A codes buffer: `rows` rows of codes_ld elements of d, poisoned.
std::vector<uint8_t> code_buffer(DType d, int64_t rows, int64_t codes_ld) {
  const int per = codes::elements_per_byte(d);
  return std::vector<uint8_t>(size_t(rows * codes_ld / per + 1), kCodePoison);
}

// The poisoned buffer with exactly the [rows, cols] codes written: what a call must leave.
std::vector<uint8_t> expected_codes(DType d, const std::vector<uint8_t>& codes_, int64_t rows,
                                    int64_t cols, int64_t codes_ld, size_t size) {
  const int bits = bits_of(d), per = codes::elements_per_byte(d);
  std::vector<uint8_t> out(size, kCodePoison);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      codes::set_code(out.data() + r * codes_ld / per, c, bits, codes_[size_t(r * cols + c)]);
  return out;
}

std::string describe(const QuantizeOptions& o, int64_t rows, int64_t cols) {
  return std::string(to_string(o.dtype)) + " " + to_string(o.scheme) +
         (o.axis == QuantAxis::kCols ? " axis=cols " : " axis=rows ") + to_string(o.calibration) +
         " [" + std::to_string(rows) + ", " + std::to_string(cols) + "]";
}

// One quantize + dequantize call against the reference, with padded leading dimensions (x's
// padding NaN, outputs' padding poisoned) or packed ones.
void check_against_reference(const QuantizeOptions& o, int64_t rows, int64_t cols, bool padded,
                             uint64_t seed) {
  SCOPED_TRACE(describe(o, rows, cols) + (padded ? " padded" : " packed") +
               (o.check == ValueCheck::kWhileWriting ? " while writing" : ""));
  const int per = codes::elements_per_byte(o.dtype);
  const int64_t ld = padded ? cols + 3 : cols;
  const int64_t packed_cld = cdiv(cols, per) * per;
  const int64_t codes_ld = padded ? packed_cld + per : 0;
  const int64_t cld = codes_ld ? codes_ld : packed_cld;
  ASSERT_EQ(packed_cld, packed_codes_ld(o.dtype, cols));
  const std::vector<float> x = random_matrix(rows, cols, ld, seed);
  const RefResult ref = reference(x, rows, cols, ld, o);
  const int64_t srows = ref.layout.srows, scols = ref.layout.scols;
  const ScaleShape shape = scale_shape(o.scheme, o.axis, rows, cols);
  EXPECT_EQ(srows, shape.rows);
  EXPECT_EQ(scols, shape.cols);
  const int64_t sld = padded ? scols + 2 : 0, sstride = sld ? sld : scols;

  std::vector<uint8_t> codes_ = code_buffer(o.dtype, rows, cld);
  std::vector<float> scales(size_t(srows * sstride + 1), kScalePoison);
  quantize(x.data(), rows, cols, padded ? ld : 0, o, codes_.data(), codes_ld, scales.data(), sld);

  // Scales: the reference's in their slots, poison elsewhere.
  for (int64_t i = 0; i < srows; ++i)
    for (int64_t j = 0; j < sstride; ++j) {
      const float got = scales[size_t(i * sstride + j)];
      const float want = j < scols ? ref.scales[size_t(i * scols + j)] : kScalePoison;
      ASSERT_EQ(want, got) << "scales[" << i << ", " << j << "]";
    }
  EXPECT_EQ(kScalePoison, scales.back());

  // Codes: exactly the reference's bits, every other bit of the buffer untouched.
  const std::vector<uint8_t> want =
      expected_codes(o.dtype, ref.codes, rows, cols, cld, codes_.size());
  for (size_t i = 0; i < want.size(); ++i) {
    if (want[i] == codes_[i]) continue;
    const int64_t r = int64_t(i) / (cld / per);
    ADD_FAILURE() << "codes byte " << i << " (row " << r << "): " << int(codes_[i]) << ", expected "
                  << int(want[i]);
    return;
  }

  // Round trip: integer codes lie within s/2 of the (clipped) value, x̂ = code * s within half an
  // f32 step of its own value on top; dequantize gives the reference x̂ bit for bit.
  const bool fixed = o.calibration.kind == Calibration::Kind::kFixed;
  if (o.dtype == DType::kI8 || o.dtype == DType::kI4 || o.dtype == DType::kT2)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const auto [i, j] = ref.layout.at(r, c);
        const double s = ref.scales[size_t(i * scols + j)];
        double v = x[size_t(r * ld + c)];
        if (fixed) v = std::min(std::max(v, o.calibration.lo), o.calibration.hi);
        const double xhat = ref.xhat[size_t(r * cols + c)];
        ASSERT_LE(std::fabs(v - xhat), s / 2 * (1 + 1e-6) + std::fabs(xhat) * 0x1p-24)
            << "element [" << r << ", " << c << "]";
      }
  const int64_t xld = padded ? cols + 1 : cols;
  std::vector<float> xhat(size_t(rows * xld + 1), kScalePoison);
  dequantize(codes_.data(), codes_ld, scales.data(), sld, rows, cols, o, xhat.data(),
             padded ? xld : 0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < xld; ++c) {
      const float got = xhat[size_t(r * xld + c)];
      const float w = c < cols ? ref.xhat[size_t(r * cols + c)] : kScalePoison;
      ASSERT_EQ(std::memcmp(&w, &got, 4), 0)
          << "x̂[" << r << ", " << c << "]=" << got << ", expected " << w;
    }
  EXPECT_EQ(kScalePoison, xhat.back());
}

Quant scheme(const char* text) {
  return parse_quant_scheme(text);
}

// ---- Every dtype x scheme x axis x calibration on ragged shapes ----------------------------

// Each dtype under each vector code level (a level the host lacks is skipped).
class QuantizeDtype : public ::testing::TestWithParam<std::tuple<DType, VectorCode>> {
 protected:
  void SetUp() override {
    if (!host_runs(std::get<1>(GetParam()))) GTEST_SKIP() << "the host lacks this vector code";
    cap_.emplace(std::get<1>(GetParam()));
  }
  void TearDown() override { cap_.reset(); }
  std::optional<VectorCap> cap_;
};

TEST_P(QuantizeDtype, MatchesFloat64ReferenceOnRaggedShapes) {
  const DType d = std::get<0>(GetParam());
  // cols not a multiple of any block, odd cols for the sub-byte dtypes, a single row, a single
  // column, partial last blocks along both axes, rows long enough for the vector code's groups of
  // blocks (8 or 16 blocks of 16 or 32 at a time).
  const std::pair<int64_t, int64_t> shapes[] = {{1, 37}, {45, 67}, {70, 33},
                                                {17, 1}, {33, 16}, {5, 1031}};
  const char* schemes[] = {"tensor",   "channel",     "block:16",
                           "block:32", "block:16x32", "block:32x16"};
  uint64_t seed = 1;
  for (const auto& [rows, cols] : shapes)
    for (const char* s : schemes)
      for (QuantAxis axis : {QuantAxis::kCols, QuantAxis::kRows})
        for (const char* cal : {"absmax", "fixed:-1.5:2"}) {
          QuantizeOptions o;
          o.dtype = d;
          o.scheme = scheme(s);
          o.axis = axis;
          o.calibration = parse_calibration(cal);
          for (bool padded : {false, true}) {
            // Values checked before any write, or (one pass) while writing: the same bits.
            o.check = padded ? ValueCheck::kWhileWriting : ValueCheck::kBeforeWrites;
            check_against_reference(o, rows, cols, padded, seed++);
            if (HasFatalFailure() || HasFailure()) return;
          }
        }
  if (is_fp8(d)) {  // scheme none: a plain saturating cast
    QuantizeOptions o;
    o.dtype = d;
    o.scheme = scheme("none");
    check_against_reference(o, 45, 67, true, 99);
  }
}

// Inputs of 32768 elements and more are split over the quantizers' pool: row panels, column
// chunks (one scale per column), and the single block of tensor scales (its amax, then its rows).
TEST_P(QuantizeDtype, LargeInputsSplitOverThePoolMatchTheReference) {
  const DType d = std::get<0>(GetParam());
  uint64_t seed = 500;
  for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{300, 131}, {3, 11001}})
    for (const char* s : {"tensor", "channel", "block:32", "block:128", "block:16x32"})
      for (QuantAxis axis : {QuantAxis::kCols, QuantAxis::kRows})
        for (const char* cal : {"absmax", "fixed:-1.5:2"}) {
          QuantizeOptions o;
          o.dtype = d;
          o.scheme = scheme(s);
          o.axis = axis;
          o.calibration = parse_calibration(cal);
          for (ValueCheck check : {ValueCheck::kBeforeWrites, ValueCheck::kWhileWriting}) {
            o.check = check;
            check_against_reference(o, rows, cols, false, seed++);
            if (HasFatalFailure() || HasFailure()) return;
          }
        }
}

INSTANTIATE_TEST_SUITE_P(Quantize, QuantizeDtype,
                         ::testing::Combine(::testing::ValuesIn(kQuantized),
                                            ::testing::ValuesIn(kVectorCodes)),
                         [](const auto& info) {
                           return std::string(to_string(std::get<0>(info.param))) + "_" +
                                  name_of(std::get<1>(info.param));
                         });

// ---- Codes ----------------------------------------------------------------------------------

TEST(QuantizeCodes, EncodeMatchesBruteForceNearestEvenOverAllCodes) {
  std::mt19937_64 rng(7);
  for (DType d : kQuantized) {
    SCOPED_TRACE(std::string(to_string(d)));
    std::vector<double> values;
    // Every value, the midpoints between neighbours (ties), and just off them.
    std::vector<double> levels;
    for (unsigned c = 0; c < (1u << bits_of(d)); ++c)
      if (produced(d, c)) levels.push_back(codes::decode(d, uint8_t(c)));
    std::sort(levels.begin(), levels.end());
    for (size_t i = 0; i < levels.size(); ++i) {
      values.push_back(levels[i]);
      if (i + 1 < levels.size() && levels[i + 1] != levels[i]) {
        const double mid = (levels[i] + levels[i + 1]) / 2;
        values.insert(values.end(), {mid, std::nextafter(mid, -1e300), std::nextafter(mid, 1e300)});
      }
    }
    const double top = codes::qmax(d);
    values.insert(values.end(), {-0.0, top * 1.01, -top * 1.01, top * 1e6, -1e300, 1e-300});
    for (int i = 0; i < 20000; ++i)
      values.push_back(std::ldexp(uniform_real(rng, -1.0, 1.0), int(rng() % 40) - 20) * top);
    for (double v : values) {
      ASSERT_EQ(int(brute_force_code(d, v)), int(encode_code(d, v))) << "v=" << v;
      ASSERT_EQ(int(brute_force_code(d, v)), int(ref_code(d, v))) << "v=" << v;
    }
  }
}

// The quantizers' fp8 rows (eight codes at a time where the host runs AVX-512, one at a time
// elsewhere) against encode_code element by element, on values that hit every level, every tie
// and both sides of it, subnormals, saturation and signed zeros; rows whose lengths leave tails,
// with one scale per block, one per column, none, and fixed calibration (lo = 0 keeps -0's sign).
TEST(QuantizeCodes, Fp8RowsMatchEncodeCode) {
  std::mt19937 rng(11);
  for (DType d : {DType::kF8E4M3, DType::kF8E5M2}) {
    SCOPED_TRACE(std::string(to_string(d)));
    const CodeTable& t = code_table(d);
    std::vector<float> v;  // ties of fp8 values are exact in f32
    std::vector<double> levels = t.values;
    std::sort(levels.begin(), levels.end());
    for (size_t i = 0; i + 1 < levels.size(); ++i) {
      const float mid = float((levels[i] + levels[i + 1]) / 2);
      v.insert(v.end(),
               {float(levels[i]), mid, std::nextafter(mid, -1e30f), std::nextafter(mid, 1e30f)});
    }
    const float top = float(codes::qmax(d));
    v.insert(v.end(),
             {0.0f, -0.0f, top, -top, top * 1.01f, -top * 1.01f, 3e38f, -3e38f, 1e-30f, -1e-40f});
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    while (v.size() % 16 != 13) v.push_back(std::ldexp(u(rng), int(rng() % 30) - 15) * top);
    const int64_t n = int64_t(v.size());
    std::vector<uint8_t> q(v.size());
    // Unit scale (scheme none), then blocks of 16 along the row.
    QuantizeOptions o;
    o.dtype = d;
    o.scheme = scheme("none");
    quantize(v.data(), 1, n, 0, o, q.data(), 0, nullptr, 0);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(int(encode_code(d, v[i])), int(q[i])) << "x=" << v[i];
    o.scheme = scheme("block:16");
    std::vector<float> s(size_t((n + 15) / 16));
    quantize(v.data(), 1, n, 0, o, q.data(), 0, s.data(), 0);
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(int(encode_code(d, double(v[i]) / s[size_t(i / 16)])), int(q[i])) << "x=" << v[i];
    // One scale per column: v as 3 rows of n / 3 columns.
    const int64_t cols = n / 3, rows = 3;
    o.scheme = scheme("channel"), o.axis = QuantAxis::kRows;
    std::vector<float> sc(static_cast<size_t>(cols));
    quantize(v.data(), rows, cols, 0, o, q.data(), 0, sc.data(), 0);
    for (int64_t i = 0; i < rows * cols; ++i)
      ASSERT_EQ(int(encode_code(d, double(v[i]) / sc[size_t(i % cols)])), int(q[i]))
          << "x=" << v[i];
    // Rows of 12: shorter than sixteen, so eight of each row take the eight-wide vector code
    // (AVX2) on hosts with AVX-512 too; without the exact ties, which send a group to f64.
    std::vector<float> w;
    for (size_t i = 0; i < v.size(); ++i)
      if (i >= 4 * (levels.size() - 1) || i % 4 != 1) w.push_back(v[i]);
    const int64_t short_rows = int64_t(w.size()) / 12;
    o.scheme = scheme("none"), o.axis = QuantAxis::kCols;
    quantize(w.data(), short_rows, 12, 0, o, q.data(), 0, nullptr, 0);
    for (int64_t i = 0; i < short_rows * 12; ++i)
      ASSERT_EQ(int(encode_code(d, w[i])), int(q[i])) << "x=" << w[i];
    o.scheme = scheme("block:16");
    std::vector<float> sr(static_cast<size_t>(short_rows));
    quantize(w.data(), short_rows, 12, 0, o, q.data(), 0, sr.data(), 0);
    for (int64_t i = 0; i < short_rows * 12; ++i)
      ASSERT_EQ(int(encode_code(d, double(w[i]) / sr[size_t(i / 12)])), int(q[i])) << "x=" << w[i];
    // Fixed calibration clips first; with lo = 0, -0 stays -0 and negatives become +0.
    for (const char* cal : {"fixed:-3.5:2", "fixed:0:8"}) {
      SCOPED_TRACE(cal);
      o.scheme = scheme("tensor"), o.axis = QuantAxis::kCols,
      o.calibration = parse_calibration(cal);
      float st = 0;
      quantize(v.data(), 1, n, 0, o, q.data(), 0, &st, 0);
      const Calibration c = o.calibration;
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(int(encode_code(d, std::clamp(double(v[i]), c.lo, c.hi) / st)), int(q[i]))
            << "x=" << v[i];
    }
  }
}

TEST(QuantizeCodes, Fp8SaturatesAtAndAboveItsMax) {
  // e4m3fn: 448 = 0x7E (0x7F is NaN); e5m2: 57344 = 0x7B (0x7C is inf).
  const float e4[] = {448.0f, 449.0f, 464.0f, 480.0f, 1e6f, 3e38f};
  const float e5[] = {57344.0f, 61439.0f, 61440.0f, 65536.0f, 1e9f, 3e38f};
  for (auto [d, xs, code] : {std::tuple{DType::kF8E4M3, e4, 0x7E}, {DType::kF8E5M2, e5, 0x7B}}) {
    std::vector<float> x;
    for (int i = 0; i < 6; ++i) x.insert(x.end(), {xs[i], -xs[i]});
    QuantizeOptions o;
    o.dtype = d;
    o.scheme = scheme("none");
    std::vector<uint8_t> q(x.size(), kCodePoison);
    quantize(x.data(), 1, int64_t(x.size()), 0, o, q.data(), 0, nullptr, 0);
    for (size_t i = 0; i < x.size(); ++i) {
      EXPECT_EQ(i % 2 ? code | 0x80 : code, int(q[i])) << to_string(d) << " x=" << x[i];
      EXPECT_TRUE(std::isfinite(codes::decode(d, q[i])));
    }
    // With absmax, the block's amax maps to the max exactly.
    o.scheme = scheme("tensor");
    float s = 0;
    quantize(x.data(), 1, int64_t(x.size()), 0, o, q.data(), 0, &s, 0);
    EXPECT_EQ(float(double(3e38f) / codes::qmax(d)), s);
    EXPECT_EQ(code, int(q[10]));
    EXPECT_EQ(code | 0x80, int(q[11]));
  }
}

TEST(QuantizeCodes, Nf4TiesGoToTheLevelNearerZero) {
  const float* l = codes::kNf4Levels;
  for (int i = 0; i < 15; ++i) {
    const double mid = (double(l[i]) + double(l[i + 1])) / 2;
    const int want = std::fabs(l[i + 1]) < std::fabs(l[i]) ? i + 1 : i;
    EXPECT_EQ(want, int(encode_code(DType::kNF4, mid))) << "between codes " << i << ", " << i + 1;
  }
  EXPECT_EQ(7, int(encode_code(DType::kNF4, l[6] / 2)));  // between -0.091 and 0: zero
  EXPECT_EQ(7, int(encode_code(DType::kNF4, l[8] / 2)));  // between 0 and 0.0796: zero
  EXPECT_EQ(15, int(encode_code(DType::kNF4, 5.0)));
  EXPECT_EQ(0, int(encode_code(DType::kNF4, -5.0)));
}

TEST(QuantizeCodes, IntegersRoundHalfToEvenAndClamp) {
  EXPECT_EQ(2, int(encode_code(DType::kI8, 2.5)));
  EXPECT_EQ(4, int(encode_code(DType::kI8, 3.5)));
  EXPECT_EQ(uint8_t(int8_t(-2)), encode_code(DType::kI8, -2.5));
  EXPECT_EQ(127, int(encode_code(DType::kI8, 127.5)));
  EXPECT_EQ(uint8_t(int8_t(-127)), encode_code(DType::kI8, -1000.0));  // never -128
  EXPECT_EQ(7, int(encode_code(DType::kI4, 9.0)));
  EXPECT_EQ(9, int(encode_code(DType::kI4, -7.6)));  // -7 as a nibble
  EXPECT_EQ(0, int(encode_code(DType::kT2, 0.5)));   // tie: 0 is even
  EXPECT_EQ(2, int(encode_code(DType::kT2, -0.51)));
  EXPECT_EQ(1, int(encode_code(DType::kT2, 3.0)));
}

// v (whose largest magnitude makes the absmax scale s) quantized with one scale (tensor), blocks
// of 16 and one scale per column (v as 2 rows), every code against encode_code of its exact
// quotient.
void expect_codes_at_ties(DType d, const std::vector<float>& v, double s) {
  const int64_t n = int64_t(v.size());
  std::vector<uint8_t> q(static_cast<size_t>(n));
  float st = 0;
  QuantizeOptions o;
  o.dtype = d;
  o.scheme = scheme("tensor");
  quantize(v.data(), 1, n, 0, o, q.data(), 0, &st, 0);
  ASSERT_EQ(float(s), st);
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(int(encode_code(d, double(v[size_t(i)]) / s)),
              int(codes::get_code(q.data(), i, bits_of(d))))
        << "x=" << v[size_t(i)];
  o.scheme = scheme("block:16");
  std::vector<float> sb(size_t((n + 15) / 16));
  quantize(v.data(), 1, n, 0, o, q.data(), 0, sb.data(), 0);
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(int(encode_code(d, double(v[size_t(i)]) / sb[size_t(i / 16)])),
              int(codes::get_code(q.data(), i, bits_of(d))))
        << "x=" << v[size_t(i)];
  const int64_t cols = n / 2;
  o.scheme = scheme("channel"), o.axis = QuantAxis::kRows;
  std::vector<float> sc(static_cast<size_t>(cols));
  const int64_t cld = packed_codes_ld(d, cols);
  quantize(v.data(), 2, cols, 0, o, q.data(), 0, sc.data(), 0);
  for (int64_t r = 0; r < 2; ++r)
    for (int64_t c = 0; c < cols; ++c)
      ASSERT_EQ(int(encode_code(d, double(v[size_t(r * cols + c)]) / sc[size_t(c)])),
                int(codes::get_code(q.data() + r * cld * bits_of(d) / 8, c, bits_of(d))))
          << "x=" << v[size_t(r * cols + c)];
  // Rows of 12 (eight of each in eight-wide vector code, as above), one scale per row.
  const int64_t rows = n / 12;
  o.scheme = scheme("channel"), o.axis = QuantAxis::kCols;
  std::vector<float> sr(static_cast<size_t>(rows));
  quantize(v.data(), rows, 12, 0, o, q.data(), 0, sr.data(), 0);
  for (int64_t i = 0; i < rows * 12; ++i)
    ASSERT_EQ(int(encode_code(d, double(v[size_t(i)]) / sr[size_t(i / 12)])),
              int(codes::get_code(q.data(), i, bits_of(d))))
        << "x=" << v[size_t(i)];
}

// amax, then x = t * s rounded to f32 for every tie t, and the f32 values 1, 2, ..., `steps` steps
// below and above each x; each value starts a group of 16 of its own, the rest of it zeros, so that
// a value near a tie, which sends its whole group of codes to the f64 path, sends no other there:
// every one of them meets the vector code's own rounding.
std::vector<float> tie_row(float amax, double s, const std::vector<double>& ties, int steps) {
  std::vector<float> v{amax};
  const auto add = [&v](float x) {
    v.resize(v.size() / 16 * 16 + 16, 0.0f);
    v.push_back(x);
  };
  for (double t : ties) {
    const float x = float(t * s);
    add(x);
    float below = x, above = x;
    for (int step = 0; step < steps; ++step) {
      below = std::nextafter(below, -1e30f), above = std::nextafter(above, 1e30f);
      add(below), add(above);
    }
  }
  return v;
}

// Values next to ties, x = (j + 1/2) * s rounded to f32, and their neighbours up to 3 f32 steps
// away, in runs long enough for the vector code (64 at a time where a scale is shared): their
// f32 quotients x / s and products x * (1 / s) land on the tie or either side of it, while the
// exact ones lie on either side. Scales whose reciprocals are not f32 values (amax 1, 0.37,
// 3.3, 1234.5: s = amax / qmax), then a power of two, where x / s is exactly the tie; each under
// every vector code level the host runs.
TEST(QuantizeCodes, IntegerRowsMatchEncodeCodeAtTies) {
  for_each_vector_code([] {
    std::mt19937 rng(5);
    for (DType d : {DType::kI8, DType::kI4})
      for (const float amax : {1.0f, 0.37f, 3.3f, 1234.5f, float(codes::qmax(d) / 8)}) {
        const double qmax = codes::qmax(d);
        const double s = double(float(double(amax) / qmax));  // the absmax scale
        SCOPED_TRACE(std::string(to_string(d)) + " s=" + std::to_string(s));
        std::vector<double> ties;  // every tie inside [-qmax, qmax]
        for (double j = -qmax; j < qmax; ++j) ties.push_back(j + 0.5);
        std::vector<float> v = tie_row(amax, s, ties, 3);
        std::uniform_real_distribution<float> u(-1.0f, 1.0f);
        while (v.size() % 16 != 11) v.push_back(u(rng) * amax);
        expect_codes_at_ties(d, v, s);
        if (HasFatalFailure()) return;
      }
  });
}

// Blocks whose scales are too small for an f32 reciprocal (subnormal: the block's values are
// tiny) beside ordinary ones, in rows long enough for the vector code: every code is encode_code's
// of the exact quotient, under every vector code level the host runs.
TEST(QuantizeCodes, RowsWithSubnormalScalesMatchEncodeCode) {
  for_each_vector_code([] {
    std::mt19937 rng(13);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (DType d : {DType::kI8, DType::kI4, DType::kF8E4M3, DType::kF8E5M2}) {
      SCOPED_TRACE(std::string(to_string(d)));
      const int64_t n = 16 * 40 + 7;
      std::vector<float> v(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i)  // every third block of 16 tiny, some of them subnormal
        v[size_t(i)] = u(rng) * (i / 16 % 3 == 1 ? (i / 48 % 2 ? 1e-39f : 1e-36f) : 2.0f);
      QuantizeOptions o;
      o.dtype = d;
      o.scheme = scheme("block:16");
      std::vector<uint8_t> q(static_cast<size_t>(n));
      std::vector<float> sb(size_t((n + 15) / 16));
      quantize(v.data(), 1, n, 0, o, q.data(), 0, sb.data(), 0);
      EXPECT_LT(sb[4], std::numeric_limits<float>::min());  // block 4: values ~1e-39
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(int(encode_code(d, double(v[size_t(i)]) / sb[size_t(i / 16)])),
                  int(codes::get_code(q.data(), i, bits_of(d))))
            << "x=" << v[size_t(i)] << " s=" << sb[size_t(i / 16)];
    }
  });
}

// amax, then m * s rounded to f32 and its f32 neighbours up to `steps` away for every midpoint m
// between neighbouring levels of d (tie_row), then values in [-amax, amax] until the row has at
// least min_size values and rest modulo mod.
std::vector<float> midpoint_row(DType d, float amax, double s, std::mt19937& rng, size_t min_size,
                                size_t mod, size_t rest, int steps = 1) {
  std::vector<double> levels = code_table(d).values;
  std::sort(levels.begin(), levels.end());
  std::vector<double> mids;
  for (size_t i = 0; i + 1 < levels.size(); ++i) mids.push_back((levels[i] + levels[i + 1]) / 2);
  std::vector<float> v = tie_row(amax, s, mids, steps);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  while (v.size() < min_size || v.size() % mod != rest) v.push_back(u(rng) * amax);
  return v;
}

// The same for fp8 (sixteen or eight codes at a time from f32 quotients): x = m * s rounded to
// f32 for every midpoint m between neighbouring levels, subnormal ones included, and its
// neighbours up to 3 f32 steps away, with several absmax scales, then a power of two, where x / s
// is exactly m.
TEST(QuantizeCodes, Fp8RowsMatchEncodeCodeAtTies) {
  for_each_vector_code([] {
    std::mt19937 rng(7);
    for (DType d : {DType::kF8E4M3, DType::kF8E5M2})
      for (const float amax : {1.0f, 0.37f, 3.3f, 1234.5f, float(codes::qmax(d) / 64)}) {
        const double qmax = codes::qmax(d);
        const double s = double(float(double(amax) / qmax));  // the absmax scale
        SCOPED_TRACE(std::string(to_string(d)) + " s=" + std::to_string(s));
        expect_codes_at_ties(d, midpoint_row(d, amax, s, rng, 0, 32, 21, 3), s);
        if (HasFatalFailure()) return;
      }
  });
}

// The same for nf4 and t2 (sixteen codes at a time from f64 quotients and comparisons where the
// host runs AVX-512): x = m * s for every midpoint m between neighbouring levels (its f32
// neighbours too; m itself where it is an f32 value), with a power-of-two scale where x / s is
// exactly m, and with the absmax scale of amax 1; rows of 16k + 13, then 2 rows of half of them,
// then a tensor scale under fixed calibration (clipping some values first).
TEST(QuantizeCodes, LevelRowsMatchEncodeCodeAtTies) {
  std::mt19937 rng(9);
  for (DType d : {DType::kNF4, DType::kT2})
    for (const float amax : {1.0f, 0.25f}) {
      const double qmax = codes::qmax(d);
      const double s = double(float(double(amax) / qmax));  // the absmax scale
      SCOPED_TRACE(std::string(to_string(d)) + " s=" + std::to_string(s));
      const std::vector<float> v = midpoint_row(d, amax, s, rng, 64, 16, 13);  // t2: 3 levels
      expect_codes_at_ties(d, v, s);
      QuantizeOptions o;
      o.dtype = d;
      o.scheme = scheme("tensor");
      o.calibration = parse_calibration("fixed:-0.1:0.2");
      const int64_t n = int64_t(v.size());
      std::vector<uint8_t> q(static_cast<size_t>(n));
      float st = 0;
      quantize(v.data(), 1, n, 0, o, q.data(), 0, &st, 0);
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(int(encode_code(d, std::clamp(double(v[size_t(i)]), -0.1, 0.2) / st)),
                  int(codes::get_code(q.data(), i, bits_of(d))))
            << "x=" << v[size_t(i)];
    }
}

// ---- Calibration and scales -----------------------------------------------------------------

TEST(QuantizeScales, AllZeroBlockHasScaleOneAndZeroCodes) {
  for (DType d : kQuantized) {
    SCOPED_TRACE(std::string(to_string(d)));
    // Row 0: block 0 is all zeros, block 1 is not; row 1 is all zeros.
    const int64_t rows = 2, cols = 40;
    std::vector<float> x(rows * cols, 0.0f);
    for (int64_t c = 16; c < 32; ++c) x[c] = float(c) - 20.5f;
    QuantizeOptions o;
    o.dtype = d;
    o.scheme = scheme("block:16");
    std::vector<uint8_t> q = code_buffer(d, rows, packed_codes_ld(d, cols));
    std::vector<float> s(6, kScalePoison);
    quantize(x.data(), rows, cols, 0, o, q.data(), 0, s.data(), 0);
    const float amax = 10.5f;
    EXPECT_EQ(1.0f, s[0]);
    EXPECT_EQ(float(amax / codes::qmax(d)), s[1]);
    for (int i = 2; i < 6; ++i) EXPECT_EQ(1.0f, s[i]) << "scale " << i;
    const int64_t stride = packed_codes_ld(d, cols) / codes::elements_per_byte(d);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        if (r == 0 && c >= 16 && c < 32) continue;
        const uint8_t code = codes::get_code(q.data() + r * stride, c, bits_of(d));
        EXPECT_EQ(0.0f, codes::decode(d, code)) << r << ", " << c;
        EXPECT_FALSE(std::signbit(codes::decode(d, code)));
        EXPECT_EQ(d == DType::kNF4 ? 7 : 0, int(code));  // nf4's zero is code 7
      }
  }
}

// Rows of many blocks (their maxima are taken 16 blocks at a time where the host runs AVX-512):
// each block's largest magnitude planted at a different position and sign, its size varied so
// neighbouring scales differ, one block all zeros; whole groups of 16 blocks, then a few blocks
// and a partial one.
TEST(QuantizeScales, BlockMaximaOfLongRowsMatchTheReference) {
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (const int64_t block : {16, 32, 64, 128, 256}) {
    SCOPED_TRACE("block:" + std::to_string(block));
    const int64_t rows = 3, cols = 37 * block + 7, nb = (cols + block - 1) / block;
    std::vector<float> x(size_t(rows * cols));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t b = 0; b < nb; ++b) {
        const int64_t c0 = b * block, n = std::min(block, cols - c0);
        const float size = std::ldexp(1.0f, int((r * nb + b) % 23) - 11);
        for (int64_t c = c0; c < c0 + n; ++c)
          x[size_t(r * cols + c)] = r == 1 && b == 5 ? 0.0f : u(rng) * size;
        if (r != 1 || b != 5)
          x[size_t(r * cols + c0 + (b * 7 + r) % n)] = (b % 2 ? -1.5f : 1.5f) * size;
      }
    QuantizeOptions o;
    o.dtype = DType::kI8;
    o.scheme = scheme(("block:" + std::to_string(block)).c_str());
    std::vector<uint8_t> q(x.size());
    std::vector<float> sc(size_t(rows * nb), kScalePoison);
    quantize(x.data(), rows, cols, 0, o, q.data(), 0, sc.data(), 0);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t b = 0; b < nb; ++b) {
        double amax = 0;
        for (int64_t c = b * block; c < std::min(cols, (b + 1) * block); ++c)
          amax = std::max(amax, std::fabs(double(x[size_t(r * cols + c)])));
        const float want = amax == 0 ? 1.0f : float(amax / codes::qmax(DType::kI8));
        ASSERT_EQ(want, sc[size_t(r * nb + b)]) << "row " << r << " block " << b;
      }
  }
}

TEST(QuantizeScales, TinyBlocksStillGetAPositiveScale) {
  // amax / qmax underflows f32 for every dtype but nf4 and t2.
  const float x[4] = {1e-44f, -2e-45f, 0.0f, 3e-45f};
  for (DType d : kQuantized) {
    QuantizeOptions o;
    o.dtype = d;
    float s = 0;
    uint8_t q[4] = {};
    quantize(x, 1, 4, 0, o, q, 0, &s, 0);
    EXPECT_GT(s, 0.0f) << to_string(d);
    EXPECT_TRUE(std::isfinite(s));
  }
}

TEST(QuantizeScales, FixedCalibrationClipsAndUsesOneScale) {
  const float x[6] = {-10.0f, -1.5f, 0.2f, 2.0f, 2.5f, 1e30f};
  QuantizeOptions o;
  o.dtype = DType::kI8;
  o.scheme = scheme("block:16");
  o.calibration = parse_calibration("fixed:-1.5:2");
  uint8_t q[6];
  float s = 0;
  quantize(x, 1, 6, 0, o, q, 0, &s, 0);
  EXPECT_EQ(float(2.0 / 127), s);
  const int want[6] = {-95, -95, 13, 127, 127, 127};  // -1.5 * 63.5 = -95.25; 0.2 * 63.5 = 12.7
  for (int i = 0; i < 6; ++i) EXPECT_EQ(want[i], int(int8_t(q[i]))) << "x=" << x[i];
  EXPECT_EQ(Calibration({Calibration::Kind::kFixed, -1.5, 2.0}), o.calibration);
  EXPECT_EQ("fixed:-1.5:2", to_string(o.calibration));
  EXPECT_EQ(o.calibration, parse_calibration(to_string(o.calibration)));
}

// ---- Packing ---------------------------------------------------------------------------------

TEST(QuantizePacking, NeighbouringCodesAndPaddingAreUntouched) {
  // i4: 3 codes per row in rows of 6 (3 bytes): byte 1's high nibble and byte 2 are padding.
  // t2: 5 codes per row in rows of 8 (2 bytes).
  for (auto [d, cols, cld] :
       {std::tuple{DType::kI4, 3, 6}, {DType::kNF4, 3, 6}, {DType::kT2, 5, 8}}) {
    SCOPED_TRACE(std::string(to_string(d)));
    const int64_t rows = 3;
    std::vector<float> x = random_matrix(rows, cols, cols, 5);
    QuantizeOptions o;
    o.dtype = d;
    o.scheme = scheme("channel");
    std::vector<uint8_t> q(size_t(rows * cld / codes::elements_per_byte(d)), 0xFF);
    std::vector<float> s(rows);
    quantize(x.data(), rows, cols, 0, o, q.data(), cld, s.data(), 0);
    const int bits = bits_of(d), per = codes::elements_per_byte(d);
    for (int64_t r = 0; r < rows; ++r) {
      const uint8_t* row = q.data() + r * cld / per;
      for (int64_t c = 0; c < cld; ++c) {
        const uint8_t code = codes::get_code(row, c, bits);
        if (c >= cols) {
          EXPECT_EQ((1 << bits) - 1, int(code)) << "padding element " << c << " of row " << r;
        } else {
          const double v = x[r * cols + c] / double(s[r]);
          EXPECT_EQ(int(ref_code(d, v)), int(code)) << r << ", " << c;
        }
      }
    }
  }
}

// ---- Dual quantization -----------------------------------------------------------------------

TEST(QuantizeDual, EqualsTwoSingleCallsBitForBit) {
  // The last two shapes are split over the quantizers' pool (the last: partial 128-row panels
  // and blocks at both ends of the split).
  const std::pair<int64_t, int64_t> shapes[] = {{1, 37}, {70, 45},   {33, 67},  {16, 16},
                                                {5, 1},  {200, 171}, {300, 290}};
  uint64_t seed = 11;
  for (DType d : kQuantized)
    for (const char* s : {"block:16", "block:32", "block:128"})
      for (const char* cal : {"absmax", "fixed:-0.5:3"})
        for (const auto& shape : shapes) {
          // Plain names, not a structured binding: the lambdas below capture them (C++20 only).
          const int64_t rows = shape.first, cols = shape.second;
          SCOPED_TRACE(std::string(to_string(d)) + " " + s + " " + cal + " [" +
                       std::to_string(rows) + ", " + std::to_string(cols) + "]");
          const int per = codes::elements_per_byte(d);
          const int64_t ld = cols + 2, cld = packed_codes_ld(d, cols) + per;
          const std::vector<float> x = random_matrix(rows, cols, ld, seed++);
          const int64_t b = scheme(s).block_k;
          const int64_t rs_ld = cdiv(cols, b) + 1, cs_ld = cols + 3;
          auto codes_buf = [&] { return code_buffer(d, rows, cld); };
          auto rs_buf = [&] { return std::vector<float>(size_t(rows * rs_ld), kScalePoison); };
          auto cs_buf = [&] {
            return std::vector<float>(size_t(cdiv(rows, b) * cs_ld), kScalePoison);
          };
          auto rq = codes_buf(), cq = codes_buf(), rq1 = codes_buf(), cq1 = codes_buf();
          auto rsc = rs_buf(), rsc1 = rs_buf();
          auto csc = cs_buf(), csc1 = cs_buf();
          DualQuantizeOptions dual;
          dual.dtype = d;
          dual.scheme = scheme(s);
          dual.calibration = parse_calibration(cal);
          quantize_dual(x.data(), rows, cols, ld, dual, rq.data(), cld, rsc.data(), rs_ld,
                        cq.data(), cld, csc.data(), cs_ld);
          QuantizeOptions o;
          o.dtype = d;
          o.scheme = scheme(s);
          o.calibration = dual.calibration;
          o.axis = QuantAxis::kCols;
          quantize(x.data(), rows, cols, ld, o, rq1.data(), cld, rsc1.data(), rs_ld);
          o.axis = QuantAxis::kRows;
          quantize(x.data(), rows, cols, ld, o, cq1.data(), cld, csc1.data(), cs_ld);
          ASSERT_TRUE(rq == rq1) << "row-wise codes differ";
          ASSERT_TRUE(cq == cq1) << "column-wise codes differ";
          ASSERT_EQ(0, std::memcmp(rsc.data(), rsc1.data(), rsc.size() * 4)) << "row scales";
          ASSERT_EQ(0, std::memcmp(csc.data(), csc1.data(), csc.size() * 4)) << "col scales";
          // And both are the reference's (checked per element above for quantize).
          const RefResult ref = reference(x, rows, cols, ld, o);
          ASSERT_TRUE(cq == expected_codes(d, ref.codes, rows, cols, cld, cq.size()));
        }
}

// ---- Bad input ------------------------------------------------------------------------------

// A valid call whose arguments a test breaks one at a time; outputs are poisoned.
struct QuantizeCall {
  int64_t rows = 6, cols = 40, x_ld = 0, codes_ld = 0, scales_ld = 0;
  std::vector<float> x = random_matrix(6, 40, 40, 3);
  QuantizeOptions o;
  std::vector<uint8_t> q = std::vector<uint8_t>(300, kCodePoison);
  std::vector<float> s = std::vector<float>(64, kScalePoison);
  const float* xp = x.data();
  void* qp = q.data();
  float* sp = s.data();
  QuantizeCall() {
    o.dtype = DType::kI4;
    o.scheme = Quant{QuantKind::kBlock, 16, 0};
  }
  void run() { quantize(xp, rows, cols, x_ld, o, qp, codes_ld, sp, scales_ld); }
  bool untouched() const {
    for (uint8_t b : q)
      if (b != kCodePoison) return false;
    for (float f : s)
      if (f != kScalePoison) return false;
    return true;
  }
};

void expect_error(const std::function<void(QuantizeCall&)>& breaks, const std::string& needle) {
  QuantizeCall call;
  breaks(call);
  try {
    call.run();
    ADD_FAILURE() << "no error; expected one naming '" << needle << "'";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
  EXPECT_TRUE(call.untouched()) << "outputs written before the error '" << needle << "'";
}

TEST(QuantizeErrors, NameTheParameterAndLeaveOutputsUntouched) {
  QuantizeCall ok;
  ok.run();  // the unbroken call works
  EXPECT_FALSE(ok.untouched());

  expect_error([](QuantizeCall& c) { c.o.dtype = DType::kBF16; },
               "dtype=bf16 is not a quantized dtype");
  expect_error([](QuantizeCall& c) { c.o.dtype = DType(42); }, "dtype=42");
  expect_error(
      [](QuantizeCall& c) {
        c.o.scheme = Quant{QuantKind::kBlock, 12, 0};
      },
      "scheme=block:12: block size 12 must be a power of two in [16, 8192]");
  expect_error(
      [](QuantizeCall& c) {
        c.o.scheme = Quant{QuantKind::kBlock, 8, 0};
      },
      "block size 8");
  expect_error(
      [](QuantizeCall& c) {
        c.o.scheme = Quant{QuantKind::kBlock, 16, 24};
      },
      "block size 24");
  expect_error(
      [](QuantizeCall& c) {
        c.o.scheme = Quant{QuantKind::kBlock, 16384, 0};
      },
      "block size 16384");
  expect_error(
      [](QuantizeCall& c) {
        c.o.scheme = Quant{QuantKind::kTensor, 16, 0};
      },
      "scheme=tensor: block sizes");
  expect_error([](QuantizeCall& c) { c.o.scheme = Quant{}; }, "scheme=none: dtype=i4 needs scales");
  expect_error(
      [](QuantizeCall& c) {
        c.o.dtype = DType::kF8E4M3;
        c.o.scheme = Quant{};
        c.o.calibration = parse_calibration("fixed:-1:1");
      },
      "scheme=none: fixed calibration");
  expect_error([](QuantizeCall& c) { c.o.axis = QuantAxis(2); }, "axis=2");
  expect_error(
      [](QuantizeCall& c) {
        c.o.calibration = {Calibration::Kind::kFixed, 2.0, 1.0};
      },
      "calibration=fixed:2:1: lo < hi required");
  expect_error(
      [](QuantizeCall& c) {
        c.o.calibration = {Calibration::Kind::kFixed, 0.0, INFINITY};
      },
      "lo and hi must be finite");
  expect_error(
      [](QuantizeCall& c) {
        c.o.calibration = {Calibration::Kind::kFixed, -1e300, 1.0};
      },
      "overflows f32");
  expect_error([](QuantizeCall& c) { c.rows = -1; }, "rows=-1 must be >= 0");
  expect_error([](QuantizeCall& c) { c.cols = -3; }, "cols=-3 must be >= 0");
  expect_error([](QuantizeCall& c) { c.x_ld = 39; }, "x_ld=39 is less than cols=40");
  expect_error([](QuantizeCall& c) { c.x_ld = -1; }, "x_ld=-1 must be >= 0");
  expect_error([](QuantizeCall& c) { c.codes_ld = 41; },
               "codes_ld=41 is not a multiple of 2: i4 packs 2 codes per byte");
  expect_error([](QuantizeCall& c) { c.codes_ld = 38; }, "codes_ld=38 is less than cols=40");
  expect_error([](QuantizeCall& c) { c.scales_ld = 2; }, "scales_ld=2 is less than");
  expect_error([](QuantizeCall& c) { c.xp = nullptr; }, "x is null");
  expect_error([](QuantizeCall& c) { c.qp = nullptr; }, "codes is null");
  expect_error([](QuantizeCall& c) { c.sp = nullptr; }, "scales is null");
  expect_error([](QuantizeCall& c) { c.sp = reinterpret_cast<float*>(c.q.data() + 1); },
               "scales is not 4-byte aligned");
  expect_error([](QuantizeCall& c) { c.rows = int64_t(1) << 60; }, "x spans more than 2^62 bytes");
  expect_error([](QuantizeCall& c) { c.x[2 * 40 + 5] = std::nanf(""); },
               "x[2, 5]=nan is not finite");
  expect_error(
      [](QuantizeCall& c) {
        c.x[4 * 40 + 1] = -INFINITY;
        c.x[5 * 40] = INFINITY;
      },
      "x[4, 1]=-inf is not finite");
  // An input split over the pool still names its first bad element.
  expect_error(
      [](QuantizeCall& c) {
        c.rows = 1000;
        c.x.assign(size_t(1000 * 40), 0.5f);
        c.xp = c.x.data();
        c.q.assign(size_t(1000 * 20), kCodePoison);
        c.qp = c.q.data();
        c.s.assign(size_t(1000 * 3), kScalePoison);
        c.sp = c.s.data();
        c.x[990 * 40 + 3] = INFINITY;
        c.x[601 * 40 + 39] = std::nanf("");
        c.x[700 * 40] = -INFINITY;
      },
      "x[601, 39]=nan is not finite");
  // Tensor scales: the check rides on the maximum over all of x, taken before anything is
  // written; a NaN is not lost to an inf, nor either to a large finite value.
  expect_error(
      [](QuantizeCall& c) {
        c.o.scheme = Quant{QuantKind::kTensor, 0, 0};
        c.x[3 * 40 + 39] = std::nanf("");
        c.x[3 * 40 + 38] = 3e38f;
        c.x[5 * 40 + 2] = INFINITY;
      },
      "x[3, 39]=nan is not finite");
  expect_error(
      [](QuantizeCall& c) {
        c.o.scheme = Quant{QuantKind::kTensor, 0, 0};
        c.rows = 1000;
        c.x.assign(size_t(1000 * 40), 0.5f);
        c.xp = c.x.data();
        c.q.assign(size_t(1000 * 20), kCodePoison);
        c.qp = c.q.data();
        c.x[999 * 40 + 39] = -INFINITY;
        c.x[12 * 40 + 7] = std::nanf("");
      },
      "x[12, 7]=nan is not finite");
  // Channel scales along rows: one block row, cut into slabs of rows for the pool's threads and
  // their maxima merged; a value only the last slab reads is still found.
  expect_error(
      [](QuantizeCall& c) {
        c.o.scheme = Quant{QuantKind::kChannel, 0, 0};
        c.o.axis = QuantAxis::kRows;
        c.rows = 1000;
        c.x.assign(size_t(1000 * 40), 0.5f);
        c.xp = c.x.data();
        c.q.assign(size_t(1000 * 20), kCodePoison);
        c.qp = c.q.data();
        c.x[998 * 40 + 17] = std::nanf("");
      },
      "x[998, 17]=nan is not finite");
  expect_error([](QuantizeCall& c) { c.qp = const_cast<float*>(c.x.data() + 3); },
               "codes overlaps x");
  expect_error([](QuantizeCall& c) { c.sp = reinterpret_cast<float*>(c.q.data() + 64); },
               "scales overlaps codes");
}

// Values checked while writing (one pass over x): every argument error still leaves the outputs
// untouched, and the first value that is not finite in row-major order is still named, whichever
// panel or thread meets a bad value first: absmax (the panels' maxima) and fixed calibration (each
// row run before its codes), block, channel and tensor scales, both axes, inputs split over the
// pool, fp8 without scales.
TEST(QuantizeErrors, WhileWritingStillNamesTheFirstValueThatIsNotFinite) {
  expect_error(
      [](QuantizeCall& c) {
        c.o.check = ValueCheck::kWhileWriting;
        c.o.scheme = Quant{QuantKind::kBlock, 12, 0};
      },
      "block size 12");
  expect_error([](QuantizeCall& c) { c.o.check = ValueCheck(5); },
               "check=5 is not 0 (kBeforeWrites) or 1 (kWhileWriting)");
  for_each_vector_code([] {
    struct Case {
      DType dtype;
      const char* scheme;
      QuantAxis axis;
      const char* calibration;
    };
    const Case cases[] = {
        {DType::kI8, "block:32", QuantAxis::kCols, "absmax"},
        {DType::kI4, "block:32", QuantAxis::kCols, "fixed:-1:1"},
        {DType::kI8, "channel", QuantAxis::kCols, "fixed:-2:2"},
        {DType::kI8, "channel", QuantAxis::kRows, "absmax"},
        {DType::kNF4, "block:16x32", QuantAxis::kRows, "fixed:-1:1"},
        {DType::kI8, "tensor", QuantAxis::kCols, "absmax"},
        {DType::kT2, "tensor", QuantAxis::kCols, "fixed:-1:1"},
        {DType::kF8E4M3, "none", QuantAxis::kCols, "absmax"},
    };
    for (const Case& k : cases) {
      const int64_t rows = 1000, cols = 72;
      SCOPED_TRACE(std::string(to_string(k.dtype)) + " " + k.scheme + " " + k.calibration);
      std::vector<float> x = random_matrix(rows, cols, cols, 77);
      x[size_t(990 * cols + 3)] = INFINITY;
      x[size_t(601 * cols + 71)] = std::nanf("");  // the first
      x[size_t(700 * cols)] = -INFINITY;
      QuantizeOptions o;
      o.dtype = k.dtype, o.scheme = scheme(k.scheme), o.axis = k.axis;
      o.calibration = parse_calibration(k.calibration);
      o.check = ValueCheck::kWhileWriting;
      std::vector<uint8_t> q(size_t(rows * cols));
      const ScaleShape sh = scale_shape(o.scheme, o.axis, rows, cols);
      std::vector<float> sc(size_t(std::max<int64_t>(1, sh.rows * sh.cols)));
      try {
        quantize(x.data(), rows, cols, 0, o, q.data(), 0,
                 o.scheme.kind == QuantKind::kNone ? nullptr : sc.data(), 0);
        ADD_FAILURE() << "no error";
      } catch (const InvalidArgument& e) {
        EXPECT_NE(std::string(e.what()).find("x[601, 71]=nan is not finite"), std::string::npos)
            << e.what();
      }
    }
  });
}

TEST(QuantizeErrors, DualAndDequantizeValidateToo) {
  const std::vector<float> x = random_matrix(8, 20, 20, 4);
  std::vector<uint8_t> rq(200, kCodePoison), cq(200, kCodePoison);
  std::vector<float> rs(40, kScalePoison), cs(40, kScalePoison);
  auto dual = [&](const char* s) {
    DualQuantizeOptions o;
    o.dtype = DType::kF8E5M2;
    o.scheme = scheme(s);
    quantize_dual(x.data(), 8, 20, 0, o, rq.data(), 0, rs.data(), 0, cq.data(), 0, cs.data(), 0);
  };
  auto throws = [](const std::function<void()>& f, const std::string& needle) {
    try {
      f();
      ADD_FAILURE() << "no error; expected '" << needle << "'";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  throws([&] { dual("channel"); }, "scheme=channel: dual quantization takes block:B");
  throws([&] { dual("block:16x16"); }, "scheme=block:16x16: dual quantization takes block:B");
  throws(
      [&] {
        DualQuantizeOptions o;
        o.scheme = scheme("block:16");
        quantize_dual(x.data(), 8, 20, 0, o, rq.data(), 0, rs.data(), 0, rq.data() + 8, 0,
                      cs.data(), 0);
      },
      "col_codes overlaps row_codes");
  throws(
      [&] {
        DualQuantizeOptions o;
        o.scheme = scheme("block:16");
        quantize_dual(x.data(), 8, 20, 0, o, rq.data(), 0, rs.data(), 0, cq.data(), 0, nullptr, 0);
      },
      "col_scales is null");
  // A value that is not finite, under either calibration: the first in row-major order is
  // named, and nothing is written (the maxima read every value before any code is written).
  for (const char* cal : {"absmax", "fixed:-1:1"}) {
    std::vector<float> bad = x;
    bad[7 * 20 + 19] = std::numeric_limits<float>::quiet_NaN();
    bad[5 * 20 + 3] = -std::numeric_limits<float>::infinity();
    throws(
        [&] {
          DualQuantizeOptions o;
          o.scheme = scheme("block:16");
          o.calibration = parse_calibration(cal);
          quantize_dual(bad.data(), 8, 20, 0, o, rq.data(), 0, rs.data(), 0, cq.data(), 0,
                        cs.data(), 0);
        },
        "x[5, 3]=-inf is not finite");
  }
  for (uint8_t b : rq) ASSERT_EQ(kCodePoison, b);
  for (uint8_t b : cq) ASSERT_EQ(kCodePoison, b);
  for (float f : rs) ASSERT_EQ(kScalePoison, f);
  for (float f : cs) ASSERT_EQ(kScalePoison, f);

  // Dequantize: every scale read must be finite and > 0; the output is untouched otherwise.
  QuantizeOptions o;
  o.dtype = DType::kI8;
  o.scheme = scheme("block:16");
  std::vector<uint8_t> q(160, 3);
  std::vector<float> s(16, 0.5f), out(160, kScalePoison);
  s[1 * 2 + 1] = 0.0f;
  throws([&] { dequantize(q.data(), 0, s.data(), 0, 8, 20, o, out.data(), 0); },
         "scales[1, 1]=0 must be finite and > 0");
  o.scheme = scheme("channel");
  s[3] = -std::numeric_limits<float>::infinity();
  throws([&] { dequantize(q.data(), 0, s.data(), 0, 8, 20, o, out.data(), 0); },
         "scales[3]=-inf must be finite and > 0");
  throws(
      [&] {
        dequantize(q.data(), 0, s.data(), 0, 8, 20, o, reinterpret_cast<float*>(q.data()), 0);
      },
      "x overlaps codes");
  for (float f : out) ASSERT_EQ(kScalePoison, f);

  // An empty matrix writes nothing and needs no buffers.
  QuantizeOptions e;
  quantize(nullptr, 0, 5, 0, e, nullptr, 0, nullptr, 0);
  quantize(nullptr, 4, 0, 0, e, nullptr, 0, nullptr, 0);
  dequantize(nullptr, 0, nullptr, 0, 0, 5, e, nullptr, 0);
}

TEST(QuantizeErrors, ParsersNameTheirParameter) {
  auto throws = [](const std::function<void()>& f, const std::string& needle) {
    try {
      f();
      ADD_FAILURE() << "no error; expected '" << needle << "'";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  throws([] { parse_quant_scheme("blocky"); }, "scheme=blocky is not one of");
  throws([] { parse_quant_scheme("block:1a"); }, "scheme=");
  throws([] { parse_calibration("minmax"); }, "calibration=minmax is not one of: absmax, fixed");
  throws([] { parse_calibration("fixed:1"); }, "calibration=fixed:1 is not fixed:LO:HI");
  throws([] { parse_calibration("fixed:a:2"); }, "lo=a is not a number");
  throws([] { parse_calibration("fixed:-1:2x"); }, "hi=2x is not a number");
  EXPECT_EQ((Quant{QuantKind::kBlock, 128, 64}), parse_quant_scheme("block:128x64"));
  EXPECT_EQ(Calibration{}, parse_calibration("absmax"));
}

// ---- C API ------------------------------------------------------------------------------------

TEST(QuantizeCApi, ReturnsCodesAndMessages) {
  const int64_t rows = 9, cols = 37;
  const std::vector<float> x = random_matrix(rows, cols, cols, 21);
  char err[256] = "stale";
  // Codes and scales equal the C++ API's.
  std::vector<uint8_t> q(rows * 19, kCodePoison), q1 = q;
  std::vector<float> s(rows * 3, kScalePoison), s1 = s;
  ASSERT_EQ(GMMGEN_OK, gmmgen_quantize(x.data(), rows, cols, 0, GMMGEN_DTYPE_I4, "block:16",
                                       GMMGEN_QUANT_AXIS_COLS, "fixed:-1.5:2", q.data(), 0,
                                       s.data(), 0, err, sizeof err))
      << err;
  EXPECT_STREQ("", err);
  QuantizeOptions o;
  o.dtype = DType::kI4;
  o.scheme = scheme("block:16");
  o.calibration = parse_calibration("fixed:-1.5:2");
  quantize(x.data(), rows, cols, 0, o, q1.data(), 0, s1.data(), 0);
  EXPECT_TRUE(q == q1);
  EXPECT_TRUE(s == s1);
  // One pass: the same bits.
  std::vector<uint8_t> q2(q.size(), kCodePoison);
  std::vector<float> s2(s.size(), kScalePoison);
  ASSERT_EQ(GMMGEN_OK, gmmgen_quantize_one_pass(x.data(), rows, cols, 0, GMMGEN_DTYPE_I4,
                                                "block:16", GMMGEN_QUANT_AXIS_COLS, "fixed:-1.5:2",
                                                q2.data(), 0, s2.data(), 0, err, sizeof err))
      << err;
  EXPECT_TRUE(q == q2);
  EXPECT_TRUE(s == s2);

  std::vector<float> xhat(rows * cols, kScalePoison), xhat1 = xhat;
  ASSERT_EQ(GMMGEN_OK,
            gmmgen_dequantize(q.data(), 0, s.data(), 0, rows, cols, GMMGEN_DTYPE_I4, "block:16",
                              GMMGEN_QUANT_AXIS_COLS, xhat.data(), 0, err, sizeof err))
      << err;
  dequantize(q1.data(), 0, s1.data(), 0, rows, cols, o, xhat1.data(), 0);
  EXPECT_TRUE(xhat == xhat1);

  // Dual, NULL calibration = absmax.
  std::vector<uint8_t> rq(rows * cols), cq(rows * cols), cq1(rows * cols);
  std::vector<float> rs(rows * 3), cs(cols), cs1(cols);
  ASSERT_EQ(GMMGEN_OK, gmmgen_quantize_dual(x.data(), rows, cols, 0, GMMGEN_DTYPE_F8E4M3,
                                            "block:16", nullptr, rq.data(), 0, rs.data(), 0,
                                            cq.data(), 0, cs.data(), 0, err, sizeof err))
      << err;
  ASSERT_EQ(GMMGEN_OK, gmmgen_quantize(x.data(), rows, cols, 0, GMMGEN_DTYPE_F8E4M3, "block:16",
                                       GMMGEN_QUANT_AXIS_ROWS, "absmax", cq1.data(), 0, cs1.data(),
                                       0, err, sizeof err));
  EXPECT_TRUE(cq == cq1);
  EXPECT_TRUE(cs == cs1);

  // Errors: a code and a message naming the parameter; nothing written.
  const std::vector<uint8_t> q_before = q;
  const std::vector<float> s_before = s;
  struct Bad {
    int32_t dtype;
    const char* scheme;
    int32_t axis;
    const char* calibration;
    const float* x;
    const char* needle;
  };
  std::vector<float> bad_x = x;
  bad_x[3 * cols + 7] = std::nanf("");
  const Bad bad[] = {
      {99, "block:16", 1, "absmax", x.data(), "dtype=99 is not a GMMGEN_DTYPE_* code"},
      {GMMGEN_DTYPE_F32, "block:16", 1, "absmax", x.data(), "dtype=f32 is not a quantized"},
      {GMMGEN_DTYPE_I4, "block:abc", 1, "absmax", x.data(),
       "scheme=block:abc: abc is not an integer"},
      {GMMGEN_DTYPE_I4, nullptr, 1, "absmax", x.data(), "scheme is NULL"},
      {GMMGEN_DTYPE_I4, "block:16", 3, "absmax", x.data(), "axis=3"},
      {GMMGEN_DTYPE_I4, "block:16", 1, "fixed:1", x.data(), "calibration=fixed:1"},
      {GMMGEN_DTYPE_I4, "block:16", 1, "fixed:2:-2", x.data(), "lo < hi required"},
      {GMMGEN_DTYPE_I4, "block:16", 1, "absmax", bad_x.data(), "x[3, 7]=nan is not finite"},
  };
  for (const Bad& b : bad) {
    std::strcpy(err, "stale");
    EXPECT_EQ(GMMGEN_ERR_INVALID_ARGUMENT,
              gmmgen_quantize(b.x, rows, cols, 0, b.dtype, b.scheme, b.axis, b.calibration,
                              q.data(), 0, s.data(), 0, err, sizeof err));
    EXPECT_NE(std::string(err).find(b.needle), std::string::npos) << err;
    EXPECT_TRUE(q == q_before && s == s_before) << b.needle;
    // One pass: the same errors; only a value that is not finite may leave outputs written.
    std::strcpy(err, "stale");
    EXPECT_EQ(GMMGEN_ERR_INVALID_ARGUMENT,
              gmmgen_quantize_one_pass(b.x, rows, cols, 0, b.dtype, b.scheme, b.axis, b.calibration,
                                       q.data(), 0, s.data(), 0, err, sizeof err));
    EXPECT_NE(std::string(err).find(b.needle), std::string::npos) << err;
    if (b.x == x.data()) {
      EXPECT_TRUE(q == q_before && s == s_before) << b.needle;
    }
  }
  EXPECT_EQ(
      GMMGEN_ERR_INVALID_ARGUMENT,
      gmmgen_quantize_dual(x.data(), rows, cols, 0, GMMGEN_DTYPE_I8, "tensor", "absmax", rq.data(),
                           0, rs.data(), 0, cq.data(), 0, cs.data(), 0, err, sizeof err));
  EXPECT_NE(std::string(err).find("dual quantization takes block:B"), std::string::npos) << err;
  EXPECT_EQ(GMMGEN_ERR_INVALID_ARGUMENT,
            gmmgen_dequantize(q.data(), 0, s.data(), 0, rows, cols, GMMGEN_DTYPE_I4, "block:16",
                              GMMGEN_QUANT_AXIS_COLS, nullptr, 0, err, sizeof err));
  EXPECT_STREQ("x is null", err);
  // A short buffer keeps the start of the message, NUL-terminated; a NULL one is allowed.
  char small[8];
  EXPECT_EQ(GMMGEN_ERR_INVALID_ARGUMENT,
            gmmgen_quantize(x.data(), rows, cols, 0, 99, "tensor", 1, nullptr, q.data(), 0,
                            s.data(), 0, small, sizeof small));
  EXPECT_STREQ("dtype=9", small);
  EXPECT_EQ(GMMGEN_ERR_INVALID_ARGUMENT,
            gmmgen_quantize(x.data(), rows, cols, 0, 99, "tensor", 1, nullptr, q.data(), 0,
                            s.data(), 0, nullptr, 0));
}

}  // namespace
}  // namespace gmmgen
