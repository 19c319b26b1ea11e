// gmm-gen verify: emit, compile, and check kernels against the float64 reference.
#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "commands.h"
#include "gmmgen/emit.h"
#include "gmmgen/heuristics.h"
#include "gmmgen/platform.hpp"
#include "gmmgen/runtime.hpp"
#include "gmmgen/templates.h"
#include "gmmgen/verify/checker.h"
#include "process.h"

namespace gmmgen::cli {
namespace {

namespace fs = std::filesystem;

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

// A Python that imports JAX and Pallas's TPU API: $GMMGEN_PYTHON if set, else the project's
// virtual environment this gmm-gen was built beside (.ci/deps installs JAX there), else python3
// (PATH), else /usr/bin/python3; "" if none does.
std::string python_with_jax() {
  std::vector<std::string> candidates{GMMGEN_JAX_PYTHON, "python3", "/usr/bin/python3"};
  if (const char* p = std::getenv("GMMGEN_PYTHON"); p && *p) candidates = {p};
  for (const auto& py : candidates)
    if (run_child({py, "-c", "import jax, jax.experimental.pallas.tpu"}, true) == 0) return py;
  return "";
}

// The Pallas modules of an emitted folder, checked in TPU interpret mode by
// tests/pallas/check_pallas.py (embedded in gmm-gen). Returns 0 (all passed), 1 (a mismatch or
// an error) or kExitSkipped (no Python with JAX).
int verify_pallas(const fs::path& dir, size_t count, uint64_t seed) {
  const std::string python = python_with_jax();
  if (python.empty()) {
    std::printf(
        "%zu Pallas module%s not run: no Python with JAX found (.ci/deps installs one; or set "
        "GMMGEN_PYTHON)\n",
        count, count == 1 ? "" : "s");
    return kExitSkipped;
  }
  const fs::path checker = dir / "check_pallas.py";
  std::ofstream(checker, std::ios::binary) << embedded_file("pallas/check_pallas.py");
  std::vector<std::string> argv{python, checker.string(), dir.string(), "--seed",
                                std::to_string(seed)};
  // The quick cases: interpret mode spends ~25 ms of host callbacks per grid step, and every
  // case of a module with tiles of 128 takes minutes (check_pallas.py DIR runs them all).
  argv.push_back("--quick");
  std::printf("Pallas modules: %s\n", format_command(argv).c_str());
  const int rc = run_child(argv, false);
  if (rc == 0 || rc == 1 || rc == kExitSkipped) return rc;
  std::printf("check_pallas.py failed (exit status %d)\n", rc);
  return 1;
}

// The cases of one kernel: all standard cases, or their quick subset.
std::vector<CheckCase> cases_of(const KernelSpec& spec, uint64_t seed, bool quick) {
  return quick ? quick_cases(spec, seed) : standard_cases(spec, seed);
}

using Clock = std::chrono::steady_clock;

// One C++ kernel's outcome, printed as one line (and a failure's message under it).
struct Outcome {
  std::string name;
  size_t cases = 0;
  double worst_rel = 0, bound = 0, seconds = 0;
  bool cached = false, skipped = false, mismatch = false, failed = false;
  std::string isa, message;
};

void print_outcome(const Outcome& o) {
  char compile[16];
  if (o.cached)
    std::snprintf(compile, sizeof compile, "%8s", "cached");
  else
    std::snprintf(compile, sizeof compile, "%7.2fs", o.seconds);
  if (o.failed) {
    std::printf("%-64s %6s %12s %10s %s FAILED\n", o.name.c_str(), "-", "-", "-", compile);
    std::string indented = "  " + o.message;
    for (size_t p = indented.find('\n'); p != std::string::npos; p = indented.find('\n', p + 3))
      indented.replace(p, 1, "\n  ");
    std::printf("%s\n", indented.c_str());
  } else if (o.skipped) {  // compiled, but running it would die of SIGILL
    std::printf("%-64s %6s %12s %10s %s skipped: host lacks %s\n", o.name.c_str(), "-", "-", "-",
                compile, o.isa.c_str());
  } else {
    std::printf("%-64s %6zu %12.3e %9.1f%% %s %s\n", o.name.c_str(), o.cases, o.worst_rel,
                100.0 * o.bound, compile, o.mismatch ? "MISMATCH" : "ok");
    if (o.mismatch) std::printf("  first mismatch: %s\n", o.message.c_str());
  }
  std::fflush(stdout);  // one line per kernel as it finishes, also into a pipe
}

// Compiles and checks one C++ kernel. Runnable kernels come from the runtime's disk cache (built
// there if missing); a kernel of a family this CPU cannot run is compiled in the private
// temporary folder `src` and never loaded.
Outcome verify_one(Runtime& rt, const KernelSpec& spec, const fs::path* src, uint64_t seed,
                   bool quick) {
  Outcome o;
  o.name = kernel_name(spec);
  o.isa = std::string(to_string(spec.isa));
  const auto t0 = Clock::now();
  try {
    if (!host_runs(spec.isa)) {
      compile_kernel(spec, *src / (o.name + ".cpp"), *src, *src / (o.name + ".so"));
      o.seconds = seconds_since(t0);
      o.skipped = true;
      return o;
    }
    o.cached = rt.cached(spec);
    const gmmgen_kernel_entry& fns = rt.kernel(spec);
    o.seconds = seconds_since(t0);
    const auto cases = cases_of(spec, seed, quick);
    o.cases = cases.size();
    for (const auto& c : cases) {
      const CheckResult r = check_kernel(fns, spec, c);
      o.worst_rel = std::max(o.worst_rel, r.worst_rel_error);
      o.bound = std::max(o.bound, r.worst_bound_ratio);
      if (!r.ok && !o.mismatch) o.mismatch = true, o.message = r.failure;
    }
  } catch (const std::exception& e) {
    o.seconds = seconds_since(t0);
    o.failed = true;
    o.message = e.what();
  }
  return o;
}

int run_verify(const std::vector<KernelSpec>& specs, uint64_t seed, bool quick, int jobs) {
  for (const auto& s : specs) validate(s);
  std::vector<KernelSpec> cpp, elsewhere;  // elsewhere: emitted into the temporary folder
  for (const auto& s : specs) {
    const bool runs = target_of(s.target).caps().runtime_runs;
    if (runs) cpp.push_back(s);
    if (!runs || !host_runs(s.isa)) elsewhere.push_back(s);
  }
  const size_t pallas = specs.size() - cpp.size();
  // The runtime the -j workers share (it builds distinct kernels at once; each worker runs its
  // kernel's cases on its own thread), made before any work so that a bad environment
  // (GMMGEN_LOG, the cache folder) stops verify at once. It compiles even under
  // GMMGEN_DISABLE_JIT=1: compiling is what verify is asked to do.
  jobs = int(std::min<size_t>(size_t(jobs), std::max<size_t>(1, cpp.size())));
  RuntimeOptions ro;
  ro.num_threads = 1, ro.jit = true, ro.log_stats = false;
  std::optional<Runtime> rt;
  if (!cpp.empty()) rt.emplace(ro);
  std::optional<TempDir> dir;
  if (!elsewhere.empty()) {
    dir.emplace("verify");
    write_files(dir->path, emit_set(elsewhere));
  }
  const fs::path src = dir ? dir->path / std::string(target_of(TargetKind::kCpp).name()) : "";

  int mismatches = 0, failed = 0, skipped = 0;
  if (!cpp.empty()) {
    std::printf("%zu C++ kernel%s, -j %d, disk cache %s\n", cpp.size(), cpp.size() == 1 ? "" : "s",
                jobs, rt->cache_dir().c_str());
    std::printf("%-64s %6s %12s %10s %8s %s\n", "kernel", "cases", "worst rel", "bound use",
                "compile", "result");
    std::fflush(stdout);
    std::mutex print;
    std::atomic<size_t> next{0};
    const auto work = [&] {
      for (size_t i = next++; i < cpp.size(); i = next++) {
        const Outcome o = verify_one(*rt, cpp[i], dir ? &src : nullptr, seed, quick);
        std::lock_guard<std::mutex> lock(print);
        print_outcome(o);
        mismatches += o.mismatch;
        failed += o.failed;
        skipped += o.skipped;
      }
    };
    std::vector<std::thread> threads;
    for (int w = 1; w < jobs; ++w) threads.emplace_back(work);
    work();
    for (auto& t : threads) t.join();
    std::printf("%zu kernels verified, %d mismatched", cpp.size() - size_t(skipped + failed),
                mismatches);
    if (failed) std::printf(", %d failed to build or load", failed);
    if (skipped)
      std::printf(", %d compiled but not run (the host lacks their ISA family)", skipped);
    std::printf("\n");
    std::fflush(stdout);
    if (log_level_from_env() >= LogLevel::kInfo)  // before the Pallas modules' lines
      std::fprintf(stderr, "gmm-gen: statistics: %s\n", to_string(rt->stats()).c_str());
  }
  const int pallas_rc = pallas ? verify_pallas(dir->path, pallas, seed) : 0;
  if (mismatches || failed || pallas_rc == 1) return kExitCheckFailed;
  // Skipped only when nothing at all was checked; C++ kernels that ran count as a verification.
  return pallas_rc == kExitSkipped && cpp.empty() ? kExitSkipped : kExitOk;
}

}  // namespace

Command add_verify(CLI::App& app) {
  struct Options {
    SpecOptions specs;
    KernelFilter filter;
    uint64_t seed = 1;
    bool quick = false;
    int jobs = 0;
    CLI::Option* jobs_given = nullptr;
  };
  auto o = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand(
      "verify",
      "Compile kernels and check them against the float64 reference on random ragged inputs");
  o->specs.add_to(*cmd);
  o->filter.add_to(*cmd);
  cmd->add_option("--seed", o->seed, "Random seed of the inputs");
  cmd->add_flag("--quick", o->quick,
                "At most 6 cases per kernel, fewer when its weights are large: M=97 in every "
                "distribution, the largest M and M=1 once each (drops M=0, M=tm-1 and the other "
                "distributions at M=1 and the largest M)");
  o->jobs_given =
      cmd->add_option("-j,--jobs", o->jobs, "Kernels compiled and checked at once [the cores]");
  cmd->footer(
      "Gets each C++ kernel from the runtime's disk cache, compiling it there if missing "
      "($GMMGEN_CXX,\n"
      "$GMMGEN_CXXFLAGS; a repeated verify compiles nothing), runs it for several M and "
      "group-size\n"
      "distributions (uniform, skewed with empty groups, many tiny groups, random), and prints "
      "one\n"
      "line per kernel as it finishes: cases, worst relative error, the share of the error bound\n"
      "used, compile time (or 'cached') and ok or MISMATCH. Exits 1 on any mismatch or failed\n"
      "compile. -j kernels are worked on at once, each line printed when its kernel is done.\n"
      "Kernels of an ISA family this CPU cannot run are compiled but not run: 'skipped: host "
      "lacks\n"
      "<isa>' (exit 0 if the rest pass; GMMGEN_ASSUME_ISA=<isa> caps the families treated as\n"
      "runnable); they are compiled in a fresh mkdtemp folder under $TMPDIR, which no other user\n"
      "may be able to change.\n"
      "Pallas modules (target=pallas) run in TPU interpret mode through a Python with JAX\n"
      "($GMMGEN_PYTHON, else the .venv that .ci/deps makes, else python3):\n"
      "tests/pallas/check_pallas.py, built into gmm-gen, on its quick cases (--quick or not:\n"
      "interpret mode costs ~25 ms a grid step; the script run by hand takes every case).\n"
      "Without one they are not run; if nothing at all ran, the exit status is 77 (skipped).\n"
      "--target T beside --spec/--spec-file selects the kernels of one target.\n"
      "Example:\n  gmm-gen verify --spec-file generated/specs.json\n"
      "  gmm-gen verify --quick -j 2 --spec op=gmm,lhs=bf16,rhs=bf16,out=f32,k=2048,n=1408,g=64\n"
      "  gmm-gen verify --target pallas --spec-file generated/specs.json");
  return {cmd, [o] {
            if (o->jobs_given->count() && (o->jobs < 1 || o->jobs > 256))
              throw InvalidArgument("-j " + std::to_string(o->jobs) + " must be in [1, 256]");
            const int jobs =
                o->jobs ? o->jobs : int(std::max(1u, std::thread::hardware_concurrency()));
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
            return run_verify(o->filter.apply(specs), o->seed, o->quick, jobs);
          }};
}

}  // namespace gmmgen::cli
