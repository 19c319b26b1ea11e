// The codes of the quantized dtypes (docs/quantization.md): how an element is stored and what value
// its code stands for. The one place that says it: the kernels' dtype partials are rendered from
// these facts (the NF4 levels are written into them), and the runtime's quantizers, the float64
// reference and the checker decode with these functions.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "gmmgen/spec.h"

namespace gmmgen::codes {

// The 16 NormalFloat levels of nf4, code 0..15: QLoRA's NF4 levels (quantiles of N(0, 1) scaled
// to [-1, 1], an exact zero at code 7) rounded to bf16, so that every nf4 value is a bf16 value
// and nf4 x bf16 products run on the bf16 pair dot product exactly. Rounding moves a level by at
// most 0.31% (code 2: -0.52507 -> -0.52344), a tenth of what bf16 compute after dequantization
// (bitsandbytes, the seeds) already rounds each weight by, and far inside the gaps between levels.
inline constexpr float kNf4Levels[16] = {
    -1.0f,          -0.6953125f, -0.5234375f,    -0.39453125f,  -0.28515625f, -0.1845703125f,
    -0.0908203125f, 0.0f,        0.07958984375f, 0.1611328125f, 0.24609375f,  0.337890625f,
    0.44140625f,    0.5625f,     0.72265625f,    1.0f};

// Elements per byte: 1 for 8-bit codes, 2 for i4/nf4 (element 2j in the low nibble), 4 for t2
// (element 4j in the lowest two bits). Packing runs along the operand's contiguous axis.
inline int elements_per_byte(DType d) {
  return bits_of(d) >= 8 ? 1 : 8 / bits_of(d);
}

// Whether d stores codes that need the dtype's decoding: every dtype of 8 bits or fewer (fp8,
// integers, codebooks); f32, bf16 and f16 are plain values.
inline bool is_quantized(DType d) {
  return dtype_info(d).bits <= 8;
}

// Whether a spec has an operand of codes (a quantized kernel).
inline bool any_quantized(const KernelSpec& s) {
  return is_quantized(s.lhs) || is_quantized(s.rhs);
}

// fp8 e4m3 and e5m2: codes that are floating-point values of their own.
inline bool is_fp8(DType d) {
  return is_quantized(d) && dtype_info(d).kind == DTypeKind::kFloat;
}

// Whether codes of d carry no meaning without scales (integer and codebook codes; fp8 values
// stand on their own).
inline bool needs_scales(DType d) {
  return dtype_info(d).kind != DTypeKind::kFloat;
}

// The largest |decoded value| of a quantized dtype (the table's largest finite value): what
// absmax calibration maps the block's amax to. Infinite for plain float dtypes.
inline double qmax(DType d) {
  return is_quantized(d) ? dtype_info(d).max_finite : std::numeric_limits<double>::infinity();
}

// The code of element i of a buffer of codes of `bits` bits (8, 4 or 2).
inline uint8_t get_code(const void* base, int64_t i, int bits) {
  const uint8_t* b = static_cast<const uint8_t*>(base);
  if (bits == 8) return b[i];
  const int per = 8 / bits;
  return uint8_t((b[i / per] >> ((i % per) * bits)) & ((1 << bits) - 1));
}
inline void set_code(void* base, int64_t i, int bits, uint8_t code) {
  uint8_t* b = static_cast<uint8_t*>(base);
  if (bits == 8) {
    b[i] = code;
    return;
  }
  const int per = 8 / bits, shift = int(i % per) * bits;
  const uint8_t mask = uint8_t(((1 << bits) - 1) << shift);
  b[i / per] = uint8_t((b[i / per] & ~mask) | ((code << shift) & mask));
}

// The value a code stands for (before scaling). i8: two's complement, [-127, 127] (-128 is never
// produced and decodes as -128); i4: two's complement nibble, [-7, 7]; t2: 00 = 0, 01 = +1,
// 10 = -1 (11 is never produced and decodes as 0); nf4: kNf4Levels[code]; f8e4m3 (OCP e4m3fn:
// bias 7, no infinities, S.1111.111 is NaN) and f8e5m2 (OCP e5m2: bias 15, IEEE-like).
inline float decode(DType d, uint8_t c) {
  switch (d) {
    case DType::kI8:
      return float(int8_t(c));
    case DType::kI4:
      return float((c & 8) ? int(c & 15) - 16 : int(c & 15));
    case DType::kT2:
      return (c & 3) == 1 ? 1.0f : (c & 3) == 2 ? -1.0f : 0.0f;
    case DType::kNF4:
      return kNf4Levels[c & 15];
    case DType::kF8E4M3: {
      const int e = (c >> 3) & 15, m = c & 7;
      float v;
      if (e == 15 && m == 7)
        v = std::numeric_limits<float>::quiet_NaN();
      else if (e == 0)
        v = std::ldexp(float(m), -9);  // subnormal: m * 2^-6 / 8
      else
        v = std::ldexp(float(8 + m), e - 10);
      return (c & 0x80) ? -v : v;
    }
    case DType::kF8E5M2: {
      const int e = (c >> 2) & 31, m = c & 3;
      float v;
      if (e == 31)
        v = m ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
      else if (e == 0)
        v = std::ldexp(float(m), -16);  // subnormal: m * 2^-14 / 4
      else
        v = std::ldexp(float(4 + m), e - 17);
      return (c & 0x80) ? -v : v;
    }
    default:
      return std::numeric_limits<float>::quiet_NaN();
  }
}

// Whether every value of dtype d is a bf16 value (bf16 itself, fp8, i8, i4, t2, and nf4, whose
// levels are rounded to bf16 above; not f16/f32), so that products with bf16 operands can use the
// pair dot product exactly.
inline bool bf16_exact(DType d) {
  if (d == DType::kBF16) return true;
  if (!is_quantized(d)) return false;
  for (int c = 0; c < (1 << dtype_info(d).bits); ++c) {
    const float v = decode(d, uint8_t(c));
    uint32_t u;
    std::memcpy(&u, &v, 4);
    if (u & 0xffffu) return false;
  }
  return true;
}

}  // namespace gmmgen::codes
