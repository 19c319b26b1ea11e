// gmm-gen verify: emit, compile, and check kernels against the float64 reference.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "commands.h"
#include "dispatch/kernel_entry.h"
#include "gmmgen/emit.h"
#include "gmmgen/verify/checker.h"
#include "jit/toolchain.h"

namespace gmmgen::cli {
namespace {

namespace fs = std::filesystem;

// A private temporary folder (mkdtemp: a fresh name, mode 0700), removed on scope exit.
struct TempDir {
  fs::path path;
  TempDir() {
    std::string templ = (fs::temp_directory_path() / "gmm-gen-verify-XXXXXX").string();
    if (!mkdtemp(templ.data())) throw std::runtime_error("cannot create a temporary folder");
    path = templ;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

int run_verify(const std::vector<KernelSpec>& specs, uint64_t seed, bool quick) {
  for (const auto& s : specs) validate(s);
  const TempDir dir;
  write_files(dir.path, emit_set(specs));
  const fs::path src = dir.path / std::string(target_of(TargetKind::kCpp).name());

  std::printf("%-64s %6s %12s %10s %8s %s\n", "kernel", "cases", "worst rel", "bound use",
              "compile", "result");
  int failures = 0;
  for (const auto& spec : specs) {
    const std::string name = kernel_name(spec);
    const auto t0 = std::chrono::steady_clock::now();
    const fs::path so = dir.path / (name + ".so");
    compile_shared_object(default_compiler(target_of(spec.target).toolchain_flags(spec)),
                          src / (name + ".cpp"), src, so);
    const double compile_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const SharedObject lib = SharedObject::open(so);
    const gmmgen_kernel_entry fns = bind_entry_points(lib, name);
    auto cases = standard_cases(spec, seed);
    if (quick) cases.resize(std::min<size_t>(cases.size(), 8));
    CheckResult worst;
    std::string failure;
    for (const auto& c : cases) {
      const CheckResult r = check_kernel(fns, spec, c);
      worst.worst_rel_error = std::max(worst.worst_rel_error, r.worst_rel_error);
      worst.worst_bound_ratio = std::max(worst.worst_bound_ratio, r.worst_bound_ratio);
      if (!r.ok && failure.empty()) failure = r.failure;
    }
    std::printf("%-64s %6zu %12.3e %9.1f%% %7.2fs %s\n", name.c_str(), cases.size(),
                worst.worst_rel_error, 100.0 * worst.worst_bound_ratio, compile_s,
                failure.empty() ? "ok" : "MISMATCH");
    if (!failure.empty()) {
      std::printf("  first mismatch: %s\n", failure.c_str());
      ++failures;
    }
    std::fflush(stdout);
  }
  std::printf("%zu kernels verified, %d mismatched\n", specs.size(), failures);
  return failures ? 1 : 0;
}

}  // namespace

Command add_verify(CLI::App& app) {
  struct Options {
    SpecOptions specs;
    uint64_t seed = 1;
    bool quick = false;
  };
  auto o = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand(
      "verify",
      "Compile kernels and check them against the float64 reference on random ragged inputs");
  o->specs.add_to(*cmd);
  cmd->add_option("--seed", o->seed, "Random seed of the inputs");
  cmd->add_flag("--quick", o->quick, "Fewer cases per kernel");
  cmd->footer(
      "Compiles each kernel with the system compiler ($GMMGEN_CXX, $GMMGEN_CXXFLAGS), runs it for\n"
      "several M and group-size distributions (uniform, skewed with empty groups, many tiny\n"
      "groups, random), prints the worst relative error and exits 1 on any mismatch.\n"
      "Example:\n  gmm-gen verify --spec-file generated/specs.json");
  return {cmd, [o] { return run_verify(o->specs.specs(), o->seed, o->quick); }};
}

}  // namespace gmmgen::cli
