// gmm-gen verify: emit, compile, and check kernels against the float64 reference.
#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>

#include "commands.h"
#include "dispatch/kernel_entry.h"
#include "gmmgen/emit.h"
#include "gmmgen/heuristics.h"
#include "gmmgen/templates.h"
#include "gmmgen/verify/checker.h"
#include "jit/toolchain.h"

extern char** environ;

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

// Exit status of verify when nothing could be checked: every kernel asked for is a Pallas module
// and no Python with JAX was found (the checker's own "skipped" status too).
constexpr int kExitSkipped = 77;

// Runs argv (argv[0] looked up in PATH) with this process's stdout and stderr, or with both sent
// to /dev/null, and returns its exit status (128 + signal; -1 if it could not be started).
int run_child(const std::vector<std::string>& argv, bool quiet) {
  std::fflush(stdout);
  std::fflush(stderr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (quiet) {
    posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
  }
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid;
  const int rc = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return -1;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// A Python that imports JAX and Pallas's TPU API: $GMMGEN_PYTHON if set, else python3 (PATH),
// else /usr/bin/python3; "" if none does.
std::string python_with_jax() {
  std::vector<std::string> candidates{"python3", "/usr/bin/python3"};
  if (const char* p = std::getenv("GMMGEN_PYTHON"); p && *p) candidates = {p};
  for (const auto& py : candidates)
    if (run_child({py, "-c", "import jax, jax.experimental.pallas.tpu"}, true) == 0) return py;
  return "";
}

// The Pallas modules of an emitted folder, checked in TPU interpret mode by
// tests/pallas/check_pallas.py (embedded in gmm-gen). Returns 0 (all passed), 1 (a mismatch or
// an error) or kExitSkipped (no Python with JAX).
int verify_pallas(const fs::path& dir, size_t count, uint64_t seed, bool quick) {
  const std::string python = python_with_jax();
  if (python.empty()) {
    std::printf(
        "%zu Pallas module%s not run: no Python with JAX found (set GMMGEN_PYTHON to one)\n", count,
        count == 1 ? "" : "s");
    return kExitSkipped;
  }
  const fs::path checker = dir / "check_pallas.py";
  std::ofstream(checker, std::ios::binary) << embedded_file("pallas/check_pallas.py");
  std::vector<std::string> argv{python, checker.string(), dir.string(), "--seed",
                                std::to_string(seed)};
  if (quick) argv.push_back("--quick");
  std::printf("Pallas modules: %s\n", format_command(argv).c_str());
  const int rc = run_child(argv, false);
  if (rc == 0 || rc == 1 || rc == kExitSkipped) return rc;
  std::printf("check_pallas.py failed (exit status %d)\n", rc);
  return 1;
}

int run_verify(const std::vector<KernelSpec>& specs, uint64_t seed, bool quick) {
  for (const auto& s : specs) validate(s);
  const TempDir dir;
  write_files(dir.path, emit_set(specs));
  const fs::path src = dir.path / std::string(target_of(TargetKind::kCpp).name());

  std::vector<KernelSpec> cpp;
  for (const auto& s : specs)
    if (s.target == TargetKind::kCpp) cpp.push_back(s);
  const size_t pallas = specs.size() - cpp.size();
  int failures = 0, skipped = 0;
  if (!cpp.empty())
    std::printf("%-64s %6s %12s %10s %8s %s\n", "kernel", "cases", "worst rel", "bound use",
                "compile", "result");
  for (const auto& spec : cpp) {
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
  if (!cpp.empty()) {
    std::printf("%zu kernels verified, %d mismatched", cpp.size() - size_t(skipped), failures);
    if (skipped)
      std::printf(", %d compiled but not run (the host lacks their ISA family)", skipped);
    std::printf("\n");
  }
  const int pallas_rc = pallas ? verify_pallas(dir.path, pallas, seed, quick) : 0;
  if (failures || pallas_rc == 1) return 1;
  // Skipped only when nothing at all was checked; C++ kernels that ran count as a verification.
  return pallas_rc == kExitSkipped && cpp.empty() ? kExitSkipped : 0;
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
      "Pallas modules (target=pallas) run in TPU interpret mode through a Python with JAX\n"
      "($GMMGEN_PYTHON, else python3): tests/pallas/check_pallas.py, built into gmm-gen. Without\n"
      "one they are not run; if nothing at all ran, the exit status is 77 (skipped).\n"
      "--target T beside --spec/--spec-file selects the kernels of one target.\n"
      "Works in a fresh mkdtemp folder under $TMPDIR, which no other user may be able to change.\n"
      "Example:\n  gmm-gen verify --spec-file generated/specs.json\n"
      "  gmm-gen verify --target pallas --spec-file generated/specs.json");
  return {cmd, [o] {
            // `--target T` alone beside --spec/--spec-file selects the kernels of target T.
            SpecOptions selection = o->specs;
            std::string only;
            if (selection.flags.size() == 1 && selection.flags[0].first == "target" &&
                (!selection.files.empty() || !selection.texts.empty())) {
              KernelSpec probe;
              set_field(spec_field("target"), probe, selection.flags[0].second);
              only = selection.flags[0].second;
              selection.flags.clear();
            }
            std::vector<KernelSpec> specs;
            for (const auto& s : selection.specs())
              if (only.empty() || to_string(s.target) == only) specs.push_back(s);
            if (specs.empty()) throw SpecError("no spec of target=" + only + " given");
            return run_verify(specs, o->seed, o->quick);
          }};
}

}  // namespace gmmgen::cli
