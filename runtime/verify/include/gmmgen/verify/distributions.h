// Random draws for checks and benchmarks: how the M rows split among G groups, and
// uniform and normal values.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace gmmgen {

enum class Distribution {
  kUniform,      // sizes differ by at most one, sum = rows
  kSkewedEmpty,  // a few large groups, many empty ones (first and last included)
  kManyTiny,     // sizes 0..3
  kRandom,       // uniformly random partition of rows (may be empty anywhere)
};
const char* to_string(Distribution d);

// group_sizes of g groups summing to exactly `rows`.
std::vector<int32_t> make_group_sizes(Distribution d, int32_t g, int64_t rows,
                                      std::mt19937_64& rng);

// A uniform value in [lo, hi) from one draw: its top 53 bits as a fraction. The same values under
// every standard library (std::uniform_real_distribution's are the library's own), and cheap in
// unoptimized and sanitized builds, where libstdc++'s takes a long-double logarithm per value.
inline double uniform_real(std::mt19937_64& rng, double lo, double hi) {
  return lo + (hi - lo) * (double(rng() >> 11) * 0x1p-53);
}

// A normal value, mean 0, from two draws (Box-Muller, one of its pair), on the same terms.
inline double normal(std::mt19937_64& rng, double stddev) {
  const double u = 1.0 - uniform_real(rng, 0.0, 1.0);  // in (0, 1]
  const double two_pi = 6.283185307179586;
  return stddev * std::sqrt(-2.0 * std::log(u)) * std::cos(uniform_real(rng, 0.0, two_pi));
}

}  // namespace gmmgen
