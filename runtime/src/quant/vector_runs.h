// The quantizers' inner loops over one run of a row, in the host's widest vector code (AVX-512 or
// AVX2, chosen once at run time; scalar elsewhere). Each gives exactly what its scalar loop in
// quantize.cpp gives: max is order-free, and the codes are those of the same f64 quotient, clamp
// and round-to-nearest-even (f32 quotients or products by a reciprocal where they provably round
// the same, f64 ones where a value lies near a tie).
#pragma once

#include <cstdint>
#include <limits>

namespace gmmgen::quant_runs {

// The widest vector code the runs below use: the host's (AVX-512, else AVX2, else none), or less
// after cap_vector_code, which sets a process-wide cap for the calls that follow (kAvx512: none),
// so that tests check every level the host runs.
enum class VectorCode { kScalar, kAvx2, kAvx512 };
VectorCode vector_code();
void cap_vector_code(VectorCode most);

// Whether any of x[0, n) is inf or NaN.
bool any_not_finite(const float* x, int64_t n);

// out[i] = the f32 value of the bf16 bit pattern x[i] for i in [0, n) (exact: bf16 is the upper
// half of an f32), in vector code where the host has it.
void widen_bf16(const uint16_t* x, int64_t n, float* out);

// The maxima below are taken on the magnitudes' bit patterns: for finite values the float
// maximum; an inf or NaN among the values makes the maximum inf or NaN (never lost), so a
// maximum that is not finite reports a value that is not.

// max(m, |v|), m >= 0.
float max_magnitude(float m, float v);

// max(init, |x[0]|, ..., |x[n-1]|); init >= 0.
float amax(const float* x, int64_t n, float init);

// s[i] = max(s[i], |x[i]|) for i in [0, n); s[i] >= 0.
void amax_columns(float* s, const float* x, int64_t n);

// An integer code run: bits 8 (i8) or 4 (i4, two codes per byte, the first in the low nibble),
// qmax its largest code; under fixed calibration x is clipped to [lo, hi] first.
struct IntRun {
  int bits = 8;
  double qmax = 127;
  bool fixed = false;
  double lo = 0, hi = 0;
};

// s[b] = max(s[b], |x[i]| over block b), blocks of `block` elements from x[0] (the last may be
// partial); s[b] >= 0.
void amax_blocks(const float* x, int64_t n, int64_t block, float* s);

// The absmax scales of the block maxima m[0, k) in place, for the largest k <= n that the vector
// code covers (0 without it): 1 where the maximum is 0, else m / qmax in f64 rounded to f32, and at
// least the smallest positive f32; `finite` says whether every maximum it read was finite (a
// scale of one that is not is unspecified). Returns k; the caller takes the rest.
int64_t absmax_scales(float* m, int64_t n, double qmax, bool& finite);

// A scale run longer than any row: one scale for the whole run.
inline constexpr int64_t kOneScale = int64_t(1) << 60;

// The codes of x[0, k) for the largest k <= n that the vector code covers (0 without vector
// code; k a multiple of 16): code = round_even(clamp(value(x) / s, -qmax, qmax)) as in f64,
// s = scales[i / every], every being 1, a power of two >= 16 or kOneScale. `codes` points at the
// byte of element 0 (element 0 starts a byte). Returns k; the caller encodes the rest.
int64_t encode_int(const IntRun& r, const float* x, const float* scales, int64_t every, int64_t n,
                   uint8_t* codes);

// An fp8 format: significand bits with the implicit one, smallest normal exponent, largest value,
// and half its smallest subnormal (at most that rounds to 0).
struct Fp8Format {
  int precision = 0, emin = 0;
  float max = 0, half_min_subnormal = 0;
};

// Whether encode_fp8 has vector code on this host (AVX2; AVX-512 takes sixteen at a time).
bool has_fp8_runs();

// fp8 codes (one byte each) of x[i] / s, s = scales[i / every] as in encode_int, sixteen or eight
// at a time, under absmax calibration (x and s f32): the f32 quotient (or product by 1 / s)
// rounded to the format on its bits, to nearest even, saturating at +-max, keeping the sign of
// zero. That lies on the same side of every midpoint between fp8 values as the exact quotient
// unless it lies near one: a group holding such a near tie is cast from f64 quotients instead,
// so every code is the f64 quotient's. Returns the elements done: n rounded down to 8.
int64_t encode_fp8(const Fp8Format& f, const float* x, const float* scales, int64_t every,
                   int64_t n, uint8_t* codes);

// Fixed calibration's clipping of x to [lo, hi] before the quotient (none under absmax).
struct Clip {
  bool fixed = false;
  double lo = 0, hi = 0;
};

// A dtype whose code is picked by comparisons (nf4, t2): code = map[k], k the count of the
// ascending thresholds t[0, count) below v = value(x) / s, both in f64 (a threshold that v must
// reach rather than pass is given as the f64 value just below it). count < 16; the entries past
// count stay +inf, so that a search over all sixteen counts the same.
struct LevelRun {
  static constexpr double kInf = std::numeric_limits<double>::infinity();
  int bits = 4;  // 4 (two codes per byte) or 2 (four per byte), the first in the lowest bits
  int count = 0;
  alignas(64) double thresholds[16] = {kInf, kInf, kInf, kInf, kInf, kInf, kInf, kInf,
                                       kInf, kInf, kInf, kInf, kInf, kInf, kInf, kInf};
  alignas(64) int64_t map[16] = {};
};

// The codes of x[0, k) for the largest k <= n that the vector code covers (0 without AVX-512;
// k a multiple of 16), s = scales[i / every] as in encode_int, value(x) clipped to [lo, hi]
// first under fixed calibration: the scalar encoding's f64 quotient and comparisons, so every
// code is the scalar's. `codes` points at the byte of element 0 (element 0 starts a byte).
int64_t encode_levels(const LevelRun& r, const Clip& clip, const float* x, const float* scales,
                      int64_t every, int64_t n, uint8_t* codes);

// Whether encode_fp8_exact has vector code on this host (AVX-512).
bool has_fp8_exact();

// fp8 codes of value(x[i]) / s in f64, eight at a time, for i in [0, k), k = n rounded down to
// a multiple of 8 (0 without AVX-512): encode_fp8's integer steps on the bits of eight f64
// quotients, so every code is the scalar's; s = scales[i] when per_column, else scales[0].
// Returns k; the caller encodes the rest.
int64_t encode_fp8_exact(const Fp8Format& f, const Clip& clip, const float* x, const float* scales,
                         bool per_column, int64_t n, uint8_t* codes);

}  // namespace gmmgen::quant_runs
