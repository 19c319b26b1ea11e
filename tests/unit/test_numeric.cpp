// Host-side rounding and storage formats, checked against hand-computed values and against the
// hardware's float conversion.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "gmmgen/verify/distributions.h"
#include "gmmgen/verify/numeric.h"

namespace gmmgen {
namespace {

TEST(Numeric, RoundToBf16TiesToEven) {
  // bf16 keeps 8 significant bits: values between 1 and 2 step by 2^-7.
  EXPECT_EQ(1.0, round_to(DType::kBF16, 1.0 + std::ldexp(1.0, -8)));  // tie -> even (1.0)
  EXPECT_EQ(1.0 + std::ldexp(2.0, -7),
            round_to(DType::kBF16, 1.0 + std::ldexp(3.0, -8)));  // tie -> even
  EXPECT_EQ(1.0 + std::ldexp(1.0, -7), round_to(DType::kBF16, 1.0 + std::ldexp(1.0, -8) + 1e-9));
  EXPECT_TRUE(std::isinf(round_to(DType::kBF16, 3.4e38)));
}

TEST(Numeric, RoundToF16RangeAndSubnormals) {
  EXPECT_EQ(65504.0, round_to(DType::kF16, 65519.0));
  EXPECT_TRUE(std::isinf(round_to(DType::kF16, 65520.0)));  // tie at the top rounds to infinity
  EXPECT_EQ(std::ldexp(1.0, -24), round_to(DType::kF16, std::ldexp(1.5, -25)));
  EXPECT_EQ(0.0, round_to(DType::kF16, std::ldexp(1.0, -25)));  // tie -> even (zero)
  EXPECT_EQ(std::ldexp(3.0, -24),
            round_to(DType::kF16, std::ldexp(2.5, -24)) + std::ldexp(1.0, -24));
}

TEST(Numeric, RoundToAndStoreF32MatchTheHardware) {
  std::mt19937_64 rng(3);
  for (int i = 0; i < 100000; ++i) {
    const double x = std::ldexp(uniform_real(rng, -4.0, 4.0), int(rng() % 200) - 100);
    EXPECT_EQ(double(float(x)), round_to(DType::kF32, x)) << x;
    float stored = 0;
    store_element(DType::kF32, &stored, 0, x);
    EXPECT_EQ(round_to(DType::kF32, x), double(stored)) << x;
  }
}

// round_to against scaling, nearbyint and scaling back, on every float format: random values
// over the whole exponent range (subnormals and overflow included) and exact ties.
TEST(Numeric, RoundToMatchesScaledNearbyint) {
  for (DType d : {DType::kF32, DType::kBF16, DType::kF16, DType::kF8E4M3, DType::kF8E5M2}) {
    const DTypeInfo& info = dtype_info(d);
    auto reference = [&](double x) {
      const int e = std::max(std::ilogb(x), info.emin);
      const double r =
          std::ldexp(std::nearbyint(std::ldexp(x, info.precision - 1 - e)), e - info.precision + 1);
      return std::fabs(r) > info.max_finite ? std::copysign(HUGE_VAL, x) : r;
    };
    std::mt19937_64 rng(11);
    for (int i = 0; i < 200000; ++i) {
      double x = std::ldexp(uniform_real(rng, -2.0, 2.0), int(rng() % 320) - 160);
      if (i % 4 == 0) {  // a tie: halfway between two neighbours of the format
        const int e = std::max(std::ilogb(x), info.emin);
        x = std::ldexp(std::floor(std::ldexp(x, info.precision - 1 - e)) + 0.5,
                       e - info.precision + 1);
      }
      if (x == 0.0) continue;
      ASSERT_EQ(reference(x), round_to(d, x)) << to_string(d) << " x=" << x;
    }
  }
}

TEST(Numeric, StoreLoadRoundTripsEveryF16AndBf16Pattern) {
  for (DType d : {DType::kF16, DType::kBF16}) {
    for (uint32_t bits = 0; bits < 65536; ++bits) {
      uint16_t h = uint16_t(bits), back = 0;
      const double v = load_element(d, &h, 0);
      store_element(d, &back, 0, v);
      if (std::isnan(v)) {
        EXPECT_TRUE(std::isnan(load_element(d, &back, 0)));
      } else {
        EXPECT_EQ(h, back) << to_string(d) << " pattern " << bits;
      }
    }
  }
}

}  // namespace
}  // namespace gmmgen
