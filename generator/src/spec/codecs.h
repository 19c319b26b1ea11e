// How each C++ type of a spec field is parsed, printed, hashed and named. The field table
// (fields.cpp) pairs each key with one of these codecs.
#pragma once

#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>

#include "gmmgen/spec.h"

namespace gmmgen {

struct FieldCodec {
  std::string (*text)(const void* value);  // canonical text
  // Parses text into *value; throws SpecError naming key=text and the rule.
  void (*parse)(void* value, std::string_view text, std::string_view key);
  uint64_t (*code)(const void* value);  // lossless integer form, for hashing
  bool (*equal)(const void* a, const void* b);
  nlohmann::ordered_json (*json)(const void* value);     // canonical JSON value
  std::string (*token)(const void* value);               // the value's token in kernel names
  bool (*untoken)(void* value, std::string_view token);  // false if not a token of this type
  // The accepted values of the field `key`, for --help and the README ("" if the table's row
  // says it).
  std::string (*values)(std::string_view key);
  // The JSON type a value of this field has in a JSON spec (string, number_integer, boolean).
  nlohmann::json::value_t json_type;
};

// quote_value (a user's value for an error message) is declared in gmmgen/spec.h.

// Enum values: the name in specs and the token in kernel names ("" for the default's token,
// which names leave out, or a short form for names with '_').
template <typename E>
struct EnumName {
  E value;
  std::string_view name;
  std::string_view token;
};
template <typename E>
std::span<const EnumName<E>> enum_names();
template <>
std::span<const EnumName<Op>> enum_names<Op>();
template <>
std::span<const EnumName<DType>> enum_names<DType>();
template <>
std::span<const EnumName<OutMode>> enum_names<OutMode>();
template <>
std::span<const EnumName<TargetKind>> enum_names<TargetKind>();
template <>
std::span<const EnumName<Isa>> enum_names<Isa>();
template <>
std::span<const EnumName<LhsLayout>> enum_names<LhsLayout>();
template <>
std::span<const EnumName<Tpu>> enum_names<Tpu>();

template <typename E>
const EnumName<E>& enum_entry(E v) {
  for (const auto& e : enum_names<E>())
    if (e.value == v) return e;
  throw SpecError("enum value " + std::to_string(int(v)) + " has no name");
}

template <typename E>
E parse_enum(std::string_view s, std::string_view param) {
  std::string allowed;
  for (const auto& e : enum_names<E>()) {
    if (e.name == s) return e.value;
    allowed += allowed.empty() ? "" : ", ";
    allowed += e.name;
  }
  throw SpecError(std::string(param) + "=" + quote_value(s) + " is not one of: " + allowed);
}

int64_t parse_int(std::string_view s, std::string_view param);
Quant parse_quant(std::string_view s, std::string_view param);

namespace codec_detail {
template <typename E>
std::string text(const void* v) {
  return std::string(enum_entry(*static_cast<const E*>(v)).name);
}
template <typename E>
void parse(void* v, std::string_view s, std::string_view key) {
  *static_cast<E*>(v) = parse_enum<E>(s, key);
}
template <typename E>
uint64_t code(const void* v) {
  return uint64_t(*static_cast<const E*>(v));
}
template <typename E>
bool equal(const void* a, const void* b) {
  return *static_cast<const E*>(a) == *static_cast<const E*>(b);
}
template <typename E>
nlohmann::ordered_json json(const void* v) {
  return text<E>(v);
}
template <typename E>
std::string token(const void* v) {
  return std::string(enum_entry(*static_cast<const E*>(v)).token);
}
template <typename E>
std::string values(std::string_view) {
  std::string out;
  for (const auto& e : enum_names<E>()) out += (out.empty() ? "" : ", ") + std::string(e.name);
  return out;
}
template <typename E>
bool untoken(void* v, std::string_view t) {
  for (const auto& e : enum_names<E>())
    if (!e.token.empty() && e.token == t) {
      *static_cast<E*>(v) = e.value;
      return true;
    }
  return false;
}
template <>
std::string values<DType>(std::string_view key);  // the dtypes the operand `key` may have
}  // namespace codec_detail

template <typename E>
inline constexpr FieldCodec enum_codec{
    codec_detail::text<E>,    codec_detail::parse<E>,  codec_detail::code<E>,
    codec_detail::equal<E>,   codec_detail::json<E>,   codec_detail::token<E>,
    codec_detail::untoken<E>, codec_detail::values<E>, nlohmann::json::value_t::string};

extern const FieldCodec int_codec;    // int64_t: decimal
extern const FieldCodec bool_codec;   // bool: 0/1 (also true/false); token "" for true
extern const FieldCodec quant_codec;  // Quant: none, tensor, channel, block:B, block:BxB

}  // namespace gmmgen
