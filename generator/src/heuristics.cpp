#include "gmmgen/heuristics.h"

#include <algorithm>

namespace gmmgen {
namespace {
int64_t operand_bytes(DType d, int64_t elements) {
  return (elements * bits_of(d) + 7) / 8;
}
}  // namespace

Tiling default_tiling(const KernelSpec& s) {
  Tiling t;
  if (s.op == Op::kTgmm) {  // the reasons for both defaults are in heuristics.h
    t.tm = 64;
    t.tk = std::clamp<int64_t>(s.k, 1, 128);
    t.tn = std::clamp<int64_t>(s.n, 1, 64);
    return t;
  }
  t.tm = 64;
  t.tk = std::clamp<int64_t>(s.k, 1, 256);
  t.tn = std::clamp<int64_t>(s.n, 1, 64);
  return t;
}

int64_t scratch_bytes(const KernelSpec& s) {
  const int64_t tm = s.tiling.tm, tk = s.tiling.tk, tn = packed_cols(s.tiling.tn);
  if (s.op == Op::kTgmm) {
    // lhs chunk [tk][tm] and rhs chunk [tm][tn] converted to f32, accumulator [tk][tn].
    return (tk * tm + tm * tn + tk * tn) * 4;
  }
  // Accumulator [tm][tn] and the rhs tile [tk][tn] converted to f32.
  return (tm * tn + tk * tn) * 4;
}

Cost cost_estimate(const KernelSpec& s) {
  Cost c;
  c.flops.per_m = 2 * s.k * s.n;  // both ops: one K x N product per row of M
  // Existing modes read existing_out too: one more pass over the output.
  const int64_t out_passes = s.out_mode == OutMode::kPlain ? 1 : 2;
  if (s.op == Op::kTgmm) {
    // Rows of lhs [M, K] and rhs [M, N] are read once; out [G_local, K, N] does not grow with M.
    c.bytes.per_m = operand_bytes(s.lhs, s.k) + operand_bytes(s.rhs, s.n);
    c.bytes.fixed = out_passes * operand_bytes(s.out, s.g_local * s.k * s.n);
  } else {
    // Rows of lhs [M, K] are read and rows of out [M, N] written; rhs [G_local, K, N] is fixed.
    c.bytes.per_m = operand_bytes(s.lhs, s.k) + out_passes * operand_bytes(s.out, s.n);
    c.bytes.fixed = operand_bytes(s.rhs, s.g_local * s.k * s.n);
  }
  return c;
}

}  // namespace gmmgen
