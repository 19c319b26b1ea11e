#include "gmmgen/emit.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <fstream>
#include <kainjow/mustache.hpp>
#include <map>
#include <set>
#include <sstream>

#include "gmmgen/heuristics.h"
#include "gmmgen/templates.h"

namespace gmmgen {
namespace mu = kainjow::mustache;
namespace {

std::string render(std::string_view template_path, const mu::data& ctx) {
  mu::mustache tmpl{std::string(embedded_file(template_path))};
  if (!tmpl.is_valid())
    throw std::logic_error("template " + std::string(template_path) + ": " + tmpl.error_message());
  tmpl.set_custom_escape([](const std::string& s) { return s; });
  std::string text = tmpl.render(ctx);
  if (!tmpl.is_valid())
    throw std::logic_error("template " + std::string(template_path) + ": " + tmpl.error_message());
  return text;
}

mu::data partial(std::string_view template_path) {
  return mu::partial{[template_path] { return std::string(embedded_file(template_path)); }};
}

std::string_view traits_of(DType d) {
  switch (d) {
    case DType::kF32:
      return "F32";
    case DType::kBF16:
      return "BF16";
    case DType::kF16:
      return "F16";
    default:
      throw SpecError("not supported yet: dtype " + std::string(to_string(d)));
  }
}

// The kernel template of each op, and how its header comment describes each output mode
// (indexed by OutMode). The one place that maps an op to its template.
struct OpTemplate {
  Op op;
  std::string_view path;
  std::array<std::string_view, 3> out_mode_doc;
};
constexpr std::array<OpTemplate, 2> kOpTemplates{{
    {Op::kGmm,
     "cpp/gmm.cpp.mustache",
     {"written as zero", "left as existing_out has them",
      "left as existing_out has them; active rows add existing_out"}},
    {Op::kTgmm,
     "cpp/tgmm.cpp.mustache",
     {"out_mode=plain: out is overwritten; an empty group gives zeros.",
      "out_mode=existing_out is not a tgmm mode (validate() rejects it).",
      "out_mode=accumulate: out = existing_out + product, rounded once; existing_out may be out."}},
}};

const OpTemplate& op_template(Op op) {
  for (const auto& t : kOpTemplates)
    if (t.op == op) return t;
  throw std::logic_error("op " + std::string(to_string(op)) + " has no C++ template");
}

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : sep) + s;
  return out;
}

mu::data kernel_context(const KernelSpec& s, const std::string& name, const std::string& hash) {
  mu::data ctx;
  ctx.set("name", name);
  ctx.set("spec", to_text(s));
  ctx.set("hash", hash);
  ctx.set("version", std::string(generator_version()));
  ctx.set("k", std::to_string(s.k));
  ctx.set("n", std::to_string(s.n));
  ctx.set("g", std::to_string(s.g));
  ctx.set("g_local", std::to_string(s.g_local));
  ctx.set("tm", std::to_string(s.tiling.tm));
  ctx.set("tk", std::to_string(s.tiling.tk));
  ctx.set("tn", std::to_string(s.tiling.tn));
  ctx.set("transpose_rhs", s.transpose_rhs ? "true" : "false");
  ctx.set("lhs_km", s.lhs_layout == LhsLayout::kKM ? "true" : "false");
  static const char* kModeCode[] = {"GMMGEN_OUT_PLAIN", "GMMGEN_OUT_EXISTING",
                                    "GMMGEN_OUT_ACCUMULATE"};
  ctx.set("out_mode_code", kModeCode[int(s.out_mode)]);
  ctx.set("out_mode_doc", std::string(op_template(s.op).out_mode_doc[int(s.out_mode)]));
  ctx.set("lhs_traits", std::string(traits_of(s.lhs)));
  ctx.set("rhs_traits", std::string(traits_of(s.rhs)));
  ctx.set("out_traits", std::string(traits_of(s.out)));
  for (auto [key, d] : {std::pair{"need_f32", DType::kF32}, std::pair{"need_bf16", DType::kBF16},
                        std::pair{"need_f16", DType::kF16}})
    ctx.set(key, mu::data(s.lhs == d || s.rhs == d || s.out == d));
  const IsaInfo isa = isa_info(s.isa);
  ctx.set("isa_guard", mu::data(!isa.macro.empty()));
  ctx.set("isa_macro", isa.macro);
  ctx.set("isa", std::string(to_string(s.isa)));
  ctx.set("isa_flags", join(isa.flags, " "));
  ctx.set("dtypes", partial("cpp/dtypes.inc.mustache"));
  ctx.set("metadata", partial("cpp/metadata.inc.mustache"));
  ctx.set("microkernel", partial("cpp/microkernel.inc.mustache"));
  ctx.set("pack_cols", std::to_string(kPackCols));
  return ctx;
}

nlohmann::ordered_json manifest_entry(const KernelSpec& s, const std::string& name,
                                      const std::string& hash) {
  const Cost cost = cost_estimate(s);
  auto affine = [](const Affine& a, const char* formula) {
    return nlohmann::ordered_json{{"per_m", a.per_m}, {"fixed", a.fixed}, {"formula", formula}};
  };
  nlohmann::ordered_json j;
  j["name"] = name;
  j["hash"] = hash;
  j["spec"] = to_text(s);
  j["spec_json"] = to_json(s);
  j["files"] = {name + ".h", name + ".cpp"};
  j["template"] = std::string(op_template(s.op).path);
  j["symbols"] = {{"entry", name},
                  {"info", name + "_info"},
                  {"workspace_bytes", name + "_workspace_bytes"},
                  {"plan", name + "_plan"},
                  {"run_items", name + "_run_items"},
                  {"make_group_metadata", name + "_make_group_metadata"}};
  j["cost"] = {{"flops", affine(cost.flops, "per_m * M + fixed (upper bound: all M rows active)")},
               {"bytes", affine(cost.bytes, "per_m * M + fixed")}};
  j["footprint"] = {{"scratch_bytes_per_thread", scratch_bytes(s)},
                    {"tile", {{"tm", s.tiling.tm}, {"tk", s.tiling.tk}, {"tn", s.tiling.tn}}}};
  j["generator_version"] = std::string(generator_version());
  return j;
}

}  // namespace

IsaInfo isa_info(Isa isa) {
  switch (isa) {
    case Isa::kNative:
      return {"", {"-march=native"}};
    case Isa::kAvx512:
      return {"__AVX512F__",
              {"-mavx512f", "-mavx512bw", "-mavx512dq", "-mavx512vl", "-mavx2", "-mfma", "-mf16c"}};
    case Isa::kAvx2:
      return {"__AVX2__", {"-mavx2", "-mfma", "-mf16c"}};
    case Isa::kGeneric:
      return {"", {}};
  }
  return {};
}

EmittedKernel emit_kernel(const KernelSpec& spec) {
  validate(spec);
  EmittedKernel k;
  k.spec = spec;
  k.name = kernel_name(spec);
  k.hash = spec_hash(spec);
  const mu::data ctx = kernel_context(spec, k.name, k.hash);
  k.files.push_back({k.name + ".h", render("cpp/kernel.h.mustache", ctx)});
  k.files.push_back({k.name + ".cpp", render(op_template(spec.op).path, ctx)});
  k.manifest_entry = manifest_entry(spec, k.name, k.hash);
  return k;
}

std::vector<EmittedFile> emit_set(const std::vector<KernelSpec>& specs, const std::string& bundle) {
  if (!bundle.empty()) {
    const bool ident = (std::isalpha(static_cast<unsigned char>(bundle[0])) || bundle[0] == '_') &&
                       std::all_of(bundle.begin(), bundle.end(), [](char c) {
                         return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
                       });
    if (!ident)
      throw SpecError("bundle='" + bundle + "' must be a C identifier ([A-Za-z_][A-Za-z0-9_]*)");
    for (const auto& s : specs)
      if (s.isa != specs.front().isa)
        throw SpecError("bundle '" + bundle + "': every kernel must share one isa (found " +
                        std::string(to_string(specs.front().isa)) + " and " +
                        std::string(to_string(s.isa)) + ")");
  }
  std::vector<EmittedFile> files;
  mu::data bundle_kernels{mu::data::type::list};
  nlohmann::ordered_json manifest;
  manifest["generator"] = "gmm-gen";
  manifest["version"] = std::string(generator_version());
  manifest["abi_version"] = 1;
  manifest["kernels"] = nlohmann::ordered_json::array();
  std::set<std::string> names;
  for (size_t i = 0; i < specs.size(); ++i) {
    EmittedKernel k;
    try {
      k = emit_kernel(specs[i]);
    } catch (const SpecError& e) {
      throw SpecError("spec #" + std::to_string(i + 1) + ": " + e.what());
    }
    if (!names.insert(k.name).second) continue;
    for (auto& f : k.files) files.push_back(std::move(f));
    manifest["kernels"].push_back(k.manifest_entry);
    mu::data entry;
    entry.set("name", k.name);
    bundle_kernels.push_back(entry);
  }
  if (!bundle.empty()) {
    mu::data ctx;
    ctx.set("bundle", bundle);
    ctx.set("version", std::string(generator_version()));
    ctx.set("count", std::to_string(names.size()));
    ctx.set("kernels", bundle_kernels);
    files.push_back({bundle + ".h", render("cpp/bundle.h.mustache", ctx)});
    files.push_back({bundle + ".cpp", render("cpp/bundle.cpp.mustache", ctx)});
    manifest["bundle"] = {{"name", bundle},
                          {"files", {bundle + ".h", bundle + ".cpp"}},
                          {"table", bundle + "_kernels"},
                          {"count", bundle + "_kernel_count"},
                          {"compile_flags", isa_info(specs.front().isa).flags}};
  }
  files.push_back({"gmmgen/kernel_abi.h", std::string(embedded_file("gmmgen/kernel_abi.h"))});
  files.push_back({"manifest.json", manifest.dump(2) + "\n"});
  return files;
}

EmittedFile emit_cache_entry(const std::string& kernel_name, const std::string& key) {
  mu::data ctx;
  ctx.set("name", kernel_name);
  ctx.set("key", key);
  ctx.set("version", std::string(generator_version()));
  return {"entry.cpp", render("cpp/cache_entry.cpp.mustache", ctx)};
}

void write_files(const std::filesystem::path& dir, const std::vector<EmittedFile>& files) {
  namespace fs = std::filesystem;
  for (const auto& f : files) {
    const fs::path target = dir / f.path;
    fs::create_directories(target.parent_path());
    const fs::path tmp = target.parent_path() /
                         ("." + target.filename().string() + ".tmp" + std::to_string(getpid()));
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      out.write(f.content.data(), std::streamsize(f.content.size()));
      out.close();
      if (!out) throw std::runtime_error("cannot write " + tmp.string());
    }
    fs::rename(tmp, target);
  }
}

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
