#include "gmmgen/spec.h"

#include <array>
#include <charconv>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "gmmgen/hash.h"
#include "gmmgen/heuristics.h"
#include "gmmgen/templates.h"

namespace gmmgen {
namespace {

template <typename E>
struct EnumName {
  E value;
  std::string_view name;
};

constexpr std::array<EnumName<Op>, 2> kOps{{{Op::kGmm, "gmm"}, {Op::kTgmm, "tgmm"}}};
constexpr std::array<EnumName<DType>, 8> kDTypes{{{DType::kF32, "f32"},
                                                  {DType::kBF16, "bf16"},
                                                  {DType::kF16, "f16"},
                                                  {DType::kF8E4M3, "f8e4m3"},
                                                  {DType::kF8E5M2, "f8e5m2"},
                                                  {DType::kI8, "i8"},
                                                  {DType::kI4, "i4"},
                                                  {DType::kNF4, "nf4"}}};
constexpr std::array<EnumName<OutMode>, 3> kOutModes{{{OutMode::kPlain, "plain"},
                                                      {OutMode::kExistingOut, "existing_out"},
                                                      {OutMode::kAccumulate, "accumulate"}}};
constexpr std::array<EnumName<Target>, 2> kTargets{
    {{Target::kCpp, "cpp"}, {Target::kPallas, "pallas"}}};
constexpr std::array<EnumName<Isa>, 4> kIsas{{{Isa::kNative, "native"},
                                              {Isa::kAvx512, "avx512"},
                                              {Isa::kAvx2, "avx2"},
                                              {Isa::kGeneric, "generic"}}};
constexpr std::array<EnumName<LhsLayout>, 2> kLayouts{
    {{LhsLayout::kMK, "mk"}, {LhsLayout::kKM, "km"}}};

template <typename E, size_t N>
std::string_view name_of(const std::array<EnumName<E>, N>& table, E v) {
  for (const auto& e : table)
    if (e.value == v) return e.name;
  throw std::logic_error("enum value without a name");
}

template <typename E, size_t N>
E parse_enum(const std::array<EnumName<E>, N>& table, std::string_view s, std::string_view param) {
  std::string allowed;
  for (const auto& e : table) {
    if (e.name == s) return e.value;
    allowed += allowed.empty() ? "" : ", ";
    allowed += e.name;
  }
  throw SpecError(std::string(param) + "=" + std::string(s) + " is not one of: " + allowed);
}

int64_t parse_int(std::string_view s, std::string_view param) {
  int64_t v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size() || s.empty())
    throw SpecError(std::string(param) + "=" + std::string(s) + " is not an integer");
  return v;
}

bool parse_bool(std::string_view s, std::string_view param) {
  if (s == "1" || s == "true") return true;
  if (s == "0" || s == "false") return false;
  throw SpecError(std::string(param) + "=" + std::string(s) + " is not a boolean (0/1/true/false)");
}

Quant parse_quant(std::string_view s, std::string_view param) {
  Quant q;
  if (s == "none") return q;
  if (s == "tensor") {
    q.kind = QuantKind::kTensor;
    return q;
  }
  if (s == "channel") {
    q.kind = QuantKind::kChannel;
    return q;
  }
  constexpr std::string_view kBlock = "block:";
  if (s.substr(0, kBlock.size()) == kBlock) {
    q.kind = QuantKind::kBlock;
    std::string_view rest = s.substr(kBlock.size());
    size_t x = rest.find('x');
    q.block_k = parse_int(rest.substr(0, x), param);
    if (x != std::string_view::npos) q.block_n = parse_int(rest.substr(x + 1), param);
    return q;
  }
  throw SpecError(std::string(param) + "=" + std::string(s) +
                  " is not one of: none, tensor, channel, block:B, block:BxB");
}

// The canonical key order of the text form (and of the JSON form).
constexpr std::array<std::string_view, 18> kKeys{
    "op",      "lhs", "rhs", "out", "lhs_quant",     "rhs_quant",  "k",        "n",      "g",
    "g_local", "tm",  "tk",  "tn",  "transpose_rhs", "lhs_layout", "out_mode", "target", "isa"};

void set_field(KernelSpec& s, std::string_view key, std::string_view v) {
  if (key == "op")
    s.op = parse_enum(kOps, v, key);
  else if (key == "lhs")
    s.lhs = parse_dtype(v, key);
  else if (key == "rhs")
    s.rhs = parse_dtype(v, key);
  else if (key == "out")
    s.out = parse_dtype(v, key);
  else if (key == "lhs_quant")
    s.lhs_quant = parse_quant(v, key);
  else if (key == "rhs_quant")
    s.rhs_quant = parse_quant(v, key);
  else if (key == "k")
    s.k = parse_int(v, key);
  else if (key == "n")
    s.n = parse_int(v, key);
  else if (key == "g")
    s.g = parse_int(v, key);
  else if (key == "g_local")
    s.g_local = parse_int(v, key);
  else if (key == "tm")
    s.tiling.tm = parse_int(v, key);
  else if (key == "tk")
    s.tiling.tk = parse_int(v, key);
  else if (key == "tn")
    s.tiling.tn = parse_int(v, key);
  else if (key == "transpose_rhs")
    s.transpose_rhs = parse_bool(v, key);
  else if (key == "lhs_layout")
    s.lhs_layout = parse_enum(kLayouts, v, key);
  else if (key == "out_mode")
    s.out_mode = parse_enum(kOutModes, v, key);
  else if (key == "target")
    s.target = parse_enum(kTargets, v, key);
  else if (key == "isa")
    s.isa = parse_enum(kIsas, v, key);
  else {
    std::string keys;
    for (auto k : kKeys) keys += (keys.empty() ? "" : ", ") + std::string(k);
    throw SpecError("unknown spec key '" + std::string(key) + "' (known keys: " + keys + ")");
  }
}

std::string field_text(const KernelSpec& s, std::string_view key) {
  if (key == "op") return std::string(to_string(s.op));
  if (key == "lhs") return std::string(to_string(s.lhs));
  if (key == "rhs") return std::string(to_string(s.rhs));
  if (key == "out") return std::string(to_string(s.out));
  if (key == "lhs_quant") return to_string(s.lhs_quant);
  if (key == "rhs_quant") return to_string(s.rhs_quant);
  if (key == "k") return std::to_string(s.k);
  if (key == "n") return std::to_string(s.n);
  if (key == "g") return std::to_string(s.g);
  if (key == "g_local") return std::to_string(s.g_local);
  if (key == "tm") return std::to_string(s.tiling.tm);
  if (key == "tk") return std::to_string(s.tiling.tk);
  if (key == "tn") return std::to_string(s.tiling.tn);
  if (key == "transpose_rhs") return s.transpose_rhs ? "1" : "0";
  if (key == "lhs_layout") return std::string(to_string(s.lhs_layout));
  if (key == "out_mode") return std::string(to_string(s.out_mode));
  if (key == "target") return std::string(to_string(s.target));
  return std::string(to_string(s.isa));
}

// Shared by the text and JSON parsers: applies (key, value) pairs then fills derived defaults.
KernelSpec build_spec(const std::vector<std::pair<std::string, std::string>>& pairs) {
  KernelSpec s;
  std::set<std::string> seen;
  for (const auto& [key, value] : pairs) {
    if (!seen.insert(key).second) throw SpecError("spec key '" + key + "' is given twice");
    set_field(s, key, value);
  }
  for (std::string_view required : {"k", "n", "g"})
    if (!seen.count(std::string(required)))
      throw SpecError("spec key '" + std::string(required) + "' is required");
  if (!seen.count("g_local")) s.g_local = s.g;
  // Each tile size not given takes the heuristic's value for this problem.
  const Tiling d = default_tiling(s);
  if (!seen.count("tm")) s.tiling.tm = d.tm;
  if (!seen.count("tk")) s.tiling.tk = d.tk;
  if (!seen.count("tn")) s.tiling.tn = d.tn;
  return s;
}

}  // namespace

std::string_view to_string(Op v) {
  return name_of(kOps, v);
}
std::string_view to_string(DType v) {
  return name_of(kDTypes, v);
}
std::string_view to_string(OutMode v) {
  return name_of(kOutModes, v);
}
std::string_view to_string(Target v) {
  return name_of(kTargets, v);
}
std::string_view to_string(Isa v) {
  return name_of(kIsas, v);
}
std::string_view to_string(LhsLayout v) {
  return name_of(kLayouts, v);
}
DType parse_dtype(std::string_view s, std::string_view param) {
  return parse_enum(kDTypes, s, param);
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
  switch (d) {
    case DType::kF32:
      return 32;
    case DType::kBF16:
    case DType::kF16:
      return 16;
    case DType::kF8E4M3:
    case DType::kF8E5M2:
    case DType::kI8:
      return 8;
    case DType::kI4:
    case DType::kNF4:
      return 4;
  }
  return 0;
}

bool is_integer(DType d) {
  return d == DType::kI8 || d == DType::kI4;
}

std::string to_text(const KernelSpec& s) {
  std::string out;
  for (auto key : kKeys) {
    if (!out.empty()) out += ',';
    out += key;
    out += '=';
    out += field_text(s, key);
  }
  return out;
}

KernelSpec parse_text(std::string_view text) {
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
        throw SpecError("spec item '" + std::string(item) + "' is not of the form key=value");
      pairs.emplace_back(std::string(item.substr(0, eq)), std::string(item.substr(eq + 1)));
    }
    pos = end + 1;
  }
  return build_spec(pairs);
}

nlohmann::ordered_json to_json(const KernelSpec& s) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (auto key : kKeys) {
    std::string v = field_text(s, key);
    if (key == "k" || key == "n" || key == "g" || key == "g_local" || key == "tm" || key == "tk" ||
        key == "tn")
      j[std::string(key)] = std::stoll(v);
    else if (key == "transpose_rhs")
      j[std::string(key)] = s.transpose_rhs;
    else
      j[std::string(key)] = v;
  }
  return j;
}

KernelSpec from_json(const nlohmann::ordered_json& j) {
  if (!j.is_object()) throw SpecError("a JSON spec must be an object, got " + j.dump());
  std::vector<std::pair<std::string, std::string>> pairs;
  for (const auto& [key, value] : j.items()) {
    if (value.is_string())
      pairs.emplace_back(key, value.get<std::string>());
    else if (value.is_boolean())
      pairs.emplace_back(key, value.get<bool>() ? "1" : "0");
    else if (value.is_number_integer())
      pairs.emplace_back(key, std::to_string(value.get<int64_t>()));
    else
      throw SpecError("spec key '" + key + "' has a value of the wrong type: " + value.dump());
  }
  return build_spec(pairs);
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
  const int64_t scratch = scratch_bytes(s);
  if (scratch > kMaxScratchBytes)
    fail("tiling tm=" + std::to_string(s.tiling.tm) + " tk=" + std::to_string(s.tiling.tk) +
         " tn=" + std::to_string(s.tiling.tn) + " needs " + std::to_string(scratch) +
         " bytes of scratch per thread, above the limit of " + std::to_string(kMaxScratchBytes));

  // Dtype rules.
  const DType kFloatOut[] = {DType::kF32, DType::kBF16, DType::kF16};
  bool out_ok = false;
  for (DType d : kFloatOut) out_ok |= s.out == d;
  if (!out_ok) fail("out=" + std::string(to_string(s.out)) + " is not one of: f32, bf16, f16");
  if (s.lhs == DType::kNF4) fail("lhs=nf4: nf4 is a weight format, allowed for rhs only");
  if (is_integer(s.lhs) != is_integer(s.rhs) && s.rhs != DType::kNF4)
    fail("lhs=" + std::string(to_string(s.lhs)) + " with rhs=" + std::string(to_string(s.rhs)) +
         ": integer operands pair only with integer operands (unsupported dtype pair)");

  // Quantization rules.
  auto check_quant = [&](std::string_view p, const Quant& q, bool is_rhs) {
    if (q.kind != QuantKind::kBlock) return;
    if (q.block_k < 1) fail(std::string(p) + "=" + to_string(q) + ": block size must be >= 1");
    if (s.k % q.block_k != 0)
      fail("K=" + std::to_string(s.k) + " is not a multiple of block size " +
           std::to_string(q.block_k) + " (" + std::string(p) + "=" + to_string(q) + ")");
    if (q.block_n != 0) {
      if (!is_rhs) fail(std::string(p) + "=" + to_string(q) + ": block:BxB is for rhs only");
      if (q.block_n < 1) fail(std::string(p) + "=" + to_string(q) + ": block size must be >= 1");
      if (s.n % q.block_n != 0)
        fail("N=" + std::to_string(s.n) + " is not a multiple of block size " +
             std::to_string(q.block_n) + " (" + std::string(p) + "=" + to_string(q) + ")");
    }
  };
  check_quant("lhs_quant", s.lhs_quant, false);
  check_quant("rhs_quant", s.rhs_quant, true);

  if (s.lhs_layout == LhsLayout::kKM && s.op != Op::kTgmm)
    fail("lhs_layout=km applies to op=tgmm only (gmm takes lhs as [M, K])");
  if (s.op == Op::kTgmm && s.out_mode == OutMode::kExistingOut)
    fail(
        "out_mode=existing_out: tgmm writes every element of out, so there is nothing to "
        "preserve; to add the product to existing_out (gradient accumulation) use "
        "out_mode=accumulate");

  // Valid, but not built yet: say so plainly.
  auto not_yet = [&](const std::string& what) { fail("not supported yet: " + what); };
  if (s.target == Target::kPallas) not_yet("target=pallas");
  for (auto [p, d] : {std::pair{"lhs", s.lhs}, std::pair{"rhs", s.rhs}})
    if (d != DType::kF32 && d != DType::kBF16 && d != DType::kF16)
      not_yet(std::string(p) + "=" + std::string(to_string(d)));
  if (s.lhs_quant.kind != QuantKind::kNone) not_yet("lhs_quant=" + to_string(s.lhs_quant));
  if (s.rhs_quant.kind != QuantKind::kNone) not_yet("rhs_quant=" + to_string(s.rhs_quant));
}

std::string spec_hash(const KernelSpec& s) {
  const std::string text = to_text(s);
  return hash128_hex({text, generator_version(), templates_digest()});
}

std::string kernel_name(const KernelSpec& s) {
  std::string n = std::string(to_string(s.op)) + "_" + std::string(to_string(s.lhs)) + "x" +
                  std::string(to_string(s.rhs)) + "_" + std::string(to_string(s.out)) + "_k" +
                  std::to_string(s.k) + "_n" + std::to_string(s.n) + "_g" + std::to_string(s.g);
  if (s.g_local != s.g) n += "l" + std::to_string(s.g_local);
  n += "_t" + std::to_string(s.tiling.tm) + "x" + std::to_string(s.tiling.tk) + "x" +
       std::to_string(s.tiling.tn);
  if (s.transpose_rhs) n += "_tr";
  if (s.lhs_layout == LhsLayout::kKM) n += "_km";
  if (s.out_mode == OutMode::kExistingOut) n += "_eo";
  if (s.out_mode == OutMode::kAccumulate) n += "_acc";
  auto quant_token = [](const Quant& q) {
    std::string t = to_string(q);
    for (char& c : t)
      if (c == ':') c = '-';
    return t;
  };
  if (s.lhs_quant.kind != QuantKind::kNone) n += "_ql-" + quant_token(s.lhs_quant);
  if (s.rhs_quant.kind != QuantKind::kNone) n += "_qr-" + quant_token(s.rhs_quant);
  if (s.isa != Isa::kNative) n += "_" + std::string(to_string(s.isa));
  if (s.target == Target::kPallas) n += "_pallas";
  return n + "_" + spec_hash(s).substr(0, 8);
}

ParsedName parse_kernel_name(std::string_view name) {
  auto bad = [&](const std::string& why) {
    throw SpecError("kernel name '" + std::string(name) + "': " + why);
  };
  std::vector<std::string> parts;
  for (size_t pos = 0;;) {
    size_t end = name.find('_', pos);
    parts.emplace_back(name.substr(pos, end == std::string_view::npos ? end : end - pos));
    if (end == std::string_view::npos) break;
    pos = end + 1;
  }
  if (parts.size() < 7) bad("too few parts");
  ParsedName r;
  KernelSpec& s = r.spec;
  s.op = parse_enum(kOps, parts[0], "op");
  size_t x = parts[1].find('x');
  if (x == std::string::npos) bad("'" + parts[1] + "' is not <lhs>x<rhs>");
  s.lhs = parse_dtype(parts[1].substr(0, x), "lhs");
  s.rhs = parse_dtype(parts[1].substr(x + 1), "rhs");
  s.out = parse_dtype(parts[2], "out");
  auto number = [&](const std::string& part, char prefix) {
    if (part.empty() || part[0] != prefix) bad("expected '" + std::string(1, prefix) + "<int>'");
    return parse_int(std::string_view(part).substr(1), std::string(1, prefix));
  };
  s.k = number(parts[3], 'k');
  s.n = number(parts[4], 'n');
  {
    std::string gpart = parts[5];
    size_t l = gpart.find('l');
    s.g = number(gpart.substr(0, l), 'g');
    s.g_local = l == std::string::npos ? s.g : parse_int(gpart.substr(l + 1), "g_local");
  }
  {
    const std::string& t = parts[6];
    if (t.empty() || t[0] != 't') bad("expected 't<tm>x<tk>x<tn>'");
    size_t a = t.find('x'), b = t.find('x', a + 1);
    if (a == std::string::npos || b == std::string::npos) bad("expected 't<tm>x<tk>x<tn>'");
    s.tiling.tm = parse_int(std::string_view(t).substr(1, a - 1), "tm");
    s.tiling.tk = parse_int(std::string_view(t).substr(a + 1, b - a - 1), "tk");
    s.tiling.tn = parse_int(std::string_view(t).substr(b + 1), "tn");
  }
  r.hash8 = parts.back();
  auto unquant = [&](std::string t) {
    for (char& c : t)
      if (c == '-') c = ':';
    return t;
  };
  for (size_t i = 7; i + 1 < parts.size(); ++i) {
    const std::string& p = parts[i];
    if (p == "tr")
      s.transpose_rhs = true;
    else if (p == "km")
      s.lhs_layout = LhsLayout::kKM;
    else if (p == "eo")
      s.out_mode = OutMode::kExistingOut;
    else if (p == "acc")
      s.out_mode = OutMode::kAccumulate;
    else if (p == "pallas")
      s.target = Target::kPallas;
    else if (p.rfind("ql-", 0) == 0)
      s.lhs_quant = parse_quant(unquant(p.substr(3)), "lhs_quant");
    else if (p.rfind("qr-", 0) == 0)
      s.rhs_quant = parse_quant(unquant(p.substr(3)), "rhs_quant");
    else
      s.isa = parse_enum(kIsas, p, "isa");
  }
  return r;
}

}  // namespace gmmgen
