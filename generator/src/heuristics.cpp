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
  t.tm = 64;
  t.tk = std::clamp<int64_t>(s.k, 1, 256);
  t.tn = std::clamp<int64_t>(s.n, 1, 64);
  return t;
}

int64_t scratch_bytes(const KernelSpec& s) {
  const int64_t acc = s.tiling.tm * s.tiling.tn * 4;
  const int64_t packed_rhs = s.tiling.tk * s.tiling.tn * 4;
  return acc + packed_rhs;
}

Cost cost_estimate(const KernelSpec& s) {
  Cost c;
  c.flops.per_m = 2 * s.k * s.n;
  c.bytes.per_m = operand_bytes(s.lhs, s.k) + operand_bytes(s.out, s.n);
  if (s.out_mode != OutMode::kPlain) c.bytes.per_m += operand_bytes(s.out, s.n);
  c.bytes.fixed = operand_bytes(s.rhs, s.g_local * s.k * s.n);
  return c;
}

}  // namespace gmmgen
