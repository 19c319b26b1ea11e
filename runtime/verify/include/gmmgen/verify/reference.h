// Plain float64 references of the grouped products, written for clarity: each output element
// sums its products in order (k for gmm, rows for tgmm), with the contiguous axis innermost.
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

// tgmm in logical layout: storage layouts (lhs [K, M], out [G_local, N, K]) are the caller's
// business; here lhs is [m, k], rhs [m, n] and out [G_local, k, n].
struct TgmmProblem {
  int64_t m = 0, k = 0, n = 0;
  int32_t num_groups = 0;        // G
  int32_t num_local_groups = 0;  // G_local
  int32_t group_offset = 0;
  OutMode out_mode = OutMode::kPlain;  // plain or accumulate
  std::vector<int32_t> group_sizes;    // [G]
  std::vector<double> lhs;             // [m, k]
  std::vector<double> rhs;             // [m, n]
  std::vector<double> existing_out;    // [G_local, k, n] for accumulate
};

struct TgmmReferenceResult {
  std::vector<double> out;         // [G_local, k, n] exact (unrounded) result
  std::vector<double> abs_dot;     // [G_local, k, n] sum over rows |lhs[r,k] * rhs[r,n]|
  std::vector<int64_t> rows;       // [G_local] rows of each local group (summation length)
  std::vector<int64_t> row_begin;  // [G_local] first row of each local group
};

// out[j] = lhs[rows of g]^T @ rhs[rows of g], g = group_offset + j (+ existing_out[j] when
// accumulating). Only the rows of active groups are read.
TgmmReferenceResult reference_tgmm(const TgmmProblem& p);

}  // namespace gmmgen
