#include "gmmgen/verify/reference.h"

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

  for (int64_t row = 0; row < p.m; ++row) {
    const int32_t j = r.row_group[row];
    for (int64_t col = 0; col < p.n; ++col) {
      double& out = r.out[row * p.n + col];
      if (j < 0) {  // not in an active group: zero, or the existing value
        out = p.out_mode == OutMode::kPlain ? 0.0 : p.existing_out[row * p.n + col];
        continue;
      }
      double sum = 0.0, abs_sum = 0.0;
      for (int64_t kk = 0; kk < p.k; ++kk) {
        const double w =
            p.transpose_rhs ? p.rhs[(j * p.n + col) * p.k + kk] : p.rhs[(j * p.k + kk) * p.n + col];
        const double prod = p.lhs[row * p.k + kk] * w;
        sum += prod;
        abs_sum += std::fabs(prod);
      }
      if (p.out_mode == OutMode::kAccumulate) sum += p.existing_out[row * p.n + col];
      out = sum;
      r.abs_dot[row * p.n + col] = abs_sum;
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

  for (int32_t j = 0; j < p.num_local_groups; ++j) {
    const int64_t begin = r.row_begin[j], end = begin + r.rows[j];
    for (int64_t kk = 0; kk < p.k; ++kk) {
      for (int64_t col = 0; col < p.n; ++col) {
        double sum = 0.0, abs_sum = 0.0;  // an empty group sums to zero
        for (int64_t row = begin; row < end; ++row) {
          const double prod = p.lhs[row * p.k + kk] * p.rhs[row * p.n + col];
          sum += prod;
          abs_sum += std::fabs(prod);
        }
        const int64_t i = j * per_group + kk * p.n + col;
        if (p.out_mode == OutMode::kAccumulate) sum += p.existing_out[i];
        r.out[i] = sum;
        r.abs_dot[i] = abs_sum;
      }
    }
  }
  return r;
}

}  // namespace gmmgen
