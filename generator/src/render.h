// Renders the embedded Mustache templates (templates/). Every embedded template is available as
// a partial under its path without ".mustache" ({{> cpp/common/checks.inc}}), and every file a
// rendering touches is recorded, so a kernel's hash covers exactly what it is rendered from.
#pragma once

#include <kainjow/mustache.hpp>
#include <set>
#include <string>
#include <string_view>

namespace gmmgen {

namespace mu = kainjow::mustache;

class Renderer {
 public:
  // Renders `path` (an embedded template without ".mustache", e.g. "cpp/gmm.cpp") with ctx.
  // Throws std::logic_error for a template error.
  std::string render(std::string_view path, mu::data ctx);
  // An embedded file verbatim (e.g. "gmmgen/kernel_abi.h"), recorded as used.
  std::string_view file(std::string_view path);
  // The embedded paths used so far (with their ".mustache"), sorted.
  const std::set<std::string>& used() const { return used_; }

 private:
  std::set<std::string> used_;
};

}  // namespace gmmgen
