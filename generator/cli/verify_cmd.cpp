// gmm-gen verify: emit, compile, and check kernels against the float64 reference.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "commands.h"
#include "gmmgen/compiler.h"
#include "gmmgen/emit.h"
#include "gmmgen/kernel_check.h"

namespace gmmgen::cli {

int run_verify(const std::vector<KernelSpec>& specs, uint64_t seed, bool quick) {
  namespace fs = std::filesystem;
  for (const auto& s : specs) validate(s);
  const fs::path dir = fs::temp_directory_path() / ("gmm-gen-verify-" + std::to_string(getpid()));
  fs::create_directories(dir);
  struct Cleanup {
    fs::path p;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(p, ec);
    }
  } cleanup{dir};
  write_files(dir, emit_set(specs));

  std::printf("%-64s %6s %12s %10s %8s %s\n", "kernel", "cases", "worst rel", "bound use",
              "compile", "result");
  int failures = 0;
  for (const auto& spec : specs) {
    const std::string name = kernel_name(spec);
    const auto t0 = std::chrono::steady_clock::now();
    const fs::path so = dir / (name + ".so");
    compile_shared_object(default_compiler(spec.isa), dir / (name + ".cpp"), dir, so);
    const double compile_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const KernelLibrary lib = KernelLibrary::open(so, name);
    auto cases = standard_cases(spec, seed);
    if (quick) cases.resize(std::min<size_t>(cases.size(), 8));
    CheckResult worst;
    std::string failure;
    for (const auto& c : cases) {
      const CheckResult r = check_kernel(lib.fns(), spec, c);
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
  }
  std::printf("%zu kernels verified, %d mismatched\n", specs.size(), failures);
  return failures ? 1 : 0;
}

}  // namespace gmmgen::cli
