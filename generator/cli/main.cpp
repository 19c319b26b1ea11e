// gmm-gen: emit, describe, list and verify grouped-matmul kernels.
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "gmmgen/disk_cache.h"
#include "gmmgen/emit.h"
#include "gmmgen/heuristics.h"
#include "gmmgen/templates.h"

namespace gmmgen::cli {

void SpecOptions::add_to(CLI::App& app) {
  app.add_option("--spec", texts,
                 "Spec text, e.g. op=gmm,lhs=bf16,rhs=bf16,out=f32,k=512,n=256,g=8")
      ->take_all();
  app.add_option("--spec-file", files, "JSON spec file: [spec, ...] or {\"kernels\": [...]}")
      ->check(CLI::ExistingFile);
  // One flag per spec key; given flags form one more spec.
  struct Flag {
    const char* name;
    const char* key;
    const char* help;
  };
  static const Flag kFlags[] = {
      {"--op", "op", "gmm | tgmm"},
      {"--lhs", "lhs", "lhs dtype: f32 bf16 f16 f8e4m3 f8e5m2 i8 i4"},
      {"--rhs", "rhs", "rhs dtype: f32 bf16 f16 f8e4m3 f8e5m2 i8 i4 nf4"},
      {"--out-dtype", "out", "output dtype: f32 bf16 f16"},
      {"--lhs-quant", "lhs_quant", "none | tensor | channel | block:B"},
      {"--rhs-quant", "rhs_quant", "none | tensor | channel | block:B | block:BxB"},
      {"-k,--k", "k", "contraction size K"},
      {"-n,--n", "n", "output size N"},
      {"-g,--g", "g", "number of groups G"},
      {"--g-local", "g_local", "groups held by this shard (default G)"},
      {"--tm", "tm", "rows per tile"},
      {"--tk", "tk", "contraction depth per tile"},
      {"--tn", "tn", "columns per tile"},
      {"--transpose-rhs", "transpose_rhs", "0 | 1: rhs stored [G_local, N, K]"},
      {"--lhs-layout", "lhs_layout", "tgmm: mk | km"},
      {"--out-mode", "out_mode", "plain | existing_out | accumulate"},
      {"--target", "target", "cpp | pallas"},
      {"--isa", "isa", "native | avx512 | avx2 | generic"},
  };
  for (const Flag& f : kFlags) {
    app.add_option_function<std::string>(
        f.name,
        [this, key = std::string(f.key)](const std::string& v) { flags.emplace_back(key, v); },
        f.help);
  }
}

std::vector<KernelSpec> SpecOptions::specs() const {
  std::vector<KernelSpec> out;
  for (const auto& f : files)
    for (auto& s : load_spec_file(f)) out.push_back(s);
  for (const auto& t : texts) out.push_back(parse_text(t));
  if (!flags.empty()) {
    std::string text;
    for (const auto& [k, v] : flags) text += (text.empty() ? "" : ",") + k + "=" + v;
    out.push_back(parse_text(text));
  }
  if (out.empty()) throw SpecError("no spec given: use --spec, --spec-file or -k/-n/-g flags");
  return out;
}

namespace {

int run_emit(const SpecOptions& opts, const std::string& out_dir, const std::string& bundle) {
  const auto files =
      emit_set(opts.specs(), bundle);  // validates everything before writing anything
  write_files(out_dir, files);
  for (const auto& f : files)
    if (f.path.size() > 4 && f.path.compare(f.path.size() - 4, 4, ".cpp") == 0)
      std::cout << out_dir << "/" << f.path << "\n";
  std::cout << out_dir << "/manifest.json\n";
  return 0;
}

int run_describe(const SpecOptions& opts, bool json) {
  nlohmann::ordered_json all = nlohmann::ordered_json::array();
  for (const auto& s : opts.specs()) {
    const EmittedKernel k = emit_kernel(s);
    if (json) {
      all.push_back(k.manifest_entry);
      continue;
    }
    const auto& m = k.manifest_entry;
    std::cout << "name:       " << k.name << "\n"
              << "hash:       " << k.hash << "\n"
              << "spec:       " << to_text(s) << "\n"
              << "json:       " << to_json(s).dump() << "\n"
              << "flops(M):   " << m["cost"]["flops"]["per_m"] << " * M + "
              << m["cost"]["flops"]["fixed"] << "\n"
              << "bytes(M):   " << m["cost"]["bytes"]["per_m"] << " * M + "
              << m["cost"]["bytes"]["fixed"] << "\n"
              << "scratch:    " << m["footprint"]["scratch_bytes_per_thread"]
              << " bytes per thread\n"
              << "generator:  " << generator_version() << "\n\n";
  }
  if (json) std::cout << all.dump(2) << "\n";
  return 0;
}

int run_cache(const std::string& action) {
  if (action == "path") {
    std::cout << DiskCache::default_root().string() << "\n";
    return 0;
  }
  DiskCache cache(DiskCache::default_root());
  if (action == "clear") {
    std::cout << "removed " << cache.clear() << " entries from " << cache.root().string() << "\n";
    return 0;
  }
  uintmax_t total = 0;
  for (const auto& e : cache.list()) {
    total += e.bytes;
    const std::string name =
        e.entry.is_object() ? e.entry.value("name", "?") : "(unreadable entry)";
    std::cout << e.key << "  " << e.bytes << " B  " << name << "\n";
  }
  std::cout << cache.list().size() << " entries, " << total << " bytes in " << cache.root().string()
            << "\n";
  return 0;
}

int run_list(const std::string& dir) {
  std::ifstream in(dir + "/manifest.json");
  if (!in) throw std::runtime_error(dir + "/manifest.json cannot be read");
  const auto m = nlohmann::ordered_json::parse(in);
  for (const auto& k : m["kernels"])
    std::cout << k["name"].get<std::string>() << "  " << k["spec"].get<std::string>() << "\n";
  return 0;
}

}  // namespace
}  // namespace gmmgen::cli

int main(int argc, char** argv) {
  using namespace gmmgen::cli;
  CLI::App app{"gmm-gen " + std::string(gmmgen::generator_version()) +
               ": generates grouped-matmul (MoE) kernels"};
  app.require_subcommand(1);
  app.footer("Run 'gmm-gen <command> --help' for a command's options and an example.");

  SpecOptions emit_opts, describe_opts, verify_opts;
  std::string out_dir;
  auto* emit = app.add_subcommand("emit", "Emit kernel sources and manifest.json for specs");
  emit_opts.add_to(*emit);
  emit->add_option("--out", out_dir, "Output folder (created if missing)")->required();
  std::string bundle;
  emit->add_option("--bundle", bundle,
                   "Also write BUNDLE.h/.cpp: every kernel in one translation unit and a table of "
                   "entry points (for build systems and registries)");
  emit->footer(
      "Example:\n  gmm-gen emit -k 2048 -n 1408 -g 64 --lhs bf16 --rhs bf16 --out-dtype f32 --out "
      "kernels/\n"
      "  gmm-gen emit --spec-file examples/default_specs.json --out generated/ --bundle "
      "default_kernels");

  bool json = false;
  auto* describe =
      app.add_subcommand("describe", "Print name, hash, canonical forms, cost and footprint");
  describe_opts.add_to(*describe);
  describe->add_flag("--json", json, "Print the manifest entries as JSON");
  describe->footer(
      "Example:\n  gmm-gen describe --spec op=gmm,lhs=bf16,rhs=bf16,out=f32,k=2048,n=1408,g=64");

  std::string list_dir;
  auto* list =
      app.add_subcommand("list", "List the kernels of an emitted folder (its manifest.json)");
  list->add_option("dir", list_dir, "Folder written by 'gmm-gen emit'")->required();
  list->footer("Example:\n  gmm-gen list generated/");

  std::string cache_action;
  auto* cache =
      app.add_subcommand("cache", "Show, list or clear the disk cache of compiled kernels");
  cache->add_option("action", cache_action, "path | ls | clear")
      ->required()
      ->check(CLI::IsMember({"path", "ls", "clear"}));
  cache->footer(
      "The cache lives in $GMMGEN_CACHE_DIR, else $XDG_CACHE_HOME/gmm-gen, else ~/.cache/gmm-gen.\n"
      "Example:\n  gmm-gen cache ls");

  uint64_t seed = 1;
  bool quick = false;
  auto* verify = app.add_subcommand(
      "verify",
      "Compile kernels and check them against the float64 reference on random ragged inputs");
  verify_opts.add_to(*verify);
  verify->add_option("--seed", seed, "Random seed of the inputs");
  verify->add_flag("--quick", quick, "Fewer cases per kernel");
  verify->footer(
      "Compiles each kernel with the system compiler ($GMMGEN_CXX, $GMMGEN_CXXFLAGS), runs it for\n"
      "several M and group-size distributions (uniform, skewed with empty groups, many tiny\n"
      "groups, random), prints the worst relative error and exits 1 on any mismatch.\n"
      "Example:\n  gmm-gen verify --spec-file examples/default_specs.json");

  try {
    app.parse(argc, argv);
    if (*emit) return run_emit(emit_opts, out_dir, bundle);
    if (*describe) return run_describe(describe_opts, json);
    if (*list) return run_list(list_dir);
    if (*cache) return run_cache(cache_action);
    if (*verify) return run_verify(verify_opts.specs(), seed, quick);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const gmmgen::SpecError& e) {
    std::cerr << "gmm-gen: invalid spec: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "gmm-gen: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
