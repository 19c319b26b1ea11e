#include "gmmgen/verify/numeric.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
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

[[noreturn]] void unsupported(const char* function, DType d) {
  throw std::invalid_argument(std::string(function) + ": dtype " + std::string(to_string(d)));
}

[[noreturn]] void no_float_format(DType d) {
  throw std::invalid_argument("no host float format for dtype " + std::string(dtype_info(d).name));
}

// The formats, read from the dtype table once: the checker rounds every element it makes, so
// this path stays free of locals that live in memory (a sanitizer build pays for each).
const Format& format_of(DType d) {
  struct Table {
    std::array<Format, kNumDTypes> format{};
    std::array<bool, kNumDTypes> is_float{};
    Table() {
      for (const DTypeInfo& i : dtype_table()) {
        format[size_t(i.id)] = {i.precision, i.emin, i.max_finite};
        is_float[size_t(i.id)] = i.kind == DTypeKind::kFloat;
      }
    }
  };
  static const Table table;
  const size_t i = size_t(d);
  if (i >= size_t(kNumDTypes) || !table.is_float[i]) no_float_format(d);
  return table.format[i];
}

}  // namespace

size_t element_bytes(DType d) {
  const int bits = bits_of(d);
  if (bits < 8) throw std::invalid_argument("sub-byte dtype " + std::string(to_string(d)));
  return size_t(bits / 8);
}

double round_to(DType d, double x) {
  if (!std::isfinite(x) || x == 0.0) return x;
  const Format& f = format_of(d);
  const double inf = std::copysign(std::numeric_limits<double>::infinity(), x);
  if (std::fabs(x) >= 2 * f.max) return inf;
  // The format's values near x are the multiples of q = 2^s, s = e - p + 1 with e the exponent
  // of x (2^e <= |x| < 2^(e+1)), or emin below the normal range. M = 1.5 * 2^(52 + s) is a double
  // whose last significand bit has weight q, so x + M is rounded once, to nearest with ties to
  // even (the default mode), to a multiple of q, and subtracting M again is exact: the sum is
  // x rounded to the format. (|x| < 2^(s + p) is far inside M's binade.)
  const uint64_t bits = std::bit_cast<uint64_t>(x);
  const int biased = int((bits >> 52) & 0x7ff);
  const int ex = biased != 0 ? biased - 1023 : std::ilogb(x);
  const int e = ex > f.emin ? ex : f.emin;  // (std::max would take the two by address)
  const double m = std::bit_cast<double>((uint64_t(1023 + 52 + e - f.precision + 1) << 52) |
                                         (uint64_t(1) << 51));
  const double r = (x + m) - m;
  return std::fabs(r) > f.max ? inf : r;
}

double unit_roundoff(DType d) {
  return std::ldexp(1.0, -format_of(d).precision);
}

void store_element(DType d, void* base, int64_t i, double x) {
  if (d == DType::kF32) {  // the conversion rounds to nearest even, as round_to does
    static_cast<float*>(base)[i] = float(x);
    return;
  }
  const double r = round_to(d, x);
  switch (d) {
    case DType::kBF16: {
      const uint32_t u = std::bit_cast<uint32_t>(float(r));  // exact: r is a bf16 value
      static_cast<uint16_t*>(base)[i] = std::isnan(r) ? uint16_t(0x7fc0) : uint16_t(u >> 16);
      return;
    }
    case DType::kF16: {
      uint16_t h = 0;
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
      unsupported("store_element", d);
  }
}

double load_element(DType d, const void* base, int64_t i) {
  switch (d) {
    case DType::kF32:
      return static_cast<const float*>(base)[i];
    case DType::kBF16: {
      return std::bit_cast<float>(uint32_t(static_cast<const uint16_t*>(base)[i]) << 16);
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
      unsupported("load_element", d);
  }
}

}  // namespace gmmgen
