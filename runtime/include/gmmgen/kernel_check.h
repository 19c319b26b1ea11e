// Checks a compiled gmm kernel against the float64 reference on random ragged inputs.
// Used by `gmm-gen verify` and by the test suites.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gmmgen/kernel_library.h"
#include "gmmgen/spec.h"

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

struct CheckCase {
  std::string label;
  int64_t m = 0;
  std::vector<int32_t> group_sizes;  // [G]; sum may be below m
  int32_t group_offset = 0;
  bool nan_expert = false;     // a NaN in one local expert's weights; must stay in its rows
  bool in_place = true;        // existing modes: existing_out == out (else a separate buffer)
  int64_t lhs_pad = 0;         // lhs_ld = K + lhs_pad
  int64_t rhs_pad = 0;         // rhs_ld = row length + rhs_pad
  int64_t out_pad = 0;         // out_ld = N + out_pad (padding must stay untouched)
  bool reverse_items = false;  // run work items last to first, in uneven chunks
  // Small-integer inputs: every f32 partial sum is exact, so each output must equal the
  // reference rounded once to the output dtype (nearest even), bit for bit.
  bool exact_inputs = false;
  uint64_t seed = 1;
};

struct CheckResult {
  bool ok = true;
  double worst_rel_error = 0.0;    // max |got - ref| / max(|ref|, sum|lhs*rhs|), active elements
  double worst_bound_ratio = 0.0;  // max |got - ref| / error bound; <= 1 to pass
  int64_t elements = 0;            // output elements compared
  std::string failure;             // first failure, empty when ok
};

// Runs the kernel on the case and compares every output element (and the padding) with the
// reference. Error bound per element: one rounding to the output dtype plus f32 summation,
// u_out*|ref| + (K+2)*2^-24*sum|lhs*rhs|.
CheckResult check_kernel(const KernelFns& fns, const KernelSpec& spec, const CheckCase& c);

// A spread of cases for one spec: several M (0, 1, below/above a tile), every distribution,
// sum(group_sizes) < M, sharded offsets, strided views, NaN experts, both item orders.
std::vector<CheckCase> standard_cases(const KernelSpec& spec, uint64_t seed);

}  // namespace gmmgen
