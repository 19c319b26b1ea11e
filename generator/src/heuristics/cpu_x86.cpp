// The C++ target on x86-64: its ISA families (flags, guards, micro-kernel register tiles), default
// tilings and scratch footprints; its tiling rules are cpu_x86_tiling.cpp. Which families this
// machine runs is the runtime's to probe (gmmgen/platform.hpp): the generator may run on another
// machine at build time.
#include <algorithm>
#include <array>

#include "gmmgen/codes.h"
#include "gmmgen/heuristics.h"
#include "gmmgen/target.h"

namespace gmmgen {
namespace {

constexpr std::string_view kAvx512Guard =
    "defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && "
    "defined(__AVX512VL__) && defined(__FMA__) && defined(__F16C__)";

// Best first: native resolves to the first family whose guard holds. Register tiles measured on
// Zen 4 (explicit micro-kernels, K=1024 packed panels, one core): avx512 6x64 and 8x48 at
// 99-100% of the FMA peak with g++ 12 and clang++ 14, 12x32 at 89%, 14x32 at 75%; avx2 6x16 at
// 93% with both compilers, 4x24 at 69% (g++) / 90% (clang++). amx is avx512bf16 plus AMX tiles
// (Sapphire Rapids and later: tile, bf16 and int8 together) for bf16 x bf16 gmm and tgmm and for
// gmm of bf16 or i8 activations by quantized weights; clang spells its macros __AMXTILE__,
// __AMXBF16__ and __AMXINT8__, GCC __AMX_TILE__, __AMX_BF16__ and __AMX_INT8__.
constexpr std::string_view kAvx512Bf16Guard =
    "defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && "
    "defined(__AVX512VL__) && defined(__AVX512BF16__) && defined(__AVX512VNNI__) && "
    "defined(__FMA__) && defined(__F16C__)";
// avx512vnni is avx512 plus VNNI's integer dot product (Cascade Lake and Ice Lake Xeons, the
// AVX-512 servers without BF16): its f32 and bf16 code is avx512's, its integer codes avx512bf16's.
constexpr std::string_view kAvx512VnniGuard =
    "defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && "
    "defined(__AVX512VL__) && defined(__AVX512VNNI__) && defined(__FMA__) && defined(__F16C__)";
const std::array<IsaFamily, 6> kFamilies{{
    {Isa::kAmx, "amx",
     "avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,avx512vnni,avx2,fma,f16c,amx-tile,amx-bf16,"
     "amx-int8",
     "defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && "
     "defined(__AVX512VL__) && defined(__AVX512BF16__) && defined(__AVX512VNNI__) && "
     "defined(__FMA__) && defined(__F16C__) && (defined(__AMX_TILE__) || defined(__AMXTILE__)) && "
     "(defined(__AMX_BF16__) || defined(__AMXBF16__)) && "
     "(defined(__AMX_INT8__) || defined(__AMXINT8__))",
     "cpp/ukernel/amx.inc", 16, 6, 64, true, true, false, false, 16, true,
     "cpp/quant/decode_avx512.inc"},
    {Isa::kAvx512Bf16, "avx512bf16",
     "avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,avx512vnni,avx2,fma,f16c", kAvx512Bf16Guard,
     "cpp/ukernel/avx512bf16.inc", 16, 6, 64, true, true, true, true, 0, false,
     "cpp/quant/decode_avx512.inc"},
    {Isa::kAvx512Vnni, "avx512vnni", "avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,avx2,fma,f16c",
     kAvx512VnniGuard, "cpp/ukernel/avx512vnni.inc", 16, 6, 64, false, true, false, false, 0, false,
     "cpp/quant/decode_avx512.inc"},
    {Isa::kAvx512, "avx512", "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c", kAvx512Guard,
     "cpp/ukernel/avx512.inc", 16, 6, 64, false, false, false, false, 0, false,
     "cpp/quant/decode_avx512.inc"},
    {Isa::kAvx2, "avx2", "avx2,fma,f16c",
     "defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)", "cpp/ukernel/avx2.inc", 8, 6, 16,
     false, true, false, true, 0, false, "cpp/quant/decode_avx2.inc"},
    {Isa::kGeneric, "generic", "", "1", "cpp/ukernel/generic.inc", 1, 4, 16, false, false, false,
     true, 0, false, "cpp/quant/decode_generic.inc"},
}};

}  // namespace

std::span<const IsaFamily> isa_families() {
  return kFamilies;
}

const IsaFamily& isa_family(Isa isa) {
  for (const auto& f : kFamilies)
    if (f.isa == isa) return f;
  throw SpecError("isa=" + std::string(to_string(isa)) +
                  " is resolved where the kernel is compiled; it has no family of its own");
}

std::vector<std::string> isa_flags(Isa isa) {
  if (isa == Isa::kNative) return {"-march=native"};
  return {};
}

// The C++ target's default tiling (docs/internals/tiling-rules.md, "Default tiling", says why).
Tiling default_tiling(const KernelSpec& s) {
  return target_of(s.target).default_tiling(s);
}

Tiling cpp_default_tiling(const KernelSpec& s) {
  Tiling t;
  if (s.op == Op::kTgmm) {
    // C tiles of 96 rows x 128 columns either way: rows over k and columns over n, or with out
    // stored [N, K] rows over n and columns over k.
    t.tm = 256;
    t.tk = std::clamp<int64_t>(s.k, 1, s.transpose_rhs ? 128 : 96);
    t.tn = std::clamp<int64_t>(s.n, 1, s.transpose_rhs ? 96 : 128);
    return t;
  }
  t.tm = 256;
  t.tk = std::clamp<int64_t>(s.k, 1, 128);
  t.tn = std::clamp<int64_t>(s.n, 1, 64);
  return t;
}

Tiling run_tiling(const KernelSpec& s) {
  Tiling t = s.tiling;
  t.tk = std::min(t.tk, std::max<int64_t>(s.k, 1));
  t.tn = std::min(t.tn, std::max<int64_t>(s.n, 1));
  return t;
}

// What the kernel's scratch struct holds (templates/cpp/gmm.cpp and tgmm.cpp), in f32 units;
// the struct is 64-byte aligned, so its size is a multiple of 64.
int64_t tile_scratch_bytes(const KernelSpec& s, const IsaFamily& f) {
  const int64_t k32 = (std::max<int64_t>(s.k, 1) + 31) / 32 * 32;
  const int64_t cols = packed_cols(run_tiling(s).tn, f.nr);
  return k32 * cols * 2 + 32 * k32 * 2 + 16 * 16 * 4 + 32 * cols * 4;
}

int64_t tgmm_a_rows(const KernelSpec& s, const IsaFamily& f) {
  const Tiling run = run_tiling(s);
  const int64_t rows = s.transpose_rhs ? run.tn : run.tk;  // A's columns
  const bool keeps = s.op == Op::kTgmm && f.vec == 16 && !f.tgmm_in_place && !bf16_pairs(s, f) &&
                     !codes::any_quantized(s) && !tile_path(s, f);
  return keeps ? std::max(run.tm, kTgmmKeepABytes / (4 * rows)) : run.tm;
}

bool tile_path(const KernelSpec& s, const IsaFamily& f) {
  if (!f.tiles || s.lhs != DType::kBF16 || s.rhs != DType::kBF16) return false;
  return s.op == Op::kTgmm || tile_scratch_bytes(s, f) <= kMaxTileScratchBytes;
}

bool bf16_pairs(const KernelSpec& s, const IsaFamily& f) {
  return f.bf16_dot && s.lhs == DType::kBF16 && s.rhs == DType::kBF16;
}

bool row_streams(const KernelSpec& s, const IsaFamily& f) {
  const int64_t tn = run_tiling(s).tn;
  return bf16_pairs(s, f) && s.op == Op::kGmm && !s.transpose_rhs && tn < s.n &&
         s.n <= kRowStreamColumns && (s.n & (s.n - 1)) == 0 && s.n % (2 * f.vec) == 0;
}

bool quant_int_dot(const KernelSpec& s, const IsaFamily& f) {
  const int64_t tk = run_tiling(s).tk;
  return f.int_dot && s.op == Op::kGmm && is_integer(s.lhs) && is_integer(s.rhs) &&
         (tk % 4 == 0 || tk >= s.k);
}

namespace {
// Whether codes can be summed in bf16 pairs on family f: every operand value a bf16 value, and
// gmm's k-blocks starting on a pair.
bool pairs_fit(const KernelSpec& s, const IsaFamily& f) {
  if (!f.bf16_dot || !(codes::is_quantized(s.lhs) || codes::is_quantized(s.rhs))) return false;
  if (!codes::bf16_exact(s.lhs) || !codes::bf16_exact(s.rhs)) return false;
  if (s.op == Op::kTgmm) return true;
  const int64_t tk = run_tiling(s).tk;
  return !quant_int_dot(s, f) && (tk % 2 == 0 || tk >= s.k);
}
}  // namespace

// On AMX Xeons vdpbf16ps sums at half the f32 FMA rate (bench's path peaks on one, 2 threads:
// 214 vs 427 GFLOP/s), so the amx family pairs codes only on its tiles, and elsewhere widens
// them to f32 as avx512 does (S1 f8e4m3 x f8e4m3 block:128: 268 vs 178 GFLOP/s).
bool quant_pairs(const KernelSpec& s, const IsaFamily& f) {
  return pairs_fit(s, f) && (!f.tiles || quant_tile_path(s, f));
}

// gmm on tiles: bf16 activations by weights decoded to bf16 pairs (tdpbf16ps), or i8 activations
// by integer weights decoded to s8 quads (tdpbssd); row tiles, k-blocks and scale blocks in
// whole 32-deep steps.
bool quant_tile_path(const KernelSpec& s, const IsaFamily& f) {
  const Tiling run = run_tiling(s);
  const auto steps = [](const Quant& q) {
    return q.kind != QuantKind::kBlock || q.block_k % 32 == 0;
  };
  if (!f.tiles || s.op != Op::kGmm || run.tm % 32 != 0 || run.tk % 32 != 0 || !steps(s.rhs_quant))
    return false;
  if (quant_int_dot(s, f)) return s.lhs == DType::kI8 && steps(s.lhs_quant);
  return pairs_fit(s, f) && s.lhs == DType::kBF16;
}

ProductPath product_path(const KernelSpec& s, const IsaFamily& f) {
  if (quant_tile_path(s, f) && quant_int_dot(s, f)) return ProductPath::kIntTiles;
  if (tile_path(s, f) || quant_tile_path(s, f)) return ProductPath::kTiles;
  if (quant_int_dot(s, f)) return ProductPath::kIntDot;
  if (bf16_pairs(s, f) || quant_pairs(s, f)) return ProductPath::kBf16Dot;
  return ProductPath::kF32Fma;
}

std::string_view to_string(ProductPath p) {
  switch (p) {
    case ProductPath::kBf16Dot:
      return "bf16-dot";
    case ProductPath::kIntDot:
      return "int-dot";
    case ProductPath::kTiles:
      return "amx-tiles";
    case ProductPath::kIntTiles:
      return "amx-int-tiles";
    case ProductPath::kF32Fma:
      break;
  }
  return "f32-fma";
}

int64_t scratch_bytes(const KernelSpec& s, const IsaFamily& f) {
  const Tiling run = run_tiling(s);
  const int64_t tm = run.tm, tk = run.tk, tn = run.tn;
  int64_t floats = 0;
  if (s.op == Op::kTgmm) {
    // The output tile [rows][cols] (rows over k, or over n when out is transposed) as f32, and a
    // chunk of tm group rows of the A operand [tm][rows] and of the B operand [tm][cols] in f32,
    // or packed into bf16 pairs of rows (tm made even, A's rows in whole runs of 32 columns; on
    // tiles tm and the output's rows in whole 32s).
    const bool t = s.transpose_rhs, tiles = tile_path(s, f);
    const int64_t rows = t ? tn : tk, cols = packed_cols(t ? tk : tn, f.nr);
    const bool pairs = bf16_pairs(s, f) || quant_pairs(s, f);
    const int64_t chunk = tiles ? (tm + 31) / 32 * 32 : (tm + 1) / 2 * 2;
    // (Without pairs A holds tgmm_a_rows rows; unquantized, a line after the operands says
    // which.)
    const int64_t key = codes::any_quantized(s) ? 0 : 16;
    floats = (tiles ? packed_cols(rows, 32) : rows) * cols +
             (pairs ? chunk / 2 * (packed_cols(rows, 32) + cols)
                    : tgmm_a_rows(s, f) * rows + tm * cols + key);
  } else {
    // The f32 accumulator [tm][tn'], the packed rhs block [tk'][tn'] (tk' even for bf16 pairs),
    // mr lhs rows converted to f32 [mr][tk], and where items of whole weight rows run their
    // sums [kRowStreamRows * kRowStreamPasses][n'] (and 16 more, to start them on a line) and lhs
    // pairs (a scratch of their own).
    const int64_t cols = packed_cols(tn, f.nr);
    const int64_t rows_scratch =
        kRowStreamRows * (kRowStreamPasses * packed_cols(s.n, f.nr) + kRowStreamDepth / 2) + 16;
    floats =
        tm * cols + (tk + 1) / 2 * 2 * cols + f.mr * tk + (row_streams(s, f) ? rows_scratch : 0);
  }
  // Quantized operands (templates/cpp/quant/): the partial product of the current scale block,
  // in f32 and in i32, beside the accumulators; gmm also stages one panel of decoded codes
  // [tk'][nr] and keeps its lhs rows at even length [mr][tk'].
  if (codes::is_quantized(s.lhs) || codes::is_quantized(s.rhs)) {
    const bool t = s.transpose_rhs;
    const int64_t acc = s.op == Op::kTgmm ? (t ? tn : tk) * packed_cols(t ? tk : tn, f.nr)
                                          : tm * packed_cols(tn, f.nr);
    // Each array starts on a cache line: up to 15 floats of padding after each of 6, and 16 for
    // an unused i32 partial.
    floats += 2 * acc + 16 + 6 * 15;
    // tgmm: the scales of the tile's rows and columns in the current block, and codes decoded to
    // bf16 before pairing [tm'][max(rows', cols)] with quant_pairs (a staged array of 16 without),
    // each on a cache line.
    if (s.op == Op::kTgmm) {
      const int64_t rows = t ? tn : tk, cols = packed_cols(t ? tk : tn, f.nr);
      floats += rows + cols + 8 + 3 * 15 +
                (quant_pairs(s, f) ? (tm + 1) / 2 * std::max(packed_cols(rows, 32), cols) : 0);
    }
    // gmm: one staged panel [tk'][nr], lhs rows of even length, and the rhs scales [tn'] of each
    // scale block closing in a k-block (tk / sb + 2 at most; sb: the finest block along K).
    if (s.op == Op::kGmm) {
      int64_t sb = s.k;
      for (const Quant& q : {s.lhs_quant, s.rhs_quant})
        if (q.kind == QuantKind::kBlock) sb = std::min(sb, q.block_k);
      const int64_t folds = tk / std::max<int64_t>(sb, 1) + 2;  // the kernel's FOLDS_PER_TK
      floats += (tk + 1) / 2 * 2 * f.nr + f.mr + folds * packed_cols(tn, f.nr);
      // On a family with tiles: 32 lhs rows of tk bf16 staged for them, and a 32 x 32 block of
      // P per scale block closing in a k-block, each on a cache line.
      if (f.tiles) floats += 16 * tk + 16 + folds * 32 * 32;
    }
  }
  const int64_t bytes = (floats * 4 + 63) / 64 * 64;
  return s.op == Op::kGmm && tile_path(s, f) ? std::max(bytes, tile_scratch_bytes(s, f)) : bytes;
}

int64_t scratch_bytes(const KernelSpec& s) {
  if (s.isa != Isa::kNative) return scratch_bytes(s, isa_family(s.isa));
  int64_t most = 0;
  for (const auto& f : kFamilies) most = std::max(most, scratch_bytes(s, f));
  return most;
}

}  // namespace gmmgen
