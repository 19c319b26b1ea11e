// KernelSpec: every parameter of a generated kernel (DESIGN.md §2), its canonical text and
// JSON forms, validation, hash and name.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace gmmgen {

// Raised for any invalid spec. The message names the parameter and the rule it breaks.
class SpecError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

enum class Op { kGmm, kTgmm };
enum class DType { kF32, kBF16, kF16, kF8E4M3, kF8E5M2, kI8, kI4, kNF4 };
enum class QuantKind { kNone, kTensor, kChannel, kBlock };
enum class OutMode { kPlain, kExistingOut, kAccumulate };
enum class Target { kCpp, kPallas };
enum class Isa { kNative, kAvx512, kAvx2, kGeneric };
// tgmm only: the lhs operand is stored [M, K] (mk) or already transposed [K, M] (km).
enum class LhsLayout { kMK, kKM };

struct Quant {
  QuantKind kind = QuantKind::kNone;
  int64_t block_k = 0;  // block:B  -> block_k = B
  int64_t block_n = 0;  // block:BxB (rhs only) -> block_n = second B; 0 otherwise
  bool operator==(const Quant&) const = default;
};

struct Tiling {
  int64_t tm = 128;
  int64_t tk = 128;
  int64_t tn = 128;
  bool operator==(const Tiling&) const = default;
};

struct KernelSpec {
  Op op = Op::kGmm;
  DType lhs = DType::kBF16;
  DType rhs = DType::kBF16;
  DType out = DType::kF32;
  Quant lhs_quant;
  Quant rhs_quant;
  int64_t k = 0;
  int64_t n = 0;
  int64_t g = 0;
  int64_t g_local = 0;  // 0 while parsing means "same as g"; canonical specs always set it
  Tiling tiling;
  bool transpose_rhs = false;
  LhsLayout lhs_layout = LhsLayout::kMK;
  OutMode out_mode = OutMode::kPlain;
  Target target = Target::kCpp;
  Isa isa = Isa::kNative;

  bool operator==(const KernelSpec&) const = default;
};

// Names of enum values exactly as they appear in the text/JSON forms.
std::string_view to_string(Op v);
std::string_view to_string(DType v);
std::string_view to_string(OutMode v);
std::string_view to_string(Target v);
std::string_view to_string(Isa v);
std::string_view to_string(LhsLayout v);
std::string to_string(const Quant& q);
DType parse_dtype(std::string_view s, std::string_view param);

// Bytes per element; sub-byte types report 0 and use bits_of().
int bits_of(DType d);
bool is_integer(DType d);

// Canonical text form: `op=gmm,lhs=bf16,...` with every key in a fixed order.
std::string to_text(const KernelSpec& s);
// Parses `key=value` pairs separated by commas (any order, missing keys take defaults; k, n and
// g are required). Throws SpecError naming the key on unknown/duplicate keys or bad values.
KernelSpec parse_text(std::string_view text);

nlohmann::ordered_json to_json(const KernelSpec& s);
KernelSpec from_json(const nlohmann::ordered_json& j);

// Throws SpecError (parameter + rule) if the spec is invalid, or "not supported yet: ..." if it
// is valid but its feature has not landed in this generator version.
void validate(const KernelSpec& s);

// 128-bit XXH3 of (canonical text, generator version, template and ABI header contents), as 32
// lowercase hex digits. Names the kernel in files, symbols and cache entries.
std::string spec_hash(const KernelSpec& s);

// Readable, parseable, unique name, e.g.
//   gmm_bf16xbf16_f32_k2048_n1408_g64_t128x128x128_1f3a9c2e
// Optional parts appear only when they differ from the default:
//   l<G_local>  (after g), _tr, _km, _eo|_acc, _ql-<q>, _qr-<q>, _<isa>, _pallas.
std::string kernel_name(const KernelSpec& s);

// Recovers the spec (and the 8-digit hash suffix) from a kernel name.
struct ParsedName {
  KernelSpec spec;
  std::string hash8;
};
ParsedName parse_kernel_name(std::string_view name);

}  // namespace gmmgen
