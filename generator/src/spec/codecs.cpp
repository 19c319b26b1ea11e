#include "codecs.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <vector>

namespace gmmgen {

template <>
std::span<const EnumName<Op>> enum_names<Op>() {
  static constexpr std::array<EnumName<Op>, 2> k{
      {{Op::kGmm, "gmm", "gmm"}, {Op::kTgmm, "tgmm", "tgmm"}}};
  return k;
}
template <>
std::span<const EnumName<DType>> enum_names<DType>() {
  static const std::vector<EnumName<DType>> k = [] {
    std::vector<EnumName<DType>> v;
    for (const auto& d : dtype_table()) v.push_back({d.id, d.name, d.name});
    return v;
  }();
  return k;
}
template <>
std::span<const EnumName<OutMode>> enum_names<OutMode>() {
  static constexpr std::array<EnumName<OutMode>, 3> k{
      {{OutMode::kPlain, "plain", ""},
       {OutMode::kExistingOut, "existing_out", "eo"},
       {OutMode::kAccumulate, "accumulate", "acc"}}};
  return k;
}
template <>
std::span<const EnumName<TargetKind>> enum_names<TargetKind>() {
  static constexpr std::array<EnumName<TargetKind>, 2> k{
      {{TargetKind::kCpp, "cpp", ""}, {TargetKind::kPallas, "pallas", "pallas"}}};
  return k;
}
template <>
std::span<const EnumName<Isa>> enum_names<Isa>() {
  static constexpr std::array<EnumName<Isa>, 7> k{{{Isa::kNative, "native", ""},
                                                   {Isa::kAmx, "amx", "amx"},
                                                   {Isa::kAvx512Bf16, "avx512bf16", "avx512bf16"},
                                                   {Isa::kAvx512Vnni, "avx512vnni", "avx512vnni"},
                                                   {Isa::kAvx512, "avx512", "avx512"},
                                                   {Isa::kAvx2, "avx2", "avx2"},
                                                   {Isa::kGeneric, "generic", "generic"}}};
  return k;
}
template <>
std::span<const EnumName<LhsLayout>> enum_names<LhsLayout>() {
  static constexpr std::array<EnumName<LhsLayout>, 2> k{
      {{LhsLayout::kMK, "mk", ""}, {LhsLayout::kKM, "km", "km"}}};
  return k;
}
template <>
std::span<const EnumName<Tpu>> enum_names<Tpu>() {
  static constexpr std::array<EnumName<Tpu>, 5> k{{{Tpu::kAny, "any", ""},
                                                   {Tpu::kV4, "v4", "v4"},
                                                   {Tpu::kV5e, "v5e", "v5e"},
                                                   {Tpu::kV5p, "v5p", "v5p"},
                                                   {Tpu::kV6e, "v6e", "v6e"}}};
  return k;
}

namespace codec_detail {
template <>
std::string values<DType>(std::string_view key) {
  const unsigned use = key == "lhs" ? kUseLhs : key == "rhs" ? kUseRhs : kUseOut;
  std::string out;
  for (const auto& d : dtype_table())
    if (d.uses & use) out += (out.empty() ? "" : ", ") + std::string(d.name);
  return out;
}
}  // namespace codec_detail

std::string escape_control(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (const char c : v) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[(c >> 4) & 0xf];
      out += kHex[c & 0xf];
    } else {
      out += c;
    }
  }
  return out;
}

std::string quote_value(std::string_view v) {
  constexpr size_t kMax = 100;
  std::string out = escape_control(v.substr(0, kMax));
  if (v.size() > kMax) out += "... (" + std::to_string(v.size()) + " characters)";
  return out;
}

int64_t parse_int(std::string_view s, std::string_view param) {
  int64_t v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size() || s.empty())
    throw SpecError(std::string(param) + "=" + quote_value(s) + " is not an integer");
  return v;
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
  throw SpecError(std::string(param) + "=" + quote_value(s) +
                  " is not one of: none, tensor, channel, block:B, block:BxB");
}

namespace {

template <typename T>
const T& as(const void* v) {
  return *static_cast<const T*>(v);
}
template <typename T>
T& as(void* v) {
  return *static_cast<T*>(v);
}

bool is_decimal(std::string_view t) {
  if (t.empty()) return false;
  for (char c : t)
    if (c < '0' || c > '9') return false;
  return t.size() == 1 || t[0] != '0';
}

}  // namespace

const FieldCodec int_codec{
    [](const void* v) { return std::to_string(as<int64_t>(v)); },
    [](void* v, std::string_view s, std::string_view key) { as<int64_t>(v) = parse_int(s, key); },
    [](const void* v) { return uint64_t(as<int64_t>(v)); },
    [](const void* a, const void* b) { return as<int64_t>(a) == as<int64_t>(b); },
    [](const void* v) { return nlohmann::ordered_json(as<int64_t>(v)); },
    [](const void* v) { return std::to_string(as<int64_t>(v)); },
    [](void* v, std::string_view t) {
      if (!is_decimal(t)) return false;
      as<int64_t>(v) = parse_int(t, "kernel name");
      return true;
    },
    [](std::string_view) { return std::string(); },
    nlohmann::json::value_t::number_integer};

const FieldCodec bool_codec{
    [](const void* v) { return std::string(as<bool>(v) ? "1" : "0"); },
    [](void* v, std::string_view s, std::string_view key) {
      if (s == "1" || s == "true")
        as<bool>(v) = true;
      else if (s == "0" || s == "false")
        as<bool>(v) = false;
      else
        throw SpecError(std::string(key) + "=" + quote_value(s) +
                        " is not a boolean (0/1/true/false)");
    },
    [](const void* v) { return uint64_t(as<bool>(v)); },
    [](const void* a, const void* b) { return as<bool>(a) == as<bool>(b); },
    [](const void* v) { return nlohmann::ordered_json(as<bool>(v)); },
    // Names carry a bool only while it is true: its prefix alone is the token.
    [](const void*) { return std::string(); },
    [](void* v, std::string_view t) {
      if (!t.empty()) return false;
      as<bool>(v) = true;
      return true;
    },
    [](std::string_view) { return std::string(); }, nlohmann::json::value_t::boolean};

const FieldCodec quant_codec{
    [](const void* v) { return to_string(as<Quant>(v)); },
    [](void* v, std::string_view s, std::string_view key) { as<Quant>(v) = parse_quant(s, key); },
    [](const void* v) {
      const Quant& q = as<Quant>(v);
      return uint64_t(q.kind) | uint64_t(q.block_k) << 4 | uint64_t(q.block_n) << 34;
    },
    [](const void* a, const void* b) { return as<Quant>(a) == as<Quant>(b); },
    [](const void* v) { return nlohmann::ordered_json(to_string(as<Quant>(v))); },
    // Names are C identifiers: block:128x128 is named block128x128.
    [](const void* v) {
      std::string t = to_string(as<Quant>(v));
      t.erase(std::remove(t.begin(), t.end(), ':'), t.end());
      return t;
    },
    [](void* v, std::string_view t) {
      std::string s(t);
      constexpr std::string_view kBlock = "block";
      if (s.size() > kBlock.size() && s.compare(0, kBlock.size(), kBlock) == 0)
        s.insert(kBlock.size(), ":");
      try {
        as<Quant>(v) = parse_quant(s, "kernel name");
      } catch (const SpecError&) {
        return false;
      }
      return true;
    },
    [](std::string_view) { return std::string(); }, nlohmann::json::value_t::string};

}  // namespace gmmgen
