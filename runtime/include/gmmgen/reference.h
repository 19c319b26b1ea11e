// Plain float64 references of the operations in DESIGN.md §1, written for clarity, not speed.
// Inputs are doubles holding the exact values of the (already rounded) operands.
#pragma once

#include <cstdint>
#include <vector>

#include "gmmgen/spec.h"

namespace gmmgen {

struct GmmProblem {
  int64_t m = 0, k = 0, n = 0;
  int32_t num_groups = 0;        // G
  int32_t num_local_groups = 0;  // G_local
  int32_t group_offset = 0;
  bool transpose_rhs = false;
  OutMode out_mode = OutMode::kPlain;
  std::vector<int32_t> group_sizes;  // [G]
  std::vector<double> lhs;           // [m, k]
  std::vector<double> rhs;           // [G_local, k, n], or [G_local, n, k] if transpose_rhs
  std::vector<double> existing_out;  // [m, n] for existing_out/accumulate modes
};

struct ReferenceResult {
  std::vector<double> out;         // [m, n] exact (unrounded) result
  std::vector<double> abs_dot;     // [m, n] sum_k |lhs[r,k] * rhs[k,n]|, for error bounds
  std::vector<int32_t> row_group;  // [m] local group of each row, -1 outside active groups
};

ReferenceResult reference_gmm(const GmmProblem& p);

}  // namespace gmmgen
