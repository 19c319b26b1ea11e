// The one module that holds gmm-gen's numeric judgement: default tilings, tile limits, the scratch
// footprint of a tiling and the cost model. Everything else asks here.
#pragma once

#include <cstdint>

#include "gmmgen/spec.h"

namespace gmmgen {

// Largest tm/tk/tn accepted; anything larger is rejected as absurd.
inline constexpr int64_t kMaxTile = 8192;
// Per-thread scratch a C++ kernel may hold (accumulator tile + operand tiles converted to f32).
inline constexpr int64_t kMaxScratchBytes = int64_t{8} << 20;

// Column granularity of the packed f32 tiles in C++ kernels: a tile's tn columns are padded
// with zeros to a multiple of this, so the register-blocked micro-kernel
// (templates/cpp/microkernel.inc.mustache) always works on whole column blocks.
inline constexpr int64_t kPackCols = 32;
inline constexpr int64_t packed_cols(int64_t tn) {
  return (tn + kPackCols - 1) / kPackCols * kPackCols;
}

// Default tiling when a spec names none. C++ target, gmm: tm=64 rows share each packed rhs tile,
// tn=64 f32 accumulators per row stay within a few vector registers per row, tk=256 keeps the
// packed rhs tile (tk x tn x 4 B = 64 KiB) within L2 next to the accumulators (16 KiB).
// tgmm: tm=64 rows per chunk, tk=128, tn=64: the accumulator [tk][tn] is 32 KiB, the converted
// chunk 32 KiB of lhs and 16 KiB of rhs; the rhs chunk stays in L1 while each accumulator row
// (tn floats, a few vector registers) sweeps it.
// Each value is clipped to the problem (tk <= K, tn <= N) so small problems get small tiles.
Tiling default_tiling(const KernelSpec& s);

// Bytes of per-thread scratch the C++ kernel uses for this spec's tiling.
int64_t scratch_bytes(const KernelSpec& s);

// Cost as affine functions of M (the run-time row count): value(M) = per_m * M + fixed.
struct Affine {
  int64_t per_m = 0;
  int64_t fixed = 0;
  int64_t at(int64_t m) const { return per_m * m + fixed; }
};
struct Cost {
  Affine flops;  // multiply-adds count 2; an upper bound: rows outside groups do no work
  Affine bytes;  // operand reads + output writes, each element once
};
Cost cost_estimate(const KernelSpec& s);

}  // namespace gmmgen
