#include "quant/vector_runs.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>

#include "gmmgen/platform.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// GCC 12 warns of "'__Y' may be used uninitialized" inside its own AVX-512 intrinsics (the
// _mm512_undefined_* idiom, GCC bug 105593): silenced for that header only.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#define GMMGEN_QUANT_RUNS_X86 1
#define GMMGEN_RUNS_AVX2 __attribute__((target("avx2,fma")))
#define GMMGEN_RUNS_AVX512 __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl")))
#endif

namespace gmmgen::quant_runs {
namespace {

using Level = VectorCode;

std::atomic<Level> level_cap{Level::kAvx512};

Level host_level() {
  static const Level l = host_supports(Isa::kAvx512) ? Level::kAvx512
                         : host_supports(Isa::kAvx2) ? Level::kAvx2
                                                     : Level::kScalar;
  return l;
}

Level level() {
  return std::min(host_level(), level_cap.load(std::memory_order_relaxed));
}

// Integer codes under absmax calibration take f32 quotients, clamped to [-qmax, qmax] and rounded.
// Rounding is monotonic and half-integers up to 128 are f32 values, so a quotient within d of the
// exact one rounds to the same code unless it lies within d of a half-integer. x / s in f32 is
// correctly rounded (only an exact half-integer is in doubt); x * (1 / s) with 1 / s rounded to f32
// is within 2^-23 |x / s| of it, i.e. within 2^-16 at |x / s| <= 128 (absmax keeps |x / s| at most
// qmax (1 + 2^-24)), and saves a vector division per 16 codes where a run shares one scale. A
// rounding step of at least kNearHalf (2^-14 short of a half: four times that bound) sends its
// group of codes to the f64 quotients. 1 / s is a finite f32 where s is a normal f32; a smaller s
// (the smallest scales of tiny blocks) is divided by.
constexpr float kNearHalf = 0.5f - 0x1p-14f;

// 1 / s in f32 where the products are valid (s normal), else 0: divide by s.
inline float reciprocal_or_zero(float s) {
  return s >= std::numeric_limits<float>::min() ? 1.0f / s : 0.0f;
}

#ifdef GMMGEN_QUANT_RUNS_X86

// ---- AVX2: 8 floats, 4 doubles per register ---------------------------------------------------

GMMGEN_RUNS_AVX2 inline __m256 abs8(__m256 v) {
  return _mm256_and_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)));
}

// The maxima are taken on the bit patterns of magnitudes (sign cleared): for finite values the
// same order as the floats', while an inf or NaN (exponent all ones) exceeds every finite value
// and survives every later maximum, so a maximum that is not finite reports one in its input.
GMMGEN_RUNS_AVX2 inline __m256 maxbits8(__m256 a, __m256 b) {
  return _mm256_castsi256_ps(_mm256_max_epu32(_mm256_castps_si256(a), _mm256_castps_si256(b)));
}

GMMGEN_RUNS_AVX2 float hmaxbits8(__m256 v) {
  __m128i m = _mm_max_epu32(_mm256_castsi256_si128(_mm256_castps_si256(v)),
                            _mm256_extracti128_si256(_mm256_castps_si256(v), 1));
  m = _mm_max_epu32(m, _mm_shuffle_epi32(m, 0x4e));
  m = _mm_max_epu32(m, _mm_shuffle_epi32(m, 0xb1));
  return std::bit_cast<float>(_mm_cvtsi128_si32(m));
}

GMMGEN_RUNS_AVX2 int64_t not_finite_avx2(const float* x, int64_t n, bool& bad) {
  const __m256i exp = _mm256_set1_epi32(0x7f800000);
  __m256i any = _mm256_setzero_si256();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i u = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i));
    any = _mm256_or_si256(any, _mm256_cmpeq_epi32(_mm256_and_si256(u, exp), exp));
  }
  bad = !_mm256_testz_si256(any, any);
  return i;
}

GMMGEN_RUNS_AVX2 int64_t widen_bf16_avx2(const uint16_t* x, int64_t n, float* out) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i),
                        _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  return i;
}

GMMGEN_RUNS_AVX2 int64_t amax_avx2(const float* x, int64_t n, float& m) {
  __m256 a = _mm256_set1_ps(m), b = a;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    a = maxbits8(a, abs8(_mm256_loadu_ps(x + i)));
    b = maxbits8(b, abs8(_mm256_loadu_ps(x + i + 8)));
  }
  for (; i + 8 <= n; i += 8) a = maxbits8(a, abs8(_mm256_loadu_ps(x + i)));
  m = hmaxbits8(maxbits8(a, b));
  return i;
}

GMMGEN_RUNS_AVX2 int64_t amax_columns_avx2(float* s, const float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(s + i, maxbits8(_mm256_loadu_ps(s + i), abs8(_mm256_loadu_ps(x + i))));
  return i;
}

// The block maxima of 8 consecutive blocks of W vectors each from x: lane b of the result is
// block b's (as amax16_blocks, on 8 lanes: pairs of lanes, then pairs of pairs, then halves).
template <int W>
GMMGEN_RUNS_AVX2 inline __m256 amax8_blocks(const float* x) {
  __m256 m[8], p[4], q[2];
  for (int b = 0; b < 8; ++b) {
    m[b] = abs8(_mm256_loadu_ps(x + b * W * 8));
    for (int j = 1; j < W; ++j) m[b] = maxbits8(m[b], abs8(_mm256_loadu_ps(x + (b * W + j) * 8)));
  }
  for (int i = 0; i < 4; ++i)  // per 128-bit lane: max of elements 0|2 and 1|3 of both blocks
    p[i] = maxbits8(_mm256_unpacklo_ps(m[2 * i], m[2 * i + 1]),
                    _mm256_unpackhi_ps(m[2 * i], m[2 * i + 1]));
  for (int i = 0; i < 2; ++i) {  // per 128-bit lane: blocks 4i .. 4i + 3, each over the lane
    const __m256d c = _mm256_castps_pd(p[2 * i]), d = _mm256_castps_pd(p[2 * i + 1]);
    q[i] = maxbits8(_mm256_castpd_ps(_mm256_unpacklo_pd(c, d)),
                    _mm256_castpd_ps(_mm256_unpackhi_pd(c, d)));
  }
  return maxbits8(_mm256_permute2f128_ps(q[0], q[1], 0x20),
                  _mm256_permute2f128_ps(q[0], q[1], 0x31));
}

template <int W>
GMMGEN_RUNS_AVX2 int64_t amax_blocks_w8(const float* x, int64_t n, float* s) {
  int64_t b = 0;
  for (; (b + 8) * W * 8 <= n; b += 8)
    _mm256_storeu_ps(s + b, maxbits8(_mm256_loadu_ps(s + b), amax8_blocks<W>(x + b * W * 8)));
  return b;
}

// amax_blocks for blocks of 16 to 128 elements, 8 blocks at a time; returns the blocks done.
GMMGEN_RUNS_AVX2 int64_t amax_blocks_avx2(const float* x, int64_t n, int64_t block, float* s) {
  switch (block) {
    case 16:
      return amax_blocks_w8<2>(x, n, s);
    case 32:
      return amax_blocks_w8<4>(x, n, s);
    case 64:
      return amax_blocks_w8<8>(x, n, s);
    case 128:
      return amax_blocks_w8<16>(x, n, s);
    default:
      return 0;  // longer blocks: one horizontal max per block costs little
  }
}

// absmax_scales four at a time (the f64 quotients of four maxima).
GMMGEN_RUNS_AVX2 int64_t absmax_scales_avx2(float* m, int64_t n, double qmax, bool& finite) {
  const __m256d q = _mm256_set1_pd(qmax);
  __m128i bad = _mm_setzero_si128();
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const __m128 a = _mm_loadu_ps(m + i);
    bad = _mm_or_si128(bad, _mm_cmpgt_epi32(_mm_castps_si128(a), _mm_set1_epi32(0x7f7fffff)));
    __m128 s = _mm256_cvtpd_ps(_mm256_div_pd(_mm256_cvtps_pd(a), q));
    s = _mm_blendv_ps(s, _mm_set1_ps(std::numeric_limits<float>::denorm_min()),
                      _mm_cmpeq_ps(s, _mm_setzero_ps()));
    _mm_storeu_ps(m + i, _mm_blendv_ps(s, _mm_set1_ps(1.0f), _mm_cmpeq_ps(a, _mm_setzero_ps())));
  }
  finite = _mm_testz_si128(bad, bad);
  return i;
}

// The codes of 4 values as 4 int32: value, quotient, clamp, round to nearest even.
GMMGEN_RUNS_AVX2 inline __m128i codes4(const IntRun& r, __m128 x, __m256d s) {
  __m256d v = _mm256_cvtps_pd(x);
  if (r.fixed) v = _mm256_min_pd(_mm256_max_pd(v, _mm256_set1_pd(r.lo)), _mm256_set1_pd(r.hi));
  v = _mm256_div_pd(v, s);
  const __m256d q = _mm256_set1_pd(r.qmax);
  v = _mm256_min_pd(_mm256_max_pd(v, _mm256_sub_pd(_mm256_setzero_pd(), q)), q);
  return _mm256_cvtpd_epi32(_mm256_round_pd(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

// 16 int8 codes (in [-qmax, qmax]) -> 8 bytes of nibble pairs, the first code in the low nibble.
inline __m128i nibbles(__m128i b) {
  const __m128i lo = _mm_and_si128(b, _mm_set1_epi16(0x000f));
  const __m128i hi = _mm_srli_epi16(_mm_and_si128(b, _mm_set1_epi16(0x0f00)), 4);
  return _mm_packus_epi16(_mm_or_si128(lo, hi), _mm_setzero_si128());
}

// The quotients of 8 values in f32 (absmax calibration: x and s are f32, kNearHalf): x / s per
// column, else x * inv, or x / s where inv is 0.
GMMGEN_RUNS_AVX2 inline __m256 quotients8(const float* x, const float* scales, bool per_column,
                                          float sc, float inv) {
  const __m256 v = _mm256_loadu_ps(x);
  if (per_column) return _mm256_div_ps(v, _mm256_loadu_ps(scales));
  return inv != 0.0f ? _mm256_mul_ps(v, _mm256_set1_ps(inv)) : _mm256_div_ps(v, _mm256_set1_ps(sc));
}

// The 8 quotients clamped and rounded; near_tie marks a rounding step of kNearHalf or more, after
// which the caller takes the f64 path instead.
GMMGEN_RUNS_AVX2 inline __m256 rounded8(const IntRun& r, __m256 quotient, __m256& near_tie) {
  const __m256 q = _mm256_set1_ps(float(r.qmax));
  const __m256 v = _mm256_min_ps(_mm256_max_ps(quotient, _mm256_sub_ps(_mm256_setzero_ps(), q)), q);
  const __m256 rounded = _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  near_tie = _mm256_or_ps(near_tie, _mm256_cmp_ps(abs8(_mm256_sub_ps(v, rounded)),
                                                  _mm256_set1_ps(kNearHalf), _CMP_GE_OQ));
  return rounded;
}

GMMGEN_RUNS_AVX2 int64_t encode_int_avx2(const IntRun& r, const float* x, const float* scales,
                                         int64_t every, int64_t n, uint8_t* codes) {
  const bool per_column = every == 1;
  const int shift = __builtin_ctzll(uint64_t(every));  // a power of two: no division per group
  int64_t block = -1;
  float sc = 0.0f, inv = 0.0f;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    if (!per_column && (i >> shift) != block) {
      block = i >> shift;
      sc = scales[block], inv = reciprocal_or_zero(sc);
    }
    const __m256d s1 = _mm256_set1_pd(double(sc));
    __m128i b;
    __m256 tie = _mm256_setzero_ps();
    if (!r.fixed) {
      const __m256 q0 = rounded8(r, quotients8(x + i, scales + i, per_column, sc, inv), tie);
      const __m256 q1 =
          rounded8(r, quotients8(x + i + 8, scales + i + 8, per_column, sc, inv), tie);
      const __m256i w = _mm256_permute4x64_epi64(
          _mm256_packs_epi32(_mm256_cvtps_epi32(q0), _mm256_cvtps_epi32(q1)), 0xd8);
      b = _mm_packs_epi16(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
    }
    if (r.fixed || _mm256_movemask_ps(tie)) {
      __m128i c[4];
      for (int j = 0; j < 4; ++j) {
        const int64_t at = i + 4 * j;
        c[j] = codes4(r, _mm_loadu_ps(x + at),
                      per_column ? _mm256_cvtps_pd(_mm_loadu_ps(scales + at)) : s1);
      }
      b = _mm_packs_epi16(_mm_packs_epi32(c[0], c[1]), _mm_packs_epi32(c[2], c[3]));
    }
    if (r.bits == 8)
      _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + i), b);
    else
      _mm_storel_epi64(reinterpret_cast<__m128i*>(codes + i / 2), nibbles(b));
  }
  return i;
}

// encode_fp8 eight at a time, on the f32 quotients q = x / s and a = min(|q|, max), by f32
// rounding itself rather than shifts by each lane's exponent. A normal result (a >= 2^emin) is a's
// bits plus half a step of the format's significand, shifted right by f32's extra bits (a carry
// moves into the exponent, as rounding up into the next binade does), rebiased in the same add.
// That rounds half up, so a group holding a tie (dropped bits exactly half a step), or a near tie
// (within kFp8Near f32 steps of one: q may be a product by the scale's reciprocal, within 2^-23
// |x / s|, two f32 steps, of x / s, as kNearHalf), takes a from its f64 quotients instead, put on
// the format's grid (on_grid8), where these steps round nothing. A subnormal result (0 < a <
// 2^emin, rare under absmax: below 2^emin / max of the block's largest) counts steps of
// 2^(emin - frac): a + C, C the power of two whose f32 spacing is that step, rounds a to a whole
// number of steps (to nearest even), and its bits past C's are that number (2^frac, rounding up
// to 2^emin, is that code); one within kFp8Near f32 steps of 2^emin of a tie is a near tie too.
// Zero is code 0. Activations that are bf16 values hit near ties often (quotients of two 8-bit
// significands): groups that stopped and went to the scalar cast took 1.4-2x the time.
constexpr int32_t kFp8Near = 8;
struct Fp8Steps {
  int frac, drop;     // the format's stored significand bits, f32's dropped ones
  int32_t round;      // half a step, less the exponent's rebias (f32's bias - the format's)
  int32_t near_mask;  // (a's bits + round + kFp8Near) & near_mask == 0: a near tie
  uint32_t min_normal_bits, c_bits;  // 2^emin and C, normal f32 powers of two
  float near_subnormal;              // kFp8Near f32 steps of 2^emin: a subnormal's near tie
  explicit Fp8Steps(const Fp8Format& f)
      : frac(f.precision - 1),
        drop(23 - frac),
        round(int32_t((1u << (drop - 1)) - (uint32_t(126 + f.emin) << 23))),
        near_mask(((1 << drop) - 1) & ~(2 * kFp8Near - 1)),
        min_normal_bits(uint32_t(127 + f.emin) << 23),
        c_bits(uint32_t(127 + f.emin - frac + 23) << 23),
        near_subnormal(std::ldexp(float(kFp8Near), f.emin - 23)) {}
};

// |x / s| (four lanes) on the fp8 grid, from the f64 quotient a = min(|x / s|, max): a + C - C in
// f64, C = 2^(e + 52 - frac) for a's exponent e (at least emin), whose f64 spacing is the grid's
// step at e, rounds a to the grid (to nearest even) and is otherwise exact. The result is an fp8
// value, exact in f32: encode_fp8_avx2's steps on it round nothing, so its code is the f64
// quotient's, whatever ties it held.
GMMGEN_RUNS_AVX2 inline __m128 on_grid4(const Fp8Format& f, __m128 x, __m128 s) {
  const __m256d v = _mm256_div_pd(_mm256_cvtps_pd(x), _mm256_cvtps_pd(s));
  const __m256d a =
      _mm256_min_pd(_mm256_andnot_pd(_mm256_set1_pd(-0.0), v), _mm256_set1_pd(double(f.max)));
  // Biased exponents fit 32 bits (the lanes' high halves are zero): a 32-bit max is a 64-bit one.
  const __m256i e = _mm256_max_epi32(_mm256_srli_epi64(_mm256_castpd_si256(a), 52),
                                     _mm256_set1_epi64x(1023 + f.emin));
  const __m256d c = _mm256_castsi256_pd(
      _mm256_slli_epi64(_mm256_add_epi64(e, _mm256_set1_epi64x(52 - (f.precision - 1))), 52));
  return _mm256_cvtpd_ps(_mm256_sub_pd(_mm256_add_pd(a, c), c));
}

// on_grid4 of eight lanes; out of line: it runs only at near ties.
[[gnu::noinline]] GMMGEN_RUNS_AVX2 __m256 on_grid8(const Fp8Format& f, const float* x, __m256 s) {
  return _mm256_set_m128(on_grid4(f, _mm_loadu_ps(x + 4), _mm256_extractf128_ps(s, 1)),
                         on_grid4(f, _mm_loadu_ps(x), _mm256_castps256_ps128(s)));
}

// The lanes holding subnormal results (neither normal nor zero), as a movemask.
GMMGEN_RUNS_AVX2 inline int subnormal_lanes(__m256 a, __m256 normal) {
  return ~_mm256_movemask_ps(
             _mm256_or_ps(normal, _mm256_cmp_ps(a, _mm256_setzero_ps(), _CMP_EQ_OQ))) &
         0xFF;
}

// The eight codes of magnitudes a (a normal where `normal`, else a subnormal result or 0, a
// movemask of the subnormal lanes in `subnormal`) with q's signs, into codes: encode_fp8_avx2's
// steps.
GMMGEN_RUNS_AVX2 inline void store_fp8_codes8(__m256 a, __m256 normal, int subnormal, __m256 q,
                                              __m256i round, __m128i count, __m256 c,
                                              uint8_t* codes) {
  __m256i code =
      _mm256_and_si256(_mm256_srl_epi32(_mm256_add_epi32(_mm256_castps_si256(a), round), count),
                       _mm256_castps_si256(normal));
  if (subnormal) {
    const __m256 t = _mm256_add_ps(a, c);
    code = _mm256_castps_si256(_mm256_blendv_ps(
        _mm256_castsi256_ps(_mm256_sub_epi32(_mm256_castps_si256(t), _mm256_castps_si256(c))),
        _mm256_castsi256_ps(code), normal));
  }
  code = _mm256_or_si256(code, _mm256_and_si256(_mm256_srli_epi32(_mm256_castps_si256(q), 24),
                                                _mm256_set1_epi32(0x80)));
  const __m128i w =
      _mm_packus_epi32(_mm256_castsi256_si128(code), _mm256_extracti128_si256(code, 1));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(codes), _mm_packus_epi16(w, w));
}

GMMGEN_RUNS_AVX2 int64_t encode_fp8_avx2(const Fp8Format& f, const float* x, const float* scales,
                                         int64_t every, int64_t i, int64_t n, uint8_t* codes) {
  const int shift = __builtin_ctzll(uint64_t(every));  // a power of two: no division per group
  const Fp8Steps k(f);
  const __m256i round = _mm256_set1_epi32(k.round), near = _mm256_set1_epi32(kFp8Near);
  const __m256i near_mask = _mm256_set1_epi32(k.near_mask);
  const __m256 max = _mm256_set1_ps(f.max), half_step = _mm256_set1_ps(f.half_min_subnormal);
  const __m256 min_normal = _mm256_castsi256_ps(_mm256_set1_epi32(int32_t(k.min_normal_bits)));
  const __m256 c = _mm256_castsi256_ps(_mm256_set1_epi32(int32_t(k.c_bits)));
  const __m256 near_subnormal = _mm256_set1_ps(k.near_subnormal);
  const __m128i count = _mm_cvtsi32_si128(k.drop);
  int64_t block = -1;  // the block whose scale s and reciprocal inv hold
  __m256 s = _mm256_setzero_ps(), inv = s, q = s;
  bool by_inv = false;
  // Eights without near ties in the inner loop; one with a near tie breaks out of it and is put
  // on the grid here, off the loop, whose constants then keep their registers.
  while (i + 8 <= n) {
    for (; i + 8 <= n; i += 8) {
      if (every == 1) {
        s = _mm256_loadu_ps(scales + i);
      } else if ((i >> shift) != block) {
        block = i >> shift;
        const float r = reciprocal_or_zero(scales[block]);
        s = _mm256_set1_ps(scales[block]), inv = _mm256_set1_ps(r), by_inv = r != 0.0f;
      }
      const __m256 xv = _mm256_loadu_ps(x + i);
      q = by_inv ? _mm256_mul_ps(xv, inv) : _mm256_div_ps(xv, s);
      const __m256 a = _mm256_min_ps(abs8(q), max);
      const __m256 normal = _mm256_cmp_ps(a, min_normal, _CMP_GE_OQ);
      const __m256i near_tie = _mm256_cmpeq_epi32(
          _mm256_and_si256(_mm256_add_epi32(_mm256_add_epi32(_mm256_castps_si256(a), round), near),
                           near_mask),
          _mm256_setzero_si256());
      if (_mm256_movemask_ps(_mm256_and_ps(normal, _mm256_castsi256_ps(near_tie)))) break;
      const int subnormal = subnormal_lanes(a, normal);
      if (subnormal) {
        const __m256 off = abs8(_mm256_sub_ps(a, _mm256_sub_ps(_mm256_add_ps(a, c), c)));
        if (_mm256_movemask_ps(_mm256_andnot_ps(
                normal,
                _mm256_cmp_ps(abs8(_mm256_sub_ps(off, half_step)), near_subnormal, _CMP_LE_OQ))))
          break;
      }
      store_fp8_codes8(a, normal, subnormal, q, round, count, c, codes + i);
    }
    if (i + 8 > n) break;
    const __m256 a = on_grid8(f, x + i, s);  // s and q are the eight's
    const __m256 normal = _mm256_cmp_ps(a, min_normal, _CMP_GE_OQ);
    store_fp8_codes8(a, normal, subnormal_lanes(a, normal), q, round, count, c, codes + i);
    i += 8;
  }
  return i;
}

// ---- AVX-512: 16 floats, 8 doubles per register -----------------------------------------------
// (GCC bug 105593 again: its _mm512_undefined_* idiom warns where the intrinsics are inlined.)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

GMMGEN_RUNS_AVX512 int64_t not_finite_avx512(const float* x, int64_t n, bool& bad) {
  const __m512i exp = _mm512_set1_epi32(0x7f800000);
  __mmask16 any = 0;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    any |= _mm512_cmpeq_epi32_mask(_mm512_and_si512(_mm512_loadu_si512(x + i), exp), exp);
  bad = any != 0;
  return i;
}

GMMGEN_RUNS_AVX512 int64_t widen_bf16_avx512(const uint16_t* x, int64_t n, float* out) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i));
    _mm512_storeu_si512(out + i, _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  return i;
}

GMMGEN_RUNS_AVX512 inline __m512 maxbits16(__m512 a, __m512 b) {  // as maxbits8
  return _mm512_castsi512_ps(_mm512_max_epu32(_mm512_castps_si512(a), _mm512_castps_si512(b)));
}

GMMGEN_RUNS_AVX512 int64_t amax_avx512(const float* x, int64_t n, float& m) {
  __m512 a = _mm512_set1_ps(m), b = a;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a = maxbits16(a, _mm512_abs_ps(_mm512_loadu_ps(x + i)));
    b = maxbits16(b, _mm512_abs_ps(_mm512_loadu_ps(x + i + 16)));
  }
  for (; i + 16 <= n; i += 16) a = maxbits16(a, _mm512_abs_ps(_mm512_loadu_ps(x + i)));
  m = std::bit_cast<float>(_mm512_reduce_max_epu32(_mm512_castps_si512(maxbits16(a, b))));
  return i;
}

GMMGEN_RUNS_AVX512 int64_t amax_columns_avx512(float* s, const float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(s + i,
                     maxbits16(_mm512_loadu_ps(s + i), _mm512_abs_ps(_mm512_loadu_ps(x + i))));
  return i;
}

GMMGEN_RUNS_AVX512 int64_t absmax_scales_avx512(float* m, int64_t n, double qmax, bool& finite) {
  const __m512d q = _mm512_set1_pd(qmax);
  __mmask8 bad = 0;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 a = _mm256_loadu_ps(m + i);
    bad |= _mm256_cmpgt_epi32_mask(_mm256_castps_si256(a), _mm256_set1_epi32(0x7f7fffff));
    __m256 s = _mm512_cvtpd_ps(_mm512_div_pd(_mm512_cvtps_pd(a), q));
    s = _mm256_mask_blend_ps(_mm256_cmp_ps_mask(s, _mm256_setzero_ps(), _CMP_EQ_OQ), s,
                             _mm256_set1_ps(std::numeric_limits<float>::denorm_min()));
    s = _mm256_mask_blend_ps(_mm256_cmp_ps_mask(a, _mm256_setzero_ps(), _CMP_EQ_OQ), s,
                             _mm256_set1_ps(1.0f));
    _mm256_storeu_ps(m + i, s);
  }
  finite = bad == 0;
  return i;
}

// The block maxima of 16 consecutive blocks of W vectors each from x: lane b of the result is
// max |x| over block b. Each block's vectors are folded into one, then the 16 are reduced in a
// tree (pairs of floats, pairs of pairs, then 128-bit lanes twice) that lands block b in lane b:
// about 3 instructions per block where a horizontal max per block took about 10.
template <int W>
GMMGEN_RUNS_AVX512 inline __m512 amax16_blocks(const float* x) {
  __m512 m[16], p[8], q[4], r[2];
  for (int b = 0; b < 16; ++b) {
    m[b] = _mm512_abs_ps(_mm512_loadu_ps(x + b * W * 16));
    for (int j = 1; j < W; ++j)
      m[b] = maxbits16(m[b], _mm512_abs_ps(_mm512_loadu_ps(x + (b * W + j) * 16)));
  }
  for (int i = 0; i < 8; ++i)  // per 128-bit lane: max of elements 0|2 and 1|3 of both blocks
    p[i] = maxbits16(_mm512_unpacklo_ps(m[2 * i], m[2 * i + 1]),
                     _mm512_unpackhi_ps(m[2 * i], m[2 * i + 1]));
  for (int i = 0; i < 4; ++i) {  // per 128-bit lane: blocks 4i .. 4i + 3, each over the lane
    const __m512d c = _mm512_castps_pd(p[2 * i]), d = _mm512_castps_pd(p[2 * i + 1]);
    q[i] = maxbits16(_mm512_castpd_ps(_mm512_unpacklo_pd(c, d)),
                     _mm512_castpd_ps(_mm512_unpackhi_pd(c, d)));
  }
  for (int i = 0; i < 2; ++i)  // 128-bit lanes 0|1 and 2|3 of q[2i], then of q[2i + 1]
    r[i] = maxbits16(_mm512_shuffle_f32x4(q[2 * i], q[2 * i + 1], 0x88),
                     _mm512_shuffle_f32x4(q[2 * i], q[2 * i + 1], 0xdd));
  return maxbits16(_mm512_shuffle_f32x4(r[0], r[1], 0x88), _mm512_shuffle_f32x4(r[0], r[1], 0xdd));
}

template <int W>
GMMGEN_RUNS_AVX512 int64_t amax_blocks_w(const float* x, int64_t n, float* s) {
  int64_t b = 0;
  for (; (b + 16) * W * 16 <= n; b += 16)
    _mm512_storeu_ps(s + b, maxbits16(_mm512_loadu_ps(s + b), amax16_blocks<W>(x + b * W * 16)));
  return b;
}

// amax_blocks for blocks of 16 to 128 elements, 16 blocks at a time; returns the blocks done.
GMMGEN_RUNS_AVX512 int64_t amax_blocks_avx512(const float* x, int64_t n, int64_t block, float* s) {
  switch (block) {
    case 16:
      return amax_blocks_w<1>(x, n, s);
    case 32:
      return amax_blocks_w<2>(x, n, s);
    case 64:
      return amax_blocks_w<4>(x, n, s);
    case 128:
      return amax_blocks_w<8>(x, n, s);
    default:
      return 0;  // longer blocks: one horizontal max per block costs little
  }
}

GMMGEN_RUNS_AVX512 inline __m256i codes8(const IntRun& r, __m256 x, __m512d s) {
  __m512d v = _mm512_cvtps_pd(x);
  if (r.fixed) v = _mm512_min_pd(_mm512_max_pd(v, _mm512_set1_pd(r.lo)), _mm512_set1_pd(r.hi));
  v = _mm512_div_pd(v, s);
  const __m512d q = _mm512_set1_pd(r.qmax);
  v = _mm512_min_pd(_mm512_max_pd(v, _mm512_sub_pd(_mm512_setzero_pd(), q)), q);
  return _mm512_cvtpd_epi32(_mm512_roundscale_pd(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

// The sixteen codes of x[0, 16) from f64 quotients, by s_lo for the first eight, s_hi for the rest.
GMMGEN_RUNS_AVX512 inline __m512i codes16(const IntRun& r, const float* x, __m512d s_lo,
                                          __m512d s_hi) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(codes8(r, _mm256_loadu_ps(x), s_lo)),
                            codes8(r, _mm256_loadu_ps(x + 8), s_hi), 1);
}

// The sixteen codes of x[i, i + 16) (encode_int's rules) into codes: as rounded8, f32 quotients
// (x * (1 / s) where a normal scale is shared) unless one is near a half-integer, else f64 ones.
// Sixteen f32 quotients clamped to [-q, q] (q: qmax in every lane) and rounded, as int32 codes;
// near_tie gains the lanes whose rounding step is kNearHalf or more (as rounded8).
GMMGEN_RUNS_AVX512 inline __m512i rounded16(__m512 q, __m512 quotient, __mmask16& near_tie) {
  const __m512 v = _mm512_min_ps(_mm512_max_ps(quotient, _mm512_sub_ps(_mm512_setzero_ps(), q)), q);
  const __m512 rounded = _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  near_tie |= _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_sub_ps(v, rounded)),
                                 _mm512_set1_ps(kNearHalf), _CMP_GE_OQ);
  return _mm512_cvtps_epi32(rounded);
}

GMMGEN_RUNS_AVX512 void encode16_avx512(const IntRun& r, const float* x, const float* scales,
                                        bool per_column, int shift, int64_t i, uint8_t* codes) {
  const float sc = per_column ? 0.0f : scales[i >> shift];
  __m512i c32;
  __mmask16 tie = 0;
  if (!r.fixed) {
    const __m512 xv = _mm512_loadu_ps(x + i);
    const float inv = per_column ? 0.0f : reciprocal_or_zero(sc);
    c32 = rounded16(_mm512_set1_ps(float(r.qmax)),
                    per_column    ? _mm512_div_ps(xv, _mm512_loadu_ps(scales + i))
                    : inv != 0.0f ? _mm512_mul_ps(xv, _mm512_set1_ps(inv))
                                  : _mm512_div_ps(xv, _mm512_set1_ps(sc)),
                    tie);
  }
  if (r.fixed || tie) {
    const __m512d s1 = _mm512_set1_pd(double(sc));
    c32 = codes16(r, x + i, per_column ? _mm512_cvtps_pd(_mm256_loadu_ps(scales + i)) : s1,
                  per_column ? _mm512_cvtps_pd(_mm256_loadu_ps(scales + i + 8)) : s1);
  }
  const __m128i b = _mm512_cvtepi32_epi8(c32);
  if (r.bits == 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + i), b);
  else
    _mm_storel_epi64(reinterpret_cast<__m128i*>(codes + i / 2), nibbles(b));
}

// encode_int 64 codes at a time where runs of 16 or more share a scale, under absmax: products by
// the reciprocals of up to 256 blocks' scales at a time (one vector division per 16 blocks),
// packed and stored whole. A sixteen holding a near tie takes its codes from f64 quotients
// (codes8; activations that are bf16 values hit near ties often: when a group of 64 went sixteen
// at a time, i8 block:32 took twice as long on them); a segment with a scale too small for a
// reciprocal goes sixteen at a time. Returns the elements done (a multiple of 64).
GMMGEN_RUNS_AVX512 int64_t encode_int_shared_avx512(const IntRun& r, const float* x,
                                                    const float* scales, int shift, int64_t n,
                                                    uint8_t* codes) {
  constexpr int64_t kBlocks = 256;
  // qmax read once: the code stores may alias r for all the compiler knows.
  const __m512 q = _mm512_set1_ps(float(r.qmax)), one = _mm512_set1_ps(1.0f);
  const __m512 min_normal = _mm512_set1_ps(std::numeric_limits<float>::min());
  // packs_epi32 then packs_epi16 leave lane l holding elements 4l..4l+3 of each of the four
  // vectors in turn; this puts every vector's sixteen back in order.
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  alignas(64) float inv[kBlocks];
  const int64_t whole = n / 64 * 64;
  int64_t i = 0;
  while (i < whole) {
    const int64_t b0 = i >> shift, b1 = std::min(((whole - 1) >> shift) + 1, b0 + kBlocks);
    const int64_t end = std::min(whole, b1 << shift);
    bool small = false;
    for (int64_t k = 0; k < b1 - b0; k += 16) {
      const __mmask16 m =
          b1 - b0 - k >= 16 ? __mmask16(0xffff) : __mmask16((1u << (b1 - b0 - k)) - 1);
      const __m512 sv = _mm512_maskz_loadu_ps(m, scales + b0 + k);
      small = small || _mm512_mask_cmp_ps_mask(m, sv, min_normal, _CMP_LT_OQ) != 0;
      _mm512_store_ps(inv + k, _mm512_maskz_div_ps(m, one, sv));
    }
    if (small) {
      for (; i < end; i += 16) encode16_avx512(r, x, scales, false, shift, i, codes);
      continue;
    }
    for (; i < end; i += 64) {
      __m512i c[4];
      __mmask16 tie[4] = {0, 0, 0, 0};
      for (int j = 0; j < 4; ++j)
        c[j] = rounded16(q,
                         _mm512_mul_ps(_mm512_loadu_ps(x + i + 16 * j),
                                       _mm512_set1_ps(inv[((i + 16 * j) >> shift) - b0])),
                         tie[j]);
      for (int j = 0; j < 4; ++j) {
        if (!tie[j]) continue;
        // A sixteen shares one scale here (runs of 16 or more, i a multiple of 64).
        const int64_t at = i + 16 * j;
        const __m512d sd = _mm512_set1_pd(double(scales[at >> shift]));
        c[j] = codes16(r, x + at, sd, sd);
      }
      const __m512i b = _mm512_permutexvar_epi32(
          order,
          _mm512_packs_epi16(_mm512_packs_epi32(c[0], c[1]), _mm512_packs_epi32(c[2], c[3])));
      if (r.bits == 8) {
        _mm512_storeu_si512(codes + i, b);
      } else {  // as nibbles: each pair of codes into one byte, the first in the low nibble
        const __m512i lo = _mm512_and_si512(b, _mm512_set1_epi16(0x000f));
        const __m512i hi = _mm512_srli_epi16(_mm512_and_si512(b, _mm512_set1_epi16(0x0f00)), 4);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes + i / 2),
                            _mm512_cvtepi16_epi8(_mm512_or_si512(lo, hi)));
      }
    }
  }
  return i;
}

GMMGEN_RUNS_AVX512 int64_t encode_int_avx512(const IntRun& r, const float* x, const float* scales,
                                             int64_t every, int64_t n, uint8_t* codes) {
  const bool per_column = every == 1;
  const int shift = __builtin_ctzll(uint64_t(every));  // a power of two: no division per group
  int64_t i = per_column || r.fixed ? 0 : encode_int_shared_avx512(r, x, scales, shift, n, codes);
  for (; i + 16 <= n; i += 16) encode16_avx512(r, x, scales, per_column, shift, i, codes);
  return i;
}

// A dual quantization of a dynamic activation sits in every training step's forward, and the
// scalar fp8 cast took 13 ns per element of it (4096 x 768 in 41 ms). encode_fp8_x8 runs
// encode_fp8's integer steps on the bits of eight f64 values at once, so that every code is the
// scalar's (QuantizeCodes.Fp8RowsMatchEncodeCode checks this wherever the host runs AVX-512).
GMMGEN_RUNS_AVX512 inline __m128i encode_fp8_x8(const Fp8Format& f, __m512d v) {
  const __m512i one = _mm512_set1_epi64(1), sign_bit = _mm512_set1_epi64(0x80);
  const __m512i sign = _mm512_and_si512(_mm512_srli_epi64(_mm512_castpd_si512(v), 56), sign_bit);
  // std::min(|v|, max) is |v| unless max < |v| (no NaN here: values and scales are finite).
  const __m512d a = _mm512_min_pd(_mm512_abs_pd(v), _mm512_set1_pd(double(f.max)));
  const __mmask8 nonzero =
      _mm512_cmp_pd_mask(a, _mm512_set1_pd(double(f.half_min_subnormal)), _CMP_GT_OQ);
  const __m512i u = _mm512_castpd_si512(a);
  const __m512i exp = _mm512_sub_epi64(_mm512_srli_epi64(u, 52), _mm512_set1_epi64(1023));
  const __m512i sig =
      _mm512_or_si512(_mm512_and_si512(u, _mm512_set1_epi64((int64_t(1) << 52) - 1)),
                      _mm512_set1_epi64(int64_t(1) << 52));
  const int frac = f.precision - 1;
  __m512i e = _mm512_max_epi64(exp, _mm512_set1_epi64(f.emin));
  // Lanes that round to zero may shift by 64 or more here: the shifts then give 0, unused.
  const __m512i shift = _mm512_add_epi64(_mm512_set1_epi64(52 - frac), _mm512_sub_epi64(e, exp));
  __m512i m = _mm512_srlv_epi64(sig, shift);
  const __m512i rest = _mm512_and_si512(sig, _mm512_sub_epi64(_mm512_sllv_epi64(one, shift), one));
  const __m512i half = _mm512_sllv_epi64(one, _mm512_sub_epi64(shift, one));
  const __mmask8 up = _mm512_cmpgt_epu64_mask(rest, half) |
                      (_mm512_cmpeq_epu64_mask(rest, half) & _mm512_test_epi64_mask(m, one));
  m = _mm512_mask_add_epi64(m, up, m, one);
  const __mmask8 carry = _mm512_cmpeq_epu64_mask(m, _mm512_set1_epi64(int64_t(1) << f.precision));
  m = _mm512_mask_srli_epi64(m, carry, m, 1);
  e = _mm512_mask_add_epi64(e, carry, e, one);
  const __m512i implicit = _mm512_set1_epi64(int64_t(1) << frac);
  const __m512i biased = _mm512_add_epi64(_mm512_sub_epi64(e, _mm512_set1_epi64(f.emin)), one);
  const __m512i normal = _mm512_or_si512(_mm512_sllv_epi64(biased, _mm512_set1_epi64(frac)),
                                         _mm512_sub_epi64(m, implicit));
  const __m512i code = _mm512_mask_blend_epi64(_mm512_cmplt_epu64_mask(m, implicit), normal, m);
  return _mm512_cvtepi64_epi8(_mm512_mask_or_epi64(sign, nonzero, sign, code));
}

// encode_fp8_avx2 sixteen at a time from x's start (blocks are powers of two >= 16, so a sixteen
// never straddles two); a sixteen holding a near tie is cast from its f64 quotients
// (encode_fp8_x8). Returns n rounded down to sixteens.
GMMGEN_RUNS_AVX512 int64_t encode_fp8_avx512(const Fp8Format& f, const float* x,
                                             const float* scales, int64_t every, int64_t n,
                                             uint8_t* codes) {
  const int shift = __builtin_ctzll(uint64_t(every));  // a power of two: no division per group
  const Fp8Steps k(f);
  const int drop = k.drop;
  const __m512i round = _mm512_set1_epi32(k.round), near = _mm512_set1_epi32(kFp8Near);
  const __m512i near_mask = _mm512_set1_epi32(k.near_mask), sign_bit = _mm512_set1_epi32(0x80);
  const __m512 max = _mm512_set1_ps(f.max);
  const __m512 min_normal = _mm512_castsi512_ps(_mm512_set1_epi32(int32_t(k.min_normal_bits)));
  const __m512 c = _mm512_castsi512_ps(_mm512_set1_epi32(int32_t(k.c_bits)));
  const __m512 half_step = _mm512_set1_ps(f.half_min_subnormal);
  const __m512 near_subnormal = _mm512_set1_ps(k.near_subnormal);
  int64_t block = -1;  // the block whose scale s and reciprocal inv hold
  __m512 s = _mm512_setzero_ps(), inv = s;
  bool by_inv = false;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    if (every == 1) {
      s = _mm512_loadu_ps(scales + i);
    } else if ((i >> shift) != block) {
      block = i >> shift;
      const float r = reciprocal_or_zero(scales[block]);
      s = _mm512_set1_ps(scales[block]), inv = _mm512_set1_ps(r), by_inv = r != 0.0f;
    }
    const __m512 xv = _mm512_loadu_ps(x + i);
    const __m512 q = by_inv ? _mm512_mul_ps(xv, inv) : _mm512_div_ps(xv, s);
    const __m512 a = _mm512_min_ps(_mm512_abs_ps(q), max);
    const __mmask16 normal = _mm512_cmp_ps_mask(a, min_normal, _CMP_GE_OQ);
    const __m512i v = _mm512_add_epi32(_mm512_castps_si512(a), round);
    __mmask16 near_tie = _mm512_mask_testn_epi32_mask(normal, _mm512_add_epi32(v, near), near_mask);
    __m512i code = _mm512_maskz_srli_epi32(normal, v, drop);
    const __m512i u = _mm512_castps_si512(a);
    if ((normal | _mm512_testn_epi32_mask(u, u)) != 0xFFFF) {  // subnormal results
      const __m512 t = _mm512_add_ps(a, c);
      const __m512 off = _mm512_abs_ps(_mm512_sub_ps(a, _mm512_sub_ps(t, c)));
      near_tie |= _mm512_mask_cmp_ps_mask(_knot_mask16(normal),
                                          _mm512_abs_ps(_mm512_sub_ps(off, half_step)),
                                          near_subnormal, _CMP_LE_OQ);
      code = _mm512_mask_blend_epi32(
          normal, _mm512_sub_epi32(_mm512_castps_si512(t), _mm512_castps_si512(c)), code);
    }
    if (near_tie) {  // the sixteen from their f64 quotients, as encode_fp8_exact_avx512
      const __m512d s_lo = _mm512_cvtps_pd(_mm512_castps512_ps256(s));
      const __m512d s_hi = _mm512_cvtps_pd(_mm512_extractf32x8_ps(s, 1));
      const __m128i first =
          encode_fp8_x8(f, _mm512_div_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(xv)), s_lo));
      const __m128i second =
          encode_fp8_x8(f, _mm512_div_pd(_mm512_cvtps_pd(_mm512_extractf32x8_ps(xv, 1)), s_hi));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + i), _mm_unpacklo_epi64(first, second));
      continue;
    }
    // code | (q's sign bit, moved to bit 7)
    code = _mm512_ternarylogic_epi32(code, _mm512_srli_epi32(_mm512_castps_si512(q), 24), sign_bit,
                                     0xF8);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + i), _mm512_cvtepi32_epi8(code));
  }
  return i;
}

// encode_levels sixteen at a time: two groups of eight f64 quotients, each code found by a
// branch-free binary search over the sixteen thresholds, then mapped.
GMMGEN_RUNS_AVX512 int64_t encode_levels_avx512(const LevelRun& r, const Clip& clip, const float* x,
                                                const float* scales, int64_t every, int64_t n,
                                                uint8_t* codes) {
  const __m512d t_lo = _mm512_load_pd(r.thresholds), t_hi = _mm512_load_pd(r.thresholds + 8);
  const __m512i map_lo = _mm512_load_si512(r.map), map_hi = _mm512_load_si512(r.map + 8);
  const __m512d lo = _mm512_set1_pd(clip.lo), hi = _mm512_set1_pd(clip.hi);
  const bool per_column = every == 1;
  const int shift = __builtin_ctzll(uint64_t(every));  // a power of two: no division per group
  // The search spans the 2 * first_step > count entries from t[0] (those past count are +inf).
  const int64_t first_step = int64_t(std::bit_floor(unsigned(std::max(r.count, 1))));
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512i c[2];
    for (int j = 0; j < 2; ++j) {
      const int64_t at = i + 8 * j;
      __m512d v = _mm512_cvtps_pd(_mm256_loadu_ps(x + at));
      if (clip.fixed) {  // std::clamp, as encode_fp8_exact
        v = _mm512_mask_blend_pd(_mm512_cmp_pd_mask(v, lo, _CMP_LT_OQ), v, lo);
        v = _mm512_mask_blend_pd(_mm512_cmp_pd_mask(hi, v, _CMP_LT_OQ), v, hi);
      }
      const __m512d s = per_column ? _mm512_cvtps_pd(_mm256_loadu_ps(scales + at))
                                   : _mm512_set1_pd(double(scales[at >> shift]));
      v = _mm512_div_pd(v, s);
      __m512i k = _mm512_setzero_si512();
      for (int64_t step = first_step; step > 0; step /= 2) {
        const __m512i probe = _mm512_add_epi64(k, _mm512_set1_epi64(step - 1));
        const __m512d m = _mm512_permutex2var_pd(t_lo, probe, t_hi);
        k = _mm512_mask_add_epi64(k, _mm512_cmp_pd_mask(v, m, _CMP_GT_OQ), k,
                                  _mm512_set1_epi64(step));
      }
      c[j] = _mm512_permutex2var_epi64(map_lo, k, map_hi);
    }
    const __m128i b = _mm_unpacklo_epi64(_mm512_cvtepi64_epi8(c[0]), _mm512_cvtepi64_epi8(c[1]));
    if (r.bits == 4) {
      _mm_storel_epi64(reinterpret_cast<__m128i*>(codes + i / 2), nibbles(b));
    } else {  // four codes per byte: c0 + 4 c1 per pair, then (c0 + 4 c1) + 16 (c2 + 4 c3)
      const __m128i pairs = _mm_maddubs_epi16(b, _mm_set1_epi16(0x0401));
      const __m128i quads = _mm_madd_epi16(pairs, _mm_set1_epi32(0x00100001));
      const __m128i w = _mm_packus_epi32(quads, quads);
      const int32_t packed = _mm_cvtsi128_si32(_mm_packus_epi16(w, w));
      std::memcpy(codes + i / 4, &packed, 4);
    }
  }
  return i;
}

GMMGEN_RUNS_AVX512 int64_t encode_fp8_exact_avx512(const Fp8Format& f, const Clip& clip,
                                                   const float* x, const float* scales,
                                                   bool per_column, int64_t n, uint8_t* codes) {
  const __m512d lo = _mm512_set1_pd(clip.lo), hi = _mm512_set1_pd(clip.hi);
  __m512d s = _mm512_set1_pd(double(scales[0]));
  int64_t c = 0;
  for (; c + 8 <= n; c += 8) {
    __m512d v = _mm512_cvtps_pd(_mm256_loadu_ps(x + c));
    // std::clamp: lo when v < lo, hi when hi < v, else v itself (a zero keeps its sign).
    if (clip.fixed) {
      v = _mm512_mask_blend_pd(_mm512_cmp_pd_mask(v, lo, _CMP_LT_OQ), v, lo);
      v = _mm512_mask_blend_pd(_mm512_cmp_pd_mask(hi, v, _CMP_LT_OQ), v, hi);
    }
    if (per_column) s = _mm512_cvtps_pd(_mm256_loadu_ps(scales + c));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(codes + c), encode_fp8_x8(f, _mm512_div_pd(v, s)));
  }
  return c;
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#endif  // GMMGEN_QUANT_RUNS_X86

}  // namespace

VectorCode vector_code() {
  return level();
}

void cap_vector_code(VectorCode most) {
  level_cap.store(most, std::memory_order_relaxed);
}

bool any_not_finite(const float* x, int64_t n) {
  bool bad = false;
  int64_t i = 0;
#ifdef GMMGEN_QUANT_RUNS_X86
  if (level() == Level::kAvx512)
    i = not_finite_avx512(x, n, bad);
  else if (level() == Level::kAvx2)
    i = not_finite_avx2(x, n, bad);
#endif
  for (; i < n && !bad; ++i) bad = !std::isfinite(x[i]);
  return bad;
}

void widen_bf16(const uint16_t* x, int64_t n, float* out) {
  int64_t i = 0;
#ifdef GMMGEN_QUANT_RUNS_X86
  if (level() == Level::kAvx512)
    i = widen_bf16_avx512(x, n, out);
  else if (level() == Level::kAvx2)
    i = widen_bf16_avx2(x, n, out);
#endif
  for (; i < n; ++i) out[i] = std::bit_cast<float>(uint32_t(x[i]) << 16);
}

float max_magnitude(float m, float v) {
  return std::bit_cast<float>(
      std::max(std::bit_cast<uint32_t>(m), std::bit_cast<uint32_t>(v) & 0x7fffffffu));
}

float amax(const float* x, int64_t n, float init) {
  float m = init;
  int64_t i = 0;
#ifdef GMMGEN_QUANT_RUNS_X86
  if (level() == Level::kAvx512)
    i = amax_avx512(x, n, m);
  else if (level() == Level::kAvx2)
    i = amax_avx2(x, n, m);
#endif
  for (; i < n; ++i) m = max_magnitude(m, x[i]);
  return m;
}

void amax_columns(float* s, const float* x, int64_t n) {
  int64_t i = 0;
#ifdef GMMGEN_QUANT_RUNS_X86
  if (level() == Level::kAvx512)
    i = amax_columns_avx512(s, x, n);
  else if (level() == Level::kAvx2)
    i = amax_columns_avx2(s, x, n);
#endif
  for (; i < n; ++i) s[i] = max_magnitude(s[i], x[i]);
}

void amax_blocks(const float* x, int64_t n, int64_t block, float* s) {
  int64_t b = 0;
#ifdef GMMGEN_QUANT_RUNS_X86
  if (level() == Level::kAvx512)
    b = amax_blocks_avx512(x, n, block, s);
  else if (level() == Level::kAvx2)
    b = amax_blocks_avx2(x, n, block, s);
#endif
  for (; b * block < n; ++b) s[b] = amax(x + b * block, std::min(block, n - b * block), s[b]);
}

int64_t absmax_scales(float* m, int64_t n, double qmax, bool& finite) {
  finite = true;
#ifdef GMMGEN_QUANT_RUNS_X86
  if (level() == Level::kAvx512) return absmax_scales_avx512(m, n, qmax, finite);
  if (level() == Level::kAvx2) return absmax_scales_avx2(m, n, qmax, finite);
#endif
  (void)m, (void)n, (void)qmax;
  return 0;
}

bool has_fp8_exact() {
  return level() == Level::kAvx512;
}

int64_t encode_fp8_exact(const Fp8Format& f, const Clip& clip, const float* x, const float* scales,
                         bool per_column, int64_t n, uint8_t* codes) {
#ifdef GMMGEN_QUANT_RUNS_X86
  if (level() == Level::kAvx512)
    return encode_fp8_exact_avx512(f, clip, x, scales, per_column, n, codes);
#endif
  (void)f, (void)clip, (void)x, (void)scales, (void)per_column, (void)n, (void)codes;
  return 0;
}

int64_t encode_levels(const LevelRun& r, const Clip& clip, const float* x, const float* scales,
                      int64_t every, int64_t n, uint8_t* codes) {
#ifdef GMMGEN_QUANT_RUNS_X86
  if (level() == Level::kAvx512) return encode_levels_avx512(r, clip, x, scales, every, n, codes);
#endif
  (void)r, (void)clip, (void)x, (void)scales, (void)every, (void)n, (void)codes;
  return 0;
}

bool has_fp8_runs() {
  return level() != Level::kScalar;
}

int64_t encode_fp8(const Fp8Format& f, const float* x, const float* scales, int64_t every,
                   int64_t n, uint8_t* codes) {
  int64_t i = 0;
#ifdef GMMGEN_QUANT_RUNS_X86
  if (level() == Level::kAvx512) i = encode_fp8_avx512(f, x, scales, every, n, codes);
  if (level() != Level::kScalar) i = encode_fp8_avx2(f, x, scales, every, i, n, codes);
#endif
  (void)f, (void)x, (void)scales, (void)every, (void)n, (void)codes;
  return i;
}

int64_t encode_int(const IntRun& r, const float* x, const float* scales, int64_t every, int64_t n,
                   uint8_t* codes) {
#ifdef GMMGEN_QUANT_RUNS_X86
  if (level() == Level::kAvx512) return encode_int_avx512(r, x, scales, every, n, codes);
  if (level() == Level::kAvx2) return encode_int_avx2(r, x, scales, every, n, codes);
#endif
  (void)r, (void)x, (void)scales, (void)every, (void)n, (void)codes;
  return 0;
}

}  // namespace gmmgen::quant_runs
