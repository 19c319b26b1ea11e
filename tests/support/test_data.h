// Test helpers for data: random operands, the f32 unit roundoff.
#pragma once
#include <cstdint>
#include <random>
#include <vector>

#include "gmmgen/verify/distributions.h"

namespace gmmgen::testing {

inline constexpr double kF32Roundoff = 0x1p-24;

// `count` normally distributed floats, mean 0, standard deviation `amp`.
inline std::vector<float> randn(int64_t count, double amp, std::mt19937_64& rng) {
  std::vector<float> x(static_cast<size_t>(count));
  for (auto& v : x) v = float(normal(rng, amp));
  return x;
}

}  // namespace gmmgen::testing
