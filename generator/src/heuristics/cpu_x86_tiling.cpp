// The C++ target's tiling rules on x86-64, as data: heuristic_tiling starts from the target's
// default tiling and applies, in order, every rule whose conditions hold. The measurements
// behind each rule are in docs/internals/tiling-rules.md, under the rule's name.
#include <algorithm>
#include <array>
#include <optional>

#include "gmmgen/codes.h"
#include "gmmgen/heuristics.h"

namespace gmmgen {
namespace {

bool rule_operands_hold(RuleOperands o, const KernelSpec& s, const IsaFamily& f) {
  using enum RuleOperands;
  switch (o) {
    case kAnyOperands:
      return true;
    case kF32xF32:
      return s.lhs == DType::kF32 && s.rhs == DType::kF32;
    case kF32Lhs:
      return s.lhs == DType::kF32;
    case kF32Rhs:
      return s.rhs == DType::kF32;
    case kBf16xBf16:
      return s.lhs == DType::kBF16 && s.rhs == DType::kBF16;
    case kFloat:
      return !codes::is_quantized(s.lhs) && !codes::is_quantized(s.rhs);
    case kPairs:
      return bf16_pairs(s, f) || quant_pairs(s, f);
    case kF32xQuantized:
      return s.lhs == DType::kF32 && codes::is_quantized(s.rhs);
    case kBf16xQuantized:
      return s.lhs == DType::kBF16 && codes::is_quantized(s.rhs);
    case kBf16xStreamed:
      return s.lhs == DType::kBF16 && codes::is_quantized(s.rhs) &&
             (bits_of(s.rhs) == 8 || bits_of(s.rhs) == 4);
    case kIntDot:
      return quant_int_dot(s, f);
    case kIntDotWholeK:
      return quant_int_dot(s, f) && s.lhs_quant.kind != QuantKind::kBlock &&
             s.rhs_quant.kind != QuantKind::kBlock;
  }
  return false;
}

bool rule_holds(const TilingRule& r, const KernelSpec& s, const IsaFamily& f, double rows) {
  using enum RuleLayout;
  using enum RuleRows;
  using enum RuleWidth;
  const bool small = rows > 0 && rows < kSmallGroupRows;
  return r.op == s.op && (r.families & family_bit(f.isa)) && rule_operands_hold(r.operands, s, f) &&
         (r.layout == kAnyLayout || (r.layout == kNK) == s.transpose_rhs) &&
         (r.rows == kAnyRows || (r.rows == kSmall) == small) &&
         (r.width == kAnyWidth || (r.width == kNarrow) == (s.n <= kNarrowColumns));
}

// A tile's new value; `dim` is the problem's size along it (none for tm, which is not clipped).
int64_t rule_tile_value(const RuleTile& t, int64_t current, std::optional<int64_t> dim,
                        const KernelSpec& s, const IsaFamily& f) {
  using enum RuleTileKind;
  const auto clip = [dim](int64_t v) { return dim ? std::clamp<int64_t>(*dim, 1, v) : v; };
  switch (t.kind) {
    case kKeep:
      return current;
    case kSet:
      return clip(t.value);
    case kPackedWeightsFit: {
      // Whole register tiles of columns whose packed weights (K x tn bf16) fit t.value bytes,
      // between one and four register tiles.
      const int64_t fit = t.value / (2 * std::max<int64_t>(s.k, 1)) / f.nr * f.nr;
      return clip(std::clamp<int64_t>(fit, f.nr, 4 * f.nr));
    }
    case kSpreadColumns: {
      // Columns that leave >= 16 items per call (g_local n-tiles), in multiples of 64, between
      // 256 and t.value.
      const int64_t spread = std::max<int64_t>(256, s.n * s.g_local / 16 / 64 * 64);
      return clip(std::min(t.value, spread));
    }
    case kHalfColumns: {
      // At least two items per group along n, in multiples of 64, between 256 and t.value.
      const int64_t half = std::max<int64_t>(256, s.n / 2 / 64 * 64);
      return clip(std::min(t.value, half));
    }
  }
  return current;
}

}  // namespace

std::span<const TilingRule> cpu_tiling_rules() {
  using enum RuleOperands;
  using enum RuleLayout;
  using enum RuleRows;
  using enum RuleWidth;
  using enum RuleTileKind;

  constexpr uint8_t kAmx = family_bit(Isa::kAmx);
  constexpr uint8_t kAvx512Bf16 = family_bit(Isa::kAvx512Bf16);
  constexpr uint8_t kAvx512Vnni = family_bit(Isa::kAvx512Vnni);
  constexpr uint8_t kAvx512 = family_bit(Isa::kAvx512);
  constexpr uint8_t kAvx2 = family_bit(Isa::kAvx2);
  constexpr uint8_t kAnyFamily = 0xff;

  constexpr RuleTile keep{};
  constexpr auto set = [](int64_t v) { return RuleTile{kSet, v}; };
  constexpr auto fit = [](int64_t bytes) { return RuleTile{kPackedWeightsFit, bytes}; };
  constexpr auto spread = [](int64_t most) { return RuleTile{kSpreadColumns, most}; };
  constexpr auto halves = [](int64_t most) { return RuleTile{kHalfColumns, most}; };
  constexpr uint8_t avx512s = kAvx512Bf16 | kAvx512Vnni | kAvx512;
  constexpr uint8_t vnnis = kAvx512Bf16 | kAvx512Vnni;  // vpdpbusd without tiles
  constexpr uint8_t int_dots = kAvx2 | vnnis;           // integer dot products measured (not amx's)
  constexpr uint8_t widens_bf16 = kAvx512Vnni | kAvx512;  // AVX-512 without a bf16 dot product

  // clang-format off
  static constexpr std::array kRules{
    //         name                        op          families          operands          layout       rows       width       tm         tk          tn
    TilingRule{"tgmm-amx-f32",             Op::kTgmm,  kAmx,             kF32xF32,         kKN,         kAnyRows,  kWide,      set(64),   set(288),   set(384)},
    TilingRule{"tgmm-amx-f32",             Op::kTgmm,  kAmx,             kF32xF32,         kNK,         kAnyRows,  kWide,      set(64),   set(384),   set(288)},
    TilingRule{"tgmm-avx512-nk",           Op::kTgmm,  avx512s,          kAnyOperands,     kNK,         kAnyRows,  kWide,      keep,      set(512),   set(96)},
    TilingRule{"tgmm-pairs",               Op::kTgmm,  kAnyFamily,       kPairs,           kAnyLayout,  kAnyRows,  kWide,      keep,      set(192),   set(192)},
    TilingRule{"tgmm-amx-bf16",            Op::kTgmm,  kAmx,             kBf16xBf16,       kAnyLayout,  kAnyRows,  kWide,      keep,      set(384),   set(384)},
    TilingRule{"tgmm-narrow",              Op::kTgmm,  kAnyFamily,       kAnyOperands,     kAnyLayout,  kAnyRows,  kNarrow,    keep,      set(256),   keep},
    TilingRule{"gmm-rows",                 Op::kGmm,   kAnyFamily,       kAnyOperands,     kAnyLayout,  kAnyRows,  kAnyWidth,  set(512),  keep,       keep},
    TilingRule{"gmm-amx-f32-large",        Op::kGmm,   kAmx,             kF32Lhs,          kAnyLayout,  kLarge,    kAnyWidth,  keep,      set(1024),  set(128)},
    TilingRule{"gmm-vector-float-large",   Op::kGmm,   avx512s | kAvx2,  kFloat,           kAnyLayout,  kLarge,    kAnyWidth,  keep,      set(1024),  keep},
    TilingRule{"gmm-amx-bf16-large",       Op::kGmm,   kAmx,             kBf16xBf16,       kKN,         kLarge,    kAnyWidth,  keep,      keep,       fit(1 << 20)},
    TilingRule{"gmm-int-large",            Op::kGmm,   int_dots,         kIntDot,          kAnyLayout,  kLarge,    kAnyWidth,  keep,      set(256),   set(128)},
    TilingRule{"gmm-avx512bf16-int-deep",  Op::kGmm,   kAvx512Bf16,      kIntDot,          kAnyLayout,  kLarge,    kAnyWidth,  keep,      set(1024),  keep},
    TilingRule{"gmm-amx-int-large",        Op::kGmm,   kAmx,             kIntDot,          kKN,         kLarge,    kAnyWidth,  keep,      keep,       set(128)},
    TilingRule{"gmm-amx-int-whole-k",      Op::kGmm,   kAmx,             kIntDotWholeK,    kKN,         kLarge,    kAnyWidth,  keep,      set(1024),  keep},
    TilingRule{"gmm-small",                Op::kGmm,   kAnyFamily,       kAnyOperands,     kAnyLayout,  kSmall,    kAnyWidth,  keep,      keep,       set(256)},
    TilingRule{"gmm-avx2-small",           Op::kGmm,   kAvx2,            kAnyOperands,     kAnyLayout,  kSmall,    kAnyWidth,  keep,      set(256),   keep},
    TilingRule{"gmm-avx2-f32-kn-small",    Op::kGmm,   kAvx2,            kF32Rhs,          kKN,         kSmall,    kAnyWidth,  keep,      set(64),    keep},
    TilingRule{"gmm-bf16-pairs-small",     Op::kGmm,   kAvx512Bf16,      kBf16xBf16,       kKN,         kSmall,    kAnyWidth,  keep,      keep,       set(64)},
    TilingRule{"gmm-avx512-f32-nk-small",  Op::kGmm,   avx512s,          kF32Rhs,          kNK,         kSmall,    kAnyWidth,  keep,      set(512),   set(128)},
    TilingRule{"gmm-int-nk-small",         Op::kGmm,   vnnis,            kIntDot,          kNK,         kSmall,    kAnyWidth,  keep,      set(256),   set(128)},
    TilingRule{"gmm-xeon-f32-kn-small",    Op::kGmm,   kAmx | widens_bf16, kF32Rhs,        kKN,         kSmall,    kAnyWidth,  keep,      set(32),    spread(2048)},
    TilingRule{"gmm-avx512-bf16-kn-small", Op::kGmm,   widens_bf16,      kBf16xBf16,       kKN,         kSmall,    kAnyWidth,  keep,      set(64),    spread(2048)},
    TilingRule{"gmm-f32-quantized-small",  Op::kGmm,   kAmx | avx512s,   kF32xQuantized,   kAnyLayout,  kSmall,    kAnyWidth,  keep,      set(64),    halves(512)},
    TilingRule{"gmm-bf16-quantized-small", Op::kGmm,   kAvx512Bf16,      kBf16xQuantized,  kKN,         kSmall,    kAnyWidth,  keep,      set(256),   keep},
    TilingRule{"gmm-amx-bf16-quantized",   Op::kGmm,   kAmx,             kBf16xQuantized,  kAnyLayout,  kAnyRows,  kAnyWidth,  keep,      set(256),   keep},
    TilingRule{"gmm-amx-bf16-codes-small", Op::kGmm,   kAmx,             kBf16xStreamed,   kKN,         kSmall,    kAnyWidth,  keep,      set(128),   set(512)},
  };
  // clang-format on
  return kRules;
}

Tiling heuristic_tiling(const KernelSpec& s, double rows_per_group, Isa native,
                        std::vector<std::string_view>* applied) {
  Tiling t = default_tiling(s);
  if (s.target != TargetKind::kCpp) return t;
  if (s.isa == Isa::kNative && native == Isa::kNative)
    throw SpecError("heuristic_tiling: isa=native needs the family it stands for on this machine");
  const IsaFamily& f = isa_family(s.isa == Isa::kNative ? native : s.isa);
  for (const TilingRule& r : cpu_tiling_rules()) {
    if (!rule_holds(r, s, f, rows_per_group)) continue;
    t.tm = rule_tile_value(r.tm, t.tm, std::nullopt, s, f);
    t.tk = rule_tile_value(r.tk, t.tk, s.k, s, f);
    t.tn = rule_tile_value(r.tn, t.tn, s.n, s, f);
    if (applied) applied->push_back(r.name);
  }
  return t;
}

}  // namespace gmmgen
