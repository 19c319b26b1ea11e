// KernelSpec: every parameter of a generated kernel (docs/spec.md), its canonical text and JSON
// forms, validation, and the two tables every other module derives from: the spec fields
// (spec_fields()) and the dtypes (dtype_info()).
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json_fwd.hpp>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "gmmgen/kernel_abi.h"

namespace gmmgen {

// Raised for any invalid spec. The message names the parameter and the rule it breaks.
class SpecError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

enum class Op { kGmm, kTgmm };
// The element types of the kernel ABI (GMMGEN_DTYPES in gmmgen/kernel_abi.h), same codes.
#define GMMGEN_DTYPE_CPP_ENUM_(name, code) k##name = code,
enum class DType : int32_t { GMMGEN_DTYPES(GMMGEN_DTYPE_CPP_ENUM_) };
#undef GMMGEN_DTYPE_CPP_ENUM_
inline constexpr int kNumDTypes = GMMGEN_DTYPE_COUNT_;
enum class QuantKind { kNone, kTensor, kChannel, kBlock };
enum class OutMode { kPlain, kExistingOut, kAccumulate };
// The kernel ABI's codes are these enums' values (targets index code tables by them).
static_assert(int(QuantKind::kNone) == GMMGEN_QUANT_NONE &&
              int(QuantKind::kTensor) == GMMGEN_QUANT_TENSOR &&
              int(QuantKind::kChannel) == GMMGEN_QUANT_CHANNEL &&
              int(QuantKind::kBlock) == GMMGEN_QUANT_BLOCK);
static_assert(int(OutMode::kPlain) == GMMGEN_OUT_PLAIN &&
              int(OutMode::kExistingOut) == GMMGEN_OUT_EXISTING &&
              int(OutMode::kAccumulate) == GMMGEN_OUT_ACCUMULATE);
enum class TargetKind { kCpp, kPallas };
// ISA families of the C++ target (generator/src/heuristics/cpu_x86.cpp describes each);
// native is the best family of the machine that compiles the kernel.
enum class Isa { kNative, kAvx512Bf16, kAvx512, kAvx2, kGeneric, kAmx, kAvx512Vnni };
// target=pallas only: the TPU generation a module is checked and tiled for (heuristics.h holds
// each one's VMEM and MXU width); any: every one of them.
enum class Tpu { kAny, kV4, kV5e, kV5p, kV6e };
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
  // target=pallas, op=gmm only: the tilings of the differentiable gmm's backward kernels, in
  // their own problems' terms (dlhs: gmm of dout [M, N] and rhs, contracting N; drhs: tgmm of
  // lhs and dout). {0, 0, 0} (and left out of the canonical forms) for every other spec.
  Tiling dlhs_tiling{0, 0, 0};
  Tiling drhs_tiling{0, 0, 0};
  bool transpose_rhs = false;
  LhsLayout lhs_layout = LhsLayout::kMK;
  OutMode out_mode = OutMode::kPlain;
  TargetKind target = TargetKind::kCpp;
  Isa isa = Isa::kNative;
  Tpu tpu = Tpu::kAny;

  bool operator==(const KernelSpec&) const = default;
};

// ---- The field table: one row per spec key, in canonical order. -----------------------------

// What a field says about a call: the problem (what is computed, on which layouts), the tiling
// (how it is blocked; never changes which elements are written), or the implementation (which
// target and ISA family build it).
enum class FieldRole { kProblem, kTiling, kImplementation };

struct FieldCodec;  // how one C++ type is parsed, printed, hashed and named (fields.cpp)

struct SpecField {
  std::string_view key;          // text and JSON key, e.g. "lhs_quant"
  std::string_view flag;         // CLI option, e.g. "--lhs-quant" ("-k,--k" for short forms)
  std::string_view values;       // accepted values ("" for enums: derived from their names)
  std::string_view default_doc;  // "bf16", "required", "g", "heuristic", ...
  std::string_view doc;          // one line: what the field means
  FieldRole role;
  // Kernel name: the field's token is `name_sep` + `name_prefix` + value token, where a
  // name_sep of "_" starts a new part of the name and any other separator continues the part
  // of the field before it; optional tokens are left out while the field has its default.
  std::string_view name_sep;
  std::string_view name_prefix;
  bool name_optional;
  const FieldCodec* codec;
  void* (*member)(KernelSpec&);  // where the value lives in a KernelSpec
  // Value of a key the text or JSON form leaves out: nullptr means the KernelSpec{} default;
  // otherwise computed from the other fields (called after every given key is set).
  void (*derive)(KernelSpec&);
  bool required;  // a spec without this key is an error
  // Fields that only some specs have (e.g. the VJP tilings of Pallas gmm modules): whether s has
  // it, and which specs do, for messages. A spec without the field leaves it out of its text and
  // JSON forms and keeps its default; validate() rejects another value. nullptr: every spec.
  bool (*applies)(const KernelSpec& s) = nullptr;
  std::string_view applies_to = {};
};

// Every field, in canonical order.
std::span<const SpecField> spec_fields();
const SpecField& spec_field(std::string_view key);  // throws SpecError for unknown keys

// Text form of one field's value (as in the canonical text), and parsing of one value.
std::string field_text(const SpecField& f, const KernelSpec& s);
void set_field(const SpecField& f, KernelSpec& s, std::string_view value);
bool field_is_default(const SpecField& f, const KernelSpec& s);
// The values a field accepts, for --help and the README.
std::string field_values(const SpecField& f);

// The README's spec table (markdown), derived from the field table.
std::string spec_fields_markdown();

// Equality and hashing over the fields of some roles: the registry of compiled-in kernels is
// keyed by the problem alone, the in-memory kernel table by every field.
bool same_fields(const KernelSpec& a, const KernelSpec& b, std::initializer_list<FieldRole> roles);
uint64_t fields_hash(const KernelSpec& s, std::initializer_list<FieldRole> roles);
struct SpecKeyHash {
  size_t operator()(const KernelSpec& s) const;
};
struct ProblemHash {
  size_t operator()(const KernelSpec& s) const;
};
struct SameProblem {
  bool operator()(const KernelSpec& a, const KernelSpec& b) const;
};

// ---- The dtype table: one row per element type. ---------------------------------------------

enum class DTypeKind { kFloat, kInteger, kCodebook };
enum DTypeUse : unsigned { kUseLhs = 1, kUseRhs = 2, kUseOut = 4 };

struct DTypeInfo {
  DType id;
  std::string_view name;  // as in specs: "bf16"
  int bits;               // bits per element (4 for two-per-byte types)
  DTypeKind kind;
  unsigned uses;            // DTypeUse bits: which operands may have this type
  std::string_view c_type;  // C++ storage type of the C++ target ("" when not supported)
  std::string_view traits;  // traits struct of its template partial (cpp/dtypes/<name>)
  std::string_view jnp;     // jnp dtype of the Pallas target ("" when not supported)
  // Host format of float types (the float64 reference rounds to it): significand bits with
  // the implicit one, exponent of the smallest normal, largest finite value; 0 otherwise.
  int precision;
  int emin;
  double max_finite;
};

const DTypeInfo& dtype_info(DType d);
std::span<const DTypeInfo> dtype_table();

// Names of enum values exactly as they appear in the text/JSON forms.
std::string_view to_string(Op v);
std::string_view to_string(DType v);
std::string_view to_string(OutMode v);
std::string_view to_string(TargetKind v);
std::string_view to_string(Isa v);
std::string_view to_string(LhsLayout v);
std::string_view to_string(Tpu v);
std::string to_string(const Quant& q);
// A value from the user, for an error message: at most ~100 characters (longer ones are cut and
// say how long they were), control characters escaped.
std::string quote_value(std::string_view v);
// v with its control characters escaped (\xNN), whole: for names (paths) in messages.
std::string escape_control(std::string_view v);
DType parse_dtype(std::string_view s, std::string_view param);
Isa parse_isa(std::string_view s, std::string_view param);

// Bits per element (4 for the two-per-byte types).
int bits_of(DType d);
bool is_integer(DType d);

// ---- Forms ------------------------------------------------------------------------------------

// Canonical text form: `op=gmm,lhs=bf16,...` with every key in a fixed order.
std::string to_text(const KernelSpec& s);
// Parses `key=value` pairs separated by commas (any order, missing keys take defaults; k, n and
// g are required). Throws SpecError naming the key on unknown/duplicate keys or bad values.
KernelSpec parse_text(std::string_view text);
// The keys a spec text names, in order (throws SpecError for an item that is not key=value).
std::vector<std::string> text_keys(std::string_view text);
// Whether `key` is a field of the tiling (tm, tk, tn, and the VJP tilings of Pallas modules).
bool is_tiling_key(std::string_view key);

nlohmann::ordered_json to_json(const KernelSpec& s);
KernelSpec from_json(const nlohmann::ordered_json& j);

// Throws SpecError (parameter + rule) if the spec is invalid, or "not supported yet: ..." if it
// is valid but its target cannot build it in this generator version.
void validate(const KernelSpec& s);

// One entry of a spec file: a spec and its optional alias, a stable C name for the kernel's entry
// points (an entry {"spec": ..., "alias": "moe_w0_fwd"} gives moe_w0_fwd(), moe_w0_fwd_plan(),
// ... in a bundle, whatever the kernel's hashed name).
struct SpecEntry {
  KernelSpec spec;
  std::string alias;  // "" when the entry has none
  // The entry named a tiling field (is_tiling_key); else its tiling is the default, and a tool
  // that knows the workload (bench) may choose one as the runtime would.
  bool tiling_given = false;
};

// Reads a JSON spec file: an array of specs, or {"kernels": [...]}; each spec is a JSON object
// or a spec text string, and is validated. An entry may also be {"spec": <text or object>,
// "alias": "<name>"}, or a JSON spec object with an "alias" key: the alias must be a C identifier
// (not a keyword, not starting with '_' or "gmmgen_", no "__"), name a target=cpp kernel, and
// no symbol of its entry points may be one of another alias's (checked across the file). Strict
// JSON: at most 64 levels of nesting, no key twice in one object, each value of its field's JSON
// type (sizes are JSON integers). Throws SpecError naming the file, the entry and the key, quoting
// at most ~100 characters of a value.
std::vector<KernelSpec> load_spec_file(const std::filesystem::path& path);
// The same for JSON text; `origin` starts each message (e.g. "spec file specs.json").
std::vector<KernelSpec> parse_spec_json(std::string_view json, const std::string& origin);
// The same with each entry's alias.
std::vector<SpecEntry> load_spec_entries(const std::filesystem::path& path);
std::vector<SpecEntry> parse_spec_entries(std::string_view json, const std::string& origin);
// Throws SpecError naming the rule unless `alias` may name a kernel's entry points (see above).
void check_alias(std::string_view alias);

}  // namespace gmmgen
