// gmm-gen verify: emit, compile, and check kernels against the float64 reference.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>

#include "commands.h"
#include "dispatch/kernel_entry.h"
#include "gmmgen/emit.h"
#include "gmmgen/heuristics.h"
#include "gmmgen/verify/checker.h"
#include "jit/toolchain.h"

namespace gmmgen::cli {
namespace {

namespace fs = std::filesystem;

// Refuses a temporary folder's parent that another user could change: if any folder on its
// path may be written by someone else (not owned by root or us, or writable by group/others
// without the sticky bit), they could rename our folder away and put their own in its place,
// and we would compile and load their code.
void check_private_parent(const fs::path& parent) {
  const fs::path full = fs::canonical(parent);
  fs::path p;
  for (const auto& part : full) {
    p /= part;
    struct stat st;
    if (lstat(p.c_str(), &st) != 0)
      throw std::runtime_error("verify: cannot inspect " + p.string());
    const bool trusted_owner = st.st_uid == 0 || st.st_uid == geteuid();
    const bool others_write = (st.st_mode & (S_IWGRP | S_IWOTH)) && !(st.st_mode & S_ISVTX);
    if (!S_ISDIR(st.st_mode) || !trusted_owner || others_write)
      throw std::runtime_error(
          "verify: the temporary folder " + full.string() + " is not private: " + p.string() +
          " may be changed by another user (owner uid " + std::to_string(st.st_uid) +
          "); set TMPDIR to a folder only you and root can write");
  }
}

// A private temporary folder (mkdtemp: a fresh name that did not exist, mode 0700) inside a
// parent no other user can change, removed on scope exit. Sources, objects and the loaded
// kernels live only in it.
struct TempDir {
  fs::path path;
  TempDir() {
    const fs::path parent = fs::temp_directory_path();
    check_private_parent(parent);
    std::string templ = (parent / "gmm-gen-verify-XXXXXX").string();
    if (!mkdtemp(templ.data()))
      throw std::runtime_error("verify: cannot create a temporary folder in " + parent.string() +
                               ": " + std::strerror(errno));
    path = templ;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

// Whether verify may run kernels of a family here: the CPU must run it (host_supports), and
// GMMGEN_ASSUME_ISA=<family> caps the families treated as runnable, to see what verify does on
// an older CPU. A native kernel is compiled for this CPU and always runs.
bool host_runs(Isa isa) {
  if (isa == Isa::kNative) return true;
  if (!host_supports(isa)) return false;
  const char* cap_text = std::getenv("GMMGEN_ASSUME_ISA");
  if (!cap_text || !*cap_text) return true;
  Isa cap;
  try {
    cap = parse_isa(cap_text, "GMMGEN_ASSUME_ISA");
  } catch (const SpecError& e) {
    throw std::invalid_argument(e.what());
  }
  if (cap == Isa::kNative) return true;
  auto rank = [](Isa i) {  // families are listed best first
    const auto fams = isa_families();
    return std::find_if(fams.begin(), fams.end(), [&](const IsaFamily& f) { return f.isa == i; }) -
           fams.begin();
  };
  return rank(isa) >= rank(cap);
}

int run_verify(const std::vector<KernelSpec>& specs, uint64_t seed, bool quick) {
  for (const auto& s : specs) validate(s);
  const TempDir dir;
  write_files(dir.path, emit_set(specs));
  const fs::path src = dir.path / std::string(target_of(TargetKind::kCpp).name());

  std::printf("%-64s %6s %12s %10s %8s %s\n", "kernel", "cases", "worst rel", "bound use",
              "compile", "result");
  int failures = 0, skipped = 0;
  for (const auto& spec : specs) {
    const std::string name = kernel_name(spec);
    const auto t0 = std::chrono::steady_clock::now();
    const fs::path so = dir.path / (name + ".so");
    compile_shared_object(default_compiler(target_of(spec.target).toolchain_flags(spec)),
                          src / (name + ".cpp"), src, so);
    const double compile_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!host_runs(spec.isa)) {  // compiled, but running it would die of SIGILL
      std::printf("%-64s %6s %12s %10s %7.2fs skipped: host lacks %s\n", name.c_str(), "-", "-",
                  "-", compile_s, std::string(to_string(spec.isa)).c_str());
      ++skipped;
      std::fflush(stdout);
      continue;
    }
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
  std::printf("%zu kernels verified, %d mismatched", specs.size() - size_t(skipped), failures);
  if (skipped) std::printf(", %d compiled but not run (the host lacks their ISA family)", skipped);
  std::printf("\n");
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
      "groups, random), prints the worst relative error and exits 1 on any mismatch. Kernels of\n"
      "an ISA family this CPU cannot run are compiled but not run: 'skipped: host lacks <isa>'\n"
      "(exit 0 if the rest pass; GMMGEN_ASSUME_ISA=<isa> caps the families treated as runnable).\n"
      "Works in a fresh mkdtemp folder under $TMPDIR, which no other user may be able to change.\n"
      "Example:\n  gmm-gen verify --spec-file generated/specs.json");
  return {cmd, [o] { return run_verify(o->specs.specs(), o->seed, o->quick); }};
}

}  // namespace gmmgen::cli
