// The C++ target on x86-64: its ISA families (flags, guards, micro-kernel register tiles), default
// tilings and scratch footprints. Which families this machine runs is the runtime's to probe
// (gmmgen/platform.hpp): the generator may run on another machine at build time.
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
// (Sapphire Rapids and later) for bf16 x bf16 gmm; clang spells its macros __AMXTILE__ and
// __AMXBF16__, GCC __AMX_TILE__ and __AMX_BF16__.
constexpr std::string_view kAvx512Bf16Guard =
    "defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && "
    "defined(__AVX512VL__) && defined(__AVX512BF16__) && defined(__AVX512VNNI__) && "
    "defined(__FMA__) && defined(__F16C__)";
const std::array<IsaFamily, 5> kFamilies{{
    {Isa::kAmx, "amx",
     "avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,avx512vnni,avx2,fma,f16c,amx-tile,amx-bf16",
     "defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && "
     "defined(__AVX512VL__) && defined(__AVX512BF16__) && defined(__AVX512VNNI__) && "
     "defined(__FMA__) && defined(__F16C__) && (defined(__AMX_TILE__) || defined(__AMXTILE__)) && "
     "(defined(__AMX_BF16__) || defined(__AMXBF16__))",
     "cpp/ukernel/amx.inc", 16, 6, 64, true, true, false, true, "cpp/quant/decode_avx512.inc"},
    {Isa::kAvx512Bf16, "avx512bf16",
     "avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,avx512vnni,avx2,fma,f16c", kAvx512Bf16Guard,
     "cpp/ukernel/avx512bf16.inc", 16, 6, 64, true, true, true, false,
     "cpp/quant/decode_avx512.inc"},
    {Isa::kAvx512, "avx512", "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c", kAvx512Guard,
     "cpp/ukernel/avx512.inc", 16, 6, 64, false, false, true, false, "cpp/quant/decode_avx512.inc"},
    {Isa::kAvx2, "avx2", "avx2,fma,f16c",
     "defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)", "cpp/ukernel/avx2.inc", 8, 6, 16,
     false, true, false, false, "cpp/quant/decode_avx2.inc"},
    {Isa::kGeneric, "generic", "", "1", "cpp/ukernel/generic.inc", 1, 4, 16, false, false, false,
     false, "cpp/quant/decode_generic.inc"},
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

// C++ target defaults, from sweeps on Zen 4 (median of 3, S1-S4; the landscape is flat within
// ~7% around the choice). gmm: an item is up to tm rows of one group and tn columns; per k-block
// of tk its weights are packed (or read in place) once and used by every mr-row register tile.
// tm=256 makes one item of most groups' rows (S1 with tm=120 re-read the weights per 120 rows:
// -16%); tk=128 keeps a packed panel (128 x 64 f32 = 32 KiB) in L1/L2 while the row tiles sweep
// it; tn=64 is one AVX-512 register tile wide (S1 214 vs 205 GFLOP/s at tn=128, bf16 S3 264 vs
// 233). tgmm: an item is a [tk x tn] tile of one group's output, summed over the group's rows tm
// at a time (both operands' chunks stay in L2).
Tiling default_tiling(const KernelSpec& s) {
  return target_of(s.target).default_tiling(s);
}

Tiling cpp_default_tiling(const KernelSpec& s) {
  Tiling t;
  if (s.op == Op::kTgmm) {
    // C tiles of 96 rows x 128 columns either way: rows over k and columns over n, or with out
    // stored [N, K] rows over n and columns over k (tk=96 there left a 64-column register tile
    // half empty on AVX-512: S1 f32 0.6x -> 0.86x oneDNN on Zen 4, avx2 0.73x -> 0.79x).
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

// From sweeps of S1-S4 and the MoE example's products on Zen 4 (gmm-gen tune, f32): gmm items
// of tm=512 rows pack each weight block once for groups of 256-512 rows (S1 +5%, S2 +3%); with
// fewer than 64 rows per group the weights stream from memory once per call and an item of
// tn=256 columns reads each [K, N] weight row in runs 4x longer, which the prefetchers follow
// (S3 122 -> 131 GFLOP/s, S4 107 -> 133). The avx2 family (6x16 register tiles of 256-bit
// vectors) also wants k-blocks of tk=256 there: S3 72 -> 118 GFLOP/s, S4 77-83 -> 93-109, where
// the AVX-512 families are even in f32 and ~5% slower in bf16. tgmm's default was within
// 8% of the best on S1-S4 and the MoE products, except for a narrow output (the MoE router's weight
// gradient, N=8): an item is a [tk x tn] output tile, and with tn <= 32 a deeper tk=256 gives each
// pass over the group's rows enough work (0.28 -> 0.22 ms, +25%).
Tiling heuristic_tiling(const KernelSpec& s, double rows_per_group, Isa native) {
  Tiling t = default_tiling(s);
  if (s.target != TargetKind::kCpp) return t;
  if (s.isa == Isa::kNative && native == Isa::kNative)
    throw SpecError("heuristic_tiling: isa=native needs the family it stands for on this machine");
  const IsaFamily& f = isa_family(s.isa == Isa::kNative ? native : s.isa);
  if (s.op == Op::kTgmm) {
    // On an AMX Xeon (2 cores), which copies each chunk of rows (tgmm_in_place): output tiles of
    // 288 x 384 (C rows x columns) summed over chunks of 64 rows (S1 f32 196-231 -> 270 GFLOP/s,
    // 0.73-0.85x -> 0.99x oneDNN; S2 +15%; [N, K] output 163 -> 264). A narrow output keeps
    // the rule below.
    if (f.tiles && s.lhs == DType::kF32 && s.rhs == DType::kF32 && s.n > 32) {
      t.tm = 64;
      t.tk = std::clamp<int64_t>(s.k, 1, s.transpose_rhs ? 384 : 288);
      t.tn = std::clamp<int64_t>(s.n, 1, s.transpose_rhs ? 288 : 384);
    }
    // Out stored [N, K] on the AVX-512 families: C rows run over n and columns over k, and wide
    // tiles along k read each lhs row in runs of 2 KiB (tk=96: 384 bytes) that the prefetchers
    // follow. Zen 4, 2 threads, f32 S1-S4 0.64-0.98x -> 1.02-2.1x oneDNN (S3 61 -> 121-137
    // GFLOP/s), bf16 S1 132 -> 189 and S3 67 -> 147; avx2 was 5-10% slower with it (kept).
    if (s.transpose_rhs && f.vec == 16 && !f.tiles && s.n > 32) {
      t.tk = std::clamp<int64_t>(s.k, 1, 512);
      t.tn = std::clamp<int64_t>(s.n, 1, 96);
    }
    // bf16 x bf16 in pairs of rows (vdpbf16ps, both operands' chunks packed; lhs stored [K, M]
    // read in place): C tiles of 192 x 192 either way. Zen 5, 2 threads, against the rules above
    // in the same runs: S1 0.92-1.01x -> 0.98-1.05x oneDNN, S2 0.93-0.95x -> 0.96-0.98x, S4
    // 1.51-1.52x -> 1.77-2.21x; out stored [N, K] S2 0.96-1.01x -> 1.09-1.11x.
    // Quantized operands decoded to bf16 pairs (quant_pairs) take the same tiles: Zen 4, 2
    // threads, f8e4m3 x f8e5m2 block:128 at S1's shape ran 32.4-32.9 ms with 96 x 128, 192 x 192
    // or tm=128, 34.3 with 128 x 256 and 56.7 with 256 x 256.
    if ((bf16_pairs(s, f) || quant_pairs(s, f)) && s.n > 32) {
      t.tk = std::clamp<int64_t>(s.k, 1, 192);
      t.tn = std::clamp<int64_t>(s.n, 1, 192);
    }
    if (s.n <= 32) t.tk = std::clamp<int64_t>(s.k, 1, 256);
    return t;
  }
  t.tm = 512;
  // f32 lhs rows are read in place by the micro-kernel, six rows at a time, tk values of each
  // per k-block: on an AMX Xeon (2 cores) short runs of those rows wait on memory, and whole rows
  // pay (S1 f32 264-266 -> 312-314 GFLOP/s at tk=1024 tn=128, 0.95x -> 1.1x oneDNN; S2 228-233
  // -> 245-249; [N, K] weights 236 -> 305; f16 lhs, converted to contiguous rows, 299 -> 308).
  // (Quantized weights too: f32 x i8 channel S1 257 -> 306, S2 250 -> 288.) Small groups, whose
  // weights stream, keep the rules below (f32 x i8 at tk=1024: S3 171 -> 148).
  const bool small = rows_per_group > 0 && rows_per_group < 64;
  if (f.tiles && s.lhs == DType::kF32 && !small) {
    t.tk = std::clamp<int64_t>(s.k, 1, 1024);
    t.tn = std::clamp<int64_t>(s.n, 1, 128);
  }
  // Float operands on the vector families, larger groups: k-blocks of up to 1024 (all of K at S1)
  // keep each register tile's sums in registers through K, read the lhs rows in runs of 4 KiB,
  // and pack an item's weights once (1024 x 64 f32 = 256 KiB, in L2; the last register tiles
  // prefetch the next item's). Zen 4, 2 threads, against tk=128 in the same runs: f32 S1 +3-5%,
  // [N, K] weights +4.5%, S2 even; bf16 pairs S1 +6%, S2 +5%; bf16 widened to f32 (avx512,
  // avx2) +1%; the avx2 family's f32 (run there) +5%.
  if (!f.tiles && f.vec > 1 && !small && !codes::is_quantized(s.lhs) && !codes::is_quantized(s.rhs))
    t.tk = std::clamp<int64_t>(s.k, 1, 1024);
  // bf16 x bf16 [K, N] weights on AMX tiles (Xeon, 2 cores), larger groups: an item packs all of
  // K for its columns in one pass over each pair of weight rows, and each lhs tile serves every
  // 32-column block of the item, so wider items pay while their packed weights (K x tn bf16) stay
  // within 1 MiB of the 2 MiB L2: tn=256 against 64 took S1 from ~1900 to ~2010 GFLOP/s and S2
  // from ~905 to ~990 (medians of 4 alternated runs); [N, K] weights, packed panel by panel, were
  // even (kept at 64).
  if (f.tiles && s.lhs == DType::kBF16 && s.rhs == DType::kBF16 && !s.transpose_rhs && !small) {
    const int64_t fit = (int64_t(1) << 20) / (2 * std::max<int64_t>(s.k, 1)) / f.nr * f.nr;
    t.tn = std::clamp<int64_t>(s.n, 1, std::clamp<int64_t>(fit, f.nr, 4 * f.nr));
  }
  if (small) {
    t.tn = std::clamp<int64_t>(s.n, 1, 256);
    if (f.vec == 8) t.tk = std::clamp<int64_t>(s.k, 1, 256);
    // bf16 x bf16 [K, N] weights packed into pairs for vdpbf16ps keep items of one register tile
    // of columns: Zen 4, 2 threads, S3 229-237 -> 276-282 GFLOP/s at tn=64, S4 230-247 -> 271-274
    // (tn=128 in between). Quantized weights decoded into pairs were even or faster at 256.
    if (f.bf16_dot && !f.tiles && s.lhs == DType::kBF16 && s.rhs == DType::kBF16 &&
        !s.transpose_rhs)
      t.tn = std::clamp<int64_t>(s.n, 1, f.nr);
    // f32 [N, K] weights (packed eight columns at a time down each k-block) on the AVX-512
    // families without tiles: deeper blocks read each column in longer runs. Zen 4, 2 threads,
    // S3 95-99 -> 116 GFLOP/s at tk=512 tn=128 (tn=64: 113-120), S4 93 -> 101-107; bf16 was even
    // from tk=128 to 512 and keeps the rule above, avx2 was even either way and keeps its own.
    if (f.vec == 16 && !f.tiles && s.rhs == DType::kF32 && s.transpose_rhs) {
      t.tk = std::clamp<int64_t>(s.k, 1, 512);
      t.tn = std::clamp<int64_t>(s.n, 1, 128);
    }
    // f32 [K, N] weights read in place by small groups on an AMX Xeon (2 cores, 2 MiB L2): each
    // k-block is prefetched into L2 while the one before computes, and both run fastest when the
    // block is whole weight rows (long runs in few pages) and shallow (tk=32: S3 107 -> 146-151
    // GFLOP/s, 1.33x -> 1.8x oneDNN; S4 98 -> 170-181, 1.15x -> 2.0x; at tn=2048, tk=64 gave 131
    // and tk=128 71: two 1 MiB blocks overfill L2). Items stay >= 16 per call (g n-tiles), so
    // few groups still spread over threads. [N, K] weights keep tk=128 (their runs are tk long:
    // 0.74-0.85x at tk=128-1024 against 0.38x at 32). Not measured on Zen 4, which keeps the
    // choice above.
    if (f.tiles && s.rhs == DType::kF32 && !s.transpose_rhs) {
      const int64_t spread = std::max<int64_t>(256, s.n * s.g_local / 16 / 64 * 64);
      t.tn = std::clamp<int64_t>(s.n, 1, std::min<int64_t>(2048, spread));
      t.tk = std::clamp<int64_t>(s.k, 1, 32);
    }
  }
  // Quantized weights with bf16 activations on AMX tiles (Xeon, 2 cores): each k-block decodes
  // its weights and takes its C tiles out of and back into scratch, so deeper blocks pay: tk=256
  // against 128 took S1 from 0.58-0.83x of the bf16 kernel to 0.70-1.08x, S3/S4 from 1.12-1.68x
  // to 1.22-1.89x; 512 was no better.
  if (f.tiles && s.lhs == DType::kBF16 && codes::is_quantized(s.rhs))
    t.tk = std::clamp<int64_t>(s.k, 1, 256);
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

bool tile_path(const KernelSpec& s, const IsaFamily& f) {
  return f.tiles && s.op == Op::kGmm && s.lhs == DType::kBF16 && s.rhs == DType::kBF16 &&
         tile_scratch_bytes(s, f) <= kMaxTileScratchBytes;
}

bool bf16_pairs(const KernelSpec& s, const IsaFamily& f) {
  return f.bf16_dot && s.lhs == DType::kBF16 && s.rhs == DType::kBF16;
}

bool quant_int_dot(const KernelSpec& s, const IsaFamily& f) {
  const int64_t tk = run_tiling(s).tk;
  return f.int_dot && s.op == Op::kGmm && is_integer(s.lhs) && is_integer(s.rhs) &&
         (tk % 4 == 0 || tk >= s.k);
}

bool quant_pairs(const KernelSpec& s, const IsaFamily& f) {
  if (!f.bf16_dot || !(codes::is_quantized(s.lhs) || codes::is_quantized(s.rhs))) return false;
  if (!codes::bf16_exact(s.lhs) || !codes::bf16_exact(s.rhs)) return false;
  if (s.op == Op::kTgmm) return true;
  const int64_t tk = run_tiling(s).tk;
  return !quant_int_dot(s, f) && (tk % 2 == 0 || tk >= s.k);
}

int64_t scratch_bytes(const KernelSpec& s, const IsaFamily& f) {
  const Tiling run = run_tiling(s);
  const int64_t tm = run.tm, tk = run.tk, tn = run.tn;
  int64_t floats = 0;
  if (s.op == Op::kTgmm) {
    // The output tile [rows][cols] (rows over k, or over n when out is transposed) as f32, and a
    // chunk of tm group rows of the A operand [tm][rows] and of the B operand [tm][cols] in f32,
    // or packed into bf16 pairs of rows (tm made even, A's rows in whole runs of 32 columns).
    const bool t = s.transpose_rhs;
    const int64_t rows = t ? tn : tk, cols = packed_cols(t ? tk : tn, f.nr);
    const bool pairs = bf16_pairs(s, f) || quant_pairs(s, f);
    floats = rows * cols +
             (pairs ? (tm + 1) / 2 * (packed_cols(rows, 32) + cols) : tm * rows + tm * cols);
  } else {
    // The f32 accumulator [tm][tn'], the packed rhs block [tk'][tn'] (tk' even for bf16 pairs),
    // and mr lhs rows converted to f32 [mr][tk].
    const int64_t cols = packed_cols(tn, f.nr);
    floats = tm * cols + (tk + 1) / 2 * 2 * cols + f.mr * tk;
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
  return tile_path(s, f) ? std::max(bytes, tile_scratch_bytes(s, f)) : bytes;
}

int64_t scratch_bytes(const KernelSpec& s) {
  if (s.isa != Isa::kNative) return scratch_bytes(s, isa_family(s.isa));
  int64_t most = 0;
  for (const auto& f : kFamilies) most = std::max(most, scratch_bytes(s, f));
  return most;
}

}  // namespace gmmgen
