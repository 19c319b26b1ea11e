// Group-size distributions for checks and benchmarks: how the M rows split among G groups.
#pragma once

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

}  // namespace gmmgen
