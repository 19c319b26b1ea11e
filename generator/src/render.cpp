#include "render.h"

#include <map>
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
  const std::string_view text = file(full);
  // Each template is parsed once per thread (a set renders each of them once per kernel);
  // partials are parsed where they are used.
  thread_local std::map<std::string, mu::mustache, std::less<>> parsed;
  auto it = parsed.find(full);
  if (it == parsed.end()) {
    it = parsed.try_emplace(full, std::string(text)).first;
    it->second.set_custom_escape([](const std::string& s) { return s; });
  }
  mu::mustache& tmpl = it->second;
  std::string out = tmpl.is_valid() ? tmpl.render(ctx) : std::string();
  if (!tmpl.is_valid()) {  // a template error: reported, and not kept
    const std::string message = "template " + full + ": " + tmpl.error_message();
    parsed.erase(it);
    throw std::logic_error(message);
  }
  return out;
}

}  // namespace gmmgen
