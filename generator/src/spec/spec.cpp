// Names of enum values, dtype properties and validation of a spec.
#include "gmmgen/spec.h"

#include "codecs.h"
#include "gmmgen/codes.h"
#include "gmmgen/heuristics.h"
#include "gmmgen/target.h"

namespace gmmgen {

std::string_view to_string(Op v) {
  return enum_entry(v).name;
}
std::string_view to_string(DType v) {
  return dtype_info(v).name;
}
std::string_view to_string(OutMode v) {
  return enum_entry(v).name;
}
std::string_view to_string(TargetKind v) {
  return enum_entry(v).name;
}
std::string_view to_string(Isa v) {
  return enum_entry(v).name;
}
std::string_view to_string(LhsLayout v) {
  return enum_entry(v).name;
}
std::string_view to_string(Tpu v) {
  return enum_entry(v).name;
}
DType parse_dtype(std::string_view s, std::string_view param) {
  return parse_enum<DType>(s, param);
}
Isa parse_isa(std::string_view s, std::string_view param) {
  return parse_enum<Isa>(s, param);
}

std::string to_string(const Quant& q) {
  switch (q.kind) {
    case QuantKind::kNone:
      return "none";
    case QuantKind::kTensor:
      return "tensor";
    case QuantKind::kChannel:
      return "channel";
    case QuantKind::kBlock:
      return "block:" + std::to_string(q.block_k) +
             (q.block_n ? "x" + std::to_string(q.block_n) : std::string());
  }
  return "none";
}

int bits_of(DType d) {
  return dtype_info(d).bits;
}

bool is_integer(DType d) {
  return dtype_info(d).kind == DTypeKind::kInteger;
}

void validate(const KernelSpec& s) {
  auto fail = [](const std::string& msg) { throw SpecError(msg); };
  auto range = [&](std::string_view p, int64_t v, int64_t lo, int64_t hi) {
    if (v < lo || v > hi)
      fail(std::string(p) + "=" + std::to_string(v) + " must be in [" + std::to_string(lo) + ", " +
           std::to_string(hi) + "]");
  };
  constexpr int64_t kMaxDim = (int64_t{1} << 31) - 1;
  range("k", s.k, 1, kMaxDim);
  range("n", s.n, 1, kMaxDim);
  range("g", s.g, 1, 1 << 20);
  if (s.g_local < 1 || s.g_local > s.g)
    fail("g_local=" + std::to_string(s.g_local) + " must be in [1, g=" + std::to_string(s.g) + "]");
  range("tm", s.tiling.tm, 1, kMaxTile);
  range("tk", s.tiling.tk, 1, kMaxTile);
  range("tn", s.tiling.tn, 1, kMaxTile);
  if (s.g_local > kMaxDim / s.k / s.n)
    fail("g_local*k*n=" + std::to_string(s.g_local) + "*" + std::to_string(s.k) + "*" +
         std::to_string(s.n) + " overflows the 2^31 element limit of one " +
         (s.op == Op::kTgmm ? "out" : "rhs") + " operand");

  // Dtype rules (the dtype table says which operand each type may be).
  auto uses = [&](std::string_view p, DType d, unsigned use, const char* rule) {
    if (!(dtype_info(d).uses & use)) fail(std::string(p) + "=" + std::string(to_string(d)) + rule);
  };
  uses("out", s.out, kUseOut, " is not one of: f32, bf16, f16 (outputs are floating point)");
  uses("lhs", s.lhs, kUseLhs, ": nf4 and t2 are weight formats, allowed for rhs only");
  uses("rhs", s.rhs, kUseRhs, ": not a weight format");
  if (is_integer(s.lhs) && !is_integer(s.rhs))
    fail("lhs=" + std::string(to_string(s.lhs)) + " with rhs=" + std::string(to_string(s.rhs)) +
         ": integer activations pair only with integer weights (i8, i4, t2), whose products are "
         "summed exactly in i32");
  if (s.op == Op::kTgmm)
    for (auto [p, d] : {std::pair{"lhs", s.lhs}, std::pair{"rhs", s.rhs}})
      if (!(dtype_info(d).uses & kUseLhs))  // weight formats (nf4, t2)
        fail(std::string(p) + "=" + std::string(to_string(d)) +
             ": tgmm takes activations and gradients, not a weight format");

  // Quantization rules (docs/quantization.md): scales belong to quantized dtypes, and codes that
  // mean nothing without scales must have them.
  auto check_quant = [&](std::string_view p, DType d, std::string_view dp, const Quant& q,
                         bool is_rhs) {
    const std::string what = std::string(p) + "=" + to_string(q);
    if (q.kind == QuantKind::kNone) {
      if (codes::needs_scales(d))
        fail(std::string(dp) + "=" + std::string(to_string(d)) + " needs scales: its codes are " +
             "not values (set " + std::string(p) + " to tensor, channel or block:B)");
      return;
    }
    if (!codes::is_quantized(d))
      fail(what + ": scales apply to quantized dtypes (f8e4m3, f8e5m2, i8, i4, nf4, t2), not " +
           std::string(dp) + "=" + std::string(to_string(d)));
    if (q.kind != QuantKind::kBlock) return;
    auto block_rule = [&](int64_t b) {
      if (b < 16 || b > kMaxTile || (b & (b - 1)) != 0)
        fail(what + ": block size " + std::to_string(b) + " must be a power of two in [16, " +
             std::to_string(kMaxTile) + "]");
    };
    block_rule(q.block_k);
    if (q.block_n != 0) {
      if (!is_rhs || s.op != Op::kGmm)
        fail(what + ": block:BxB (2-D blocks) is for gmm's rhs (the weights) only");
      block_rule(q.block_n);
    }
  };
  check_quant("lhs_quant", s.lhs, "lhs", s.lhs_quant, false);
  check_quant("rhs_quant", s.rhs, "rhs", s.rhs_quant, true);

  if (s.lhs_layout == LhsLayout::kKM && s.op != Op::kTgmm)
    fail("lhs_layout=km applies to op=tgmm only (gmm takes lhs as [M, K])");
  if (s.op == Op::kTgmm && s.out_mode == OutMode::kExistingOut)
    fail(
        "out_mode=existing_out: tgmm writes every element of out, so there is nothing to "
        "preserve; to add the product to existing_out (gradient accumulation) use "
        "out_mode=accumulate");

  // Fields only some specs have (the field table says which): any other spec keeps the default.
  for (const SpecField& f : spec_fields())
    if (f.applies && !f.applies(s) && !field_is_default(f, s))
      fail(std::string(f.key) + "=" + field_text(f, s) + " applies to " +
           std::string(f.applies_to) + " only");

  // Valid: can its target build it? (Limits of the target's kernels, or "not supported yet".)
  target_of(s.target).check(s);
}

}  // namespace gmmgen
