#include "gmmgen/templates.h"

#include <stdexcept>

#include "gmmgen/hash.h"
#include "gmmgen/version.h"

namespace gmmgen {

std::string_view embedded_file(std::string_view path) {
  for (const auto& f : embedded_files())
    if (f.path == path) return f.content;
  throw std::out_of_range("no embedded template " + std::string(path));
}

const std::string& templates_digest() {
  static const std::string digest = [] {
    std::vector<std::string_view> parts;
    for (const auto& f : embedded_files()) {
      parts.push_back(f.path);
      parts.push_back(f.content);
    }
    return hash128_hex(parts);
  }();
  return digest;
}

std::string_view generator_version() {
  return GMMGEN_VERSION;
}

}  // namespace gmmgen
