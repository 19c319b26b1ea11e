// Spec files: a JSON array of specs (objects or spec text strings), or {"kernels": [...]}. Read
// strictly: nesting depth is limited (the parser never recurses and the input is never
// re-serialized), a key given twice in one object is an error as in the text form, and every
// value must have its field's JSON type.
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "codecs.h"
#include "gmmgen/spec.h"

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

}  // namespace

std::vector<KernelSpec> parse_spec_json(std::string_view text, const std::string& origin) {
  nlohmann::ordered_json j = parse_strict(text, origin);
  if (j.is_object() && j.contains("kernels")) j = std::move(j["kernels"]);
  if (!j.is_array())
    throw SpecError(origin + ": expected an array of specs or {\"kernels\": [...]}");
  std::vector<KernelSpec> specs;
  for (size_t i = 0; i < j.size(); ++i) {
    try {
      specs.push_back(j[i].is_string() ? parse_text(j[i].get<std::string>()) : from_json(j[i]));
      validate(specs.back());
    } catch (const SpecError& e) {
      throw SpecError(origin + ", spec #" + std::to_string(i + 1) + ": " + e.what());
    }
  }
  return specs;
}

std::vector<KernelSpec> load_spec_file(const std::filesystem::path& path) {
  const std::string origin = "spec file " + path.string();
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  if (!(in && text << in.rdbuf())) throw SpecError(origin + ": cannot be read");
  return parse_spec_json(text.str(), origin);
}

}  // namespace gmmgen
