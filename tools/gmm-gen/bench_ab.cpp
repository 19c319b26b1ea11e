#include "bench_ab.h"

#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <optional>
#include <stdexcept>

#include "commands.h"
#include "gmmgen/naming.h"
#include "process.h"

namespace gmmgen::cli {
namespace {

namespace fs = std::filesystem;

// Sets an environment variable for its lifetime, then puts back what was there.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() { old_ ? (void)setenv(name_, old_->c_str(), 1) : (void)unsetenv(name_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

bool executable_file(const fs::path& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(p.c_str(), X_OK) == 0;
}

// One side: where its kernel of a row's problem comes from (see bench_ab.h).
class Side {
 public:
  Side(const std::string& text, Runtime& main, const RuntimeOptions& ro)
      : text_(text), main_(main) {
    const auto bad = [&](const std::string& why) {
      return InvalidArgument("--ab " + quote_value(text) + ": " + why +
                             " (a side is this, tiling=TMxTKxTN, cxx=COMPILER or the path of a "
                             "gmm-gen or of its build folder)");
    };
    if (text == "this") {
      kind_ = Kind::kThis;
    } else if (text.rfind("tiling=", 0) == 0) {
      kind_ = Kind::kTiling;
      int64_t v[3] = {};
      char tail = 0;
      if (std::sscanf(text.c_str() + 7, "%ldx%ldx%ld%c", &v[0], &v[1], &v[2], &tail) != 3)
        throw bad("the tiling is not TMxTKxTN");
      tiling_ = Tiling{v[0], v[1], v[2]};
    } else if (text.rfind("cxx=", 0) == 0) {
      kind_ = Kind::kBuilt;
      cxx_ = text.substr(4);
      if (cxx_.empty()) throw bad("no compiler named");
      emitter_ = fs::read_symlink("/proc/self/exe");
    } else {
      kind_ = Kind::kBuilt;
      const fs::path p = text;
      emitter_ = fs::is_directory(p) ? p / "bin" / "gmm-gen" : p;
      if (!executable_file(emitter_))
        throw bad(emitter_.string() + " is not an executable gmm-gen");
    }
    if (kind_ == Kind::kBuilt) {
      RuntimeOptions own = ro;
      own.jit = false;  // its kernels are the ones built here, registered
      own.log_stats = false;
      own_ = std::make_unique<Runtime>(own);
    }
  }
  ~Side() {
    own_.reset();  // before the objects its registry points into
    for (void* h : objects_) dlclose(h);
  }
  Side(const Side&) = delete;
  Side& operator=(const Side&) = delete;

  const std::string& text() const { return text_; }

  // The runtime holding this side's kernel of `spec` and the spec it runs (the same problem).
  std::pair<Runtime*, KernelSpec> prepare(const KernelSpec& spec) {
    KernelSpec s = spec;
    if (kind_ == Kind::kTiling) {
      s.tiling = tiling_;
      validate(s);
    }
    if (kind_ != Kind::kBuilt) return {&main_, s};
    build(s);
    return {own_.get(), s};
  }

 private:
  enum class Kind { kThis, kTiling, kBuilt };

  // Emits the spec with the side's gmm-gen into a bundle of its own, compiles it (with the side's
  // compiler), loads it and registers its table.
  void build(const KernelSpec& s) {
    if (!dir_) dir_.emplace("bench");
    const std::string bundle = "ab_" + std::to_string(objects_.size());
    const fs::path out = dir_->path / bundle;
    const int rc = run_child({emitter_.string(), "emit", "--spec", to_text(s), "--out",
                              out.string(), "--bundle", bundle},
                             true);
    if (rc != 0)
      throw std::runtime_error("--ab " + text_ + ": '" + emitter_.string() + " emit --spec " +
                               to_text(s) + "' failed (exit " + std::to_string(rc) + ")");
    const fs::path so = out / (bundle + ".so");
    {
      std::optional<ScopedEnv> cxx;
      if (!cxx_.empty()) cxx.emplace("GMMGEN_CXX", cxx_);
      compile_kernel(s, out / "cpp" / (bundle + ".cpp"), out / "cpp", so);
    }
    void* h = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) throw std::runtime_error("--ab " + text_ + ": " + dlerror());
    objects_.push_back(h);
    const auto* table =
        static_cast<const gmmgen_kernel_entry*>(dlsym(h, (bundle + "_kernels").c_str()));
    const auto* count = static_cast<const int32_t*>(dlsym(h, (bundle + "_kernel_count").c_str()));
    if (!table || !count)
      throw std::runtime_error("--ab " + text_ + ": " + so.string() + " has no kernel table");
    own_->register_kernels(table, *count);
  }

  std::string text_;
  Kind kind_ = Kind::kThis;
  Tiling tiling_;
  std::string cxx_;
  fs::path emitter_;
  Runtime& main_;
  std::unique_ptr<Runtime> own_;
  std::optional<TempDir> dir_;
  std::vector<void*> objects_;
};

std::string dtypes(const bench::AbRow& r) {
  return bench::dtypes_label(r.lhs, r.lhs_quant, r.rhs, r.rhs_quant, r.out);
}

}  // namespace

int run_ab(const std::vector<std::string>& sides, const std::vector<AbJob>& jobs,
           const RuntimeOptions& ro, Runtime& rt, const bench::Options& o,
           const std::string& json) {
  if (sides.size() != 2) throw InvalidArgument("--ab takes two sides, A and B");
  Side a(sides[0], rt, ro), b(sides[1], rt, ro);
  const bench::Machine machine = bench::describe_machine(o.threads, false);
  std::printf(
      "cpu:       %s\nisa:       %s\ncompiler:  %s\nthreads:   %d\npages:     %s\noffset:    %s\n"
      "A:         %s\nB:         %s\nrounds:    %d (A first in even rounds, B first in odd "
      "ones)\n\n",
      machine.cpu.c_str(), machine.isa.c_str(), machine.compiler.c_str(), machine.threads,
      machine.pages.c_str(), bench::describe_offset(machine.operand_offset).c_str(),
      a.text().c_str(), b.text().c_str(), bench::ab_rounds(o.reps));
  std::printf("%-6s %-5s %-34s %10s %10s %7s %13s  %s\n", "shape", "op", "lhs x rhs -> out", "A ms",
              "B ms", "B/A", "p25-p75", "check");
  std::fflush(stdout);
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  int failures = 0;
  for (const AbJob& j : jobs) {
    auto [rt_a, spec_a] = a.prepare(j.spec);
    auto [rt_b, spec_b] = b.prepare(j.spec);
    const bench::AbRow r = bench::run_ab(*rt_a, spec_a, *rt_b, spec_b, j.work, o, machine);
    if (r.ok)
      std::printf("%-6s %-5s %-34s %10.3f %10.3f %7.3f %6.3f-%-6.3f  ok\n", r.shape.c_str(),
                  r.op.c_str(), dtypes(r).c_str(), r.a_ms, r.b_ms, r.ratio, r.ratio_p25,
                  r.ratio_p75);
    else
      ++failures,
          std::printf("%-6s %-5s %-34s %10s %10s %7s %13s  MISMATCH: %s\n", r.shape.c_str(),
                      r.op.c_str(), dtypes(r).c_str(), "-", "-", "-", "-", r.failure.c_str());
    std::fflush(stdout);
    nlohmann::ordered_json row = r.to_json();
    row["side_a"] = a.text(), row["side_b"] = b.text();
    rows.push_back(std::move(row));
  }
  if (!json.empty()) {
    std::ofstream out(json);
    out << nlohmann::ordered_json{{"machine", machine.to_json()}, {"rows", rows}}.dump(2) << "\n";
    if (!out) throw std::runtime_error("cannot write " + json);
  }
  return failures ? kExitCheckFailed : kExitOk;
}

}  // namespace gmmgen::cli
