#include "gmmgen/verify/numeric.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>

namespace gmmgen {
namespace {

// The float format of a dtype (the dtype table's host format).
struct Format {
  int precision;  // significand bits, including the implicit one
  int emin;       // exponent of the smallest normal number
  double max;     // largest finite value
};

Format format_of(DType d) {
  const DTypeInfo& i = dtype_info(d);
  if (i.kind != DTypeKind::kFloat)
    throw std::invalid_argument("no host float format for dtype " + std::string(i.name));
  return {i.precision, i.emin, i.max_finite};
}

}  // namespace

size_t element_bytes(DType d) {
  const int bits = bits_of(d);
  if (bits < 8) throw std::invalid_argument("sub-byte dtype " + std::string(to_string(d)));
  return size_t(bits / 8);
}

double round_to(DType d, double x) {
  if (!std::isfinite(x) || x == 0.0) return x;
  const Format f = format_of(d);
  // Scale so that the last kept significand bit has weight 1, round (the default rounding mode
  // is to nearest, ties to even), and scale back. Below emin the spacing stays 2^(emin-p+1).
  const int e = std::max(std::ilogb(x), f.emin);
  const double r =
      std::ldexp(std::nearbyint(std::ldexp(x, f.precision - 1 - e)), e - f.precision + 1);
  if (std::fabs(r) > f.max) return std::copysign(std::numeric_limits<double>::infinity(), x);
  return r;
}

double unit_roundoff(DType d) {
  return std::ldexp(1.0, -format_of(d).precision);
}

void store_element(DType d, void* base, int64_t i, double x) {
  const double r = round_to(d, x);
  switch (d) {
    case DType::kF32:
      static_cast<float*>(base)[i] = float(r);
      return;
    case DType::kBF16: {
      const float f = float(r);  // exact: r is a bf16 value
      uint32_t u;
      std::memcpy(&u, &f, 4);
      static_cast<uint16_t*>(base)[i] = std::isnan(r) ? uint16_t(0x7fc0) : uint16_t(u >> 16);
      return;
    }
    case DType::kF16: {
      uint16_t h;
      if (std::isnan(r))
        h = 0x7e00;
      else if (std::isinf(r))
        h = r > 0 ? 0x7c00 : 0xfc00;
      else {
        const uint16_t sign = std::signbit(r) ? 0x8000 : 0;
        const double a = std::fabs(r);
        if (a < std::ldexp(1.0, -14)) {  // subnormal or zero: a = mant * 2^-24
          h = uint16_t(sign | uint16_t(std::ldexp(a, 24)));
        } else {
          const int e = std::ilogb(a);  // 2^e <= a < 2^(e+1)
          const uint16_t mant = uint16_t(std::ldexp(a, 10 - e) - 1024.0);
          h = uint16_t(sign | uint16_t((e + 15) << 10) | mant);
        }
      }
      static_cast<uint16_t*>(base)[i] = h;
      return;
    }
    default:
      throw std::invalid_argument("store_element: dtype " + std::string(to_string(d)));
  }
}

double load_element(DType d, const void* base, int64_t i) {
  switch (d) {
    case DType::kF32:
      return static_cast<const float*>(base)[i];
    case DType::kBF16: {
      const uint32_t u = uint32_t(static_cast<const uint16_t*>(base)[i]) << 16;
      float f;
      std::memcpy(&f, &u, 4);
      return f;
    }
    case DType::kF16: {
      const uint16_t h = static_cast<const uint16_t*>(base)[i];
      const int exp = (h >> 10) & 31, mant = h & 1023;
      double v;
      if (exp == 0)
        v = std::ldexp(double(mant), -24);
      else if (exp == 31)
        v = mant ? std::numeric_limits<double>::quiet_NaN()
                 : std::numeric_limits<double>::infinity();
      else
        v = std::ldexp(double(1024 + mant), exp - 25);
      return (h & 0x8000) ? -v : v;
    }
    default:
      throw std::invalid_argument("load_element: dtype " + std::string(to_string(d)));
  }
}

}  // namespace gmmgen
