// Spec files: a JSON array of specs (objects or spec text strings), or {"kernels": [...]}, each
// optionally with an alias (a stable C name). Read strictly: nesting depth is limited (the parser
// never recurses and the input is never re-serialized), a key given twice in one object is an
// error as in the text form, and every value must have its field's JSON type.
#include <algorithm>
#include <cctype>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "codecs.h"
#include "gmmgen/spec.h"
#include "gmmgen/target.h"

namespace gmmgen {
namespace {

// Deeper than any spec file needs ({"kernels": [{...}]} is 3 levels).
constexpr int kMaxDepth = 64;

// A library message, which may quote the input, cut to a readable length.
std::string shorten(std::string_view message) {
  constexpr size_t kMax = 200;
  return message.size() <= kMax ? std::string(message)
                                : std::string(message.substr(0, kMax)) + "...";
}

nlohmann::ordered_json parse_strict(std::string_view text, const std::string& origin) {
  // One set of keys per object being parsed, innermost last: a key event always belongs to the
  // innermost open container, which is then an object.
  std::vector<std::set<std::string>> keys;
  // The key whose value is being read, for errors the parser itself raises (1e400).
  std::string pending_key;
  using Event = nlohmann::json::parse_event_t;
  auto check = [&](int depth, Event event, nlohmann::ordered_json& parsed) {
    if (event != Event::key) pending_key.clear();
    switch (event) {
      case Event::object_start:
      case Event::array_start:
        if (depth >= kMaxDepth)
          throw SpecError(origin + ": JSON nested deeper than " + std::to_string(kMaxDepth) +
                          " levels");
        if (event == Event::object_start) keys.emplace_back();
        break;
      case Event::object_end:
        keys.pop_back();
        break;
      case Event::key:
        if (!keys.back().insert(parsed.get<std::string>()).second)
          throw SpecError(origin + ": key '" + quote_value(parsed.get<std::string>()) +
                          "' is given twice in one object");
        pending_key = parsed.get<std::string>();
        break;
      default:
        break;
    }
    return true;
  };
  try {
    return nlohmann::ordered_json::parse(text.begin(), text.end(), check);
  } catch (const nlohmann::json::exception& e) {
    const std::string at =
        pending_key.empty() ? "" : " in the value of key '" + quote_value(pending_key) + "'";
    throw SpecError(origin + ": not valid JSON" + at + ": " + shorten(e.what()));
  }
}

// Keywords of C and C++: an alias is declared in a header both compile.
constexpr std::string_view kKeywords[] = {"alignas",
                                          "alignof",
                                          "and",
                                          "and_eq",
                                          "asm",
                                          "auto",
                                          "bitand",
                                          "bitor",
                                          "bool",
                                          "break",
                                          "case",
                                          "catch",
                                          "char",
                                          "char8_t",
                                          "char16_t",
                                          "char32_t",
                                          "class",
                                          "compl",
                                          "concept",
                                          "const",
                                          "consteval",
                                          "constexpr",
                                          "constinit",
                                          "const_cast",
                                          "continue",
                                          "co_await",
                                          "co_return",
                                          "co_yield",
                                          "decltype",
                                          "default",
                                          "delete",
                                          "do",
                                          "double",
                                          "dynamic_cast",
                                          "else",
                                          "enum",
                                          "explicit",
                                          "export",
                                          "extern",
                                          "false",
                                          "float",
                                          "for",
                                          "friend",
                                          "goto",
                                          "if",
                                          "inline",
                                          "int",
                                          "long",
                                          "mutable",
                                          "namespace",
                                          "new",
                                          "noexcept",
                                          "not",
                                          "not_eq",
                                          "nullptr",
                                          "operator",
                                          "or",
                                          "or_eq",
                                          "private",
                                          "protected",
                                          "public",
                                          "register",
                                          "reinterpret_cast",
                                          "requires",
                                          "restrict",
                                          "return",
                                          "short",
                                          "signed",
                                          "sizeof",
                                          "static",
                                          "static_assert",
                                          "static_cast",
                                          "struct",
                                          "switch",
                                          "template",
                                          "this",
                                          "thread_local",
                                          "throw",
                                          "true",
                                          "try",
                                          "typedef",
                                          "typeid",
                                          "typename",
                                          "union",
                                          "unsigned",
                                          "using",
                                          "virtual",
                                          "void",
                                          "volatile",
                                          "wchar_t",
                                          "while",
                                          "xor",
                                          "xor_eq"};

// The symbols of an alias's entry points, from the ABI's one list (<alias><suffix>).
std::vector<std::string> alias_symbols(const std::string& alias) {
#define GMMGEN_ALIAS_SYMBOL_(arg, ret, field, suffix, params) alias + #suffix,
  return {GMMGEN_ENTRY_POINTS(GMMGEN_ALIAS_SYMBOL_, ~)};
#undef GMMGEN_ALIAS_SYMBOL_
}

// One entry: a spec text string, a JSON spec object (optionally with "alias"), or
// {"spec": <text or object>, "alias": "..."}.
bool names_tiling(const nlohmann::ordered_json& spec) {
  if (spec.is_string()) {
    const auto keys = text_keys(spec.get<std::string>());
    return std::any_of(keys.begin(), keys.end(), [](const auto& k) { return is_tiling_key(k); });
  }
  for (const auto& [key, value] : spec.items())
    if (is_tiling_key(key)) return true;
  return false;
}

SpecEntry parse_entry(const nlohmann::ordered_json& e) {
  if (e.is_string()) return {parse_text(e.get<std::string>()), "", names_tiling(e)};
  if (!e.is_object())
    throw SpecError(std::string("an entry must be a spec text string or an object, got ") +
                    e.type_name());
  SpecEntry out;
  if (e.contains("alias")) {
    if (!e["alias"].is_string())
      throw SpecError(std::string("alias must be a JSON string, got ") + e["alias"].type_name());
    out.alias = e["alias"].get<std::string>();
    check_alias(out.alias);
  }
  if (e.contains("spec")) {
    for (const auto& [key, value] : e.items())
      if (key != "spec" && key != "alias")
        throw SpecError("key '" + quote_value(key) +
                        "' beside \"spec\": an entry {\"spec\": ..., \"alias\": ...} has no "
                        "other keys");
    const auto& spec = e["spec"];
    if (spec.is_string())
      out.spec = parse_text(spec.get<std::string>());
    else if (spec.is_object())
      out.spec = from_json(spec);
    else
      throw SpecError(
          std::string("\"spec\" must be a spec text string or a JSON spec object, got ") +
          spec.type_name());
    out.tiling_given = names_tiling(spec);
  } else {
    nlohmann::ordered_json spec = e;
    spec.erase("alias");
    out.spec = from_json(spec);
    out.tiling_given = names_tiling(spec);
  }
  return out;
}

}  // namespace

void check_alias(std::string_view alias) {
  const std::string quoted = "alias '" + quote_value(alias) + "'";
  const bool identifier = !alias.empty() && !std::isdigit(static_cast<unsigned char>(alias[0])) &&
                          std::all_of(alias.begin(), alias.end(), [](char c) {
                            return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                                   (c >= '0' && c <= '9') || c == '_';
                          });
  if (!identifier) throw SpecError(quoted + " must be a C identifier ([A-Za-z_][A-Za-z0-9_]*)");
  if (std::find(std::begin(kKeywords), std::end(kKeywords), alias) != std::end(kKeywords))
    throw SpecError(quoted + " is a C or C++ keyword");
  // Names starting with '_' or holding "__" are the implementation's; gmmgen_ and GMMGEN_ are
  // the kernel ABI's (types, macros).
  if (alias[0] == '_' || alias.find("__") != std::string_view::npos)
    throw SpecError(quoted + " is reserved (starts with '_' or holds \"__\")");
  std::string lower(alias.substr(0, 7));
  for (char& c : lower) c = char(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "gmmgen_") throw SpecError(quoted + " is reserved (starts with gmmgen_)");
}

std::vector<SpecEntry> parse_spec_entries(std::string_view text, const std::string& origin) {
  nlohmann::ordered_json j = parse_strict(text, origin);
  if (j.is_object() && j.contains("kernels")) j = std::move(j["kernels"]);
  if (!j.is_array())
    throw SpecError(origin + ": expected an array of specs or {\"kernels\": [...]}");
  std::vector<SpecEntry> entries;
  // Every symbol an alias defines, and the entry (0-based) whose alias defines it.
  std::map<std::string, size_t> symbols;
  for (size_t i = 0; i < j.size(); ++i) {
    const std::string at = origin + ", spec #" + std::to_string(i + 1) + ": ";
    try {
      entries.push_back(parse_entry(j[i]));
      validate(entries.back().spec);
    } catch (const SpecError& e) {
      throw SpecError(at + e.what());
    }
    const SpecEntry& e = entries.back();
    if (e.alias.empty()) continue;
    const std::string quoted = "alias '" + e.alias + "'";
    if (!target_of(e.spec.target).caps().bundles)
      throw SpecError(at + quoted + " names a target=" + std::string(to_string(e.spec.target)) +
                      " kernel; only target=cpp kernels have C entry points");
    for (const std::string& sym : alias_symbols(e.alias)) {
      const auto [it, fresh] = symbols.emplace(sym, i);
      if (fresh) continue;
      const SpecEntry& other = entries[it->second];
      const std::string first = "spec #" + std::to_string(it->second + 1);
      throw SpecError(at + quoted +
                      (other.alias == e.alias
                           ? " is also the alias of " + first + "; aliases must be unique"
                           : " clashes with alias '" + other.alias + "' of " + first +
                                 ": both would define the symbol " + sym));
    }
  }
  return entries;
}

std::vector<SpecEntry> load_spec_entries(const std::filesystem::path& path) {
  const std::string origin = "spec file " + path.string();
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  if (!(in && text << in.rdbuf())) throw SpecError(origin + ": cannot be read");
  return parse_spec_entries(text.str(), origin);
}

namespace {
std::vector<KernelSpec> specs_of(std::vector<SpecEntry> entries) {
  std::vector<KernelSpec> specs;
  specs.reserve(entries.size());
  for (auto& e : entries) specs.push_back(std::move(e.spec));
  return specs;
}
}  // namespace

std::vector<KernelSpec> parse_spec_json(std::string_view text, const std::string& origin) {
  return specs_of(parse_spec_entries(text, origin));
}

std::vector<KernelSpec> load_spec_file(const std::filesystem::path& path) {
  return specs_of(load_spec_entries(path));
}

}  // namespace gmmgen
