// The cost model shared by every target: flops and bytes moved as affine functions of M. The
// manifest, `describe` and the Pallas modules' pl.CostEstimate all read it.
#include "gmmgen/heuristics.h"

namespace gmmgen {
namespace {
int64_t operand_bytes(DType d, int64_t elements) {
  return (elements * bits_of(d) + 7) / 8;
}
}  // namespace

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
