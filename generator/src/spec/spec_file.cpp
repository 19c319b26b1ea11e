// Spec files: a JSON array of specs (objects or spec text strings), or {"kernels": [...]}.
#include <fstream>
#include <nlohmann/json.hpp>

#include "gmmgen/spec.h"

namespace gmmgen {

std::vector<KernelSpec> load_spec_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw SpecError("spec file " + path.string() + ": cannot be read");
  nlohmann::ordered_json j;
  try {
    j = nlohmann::ordered_json::parse(in);
  } catch (const nlohmann::json::parse_error& e) {
    throw SpecError("spec file " + path.string() + ": not valid JSON: " + e.what());
  }
  if (j.is_object() && j.contains("kernels")) j = j["kernels"];
  if (!j.is_array())
    throw SpecError("spec file " + path.string() +
                    ": expected an array of specs or {\"kernels\": [...]}");
  std::vector<KernelSpec> specs;
  for (size_t i = 0; i < j.size(); ++i) {
    try {
      specs.push_back(j[i].is_string() ? parse_text(j[i].get<std::string>()) : from_json(j[i]));
    } catch (const SpecError& e) {
      throw SpecError("spec file " + path.string() + ", spec #" + std::to_string(i + 1) + ": " +
                      e.what());
    }
  }
  return specs;
}

}  // namespace gmmgen
