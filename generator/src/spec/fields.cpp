// The spec field table: the one place that lists the keys of a spec. Parsing, the canonical
// text and JSON forms, hashing, kernel names (naming.cpp), the CLI's flags and the spec
// field table of docs/spec.md all walk it.
#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "codecs.h"
#include "gmmgen/codes.h"
#include "gmmgen/heuristics.h"

namespace gmmgen {
namespace {

template <auto Member>
void* member_of(KernelSpec& s) {
  return &(s.*Member);
}
void* tm_of(KernelSpec& s) {
  return &s.tiling.tm;
}
void* tk_of(KernelSpec& s) {
  return &s.tiling.tk;
}
void* tn_of(KernelSpec& s) {
  return &s.tiling.tn;
}

void derive_g_local(KernelSpec& s) {
  s.g_local = s.g;
}
void derive_tm(KernelSpec& s) {
  s.tiling.tm = default_tiling(s).tm;
}
void derive_tk(KernelSpec& s) {
  s.tiling.tk = default_tiling(s).tk;
}
void derive_tn(KernelSpec& s) {
  s.tiling.tn = default_tiling(s).tn;
}

// The VJP tilings belong to Pallas gmm modules whose differentiable gmm carries the backward
// kernels (pallas_vjp): dlhs for every one, drhs but for frozen quantized weights; each defaults
// to the target's heuristic for its own problem.
bool has_dlhs_tiling(const KernelSpec& s) {
  return pallas_vjp(s) != PallasVjp::kNone;
}
bool has_drhs_tiling(const KernelSpec& s) {
  return has_dlhs_tiling(s) && pallas_vjp(s) != PallasVjp::kFrozen;
}
void derive_dlhs_tiling(KernelSpec& s) {
  // dlhs = gmm(dout [M, N], rhs read transposed): contracts over N, writes K columns.
  s.dlhs_tiling = has_dlhs_tiling(s) ? pallas_dlhs_default_tiling(s) : Tiling{0, 0, 0};
}
void derive_drhs_tiling(KernelSpec& s) {
  // drhs = tgmm(lhs [M, K], dout [M, N]): a [K, N] product per group.
  s.drhs_tiling =
      has_drhs_tiling(s) ? pallas_default_tiling(Op::kTgmm, s.k, s.n, s.tpu) : Tiling{0, 0, 0};
}
bool is_pallas(const KernelSpec& s) {
  return s.target == TargetKind::kPallas;
}

// A tiling triple TMxTKxTN, as in kernel names (t128x128x128).
std::string tiling_text(const void* v) {
  const Tiling& t = *static_cast<const Tiling*>(v);
  return std::to_string(t.tm) + "x" + std::to_string(t.tk) + "x" + std::to_string(t.tn);
}
// Three decimal integers separated by 'x'; false for anything else.
bool parse_tiling(std::string_view text, Tiling& t) {
  int64_t parts[3];
  for (int i = 0; i < 3; ++i) {
    const size_t end = i < 2 ? text.find('x') : text.size();
    if (end == std::string_view::npos || end == 0) return false;
    const auto [p, ec] = std::from_chars(text.data(), text.data() + end, parts[i]);
    if (ec != std::errc() || p != text.data() + end) return false;
    text.remove_prefix(i < 2 ? end + 1 : end);
  }
  t = Tiling{parts[0], parts[1], parts[2]};
  return true;
}
const FieldCodec tiling_codec{
    tiling_text,
    [](void* v, std::string_view text, std::string_view key) {
      if (!parse_tiling(text, *static_cast<Tiling*>(v)))
        throw SpecError(std::string(key) + "=" + quote_value(text) +
                        " is not a tiling TMxTKxTN (e.g. 128x128x128)");
    },
    [](const void* v) {
      const Tiling& t = *static_cast<const Tiling*>(v);
      return (uint64_t(t.tm) * 1000003u + uint64_t(t.tk)) * 1000003u + uint64_t(t.tn);
    },
    [](const void* a, const void* b) {
      return *static_cast<const Tiling*>(a) == *static_cast<const Tiling*>(b);
    },
    [](const void* v) { return nlohmann::ordered_json(tiling_text(v)); },
    tiling_text,
    [](void* v, std::string_view token) { return parse_tiling(token, *static_cast<Tiling*>(v)); },
    [](std::string_view) { return std::string(); },
    nlohmann::json::value_t::string};

using R = FieldRole;

// key, flag, values ("" for an enum: its codec lists them), default, doc, role, name sep, name
// prefix, optional in names, codec, member, derive, required.
const std::array<SpecField, 21> kFields{{
    {"op", "--op", "", "gmm", "the operation: forward/input gradient or weight gradient",
     R::kProblem, "", "", false, &enum_codec<Op>, member_of<&KernelSpec::op>, nullptr, false},
    {"lhs", "--lhs", "", "bf16", "lhs element type", R::kProblem, "_", "", false,
     &enum_codec<DType>, member_of<&KernelSpec::lhs>, nullptr, false},
    {"rhs", "--rhs", "", "bf16", "rhs element type (nf4: rhs only)", R::kProblem, "x", "", false,
     &enum_codec<DType>, member_of<&KernelSpec::rhs>, nullptr, false},
    {"out", "--out-dtype", "", "f32", "output element type", R::kProblem, "_", "", false,
     &enum_codec<DType>, member_of<&KernelSpec::out>, nullptr, false},
    {"lhs_quant", "--lhs-quant", "none, tensor, channel, block:B", "none",
     "scales of lhs (docs/quantization.md)", R::kProblem, "_", "ql", true, &quant_codec,
     member_of<&KernelSpec::lhs_quant>, nullptr, false},
    {"rhs_quant", "--rhs-quant", "none, tensor, channel, block:B, block:BxB", "none",
     "scales of rhs (docs/quantization.md)", R::kProblem, "_", "qr", true, &quant_codec,
     member_of<&KernelSpec::rhs_quant>, nullptr, false},
    {"k", "-k,--k", ">= 1", "required", "contraction size K", R::kProblem, "_", "k", false,
     &int_codec, member_of<&KernelSpec::k>, nullptr, true},
    {"n", "-n,--n", ">= 1", "required", "output size N", R::kProblem, "_", "n", false, &int_codec,
     member_of<&KernelSpec::n>, nullptr, true},
    {"g", "-g,--g", ">= 1", "required", "groups (experts) G: entries of group_sizes", R::kProblem,
     "_", "g", false, &int_codec, member_of<&KernelSpec::g>, nullptr, true},
    {"g_local", "--g-local", "1..g", "g", "groups held by this shard (expert parallelism)",
     R::kProblem, "l", "", true, &int_codec, member_of<&KernelSpec::g_local>, derive_g_local,
     false},
    {"tm", "--tm", "1..8192", "heuristic", "rows per tile", R::kTiling, "_", "t", false, &int_codec,
     tm_of, derive_tm, false},
    {"tk", "--tk", "1..8192", "heuristic", "contraction depth per tile", R::kTiling, "x", "", false,
     &int_codec, tk_of, derive_tk, false},
    {"tn", "--tn", "1..8192", "heuristic", "columns per tile", R::kTiling, "x", "", false,
     &int_codec, tn_of, derive_tn, false},
    {"dlhs_tiling", "--dlhs-tiling", "TMxTKxTN (target=pallas, op=gmm with a VJP)", "heuristic",
     "tiling of the differentiable gmm's dlhs kernel (contracts over N, K columns)", R::kTiling,
     "_", "dl", true, &tiling_codec, member_of<&KernelSpec::dlhs_tiling>, derive_dlhs_tiling, false,
     has_dlhs_tiling,
     "op=gmm with target=pallas and a VJP (a float lhs, or whole-byte codes on both sides)"},
    {"drhs_tiling", "--drhs-tiling", "TMxTKxTN (target=pallas, op=gmm, trained weights)",
     "heuristic", "tiling of the differentiable gmm's drhs kernel (a tgmm: contracts over M)",
     R::kTiling, "_", "dr", true, &tiling_codec, member_of<&KernelSpec::drhs_tiling>,
     derive_drhs_tiling, false, has_drhs_tiling,
     "op=gmm with target=pallas and trained weights (float, or whole-byte codes on both sides)"},
    {"transpose_rhs", "--transpose-rhs", "0, 1", "0",
     "gmm: rhs stored [G_local, N, K]; tgmm: out stored [G_local, N, K]", R::kProblem, "_", "tr",
     true, &bool_codec, member_of<&KernelSpec::transpose_rhs>, nullptr, false},
    {"lhs_layout", "--lhs-layout", "", "mk", "tgmm: lhs stored [M, K] or [K, M]", R::kProblem, "_",
     "", true, &enum_codec<LhsLayout>, member_of<&KernelSpec::lhs_layout>, nullptr, false},
    {"out_mode", "--out-mode", "", "plain",
     "rows outside the active groups: zero, kept, or kept with active rows accumulated",
     R::kProblem, "_", "", true, &enum_codec<OutMode>, member_of<&KernelSpec::out_mode>, nullptr,
     false},
    {"target", "--target", "", "cpp", "what to emit: C++ for CPUs, or a Pallas module",
     R::kImplementation, "_", "", true, &enum_codec<TargetKind>, member_of<&KernelSpec::target>,
     nullptr, false},
    {"isa", "--isa", "", "native",
     "C++ ISA family (native: the best of the machine that compiles it)", R::kImplementation, "_",
     "", true, &enum_codec<Isa>, member_of<&KernelSpec::isa>, nullptr, false},
    {"tpu", "--tpu", "", "any",
     "TPU generation of a Pallas module: its VMEM limit and default tiles (any: every one)",
     R::kImplementation, "_", "", true, &enum_codec<Tpu>, member_of<&KernelSpec::tpu>, nullptr,
     false, is_pallas, "target=pallas"},
}};

bool has_role(const SpecField& f, std::initializer_list<FieldRole> roles) {
  return std::find(roles.begin(), roles.end(), f.role) != roles.end();
}

const void* cmember(const SpecField& f, const KernelSpec& s) {
  return f.member(const_cast<KernelSpec&>(s));
}

constexpr std::initializer_list<FieldRole> kAllRoles{FieldRole::kProblem, FieldRole::kTiling,
                                                     FieldRole::kImplementation};

// A JSON value in words, for error messages: never the whole of a container, never more than
// ~100 characters of a scalar.
std::string json_kind(const nlohmann::ordered_json& v) {
  using T = nlohmann::json::value_t;
  switch (v.type()) {
    case T::string:
      return "the string \"" + quote_value(v.get_ref<const std::string&>()) + "\"";
    case T::boolean:
      return v.get<bool>() ? "true" : "false";
    case T::number_float: {
      const double d = v.get<double>();
      return std::isfinite(d) ? "the non-integer number " + quote_value(v.dump())
                              : std::string("a number out of range");
    }
    case T::number_integer:
    case T::number_unsigned:
      return "the integer " + v.dump();
    case T::object:
      return "an object";
    case T::array:
      return "an array";
    default:
      return "null";
  }
}

// The text form of a JSON spec value, whose JSON type must be the field's: a string for enums
// and quantizations, an integer in the range of int64 for sizes (not "64", 64.0, 1e400 or true),
// a boolean (or 0/1) for flags. Each field's own range is checked by validate().
std::string json_value_text(const SpecField& f, const nlohmann::ordered_json& v) {
  using T = nlohmann::json::value_t;
  const std::string key(f.key);
  switch (f.codec->json_type) {
    case T::number_integer:
      if (v.is_number_unsigned() &&
          v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
        throw SpecError("spec key '" + key + "': " + v.dump() + " is out of range (at most " +
                        std::to_string(std::numeric_limits<int64_t>::max()) + ")");
      if (v.is_number_integer()) return std::to_string(v.get<int64_t>());
      throw SpecError("spec key '" + key + "' must be a JSON integer, got " + json_kind(v));
    case T::boolean:
      if (v.is_boolean()) return v.get<bool>() ? "1" : "0";
      if (v.is_number_integer() && (v == 0 || v == 1)) return v.dump();
      throw SpecError("spec key '" + key + "' must be true or false, got " + json_kind(v));
    default:
      if (v.is_string()) return v.get<std::string>();
      throw SpecError("spec key '" + key + "' must be a JSON string, got " + json_kind(v));
  }
}

// Shared by the text and JSON parsers: applies (key, value) pairs, then fills the keys left out.
KernelSpec build_spec(const std::vector<std::pair<std::string, std::string>>& pairs) {
  KernelSpec s;
  std::vector<bool> seen(kFields.size(), false);
  for (const auto& [key, value] : pairs) {
    const SpecField& f = spec_field(key);
    const size_t i = size_t(&f - kFields.data());
    if (seen[i]) throw SpecError("spec key '" + key + "' is given twice");
    seen[i] = true;
    set_field(f, s, value);
  }
  for (size_t i = 0; i < kFields.size(); ++i) {
    if (seen[i]) continue;
    if (kFields[i].required)
      throw SpecError("spec key '" + std::string(kFields[i].key) + "' is required");
    if (kFields[i].derive) kFields[i].derive(s);
  }
  return s;
}

}  // namespace

std::span<const SpecField> spec_fields() {
  return kFields;
}

const SpecField& spec_field(std::string_view key) {
  for (const auto& f : kFields)
    if (f.key == key) return f;
  std::string keys;
  for (const auto& f : kFields) keys += (keys.empty() ? "" : ", ") + std::string(f.key);
  throw SpecError("unknown spec key '" + quote_value(key) + "' (known keys: " + keys + ")");
}

std::string field_text(const SpecField& f, const KernelSpec& s) {
  return f.codec->text(cmember(f, s));
}

void set_field(const SpecField& f, KernelSpec& s, std::string_view value) {
  f.codec->parse(f.member(s), value, f.key);
}

bool field_is_default(const SpecField& f, const KernelSpec& s) {
  KernelSpec d;
  if (f.derive) {  // a derived default depends on the other fields
    d = s;
    f.derive(d);
  }
  return f.codec->equal(cmember(f, s), cmember(f, d));
}

std::string field_values(const SpecField& f) {
  return f.values.empty() ? f.codec->values(f.key) : std::string(f.values);
}

std::string spec_fields_markdown() {
  std::string out =
      "| key | CLI flag | values | default | meaning |\n| --- | --- | --- | --- | --- |\n";
  for (const auto& f : kFields)
    out += "| `" + std::string(f.key) + "` | `" + std::string(f.flag) + "` | " + field_values(f) +
           " | " + std::string(f.default_doc) + " | " + std::string(f.doc) + " |\n";
  return out;
}

bool same_fields(const KernelSpec& a, const KernelSpec& b, std::initializer_list<FieldRole> roles) {
  for (const auto& f : kFields)
    if (has_role(f, roles) && !f.codec->equal(cmember(f, a), cmember(f, b))) return false;
  return true;
}

uint64_t fields_hash(const KernelSpec& s, std::initializer_list<FieldRole> roles) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the fields' lossless codes
  for (const auto& f : kFields)
    if (has_role(f, roles)) h = (h ^ f.codec->code(cmember(f, s))) * 1099511628211ull;
  return h;
}

size_t SpecKeyHash::operator()(const KernelSpec& s) const {
  return size_t(fields_hash(s, kAllRoles));
}
size_t ProblemHash::operator()(const KernelSpec& s) const {
  return size_t(fields_hash(s, {FieldRole::kProblem}));
}
bool SameProblem::operator()(const KernelSpec& a, const KernelSpec& b) const {
  return same_fields(a, b, {FieldRole::kProblem});
}

std::string to_text(const KernelSpec& s) {
  std::string out;
  for (const auto& f : kFields) {
    if (f.applies && !f.applies(s)) continue;  // a field this spec does not have
    if (!out.empty()) out += ',';
    out += f.key;
    out += '=';
    out += field_text(f, s);
  }
  return out;
}

namespace {

// The key=value items of a spec text.
std::vector<std::pair<std::string, std::string>> text_pairs(std::string_view text) {
  std::vector<std::pair<std::string, std::string>> pairs;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find(',', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view item = text.substr(pos, end - pos);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    if (!item.empty()) {
      size_t eq = item.find('=');
      if (eq == std::string_view::npos || eq == 0)
        throw SpecError("spec item '" + quote_value(item) + "' is not of the form key=value");
      pairs.emplace_back(std::string(item.substr(0, eq)), std::string(item.substr(eq + 1)));
    }
    pos = end + 1;
  }
  return pairs;
}

}  // namespace

KernelSpec parse_text(std::string_view text) {
  return build_spec(text_pairs(text));
}

std::vector<std::string> text_keys(std::string_view text) {
  std::vector<std::string> keys;
  for (auto& [key, value] : text_pairs(text)) keys.push_back(std::move(key));
  return keys;
}

bool is_tiling_key(std::string_view key) {
  for (const auto& f : kFields)
    if (f.key == key) return f.role == FieldRole::kTiling;
  return false;
}

nlohmann::ordered_json to_json(const KernelSpec& s) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (const auto& f : kFields)
    if (!f.applies || f.applies(s)) j[std::string(f.key)] = f.codec->json(cmember(f, s));
  return j;
}

KernelSpec from_json(const nlohmann::ordered_json& j) {
  if (!j.is_object()) throw SpecError("a JSON spec must be an object, got " + json_kind(j));
  std::vector<std::pair<std::string, std::string>> pairs;
  for (const auto& [key, value] : j.items()) {
    const SpecField& f = spec_field(key);
    pairs.emplace_back(key, json_value_text(f, value));
  }
  return build_spec(pairs);
}

}  // namespace gmmgen
