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

// An ISA family of the C++ target: how its code is compiled, how isa=native recognizes it, and
// the shape of its micro-kernel's register tile.
struct IsaFamily {
  Isa isa;
  std::string_view name;
  // GCC/Clang target attribute list under which the emitted source compiles this family's code
  // (#pragma GCC target / clang attribute), so a kernel of an explicit family needs no compiler
  // flags; "" for generic.
  std::string_view target;
  std::string_view guard;    // preprocessor condition true when the compiler's flags enable it
  std::string_view ukernel;  // its micro-kernel template, e.g. "cpp/ukernel/avx512.inc"
  int64_t vec;               // f32 lanes of one vector register (1: scalar code)
  int64_t mr, nr;            // register tile: mr rows x nr f32 columns of accumulators
  bool bf16_dot;             // has a bf16 x bf16 pair dot product (vdpbf16ps)
  // Sums integer x integer codes with an exact integer dot product into i32: vpdpbusd (VNNI,
  // four u8 x s8 products per lane) on avx512vnni and avx512bf16 (and amx off its tiles),
  // vpmaddwd (two i16 x i16) on avx2.
  bool int_dot;
  // tgmm reads f32 operands in place (rows lda apart) rather than copying each chunk of rows to
  // contiguous scratch: pays when the register tile has enough FMAs per depth step to hide a TLB
  // miss per row (AVX-512 6x64: S1 203 vs 189 GFLOP/s on Zen 4; AVX2 6x16 copies: S3 142 vs 104).
  // The Intel families copy: amx (Sapphire Rapids and later) S1 218 in place vs 270 copied, S3
  // 193 vs 206, with its tgmm tiling (heuristic_tiling) on an AMX Xeon; avx512 and avx512vnni (what
  // Skylake-SP to Ice Lake run) S1 f32 in place 1.35-1.42x the time of copying on an Ice Lake Xeon.
  bool tgmm_in_place;
  // tgmm prefetches the chunk of group rows it reads next into L2 while the current one computes
  // (see templates/cpp/tgmm.cpp: Zen 5 S1 f32 0.85-0.88x -> 0.93-0.98x oneDNN). The Intel
  // families do not: on an AMX Xeon the micro-kernel stalled on those prefetches (14% of its
  // samples), and S1-S4 tgmm f32 took 0.91-0.97x the time without them (g++ and clang++); on an
  // Ice Lake Xeon (avx512, copying) 0.93x at S1 f32, the same at S3/S4.
  bool tgmm_prefetch;
  // gmm items of more register tiles than this (large groups) prefetch no weights ahead
  // (panel_prefetch in templates/cpp/gmm.cpp); 0: every item does. On an AMX Xeon those
  // prefetches cost S1 f32 2-7% and S2 1-4%; 16 tiles keeps them for S3's groups of up to 29
  // rows (5 tiles), which take 7% longer without them.
  int64_t gmm_prefetch_max_tiles;
  // bf16 x bf16 gmm multiplies 16 x 32 by 32 x 16 tiles (AMX tdpbf16ps) where the OS grants
  // the tile state (templates/cpp/ukernel/amx.inc); everything else is its base family's code.
  bool tiles;
  // How its kernels decode quantized codes (templates/cpp/quant/decode_*.inc): table lookups in
  // registers (AVX-512BW), gathers from the value table (AVX2), or scalar code.
  std::string_view qdecode;
};

// Every concrete family, best first (generic last). Not native: native is resolved where the
// kernel is compiled, to the first family whose guard holds.
std::span<const IsaFamily> isa_families();
const IsaFamily& isa_family(Isa isa);  // isa != native

// Compiler flags a spec's kernel needs: none for an explicit family (its code carries target
// attributes), -march=native for native (the compiler's flags choose the family).
std::vector<std::string> isa_flags(Isa isa);

// Whether a kernel of family f multiplies with AMX tiles: bf16 x bf16 tgmm on a family with
// tiles, and gmm whose tile scratch (the item's packed weights over all of K, and its lhs rows
// staged where a tile is partial: tile_scratch_bytes) stays within kMaxTileScratchBytes; above
// that gmm takes the base family's vector code.
inline constexpr int64_t kMaxTileScratchBytes = int64_t{4} << 20;
int64_t tile_scratch_bytes(const KernelSpec& s, const IsaFamily& f);
bool tile_path(const KernelSpec& s, const IsaFamily& f);

// Whether a kernel of family f multiplies bf16 x bf16 in pairs with the family's dot product
// (vdpbf16ps): gmm pairs consecutive k, tgmm consecutive group rows (both operands of a chunk
// packed into pairs).
bool bf16_pairs(const KernelSpec& s, const IsaFamily& f);
// Whether a gmm kernel of family f has items of whole weight rows (see kRowStreamColumns).
bool row_streams(const KernelSpec& s, const IsaFamily& f);

// How a quantized kernel of family f multiplies its decoded codes. quant_int_dot: integer codes
// on both sides of a gmm, summed in i32 by the family's integer dot product (k-blocks start on a
// quad of k). quant_pairs: otherwise, where every operand value is a bf16 value
// (codes::bf16_exact), codes decode to bf16 and the pair dot product sums them, as bf16 x bf16
// does: gmm pairs consecutive k (k-blocks start on a pair), tgmm consecutive group rows; on a
// family with tiles only for the tiles (quant_tile_path), its pair dot product being slower than
// its f32 FMA there.
bool quant_int_dot(const KernelSpec& s, const IsaFamily& f);
bool quant_pairs(const KernelSpec& s, const IsaFamily& f);
// Whether a quantized gmm of family f multiplies on AMX tiles: bf16 activations by codes that
// decode to bf16, or i8 activations by integer codes (the integer dot product's operands); TM,
// TK and the scale blocks in whole 32-deep tile steps (templates/cpp/quant/gmm_item.inc,
// run_tile_item).
bool quant_tile_path(const KernelSpec& s, const IsaFamily& f);

// The instruction that does a kernel's products on family f: f32 FMA (f32, f16 and fp8 operands
// converted to f32, and bf16 where the family has no pair dot product), the bf16 pair dot product
// (vdpbf16ps), the integer dot product (vpdpbusd on avx512vnni and avx512bf16, vpmaddwd on avx2)
// or AMX tiles (tdpbf16ps, or tdpbssd for integer operands). Its peak bounds the kernel's speed
// (gmm-gen bench).
enum class ProductPath { kF32Fma, kBf16Dot, kIntDot, kTiles, kIntTiles };
ProductPath product_path(const KernelSpec& s, const IsaFamily& f);
// "f32-fma", "bf16-dot", "int-dot", "amx-tiles", "amx-int-tiles"
std::string_view to_string(ProductPath p);

// gmm items whose rows fill at most this many register tiles (small groups: the weights stream
// from memory) spread the prefetch of the weights their panels need next over all their tiles
// (measured on Zen 4, S1-S4: 4 beats 1 and 16 on S3/S4 by 5-20% and leaves S1/S2 unchanged);
// larger items leave it to their last kPrefetchLastTiles tiles of each k-block
// (templates/cpp/gmm.cpp, panel_prefetch; Zen 4, S1 at tk=1024: 2, 4 and 8 were within 1% of
// each other, 16 and 32 0.5% slower, the first tile alone 1% slower).
inline constexpr int64_t kPrefetchSpreadTiles = 4;
inline constexpr int64_t kPrefetchLastTiles = 8;

// gmm of bf16 x bf16 [K, N] on a family with pairs (vdpbf16ps), N a power of two of at most
// kRowStreamColumns, at least two vectors wide, and more than one n-tile (row_streams()), in calls
// of at least kRowStreamSteps grid steps: each grid step of at most kRowStreamRows *
// kRowStreamPasses rows is one work item over whole weight rows, in k-blocks kRowStreamDepth deep,
// in passes of at most kRowStreamRows rows (one register accumulator per row), with the pass's
// lhs pairs and (unless an f32 output holds them) the sums of all N columns, 16 floats more, in its
// scratch (templates/cpp/gmm.cpp, run_row_streams). Where weight rows lie a multiple of 4 KiB
// apart, passes of at most kRowStreamWideRows rows take 32 columns (a whole line of each weight
// row, two accumulators per row) where the others take 16: such rows all fall in one L1 set, so
// the second half of every line came from L2 again (Zen 4, one thread, a 128-deep k-block of
// 2048 columns in L2: 15 rows x 32 columns 219-221 GFLOP/s, 16 x 16 172-175; with 16 rows the
// line halves read by two 8-row passes of 32 columns ran 152-156).
inline constexpr int64_t kRowStreamColumns = 2048;
inline constexpr int64_t kRowStreamRows = 24;
inline constexpr int64_t kRowStreamWideRows = 15;
// There each step also asks for its weight rows kRowStreamAhead rows on to come into L2, instead
// of each call a share of the next k-block in address order (Zen 4, 2048 columns, 10 and 16 rows
// a group, against 16-column strips with shares: 64 ran 0.81-0.93x the time, 16 1.40x, 32
// 0.98-1.06x, 96 0.91-0.98x, 128 1.04x; into L1 instead 0.97-1.28x).
inline constexpr int64_t kRowStreamAhead = 64;
inline constexpr int64_t kRowStreamPasses = 2;
inline constexpr int64_t kRowStreamSteps = 16;
inline constexpr int64_t kRowStreamDepth = 128;

// tgmm load balance: a group of at least 2 * kSplitChunks * tm rows whose output has fewer than
// kSplitMaxTiles tiles (and at most kSplitMaxElements elements, so the partial sums stay small)
// is summed in up to kSlicesPerGroup slices of rows, each a work item of its own; at most
// kMaxSlices slices per call. The last slice to finish adds the partial sums in slice order.
inline constexpr int64_t kSplitChunks = 4;
inline constexpr int64_t kSplitMaxTiles = 16;
inline constexpr int64_t kSplitMaxElements = int64_t{1} << 20;
inline constexpr int64_t kSlicesPerGroup = 8;
inline constexpr int64_t kMaxSlices = 32;
// tgmm items of alike cost: a tile of a group (or slice) with r rows costs about r +
// kTileWriteRows rows of products (its output is written once, bandwidth-bound), and an item
// holds as many consecutive tiles of its group as keep it within the costliest single tile. The
// pool hands out runs of items by count; with one tile per item a run holding the largest groups'
// tiles cost several times another (Zen 5, 2 threads, groups of 2438, 1061, ... 201 rows: 0.78x
// oneDNN, the threads' shares 62% / 38%). A tile of ~16 rows (S4) spent about as long on its
// 48 KiB of output as on its products, hence 32.
inline constexpr int64_t kTileWriteRows = 32;

// tgmm on the AVX-512 families that copy f32 operands (tgmm_in_place false), without pairs and
// unquantized: a tile's A operand (lhs columns k0.., or rhs's when out is [N, K]) is converted
// for all the tile's rows at once where they fit in kTgmmKeepABytes, and the next tiles of the
// thread's run that share it (the other n-tiles of its k-tile, in item order) skip the copy.
// Ice Lake Xeon, 2 threads, bench --ab, time kept / copied per tile, g++ (clang++): S1 (groups of
// 512 rows, 96 A columns: 192 KiB) f32 0.89-0.93x (0.93-0.96x), bf16 widened 0.95-0.99x
// (0.93-0.95x); S2 0.96-1.00x (0.97x); S3/S4 (groups of ~16 rows) 0.97-1.02x.
inline constexpr int64_t kTgmmKeepABytes = int64_t{256} << 10;
// Rows of A a tgmm kernel's scratch holds: tm, or the rows that fit in kTgmmKeepABytes.
int64_t tgmm_a_rows(const KernelSpec& s, const IsaFamily& f);

// A tile's tn columns padded to whole register tiles of the family (nr columns).
inline constexpr int64_t packed_cols(int64_t tn, int64_t nr) {
  return (tn + nr - 1) / nr * nr;
}

// ---- Every target ------------------------------------------------------------------------------

// Default tiling when a spec names none, for the spec's target (and op and shape). Each value is
// clipped to the problem (tk <= K, tn <= N) so small problems get small tiles.
Tiling default_tiling(const KernelSpec& s);  // the spec's target's (Target::default_tiling)
// The C++ target's default tiling.
Tiling cpp_default_tiling(const KernelSpec& s);

// The runtime's untuned tiling for a call whose groups hold rows_per_group rows on average (the
// group sizes are known at call time; 0 when unknown): default_tiling() adapted to how often each
// weight byte is reused, for the family the kernel runs as (the spec's, or for isa=native
// `native`, a concrete family: the runtime passes its host's, gmmgen/platform.hpp). Kernels
// named by a spec keep default_tiling(), so a spec's kernel name does not depend on the calls it
// serves, nor on the machine that emits it. For the C++ target: default_tiling() with every rule
// of cpu_tiling_rules() that holds applied in order; `applied`, when given, receives their names.
Tiling heuristic_tiling(const KernelSpec& s, double rows_per_group, Isa native,
                        std::vector<std::string_view>* applied = nullptr);

// ---- The C++ target's tiling rules (src/heuristics/cpu_x86_tiling.cpp) -----------------------
// Data: each rule is a set of conditions on the spec, the family and the call's rows per group,
// and what it does to each of tm, tk, tn. docs/internals/tiling-rules.md gives the measurements
// behind each rule under its name (several rows may share one name: one per layout).

// Groups of fewer rows than this (on average, over the active groups) are small: their weights
// stream from memory once per call.
inline constexpr double kSmallGroupRows = 64;
// Outputs at most this many columns wide are narrow.
inline constexpr int64_t kNarrowColumns = 32;

constexpr uint8_t family_bit(Isa isa) {
  return uint8_t(1u << unsigned(isa));
}
enum class RuleOperands {
  kAnyOperands,
  kF32xF32,
  kF32Lhs,
  kF32Rhs,
  kBf16xBf16,
  kFloat,           // neither operand quantized
  kPairs,           // multiplied in bf16 pairs: bf16_pairs() or quant_pairs()
  kF32xQuantized,   // f32 lhs, quantized rhs
  kBf16xQuantized,  // bf16 lhs, quantized rhs
  kBf16xStreamed,   // bf16 lhs, rhs of 8-bit or 4-bit codes
  kIntDot,          // integer codes on both sides, summed by the family's integer dot product
  kIntDotWholeK,    // kIntDot with tensor or channel scales on both sides (P summed over all K)
};
enum class RuleLayout { kAnyLayout, kKN, kNK };  // rhs (gmm) or out (tgmm) stored [K, N] or [N, K]
enum class RuleRows { kAnyRows, kSmall, kLarge };    // kLarge: not small (or not known)
enum class RuleWidth { kAnyWidth, kWide, kNarrow };  // kNarrow: n <= kNarrowColumns
enum class RuleTileKind {
  kKeep,              // leave the tile as it is
  kSet,               // value, clipped to the problem (tk <= K, tn <= N)
  kPackedWeightsFit,  // tn: whole register tiles whose packed bf16 weights (K x tn) fit `value`
                      // bytes, between one and four register tiles
  kSpreadColumns,     // tn: n * g_local / 16 in multiples of 64 (>= 16 items per call), between
                      // 256 and `value`
  kHalfColumns,       // tn: at most half of n in multiples of 64 (>= 2 items per group), between
                      // 256 and `value`
};
struct RuleTile {
  RuleTileKind kind = RuleTileKind::kKeep;
  int64_t value = 0;
};
struct TilingRule {
  std::string_view name;  // its section in docs/internals/tiling-rules.md
  Op op;
  uint8_t families;  // family_bit() of each family it holds for
  RuleOperands operands;
  RuleLayout layout;
  RuleRows rows;
  RuleWidth width;
  RuleTile tm, tk, tn;
};
std::span<const TilingRule> cpu_tiling_rules();

// The tiling a C++ kernel runs: the spec's, with tk and tn clamped to K and N (a tile larger
// than its dimension gives the same results). Scratch sizes and the emitted TK, TN use it, so a
// spec may name any tile in 1..8192 for any problem.
Tiling run_tiling(const KernelSpec& s);

// Bytes of per-thread scratch the C++ kernel uses for this spec's tiling with a family's register
// tile, and for the spec itself (its family's, or with isa=native the largest of any family).
int64_t scratch_bytes(const KernelSpec& s, const IsaFamily& f);
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

// ---- Pallas target on TPU (src/heuristics/pallas_tpu.cpp) -------------------------------------

// Mosaic's block rule: the last two dimensions of every block are multiples of 8 (sublanes) and
// 128 (lanes), or equal to the array's dimensions.
inline constexpr int64_t kTpuSublanes = 8;
inline constexpr int64_t kTpuLanes = 128;

// A TPU generation (spec field tpu), per TensorCore, as JAX describes it
// (jax/_src/pallas/mosaic/tpu_info.py, get_tpu_info): VMEM capacity and MXU width.
struct TpuGeneration {
  Tpu id;
  std::string_view what;  // for messages: "TPU v5e"
  int64_t vmem_bytes;     // the most one kernel's blocks and scratch may take
  int64_t mxu;            // MXU columns: the default tk and tn
};
// tpu=any: the smallest VMEM and MXU of all (v4's), so a module runs on every generation.
const TpuGeneration& tpu_generation(Tpu t);
std::span<const TpuGeneration> tpu_generations();
// Mosaic's default scoped VMEM limit (16 MiB): a kernel whose footprint is larger asks for
// its generation's VMEM (vmem_limit_bytes in its compiler parameters).
inline constexpr int64_t kTpuScopedVmemBytes = int64_t{16} << 20;
// The vmem_limit_bytes a kernel passes to Mosaic: 0 (the default scoped limit) when its
// footprint fits that, else its generation's VMEM.
int64_t pallas_vmem_limit(const KernelSpec& s);

// Default tiling of a Pallas kernel for `op` with contraction size k and n output columns on
// `tpu` (default_tiling() of a target=pallas spec; also the VJP kernels' default tilings).
Tiling pallas_default_tiling(Op op, int64_t k, int64_t n, Tpu tpu);
// The default tiling of a Pallas spec: the above, with k- and n-tiles of whole bytes of packed
// codes (128-lane tiles of them) and whole scale blocks along K.
Tiling pallas_default_tiling(const KernelSpec& s);
// The default tiling of a Pallas gmm module's dlhs kernel (dout [M, N] x rhs read transposed:
// contracts over N, writes K columns); with quantized weights, whose codes it reads in place, its
// tiles hold whole bytes of packed codes and whole scale blocks along K.
Tiling pallas_dlhs_default_tiling(const KernelSpec& s);
// How a Pallas gmm module's differentiable_gmm computes its VJP (its kernels: pallas_dlhs_kernel
// and pallas_drhs_kernel).
enum class PallasVjp {
  kNone,         // no differentiable_gmm: tgmm modules, lhs codes of fewer than 8 bits
  kFloat,        // float operands: dlhs = gmm(dout, rhs read transposed), drhs = tgmm(lhs, dout)
  kFrozen,       // float lhs, quantized rhs (frozen weights): dlhs = dout x rhs dequantized in VMEM
  kFp8Blocks,    // fp8 lhs block:B, fp8 rhs block:BkxBn, quantized by the module from float
                 // operands (training): dout quantized to e5m2, rows in blocks of Bn and columns
                 // in blocks of B global rows; dlhs = gmm(dout codes, rhs codes read transposed),
                 // drhs = tgmm(lhs's column codes, dout's column codes)
  kDequantized,  // other whole-byte codes on both sides, quantized by the module from float
                 // operands: dlhs = dout x rhs dequantized in VMEM, drhs = tgmm(lhs dequantized,
                 // dout) in f32
};
PallasVjp pallas_vjp(const KernelSpec& s);
// The dtype of the gradient codes of kFp8Blocks (DeepGEMM's and Transformer Engine's recipe).
inline constexpr DType kPallasGradDtype = DType::kF8E5M2;
// The backward kernels of a gmm module with a VJP, as specs of their own problems (tilings
// dlhs_tiling and drhs_tiling): dlhs contracts over N and writes K columns; drhs is a tgmm.
// pallas_drhs_kernel is for kFloat, kFp8Blocks and kDequantized.
KernelSpec pallas_dlhs_kernel(const KernelSpec& s);
KernelSpec pallas_drhs_kernel(const KernelSpec& s);
// Codes per byte along a Pallas gmm's K and N: sub-byte codes pack along their operand's minor
// axis (lhs: K; rhs: N, or K when transposed), so blocks along it hold whole bytes.
struct PackedAxes {
  int64_t k = 1;
  int64_t n = 1;
};
PackedAxes pallas_packed_axes(const KernelSpec& s);
// The finest scale block along the contraction axis of a quantized kernel (K for gmm, M for
// tgmm; 0: no block scales: one block, the whole axis).
int64_t pallas_scale_block(const KernelSpec& s);
// VMEM of a Pallas kernel (a spec of its own problem): its double-buffered blocks plus its f32
// accumulator tile (pallas_acc_bytes, the kernel's scratch).
int64_t pallas_vmem_bytes(const KernelSpec& s);
int64_t pallas_acc_bytes(const KernelSpec& s);

}  // namespace gmmgen
