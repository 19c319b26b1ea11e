// gmm-gen's numeric judgement, one file per target and CPU family under src/heuristics/:
// default tilings, tile and scratch limits, the ISA families of the C++ target and the cost
// model. Everything else asks here.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gmmgen/spec.h"

namespace gmmgen {

// Largest tm/tk/tn accepted; anything larger is rejected as absurd.
inline constexpr int64_t kMaxTile = 8192;
// Per-thread scratch a C++ kernel may hold (accumulator tile + operand tiles converted to f32).
inline constexpr int64_t kMaxScratchBytes = int64_t{8} << 20;

// ---- C++ target on x86-64 (src/heuristics/cpu_x86.cpp) ---------------------------------------

// An ISA family of the C++ target: how to compile for it, how the emitted source checks that it
// was, and the shape of its micro-kernel's register tile.
struct IsaFamily {
  Isa isa;
  std::string_view name;
  std::span<const std::string_view> flags;  // compiler flags that enable the family
  std::string_view guard;    // preprocessor condition true exactly when the flags are on
  std::string_view ukernel;  // its micro-kernel template, e.g. "cpp/ukernel/avx512.inc"
  int64_t mr, nr;            // register tile: mr rows x nr f32 columns of accumulators
};

// Every concrete family, best first (generic last). Not native: native is resolved where the
// kernel is compiled, to the first family whose guard holds.
std::span<const IsaFamily> isa_families();
const IsaFamily& isa_family(Isa isa);  // isa != native

// Compiler flags of a spec's isa (native: -march=native).
std::vector<std::string> isa_flags(Isa isa);

// The best family this machine can run (cpuid), and whether it can run a given one.
Isa host_isa();
bool host_supports(Isa isa);

// Column granularity of the packed f32 tiles in C++ kernels: a tile's tn columns are padded
// with zeros to a multiple of this, so every family's micro-kernel works on whole column blocks
// (a multiple of every family's nr).
inline constexpr int64_t kPackCols = 32;
inline constexpr int64_t packed_cols(int64_t tn) {
  return (tn + kPackCols - 1) / kPackCols * kPackCols;
}

// ---- Every target ------------------------------------------------------------------------------

// Default tiling when a spec names none, for the spec's target (and op and shape). Each value is
// clipped to the problem (tk <= K, tn <= N) so small problems get small tiles.
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
