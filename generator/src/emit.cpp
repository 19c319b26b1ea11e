#include "gmmgen/emit.h"

#include <algorithm>
#include <map>
#include <set>
#include <unordered_map>

#include "gmmgen/heuristics.h"
#include "gmmgen/target.h"
#include "gmmgen/templates.h"
#include "render.h"

namespace gmmgen {
namespace {

nlohmann::ordered_json manifest_entry(const KernelSpec& s, const KernelId& id) {
  const Cost cost = cost_estimate(s);
  auto affine = [](const Affine& a, const char* formula) {
    return nlohmann::ordered_json{{"per_m", a.per_m}, {"fixed", a.fixed}, {"formula", formula}};
  };
  nlohmann::ordered_json j;
  j["name"] = id.name;
  j["hash"] = id.hash;
  j["spec"] = to_text(s);
  j["spec_json"] = to_json(s);
  j["target"] = std::string(to_string(s.target));
  j["cost"] = {{"flops", affine(cost.flops, "per_m * M + fixed (upper bound: all M rows active)")},
               {"bytes", affine(cost.bytes, "per_m * M + fixed")}};
  const nlohmann::ordered_json fields = target_of(s.target).manifest_fields(s, id);
  for (const auto& [key, value] : fields.items()) j[key] = value;
  j["generator_version"] = std::string(generator_version());
  return j;
}

}  // namespace

EmittedKernel emit_kernel(const KernelSpec& spec) {
  validate(spec);
  EmittedKernel k;
  k.spec = spec;
  const KernelId id{kernel_name(spec), spec_hash(spec)};
  k.name = id.name;
  k.hash = id.hash;
  Renderer r;
  k.files = target_of(spec.target).render(spec, id, r);
  k.manifest_entry = manifest_entry(spec, id);
  return k;
}

std::vector<EmittedFile> emit_set(const std::vector<SpecEntry>& entries,
                                  const std::string& bundle) {
  // Every check first (the specs, the aliases, the bundle), so that bad input is reported
  // before anything is rendered.
  std::map<std::string, size_t> first_of;  // kernel name -> its first entry
  // Spec text -> its first entry: a spec given again is not rendered again.
  std::unordered_map<std::string, size_t> first_text;
  std::vector<BundleMember> members;
  std::vector<size_t> rendered;  // the entries whose kernel is rendered: each kernel's first
  std::set<TargetKind> targets;
  for (size_t i = 0; i < entries.size(); ++i) {
    const std::string at = "spec #" + std::to_string(i + 1) + ": ";
    const KernelSpec& spec = entries[i].spec;
    const std::string& alias = entries[i].alias;
    if (!alias.empty() && bundle.empty())
      throw SpecError(at + "alias '" + alias +
                      "' names entry points of a bundle: give a bundle name (emit --bundle NAME)");
    std::string text;
    try {
      text = to_text(spec);
      validate(spec);
    } catch (const SpecError& e) {
      throw SpecError(at + e.what());
    }
    const auto [same, fresh_text] = first_text.emplace(std::move(text), i);
    if (!fresh_text) {
      BundleMember m = members[same->second];
      m.aliases.clear();
      members.push_back(std::move(m));  // its `first` is the kernel's first entry
      if (!alias.empty()) members[members.back().first].aliases.push_back(alias);
      continue;
    }
    KernelId id{kernel_name(spec), spec_hash(spec)};
    const auto [first, fresh] = first_of.emplace(id.name, i);
    members.push_back({spec, std::move(id), first->second, {}});
    if (!alias.empty()) members[first->second].aliases.push_back(alias);
    if (!fresh) continue;
    rendered.push_back(i);
    targets.insert(spec.target);
  }
  if (!bundle.empty()) {
    if (std::none_of(targets.begin(), targets.end(),
                     [](TargetKind k) { return target_of(k).caps().bundles; }))
      throw SpecError("bundle '" + bundle +
                      "': bundles hold C++ kernels, and no spec has target=cpp");
    for (const TargetKind kind : targets)
      if (target_of(kind).caps().bundles) target_of(kind).check_bundle(bundle, members);
  }

  std::vector<EmittedFile> files;
  nlohmann::ordered_json manifest;
  manifest["generator"] = "gmm-gen";
  manifest["version"] = std::string(generator_version());
  manifest["abi_version"] = GMMGEN_ABI_VERSION;
  manifest["kernels"] = nlohmann::ordered_json::array();
  for (const size_t i : rendered) {
    EmittedKernel k;
    try {
      k = emit_kernel(entries[i].spec);
    } catch (const SpecError& e) {
      throw SpecError("spec #" + std::to_string(i + 1) + ": " + e.what());
    }
    const std::string dir = std::string(target_of(k.spec.target).name()) + "/";
    for (auto& f : k.files) files.push_back({dir + f.path, std::move(f.content)});
    manifest["kernels"].push_back(k.manifest_entry);
  }
  for (const TargetKind kind : targets) {
    const Target& t = target_of(kind);
    const std::string dir = std::string(t.name()) + "/";
    for (auto& f : t.support_files()) files.push_back({dir + f.path, std::move(f.content)});
    if (!bundle.empty() && t.caps().bundles) {
      nlohmann::ordered_json entry;
      for (auto& f : t.bundle(bundle, members, entry))
        files.push_back({dir + f.path, std::move(f.content)});
      manifest["bundle"] = entry;
    }
  }
  files.push_back({"manifest.json", manifest.dump(2) + "\n"});
  return files;
}

std::vector<EmittedFile> emit_set(const std::vector<KernelSpec>& specs, const std::string& bundle) {
  std::vector<SpecEntry> entries;
  entries.reserve(specs.size());
  for (const auto& s : specs) entries.push_back({s, ""});
  return emit_set(entries, bundle);
}

EmittedFile emit_cache_entry(const std::string& kernel_name, const std::string& key) {
  mu::data ctx;
  ctx.set("name", kernel_name);
  ctx.set("key", key);
  ctx.set("version", std::string(generator_version()));
  Renderer r;
  return {"entry.cpp", r.render("cpp/cache_entry.cpp", ctx)};
}

}  // namespace gmmgen
