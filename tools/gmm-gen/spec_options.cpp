// Spec selection shared by the subcommands: --spec, --spec-file, one flag per spec key, and
// --filter over the kernel names.
#include <algorithm>

#include "commands.h"
#include "gmmgen/errors.hpp"
#include "gmmgen/naming.h"
#include "gmmgen/target.h"

namespace gmmgen::cli {
namespace {

std::vector<std::string> split(std::string_view s, std::string_view sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t end = s.find(sep, start);
    out.emplace_back(s.substr(start, end == std::string_view::npos ? s.npos : end - start));
    if (end == std::string_view::npos) return out;
    start = end + sep.size();
  }
}

// "; not supported yet: i4, nf4 with target=pallas": the values of an enumerated field that a
// target rejects as not supported yet, found by asking each target to check a spec holding the
// value (so --help follows the targets' own rules and cannot drift from them).
std::string not_supported_note(const SpecField& f) {
  if (!f.values.empty()) return "";  // not an enumeration
  std::string note;
  for (const Target* target : targets()) {
    const TargetKind kind = target->kind();
    std::vector<std::string> rejected;
    for (const std::string& v : split(field_values(f), ", ")) {
      KernelSpec s;
      s.k = s.n = 512, s.g = s.g_local = 8;
      s.tiling = {128, 128, 128};
      s.target = kind;
      try {
        set_field(f, s, v);
        if (s.target != kind) continue;  // the target field itself
        target_of(kind).check(s);
      } catch (const SpecError& e) {
        if (std::string_view(e.what()).find("not supported yet") != std::string_view::npos)
          rejected.push_back(v);
      }
    }
    if (rejected.empty()) continue;
    std::string list;
    for (const auto& v : rejected) list += (list.empty() ? "" : ", ") + v;
    note += (note.empty() ? "; not supported yet: " : "; ") + list +
            " with target=" + std::string(to_string(kind));
  }
  return note;
}

}  // namespace

void SpecOptions::add_to(CLI::App& app) {
  app.add_option("--spec", texts,
                 "Spec text, e.g. op=gmm,lhs=bf16,rhs=bf16,out=f32,k=512,n=256,g=8")
      ->take_all();
  app.add_option("--spec-file", files, "JSON spec file: [spec, ...] or {\"kernels\": [...]}")
      ->check(CLI::ExistingFile);
  for (const SpecField& f : spec_fields()) {
    const std::string help = std::string(f.doc) + ": " + field_values(f) + " [" +
                             std::string(f.default_doc) + "]" + not_supported_note(f);
    app.add_option_function<std::string>(
        std::string(f.flag),
        [this, key = std::string(f.key)](const std::string& v) { flags.emplace_back(key, v); },
        help);
  }
}

std::vector<SpecEntry> SpecOptions::entries() const {
  std::vector<SpecEntry> out;
  for (const auto& f : files)
    for (auto& e : load_spec_entries(f)) out.push_back(std::move(e));
  const auto names_tiling = [](const std::vector<std::string>& keys) {
    return std::any_of(keys.begin(), keys.end(), [](const auto& k) { return is_tiling_key(k); });
  };
  for (const auto& t : texts) out.push_back({parse_text(t), "", names_tiling(text_keys(t))});
  if (!flags.empty()) {
    std::string text;
    for (const auto& [k, v] : flags) text += (text.empty() ? "" : ",") + k + "=" + v;
    out.push_back({parse_text(text), "", names_tiling(text_keys(text))});
  }
  if (out.empty()) throw SpecError("no spec given: use --spec, --spec-file or -k/-n/-g flags");
  return out;
}

std::vector<KernelSpec> SpecOptions::specs() const {
  std::vector<KernelSpec> out;
  for (auto& e : entries()) out.push_back(std::move(e.spec));
  return out;
}

bool glob_match(std::string_view pattern, std::string_view name) {
  // Greedy with one backtrack point (the last `*`): linear in practice, never exponential.
  size_t p = 0, n = 0, star = std::string_view::npos, resume = 0;
  while (n < name.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == name[n])) {
      ++p, ++n;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++, resume = n;
    } else if (star != std::string_view::npos) {
      p = star + 1, n = ++resume;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

void KernelFilter::add_to(CLI::App& app) {
  app.add_option("--filter", pattern,
                 "Only the kernels whose name (or alias) matches: comma-separated alternatives "
                 "with * and ? wildcards against the whole name; one without wildcards matches "
                 "anywhere (e.g. 'bf16', 'gmm_f32*,tgmm_*_g8_*')")
      ->check([](const std::string& p) -> std::string {
        if (p.empty()) return "--filter must not be empty";
        for (const auto& alt : split(p, ","))
          if (alt.empty()) return "--filter '" + p + "' has an empty alternative";
        return "";
      });
}

bool KernelFilter::matches(const KernelSpec& spec, const std::string& alias) const {
  if (pattern.empty()) return true;
  const std::string name = kernel_name(spec);
  for (const auto& alt : split(pattern, ",")) {
    const bool wild = alt.find_first_of("*?") != std::string::npos;
    for (const std::string* n : {&name, &alias})
      if (!n->empty() && (wild ? glob_match(alt, *n) : n->find(alt) != std::string::npos))
        return true;
  }
  return false;
}

std::vector<KernelSpec> KernelFilter::apply(const std::vector<KernelSpec>& specs) const {
  std::vector<KernelSpec> out;
  for (const auto& s : specs)
    if (matches(s)) out.push_back(s);
  if (out.empty()) no_match(specs.size());
  return out;
}

std::vector<SpecEntry> KernelFilter::apply(const std::vector<SpecEntry>& entries) const {
  std::vector<SpecEntry> out;
  for (const auto& e : entries)
    if (matches(e.spec, e.alias)) out.push_back(e);
  if (out.empty()) no_match(entries.size());
  return out;
}

void KernelFilter::no_match(size_t candidates) const {
  throw InvalidArgument("--filter '" + pattern + "' matches none of the " +
                        std::to_string(candidates) +
                        " kernels selected (see their names with 'gmm-gen describe' or "
                        "'gmm-gen list')");
}

}  // namespace gmmgen::cli
