#include "gmmgen/verify/reference.h"

#include <algorithm>
#include <cmath>

namespace gmmgen {

ReferenceResult reference_gmm(const GmmProblem& p) {
  ReferenceResult r;
  r.out.assign(p.m * p.n, 0.0);
  r.abs_dot.assign(p.m * p.n, 0.0);
  r.row_group.assign(p.m, -1);

  int64_t start = 0;
  for (int32_t g = 0; g < p.num_groups; ++g) {
    const int64_t end = start + p.group_sizes[g];
    const int32_t local = g - p.group_offset;
    if (local >= 0 && local < p.num_local_groups)
      for (int64_t row = start; row < end; ++row) r.row_group[row] = local;
    start = end;
  }

  // Each output element is the sum of its products in k order, as written; the loops run over
  // the contiguous axis innermost, so that each element's sum is built up term by term across
  // the k loop (the same additions in the same order as a dot product per element).
  std::vector<double> sum(p.n), abs_sum(p.n);
  for (int64_t row = 0; row < p.m; ++row) {
    const int32_t j = r.row_group[row];
    double* out = &r.out[row * p.n];
    if (j < 0) {  // not in an active group: zero, or the existing value
      for (int64_t col = 0; col < p.n; ++col)
        out[col] = p.out_mode == OutMode::kPlain ? 0.0 : p.existing_out[row * p.n + col];
      continue;
    }
    const double* a = &p.lhs[row * p.k];
    if (p.transpose_rhs) {  // rhs [N, K]: a dot product per element
      for (int64_t col = 0; col < p.n; ++col) {
        const double* w = &p.rhs[(j * p.n + col) * p.k];
        double s = 0.0, abs_s = 0.0;
        for (int64_t kk = 0; kk < p.k; ++kk) {
          const double prod = a[kk] * w[kk];
          s += prod;
          abs_s += std::fabs(prod);
        }
        sum[col] = s, abs_sum[col] = abs_s;
      }
    } else {  // rhs [K, N]: row kk of rhs adds term kk to every element of the row
      std::fill(sum.begin(), sum.end(), 0.0);
      std::fill(abs_sum.begin(), abs_sum.end(), 0.0);
      for (int64_t kk = 0; kk < p.k; ++kk) {
        const double* w = &p.rhs[(j * p.k + kk) * p.n];
        for (int64_t col = 0; col < p.n; ++col) {
          const double prod = a[kk] * w[col];
          sum[col] += prod;
          abs_sum[col] += std::fabs(prod);
        }
      }
    }
    for (int64_t col = 0; col < p.n; ++col) {
      out[col] = p.out_mode == OutMode::kAccumulate ? sum[col] + p.existing_out[row * p.n + col]
                                                    : sum[col];
      r.abs_dot[row * p.n + col] = abs_sum[col];
    }
  }
  return r;
}

TgmmReferenceResult reference_tgmm(const TgmmProblem& p) {
  TgmmReferenceResult r;
  const int64_t per_group = p.k * p.n;
  r.out.assign(p.num_local_groups * per_group, 0.0);
  r.abs_dot.assign(p.num_local_groups * per_group, 0.0);
  r.rows.assign(p.num_local_groups, 0);
  r.row_begin.assign(p.num_local_groups, 0);

  int64_t start = 0;
  for (int32_t g = 0; g < p.num_groups; ++g) {
    const int32_t local = g - p.group_offset;
    if (local >= 0 && local < p.num_local_groups) {
      r.row_begin[local] = start;
      r.rows[local] = p.group_sizes[g];
    }
    start += p.group_sizes[g];
  }

  // Each output element is the sum of its products in row order: row `row` of the group adds its
  // term to every element of out[j] (an empty group sums to zero).
  for (int32_t j = 0; j < p.num_local_groups; ++j) {
    const int64_t begin = r.row_begin[j], end = begin + r.rows[j];
    double* sum = &r.out[j * per_group];
    double* abs_sum = &r.abs_dot[j * per_group];
    for (int64_t row = begin; row < end; ++row)
      for (int64_t kk = 0; kk < p.k; ++kk) {
        const double a = p.lhs[row * p.k + kk];
        const double* b = &p.rhs[row * p.n];
        double* s = sum + kk * p.n;
        double* abs_s = abs_sum + kk * p.n;
        for (int64_t col = 0; col < p.n; ++col) {
          const double prod = a * b[col];
          s[col] += prod;
          abs_s[col] += std::fabs(prod);
        }
      }
    if (p.out_mode == OutMode::kAccumulate)
      for (int64_t i = 0; i < per_group; ++i) sum[i] += p.existing_out[j * per_group + i];
  }
  return r;
}

}  // namespace gmmgen
