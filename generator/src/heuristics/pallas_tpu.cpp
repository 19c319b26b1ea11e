// The Pallas target on TPU: default tilings, Mosaic's block rule and the VMEM footprint of a
// kernel. No TPU measurements back these yet: the default is megablox's (128, 128, 128), which
// Mosaic lowers on every TPU generation that runs megablox.
#include <algorithm>

#include "gmmgen/heuristics.h"

namespace gmmgen {

// megablox's default tiling, with tk and tn cut to K and N when those are smaller (a block as
// large as its array's dimension always satisfies the block rule).
Tiling pallas_default_tiling(Op op, int64_t k, int64_t n) {
  (void)op;  // gmm and tgmm share the default until a TPU sweep says otherwise
  return Tiling{128, std::clamp<int64_t>(k, 1, 128), std::clamp<int64_t>(n, 1, 128)};
}

int64_t pallas_acc_bytes(const KernelSpec& s) {
  // gmm accumulates a [tm, tn] tile of out, tgmm a [tk, tn] tile of one group's out.
  return 4 * (s.op == Op::kGmm ? s.tiling.tm : s.tiling.tk) * s.tiling.tn;
}

int64_t pallas_vmem_bytes(const KernelSpec& s) {
  const auto bytes = [](DType d, int64_t elements) { return elements * bits_of(d) / 8; };
  const Tiling& t = s.tiling;
  // Pallas double-buffers every block it pipelines (inputs, existing_out, out).
  const int64_t out_blocks = s.out_mode == OutMode::kPlain ? 1 : 2;
  int64_t blocks = 0;
  if (s.op == Op::kGmm)
    blocks = bytes(s.lhs, t.tm * t.tk) + bytes(s.rhs, t.tk * t.tn) +
             out_blocks * bytes(s.out, t.tm * t.tn);
  else
    blocks = bytes(s.lhs, t.tm * t.tk) + bytes(s.rhs, t.tm * t.tn) +
             out_blocks * bytes(s.out, t.tk * t.tn);
  return 2 * blocks + pallas_acc_bytes(s);
}

}  // namespace gmmgen
