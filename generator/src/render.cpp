#include "render.h"

#include <stdexcept>

#include "gmmgen/templates.h"

namespace gmmgen {
namespace {
constexpr std::string_view kSuffix = ".mustache";
}

std::string_view Renderer::file(std::string_view path) {
  const std::string_view content = embedded_file(path);
  used_.emplace(path);
  return content;
}

std::string Renderer::render(std::string_view path, mu::data ctx) {
  for (const auto& f : embedded_files()) {
    if (f.path.size() <= kSuffix.size() || !f.path.ends_with(kSuffix)) continue;
    const std::string name(f.path.substr(0, f.path.size() - kSuffix.size()));
    // A partial stands on a line of its own: that line's newline ends it, not the file's.
    ctx.set(name, mu::partial{[this, p = f.path] {
              std::string text(file(p));
              if (text.ends_with('\n')) text.pop_back();
              return text;
            }});
  }
  const std::string full = std::string(path) + std::string(kSuffix);
  mu::mustache tmpl{std::string(file(full))};
  if (!tmpl.is_valid()) throw std::logic_error("template " + full + ": " + tmpl.error_message());
  tmpl.set_custom_escape([](const std::string& s) { return s; });
  std::string text = tmpl.render(ctx);
  if (!tmpl.is_valid()) throw std::logic_error("template " + full + ": " + tmpl.error_message());
  return text;
}

}  // namespace gmmgen
