// Kernel hashes and names. Names are derived from the field table: each field's name_sep,
// name_prefix and codec token (spec/fields.cpp).
#include "gmmgen/naming.h"

#include <mutex>
#include <unordered_map>
#include <vector>

#include "gmmgen/hash.h"
#include "gmmgen/target.h"
#include "gmmgen/templates.h"
#include "render.h"
#include "spec/codecs.h"

namespace gmmgen {
namespace {

// Fields written in the head of a name (mandatory ones, and optional ones that continue a part
// such as g_local in g64l8), in table order; the others are optional parts of the tail.
bool in_head(const SpecField& f) {
  return !f.name_optional || f.name_sep != "_";
}
bool starts_part(const SpecField& f) {
  return f.name_sep.empty() || f.name_sep == "_";
}

}  // namespace

std::string spec_hash(const KernelSpec& s) {
  static std::mutex mutex;
  static std::unordered_map<std::string, std::string> known;
  const std::string text = to_text(s);
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = known.find(text); it != known.end()) return it->second;
  validate(s);
  // Render once with a placeholder name and hash: the templates the kernel is made of, and the
  // source itself, which also holds what the generator computes into it (register tile, scratch
  // bound, split limits), so a change to the heuristics alone gives new hashes and cache keys.
  Renderer r;
  const std::vector<EmittedFile> files = target_of(s.target).render(s, KernelId{"name", "hash"}, r);
  std::vector<std::string_view> parts{text, generator_version()};
  for (const auto& path : r.used()) {
    parts.push_back(path);
    parts.push_back(embedded_file(path));
  }
  for (const auto& f : files) {
    parts.push_back(f.path);
    parts.push_back(f.content);
  }
  return known[text] = hash128_hex(parts);
}

std::string name_stem(const KernelSpec& s) {
  std::string head, tail;
  for (const auto& f : spec_fields()) {
    if (f.name_optional && field_is_default(f, s)) continue;
    const std::string token = std::string(f.name_sep) + std::string(f.name_prefix) +
                              f.codec->token(f.member(const_cast<KernelSpec&>(s)));
    (in_head(f) ? head : tail) += token;
  }
  return head + tail;
}

std::string kernel_name(const KernelSpec& s) {
  return name_stem(s) + "_" + spec_hash(s).substr(0, 8);
}

ParsedName parse_kernel_name(std::string_view name) {
  auto bad = [&](const std::string& why) -> void {
    throw SpecError("kernel name '" + std::string(name) + "': " + why);
  };
  std::vector<std::string_view> parts;
  for (size_t pos = 0;;) {
    const size_t end = name.find('_', pos);
    parts.push_back(name.substr(pos, end == std::string_view::npos ? end : end - pos));
    if (end == std::string_view::npos) break;
    pos = end + 1;
  }
  if (parts.size() < 2) bad("too few parts");
  ParsedName r;
  r.hash8 = std::string(parts.back());
  parts.pop_back();
  KernelSpec& s = r.spec;

  std::vector<const SpecField*> head;
  for (const auto& f : spec_fields())
    if (in_head(f)) head.push_back(&f);
  size_t next_part = 0;
  std::string_view cur;
  for (size_t i = 0; i < head.size(); ++i) {
    const SpecField& f = *head[i];
    if (starts_part(f)) {
      if (!cur.empty()) bad("unexpected '" + std::string(cur) + "'");
      if (next_part >= parts.size()) bad("too few parts");
      cur = parts[next_part++];
    } else if (cur.starts_with(f.name_sep)) {
      cur.remove_prefix(f.name_sep.size());
    } else if (f.name_optional) {
      if (f.derive) f.derive(s);
      continue;
    } else {
      bad("expected '" + std::string(f.name_sep) + "' before " + std::string(f.key));
    }
    if (!cur.starts_with(f.name_prefix))
      bad("expected '" + std::string(f.name_prefix) + "<" + std::string(f.key) + ">'");
    cur.remove_prefix(f.name_prefix.size());
    // The token runs to the separator of the next field when that one continues this part.
    size_t len = cur.size();
    if (i + 1 < head.size() && !starts_part(*head[i + 1]))
      len = std::min(len, cur.find(head[i + 1]->name_sep));
    if (!f.codec->untoken(f.member(s), cur.substr(0, len)))
      bad("'" + std::string(cur.substr(0, len)) + "' is not a value of " + std::string(f.key));
    cur.remove_prefix(len);
  }
  if (!cur.empty()) bad("unexpected '" + std::string(cur) + "'");

  // Optional parts: each names one field that differs from its default.
  std::vector<bool> seen(spec_fields().size(), false);
  for (; next_part < parts.size(); ++next_part) {
    const std::string_view part = parts[next_part];
    bool matched = false;
    for (size_t i = 0; i < spec_fields().size() && !matched; ++i) {
      const SpecField& f = spec_fields()[i];
      if (in_head(f) || seen[i] || !part.starts_with(f.name_prefix)) continue;
      KernelSpec trial = s;
      if (f.codec->untoken(f.member(trial), part.substr(f.name_prefix.size())) &&
          !field_is_default(f, trial)) {
        s = trial;
        seen[i] = matched = true;
      }
    }
    if (!matched) bad("'" + std::string(part) + "' names no spec field");
  }
  // Optional fields the name leaves out have their default, which may derive from the others
  // (the VJP tilings of a Pallas gmm: the heuristic's for its K and N).
  for (size_t i = 0; i < spec_fields().size(); ++i) {
    const SpecField& f = spec_fields()[i];
    if (!in_head(f) && !seen[i] && f.derive) f.derive(s);
  }
  return r;
}

}  // namespace gmmgen
