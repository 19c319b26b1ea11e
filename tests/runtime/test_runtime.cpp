// The runtime: compile once, cache on disk, detect bad entries, dispatch on threads, reject
// bad input without touching the output.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "gmmgen/heuristics.h"
#include "gmmgen/naming.h"
#include "gmmgen/platform.hpp"
#include "gmmgen/runtime.hpp"
#include "gmmgen/runtime_c.h"
#include "gmmgen/runtime_config.h"
#include "gmmgen/verify/distributions.h"
#include "gmmgen/verify/reference.h"
#include "jit/disk_cache.h"
#include "jit/toolchain.h"
#include "runtime_fixtures.h"
#include "scratch.h"
#include "smoke_kernels.h"
#include "smoke_kernels_avx2.h"
#include "smoke_kernels_avx512bf16.h"
#include "smoke_kernels_avx512vnni.h"
#include "smoke_kernels_generic.h"

namespace gmmgen {
namespace {

namespace fs = std::filesystem;

// A fresh, private cache folder per test (mkdtemp), removed afterwards.
class RuntimeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::make_private_dir("gmmgen_rt");
    ASSERT_FALSE(dir_.empty()) << "mkdtemp failed";
    setenv("GMMGEN_CACHE_DIR", dir_.c_str(), 1);
    unsetenv("GMMGEN_CXX");
    unsetenv("GMMGEN_CXXFLAGS");
    unsetenv("GMMGEN_DISABLE_JIT");
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  RuntimeOptions options(int threads = 2) {
    RuntimeOptions o;
    o.cache_dir = dir_;
    o.num_threads = threads;
    return o;
  }
  fs::path dir_;
};

// A small f32 problem with random ragged groups and its reference.
struct Problem {
  int64_t m, k, n, g;
  std::vector<float> lhs, rhs, out;
  std::vector<int32_t> sizes;
  Problem(int64_t m_, int64_t k_, int64_t n_, int64_t g_, uint64_t seed = 1)
      : m(m_), k(k_), n(n_), g(g_) {
    std::mt19937_64 rng(seed);
    lhs.resize(m * k);
    rhs.resize(g * k * n);
    for (auto& v : lhs) v = float(uniform_real(rng, -1, 1));
    for (auto& v : rhs) v = float(uniform_real(rng, -1, 1));
    out.assign(m * n, std::nanf(""));
    std::vector<int64_t> cuts{0, m - 3};
    for (int64_t i = 0; i + 1 < g; ++i) cuts.push_back(int64_t(rng() % uint64_t(m - 2)));
    std::sort(cuts.begin(), cuts.end());
    for (int64_t i = 0; i < g; ++i) sizes.push_back(int32_t(cuts[i + 1] - cuts[i]));
  }
  TensorView lhs_view() { return TensorView::matrix(lhs.data(), DType::kF32, m, k); }
  TensorView rhs_view() { return TensorView::batch(rhs.data(), DType::kF32, g, k, n); }
  TensorView out_view() { return TensorView::matrix(out.data(), DType::kF32, m, n); }
  void run(Runtime& rt, const GmmOptions& o = {}) {
    rt.gmm(lhs_view(), rhs_view(), sizes, out_view(), o);
  }
  void expect_correct() const {
    GmmProblem p;
    p.m = m, p.k = k, p.n = n, p.num_groups = p.num_local_groups = int32_t(g);
    p.group_sizes = sizes;
    p.lhs.assign(lhs.begin(), lhs.end());
    p.rhs.assign(rhs.begin(), rhs.end());
    const ReferenceResult ref = reference_gmm(p);
    for (int64_t i = 0; i < m * n; ++i)
      ASSERT_NEAR(ref.out[i], out[i], 1e-5 * (1 + ref.abs_dot[i])) << "element " << i;
  }
};

GmmOptions tiled(int64_t tm, int64_t tk, int64_t tn) {
  GmmOptions o;
  o.tiling = Tiling{tm, tk, tn};
  return o;
}

nlohmann::json probe(int threads, const std::string& spec,
                     const std::vector<std::string>& env = {}) {
  std::vector<std::string> argv{"env"};
  argv.insert(argv.end(), env.begin(), env.end());
  argv.insert(argv.end(), {GMMGEN_PROBE, std::to_string(threads), spec});
  const ProcessResult r = run_process(argv);
  const std::string last = r.output.substr(r.output.rfind('{'));
  auto j = nlohmann::json::parse(last);
  j["status"] = r.status;
  j["output"] = r.output;
  return j;
}

constexpr const char* kProbeSpec = "op=gmm,lhs=f32,rhs=f32,out=f32,k=24,n=20,g=4,tm=8,tk=16,tn=8";

TEST_F(RuntimeTest, FirstCallCompilesThenMemoryThenDiskInANewProcess) {
  {
    Runtime rt(options());
    Problem p(40, 24, 20, 4);
    p.run(rt, tiled(8, 16, 8));
    p.expect_correct();
    EXPECT_EQ(1, rt.stats().compiles);
    p.out.assign(p.out.size(), std::nanf(""));
    p.run(rt, tiled(8, 16, 8));
    p.expect_correct();
    const RuntimeStats s = rt.stats();
    EXPECT_EQ(1, s.compiles);
    EXPECT_EQ(1, s.memory_hits);
    EXPECT_EQ(2, s.lookups);
    EXPECT_GT(s.compile_seconds, 0.0);
  }
  // A new process finds the entry on disk and compiles nothing.
  const auto j = probe(1, kProbeSpec, {"GMMGEN_CACHE_DIR=" + dir_.string(), "GMMGEN_LOG=1"});
  EXPECT_EQ(0, j["status"]) << j["output"];
  EXPECT_EQ(0, j["compiles"]) << j["output"];
  EXPECT_EQ(1, j["disk_hits"]) << j["output"];
  EXPECT_NE(j["output"].get<std::string>().find("disk cache hit"), std::string::npos)
      << j["output"];
}

TEST_F(RuntimeTest, FourProcessesFourThreadsCompileOnce) {
  std::vector<nlohmann::json> results(4);
  std::vector<std::thread> procs;
  for (int i = 0; i < 4; ++i)
    procs.emplace_back(
        [&, i] { results[i] = probe(4, kProbeSpec, {"GMMGEN_CACHE_DIR=" + dir_.string()}); });
  for (auto& t : procs) t.join();
  int64_t compiles = 0, lookups = 0;
  for (const auto& j : results) {
    EXPECT_EQ(0, j["status"]) << j["output"];
    EXPECT_TRUE(j["ok"].get<bool>()) << j["output"];
    compiles += j["compiles"].get<int64_t>();
    lookups += j["lookups"].get<int64_t>();
  }
  EXPECT_EQ(1, compiles) << "exactly one process compiles the kernel";
  EXPECT_EQ(16, lookups);
}

// warmup(specs, jobs) builds distinct kernels at once (a compiler that logs when each compile
// starts and ends, 1 s each, shows two running together), each once (a spec given twice, and a
// second warmup, compile nothing more), keeps going past a bad spec and throws its error at the
// end; every kernel it built then serves its calls correctly.
TEST_F(RuntimeTest, WarmupBuildsDistinctKernelsConcurrentlyEachOnce) {
  const fs::path log = dir_ / "compiles.log", cxx = dir_ / "logging-c++";
  std::ofstream(cxx) << "#!/bin/sh\ncase \" $* \" in *\" -o \"*)\n  echo start >> " << log.string()
                     << "; sleep 1; " << GMMGEN_DEFAULT_CXX << " \"$@\"; rc=$?; echo end >> "
                     << log.string() << "; exit $rc;;\nesac\nexec " << GMMGEN_DEFAULT_CXX
                     << " \"$@\"\n";
  fs::permissions(cxx, fs::perms::owner_all);
  setenv("GMMGEN_CXX", cxx.c_str(), 1);
  setenv("GMMGEN_PCH", "off", 1);  // no prelude of its own to build for this compiler
  const char* base = "op=gmm,lhs=f32,rhs=f32,out=f32,k=24,n=20,g=4,tk=16,tn=8,tm=";
  std::vector<KernelSpec> specs;
  for (const char* tm : {"8", "16", "24", "32", "8"})
    specs.push_back(parse_text(base + std::string(tm)));
  KernelSpec bad = specs[1];
  bad.tiling.tm = 0;  // invalid: validate() names tm
  specs.insert(specs.begin() + 2, bad);
  Runtime rt(options());
  EXPECT_THROW(rt.warmup(specs, 2), SpecError);
  EXPECT_EQ(4, rt.stats().compiles);
  specs.erase(specs.begin() + 2);
  rt.warmup(specs, 2);
  EXPECT_EQ(4, rt.stats().compiles);
  unsetenv("GMMGEN_CXX");
  unsetenv("GMMGEN_PCH");

  std::ifstream in(log);
  int running = 0, most = 0, starts = 0;
  for (std::string line; std::getline(in, line);) {
    running += line == "start" ? 1 : -1;
    starts += line == "start";
    most = std::max(most, running);
  }
  EXPECT_EQ(4, starts);
  EXPECT_EQ(2, most) << "two compiles at once with jobs=2";
  for (const int64_t tm : {8, 16, 24, 32}) {
    Problem p(40, 24, 20, 4, uint64_t(tm));
    p.run(rt, tiled(tm, 16, 8));
    p.expect_correct();
  }
  EXPECT_EQ(4, rt.stats().compiles);
  EXPECT_THROW(rt.warmup(specs, -1), InvalidArgument);
}

// The entry of a probe-sized spec as an earlier build left it in `dir`, for a test of what
// happens to it later: compiled (once per test run) into the shared test cache, whose key is the
// same, and copied. Returns its folder.
fs::path build_entry(const fs::path& dir, const KernelSpec& spec) {
  RuntimeOptions o;
  o.cache_dir = testing::shared_test_cache();
  Runtime(o).warmup({spec});
  const std::string key = cache_key(spec);
  fs::copy(o.cache_dir / key, dir / key, fs::copy_options::recursive);
  return dir / key;
}

TEST_F(RuntimeTest, TruncatedObjectIsDetectedAndRebuilt) {
  const KernelSpec spec = parse_text(kProbeSpec);
  const fs::path entry = build_entry(dir_, spec);
  fs::resize_file(entry / "kernel.so", fs::file_size(entry / "kernel.so") / 2);
  Runtime rt(options());
  Problem p(40, 24, 20, 4);
  p.run(rt, tiled(8, 16, 8));
  p.expect_correct();
  EXPECT_EQ(1, rt.stats().rebuilds);
  EXPECT_EQ(1, rt.stats().compiles);
  EXPECT_EQ(DiskCache::State::kValid, DiskCache(dir_).check(cache_key(spec)));
}

TEST_F(RuntimeTest, ObjectReportingAnotherKeyIsRebuiltNeverRun) {
  const KernelSpec a = parse_text(kProbeSpec);
  const KernelSpec b = parse_text("op=gmm,lhs=f32,rhs=f32,out=f32,k=24,n=20,g=4,tm=16,tk=16,tn=8");
  const fs::path ea = build_entry(dir_, a), eb = build_entry(dir_, b);
  // Put b's object into a's entry with matching size and hash, so only the key it reports
  // after loading can tell.
  fs::copy_file(eb / "kernel.so", ea / "kernel.so", fs::copy_options::overwrite_existing);
  nlohmann::json entry = nlohmann::json::parse(std::ifstream(ea / "entry.json"));
  entry["so_bytes"] = fs::file_size(ea / "kernel.so");
  entry["so_hash"] = file_hash(ea / "kernel.so");
  std::ofstream(ea / "entry.json") << entry.dump();
  ASSERT_EQ(DiskCache::State::kValid, DiskCache(dir_).check(cache_key(a)));
  Runtime rt(options());
  Problem p(40, 24, 20, 4);
  p.run(rt, tiled(8, 16, 8));
  p.expect_correct();
  EXPECT_EQ(1, rt.stats().rebuilds);
  EXPECT_EQ(1, rt.stats().compiles);
}

TEST_F(RuntimeTest, UnsafeEntriesAreRefused) {
  const KernelSpec spec = parse_text(kProbeSpec);
  const fs::path entry = build_entry(dir_, spec);
  auto expect_refused = [&](const std::string& needle) {
    Runtime rt(options());
    Problem p(40, 24, 20, 4);
    try {
      p.run(rt, tiled(8, 16, 8));
      ADD_FAILURE() << "loaded an unsafe entry";
    } catch (const CacheError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
    EXPECT_EQ(0, rt.stats().compiles);
    EXPECT_TRUE(std::isnan(p.out[0])) << "output written";
  };
  chmod((entry / "kernel.so").c_str(), 0666);
  expect_refused("writable by group or others");
  chmod((entry / "kernel.so").c_str(), 0644);
  chmod(entry.c_str(), 0777);
  expect_refused("writable by group or others");
  chmod(entry.c_str(), 0700);
  if (geteuid() == 0) {  // only root can give a file away
    ASSERT_EQ(0, chown((entry / "kernel.so").c_str(), 65534, 65534));
    expect_refused("owned by uid 65534");
  }
  // A cache root others can write to is refused before anything is read from it.
  ASSERT_EQ(0, chmod(dir_.c_str(), 0777));
  EXPECT_THROW(DiskCache{dir_}, CacheError);
  chmod(dir_.c_str(), 0700);
}

TEST_F(RuntimeTest, CacheRootIsCreatedPrivate) {
  DiskCache cache(dir_ / "nested" / "root");
  struct stat st;
  ASSERT_EQ(0, stat(cache.root().c_str(), &st));
  EXPECT_EQ(0700u, st.st_mode & 0777u);
}

TEST_F(RuntimeTest, CompilerProblemsAreClearErrors) {
  Problem p(40, 24, 20, 4);
  setenv("GMMGEN_CXX", "/nonexistent/c++", 1);
  {
    Runtime rt(options());
    try {
      p.run(rt, tiled(8, 16, 8));
      ADD_FAILURE() << "ran without a compiler";
    } catch (const CompileError& e) {
      EXPECT_NE(std::string(e.what()).find("/nonexistent/c++"), std::string::npos) << e.what();
    }
  }
  unsetenv("GMMGEN_CXX");
  setenv("GMMGEN_CXXFLAGS", "--no-such-flag", 1);
  {
    Runtime rt(options());
    try {
      p.run(rt, tiled(8, 16, 8));
      ADD_FAILURE() << "compiled with a rejected flag";
    } catch (const CompileError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("command: "), std::string::npos) << msg;
      EXPECT_NE(msg.find("--no-such-flag"), std::string::npos) << msg;
    }
  }
  EXPECT_TRUE(std::isnan(p.out[0]));
}

TEST_F(RuntimeTest, JitDisabledNeedsWarmup) {
  const KernelSpec spec = parse_text(kProbeSpec);
  RuntimeOptions no_jit = options();
  no_jit.jit = false;
  {
    Runtime rt(no_jit);
    EXPECT_THROW(rt.kernel(spec), JitDisabledError);
  }
  Runtime(options()).warmup({spec});
  Runtime rt(no_jit);
  Problem p(40, 24, 20, 4);
  p.run(rt, tiled(8, 16, 8));
  p.expect_correct();
  EXPECT_EQ(0, rt.stats().compiles);
  EXPECT_EQ(1, rt.stats().disk_hits);
}

TEST_F(RuntimeTest, CompiledInKernelsComeFirst) {
  RuntimeOptions o = options();
  o.jit = false;  // nothing may be compiled: the registry must serve the call
  Runtime rt(o);
  rt.register_kernels(smoke_kernels_kernels, smoke_kernels_kernel_count);
  // The test set's first kernel: f32, k=37, n=29, g=5, tm=8, tk=16, tn=8.
  const KernelSpec s = parse_text(smoke_kernels_kernels[0].info()->spec);
  Problem p(50, s.k, s.n, s.g);
  p.run(rt, tiled(s.tiling.tm, s.tiling.tk, s.tiling.tn));
  p.expect_correct();
  EXPECT_EQ(1, rt.stats().registry_hits);
  EXPECT_EQ(0, rt.stats().compiles);
}

// The registry is keyed by problem: a compiled-in kernel serves every call of its problem that
// names no tiling, so an embedder need not repeat the tiling it compiled in.
TEST_F(RuntimeTest, CompiledInKernelServesItsProblemWhateverItsTiling) {
  RuntimeOptions o = options();
  o.jit = false;
  Runtime rt(o);
  rt.register_kernels(smoke_kernels_kernels, smoke_kernels_kernel_count);
  const gmmgen_kernel_info* info = smoke_kernels_kernels[0].info();
  const KernelSpec s = parse_text(info->spec);
  ASSERT_NE(default_tiling(s), s.tiling) << "the test needs a non-heuristic tiling";
  Problem p(50, s.k, s.n, s.g);
  p.run(rt);  // no tiling named
  p.expect_correct();
  EXPECT_EQ(1, rt.stats().registry_hits);
  EXPECT_EQ(0, rt.stats().compiles);
  // A tiling nobody compiled in, and no JIT: the error names the closest compiled-in kernels.
  try {
    p.run(rt, tiled(s.tiling.tm * 2, s.tiling.tk, s.tiling.tn));
    ADD_FAILURE() << "ran without a kernel";
  } catch (const JitDisabledError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("Closest compiled-in kernels"), std::string::npos) << msg;
    EXPECT_NE(msg.find(info->name), std::string::npos) << msg;
  }
  // Another problem (K differs) is not served by it.
  Problem q(50, s.k + 1, s.n, s.g);
  EXPECT_THROW(q.run(rt), JitDisabledError);
}

// A bundle may carry one spec in several ISA families: dispatch takes the best the CPU runs, and
// registration leaves out the ones it cannot run.
TEST_F(RuntimeTest, CompiledInFamiliesBestFirst) {
  RuntimeOptions o = options();
  o.jit = false;
  Runtime rt(o);
  rt.register_kernels(smoke_kernels_generic_kernels, smoke_kernels_generic_kernel_count);
  rt.register_kernels(smoke_kernels_avx2_kernels, smoke_kernels_avx2_kernel_count);
  rt.register_kernels(smoke_kernels_avx512vnni_kernels, smoke_kernels_avx512vnni_kernel_count);
  rt.register_kernels(smoke_kernels_avx512bf16_kernels, smoke_kernels_avx512bf16_kernel_count);
  const KernelSpec s = parse_text(smoke_kernels_generic_kernels[0].info()->spec);
  Problem p(50, s.k, s.n, s.g);
  KernelSpec problem = rt.gmm_spec(p.lhs_view(), p.rhs_view(), p.sizes, p.out_view());
  // The kernel the call gets: the best family this CPU runs among the registered ones.
  const Isa want = host_supports(Isa::kAvx512Bf16)   ? Isa::kAvx512Bf16
                   : host_supports(Isa::kAvx512Vnni) ? Isa::kAvx512Vnni
                   : host_supports(Isa::kAvx2)       ? Isa::kAvx2
                                                     : Isa::kGeneric;
  p.run(rt);
  p.expect_correct();
  EXPECT_EQ(1, rt.stats().registry_hits);
  problem.isa = want;
  problem.tiling = s.tiling;
  EXPECT_EQ(kernel_name(problem), rt.kernel(problem).info()->name);
}

TEST_F(RuntimeTest, ResultsAreBitIdenticalAcrossThreadCounts) {
  Problem one(300, 64, 96, 6, 9), two(300, 64, 96, 6, 9);
  Runtime rt1(options(1)), rt2(options(2));
  EXPECT_EQ(1, rt1.num_threads());
  EXPECT_EQ(2, rt2.num_threads());
  one.run(rt1, tiled(16, 32, 16));
  two.run(rt2, tiled(16, 32, 16));
  one.expect_correct();
  EXPECT_EQ(0, std::memcmp(one.out.data(), two.out.data(), one.out.size() * sizeof(float)));
}

TEST_F(RuntimeTest, BadInputIsRejectedAndOutputUntouched) {
  Runtime rt(options());
  auto expect_rejected = [&](Problem& p, const std::function<void(Problem&)>& call,
                             const std::string& needle) {
    const std::vector<float> before = p.out;
    try {
      call(p);
      ADD_FAILURE() << "accepted; expected an error mentioning '" << needle << "'";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
    EXPECT_EQ(0, std::memcmp(before.data(), p.out.data(), p.out.size() * sizeof(float))) << needle;
  };
  Problem p(40, 24, 20, 4);
  const GmmOptions o = tiled(8, 16, 8);
  expect_rejected(
      p,
      [&](Problem& q) {
        rt.gmm(TensorView::matrix(q.lhs.data(), DType::kF32, q.m, q.k - 1), q.rhs_view(), q.sizes,
               q.out_view(), o);
      },
      "does not match lhs");
  expect_rejected(
      p,
      [&](Problem& q) {
        rt.gmm(q.lhs_view(), q.rhs_view(), q.sizes,
               TensorView::matrix(q.out.data(), DType::kF32, q.m, q.n + 1), o);
      },
      "must be [M, N]");
  expect_rejected(
      p,
      [&](Problem& q) {
        rt.gmm(q.lhs_view(), TensorView::matrix(q.rhs.data(), DType::kF32, q.k, q.n), q.sizes,
               q.out_view(), o);
      },
      "rhs must be 3-D");
  expect_rejected(
      p,
      [&](Problem& q) {
        std::vector<float> e(q.out.size());
        const TensorView ev = TensorView::matrix(e.data(), DType::kBF16, q.m, q.n);
        GmmOptions x = o;
        x.existing_out = &ev;
        rt.gmm(q.lhs_view(), q.rhs_view(), q.sizes, q.out_view(), x);
      },
      "existing_out dtype bf16 differs");
  expect_rejected(
      p,
      [&](Problem& q) {
        std::vector<int32_t> s = q.sizes;
        s[2] = -1;
        rt.gmm(q.lhs_view(), q.rhs_view(), s, q.out_view(), o);
      },
      "group_sizes[2]=-1 is negative");
  expect_rejected(
      p,
      [&](Problem& q) {
        std::vector<int32_t> s = q.sizes;
        s[0] += int32_t(q.m);
        rt.gmm(q.lhs_view(), q.rhs_view(), s, q.out_view(), o);
      },
      "exceeds m=40");
  expect_rejected(
      p,
      [&](Problem& q) {
        GmmOptions x = o;
        x.group_offset = 1;  // G_local = G: the only valid offset is 0
        rt.gmm(q.lhs_view(), q.rhs_view(), q.sizes, q.out_view(), x);
      },
      "group_offset=1");
  expect_rejected(
      p,
      [&](Problem& q) {
        rt.gmm(TensorView::matrix(nullptr, DType::kF32, q.m, q.k), q.rhs_view(), q.sizes,
               q.out_view(), o);
      },
      "lhs is NULL");
  expect_rejected(
      p,
      [&](Problem& q) {
        rt.gmm(TensorView::matrix(reinterpret_cast<char*>(q.lhs.data()) + 2, DType::kF32, q.m, q.k),
               q.rhs_view(), q.sizes, q.out_view(), o);
      },
      "lhs is not 4-byte aligned");
  expect_rejected(
      p,
      [&](Problem& q) {
        GmmOptions x = o;
        x.accumulate = true;
        rt.gmm(q.lhs_view(), q.rhs_view(), q.sizes, q.out_view(), x);
      },
      "accumulate needs existing_out");
}

TEST_F(RuntimeTest, CApi) {
  gmmgen_runtime* rt = nullptr;
  char err[512];
  ASSERT_EQ(GMMGEN_OK, gmmgen_runtime_create(&rt, err, sizeof err)) << err;
  Problem p(40, 24, 20, 4);
  gmmgen_tensor lhs{p.lhs.data(), GMMGEN_DTYPE_F32, 2, {p.m, p.k, 0}, 0};
  gmmgen_tensor rhs{p.rhs.data(), GMMGEN_DTYPE_F32, 3, {p.g, p.k, p.n}, 0};
  gmmgen_tensor out{p.out.data(), GMMGEN_DTYPE_F32, 2, {p.m, p.n, 0}, 0};
  gmmgen_gmm_options o{};
  o.tm = 8, o.tk = 16, o.tn = 8;
  ASSERT_EQ(GMMGEN_OK, gmmgen_runtime_gmm(rt, &lhs, &rhs, p.sizes.data(), int32_t(p.g), &out, &o,
                                          err, sizeof err))
      << err;
  p.expect_correct();
  std::vector<int32_t> bad = p.sizes;
  bad[1] = -5;
  p.out.assign(p.out.size(), std::nanf(""));
  EXPECT_EQ(
      GMMGEN_ERR_INVALID_ARGUMENT,
      gmmgen_runtime_gmm(rt, &lhs, &rhs, bad.data(), int32_t(p.g), &out, &o, err, sizeof err));
  EXPECT_NE(std::string(err).find("group_sizes[1]=-5"), std::string::npos) << err;
  EXPECT_TRUE(std::isnan(p.out[0]));
  EXPECT_EQ(GMMGEN_ERR_INVALID_ARGUMENT,
            gmmgen_runtime_warmup(rt, "k=8,n=8,g=2,tm=0", err, sizeof err));
  EXPECT_NE(std::string(err).find("tm=0"), std::string::npos) << err;
  gmmgen_runtime_stats s;
  gmmgen_runtime_get_stats(rt, &s);
  EXPECT_EQ(1, s.compiles);
  gmmgen_runtime_destroy(rt);
}

// The C API's tgmm and VJP give the same bits as the C++ API, and reject bad input.
TEST_F(RuntimeTest, CApiTgmmAndVjpMatchTheCppApi) {
  Problem p(40, 24, 20, 4);
  std::vector<float> dout(p.m * p.n);
  std::mt19937_64 rng(4);
  for (auto& v : dout) v = float(uniform_real(rng, -1, 1));
  std::vector<float> dlhs_c(p.m * p.k), drhs_c(p.g * p.n * p.k), tg_c(p.g * p.k * p.n);
  std::vector<float> dlhs_cpp = dlhs_c, drhs_cpp = drhs_c, tg_cpp = tg_c;

  Runtime rt(options());
  GmmVjpOptions vo;
  vo.transpose_rhs = true;  // rhs read as [G, N, K]
  rt.gmm_vjp(TensorView::matrix(dout.data(), DType::kF32, p.m, p.n), p.lhs_view(),
             TensorView::batch(p.rhs.data(), DType::kF32, p.g, p.n, p.k), p.sizes,
             TensorView::matrix(dlhs_cpp.data(), DType::kF32, p.m, p.k),
             TensorView::batch(drhs_cpp.data(), DType::kF32, p.g, p.n, p.k), vo);
  rt.tgmm(p.lhs_view(), TensorView::matrix(dout.data(), DType::kF32, p.m, p.n), p.sizes,
          TensorView::batch(tg_cpp.data(), DType::kF32, p.g, p.k, p.n));

  gmmgen_runtime* c = nullptr;
  char err[512];
  ASSERT_EQ(GMMGEN_OK, gmmgen_runtime_create(&c, err, sizeof err)) << err;
  gmmgen_tensor t_dout{dout.data(), GMMGEN_DTYPE_F32, 2, {p.m, p.n, 0}, 0};
  gmmgen_tensor t_lhs{p.lhs.data(), GMMGEN_DTYPE_F32, 2, {p.m, p.k, 0}, 0};
  gmmgen_tensor t_rhs{p.rhs.data(), GMMGEN_DTYPE_F32, 3, {p.g, p.n, p.k}, 0};
  gmmgen_tensor t_dlhs{dlhs_c.data(), GMMGEN_DTYPE_F32, 2, {p.m, p.k, 0}, 0};
  gmmgen_tensor t_drhs{drhs_c.data(), GMMGEN_DTYPE_F32, 3, {p.g, p.n, p.k}, 0};
  gmmgen_tensor t_tg{tg_c.data(), GMMGEN_DTYPE_F32, 3, {p.g, p.k, p.n}, 0};
  gmmgen_vjp_options co{};
  co.transpose_rhs = 1;
  ASSERT_EQ(GMMGEN_OK, gmmgen_runtime_gmm_vjp(c, &t_dout, &t_lhs, &t_rhs, p.sizes.data(),
                                              int32_t(p.g), &t_dlhs, &t_drhs, &co, err, sizeof err))
      << err;
  ASSERT_EQ(GMMGEN_OK, gmmgen_runtime_tgmm(c, &t_lhs, &t_dout, p.sizes.data(), int32_t(p.g), &t_tg,
                                           nullptr, err, sizeof err))
      << err;
  EXPECT_EQ(0, std::memcmp(dlhs_c.data(), dlhs_cpp.data(), dlhs_c.size() * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(drhs_c.data(), drhs_cpp.data(), drhs_c.size() * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(tg_c.data(), tg_cpp.data(), tg_c.size() * sizeof(float)));

  gmmgen_tensor wrong{tg_c.data(), GMMGEN_DTYPE_F32, 3, {p.g, p.k + 1, p.n}, 0};
  const std::vector<float> before = tg_c;
  EXPECT_EQ(GMMGEN_ERR_INVALID_ARGUMENT,
            gmmgen_runtime_tgmm(c, &t_lhs, &t_dout, p.sizes.data(), int32_t(p.g), &wrong, nullptr,
                                err, sizeof err));
  EXPECT_NE(std::string(err).find("out [4, 25, 20] must be [G_local, 24, 20]"), std::string::npos)
      << err;
  EXPECT_EQ(before, tg_c);
  gmmgen_runtime_destroy(c);
}

TEST_F(RuntimeTest, CacheCommandListsAndClears) {
  build_entry(dir_, parse_text(kProbeSpec));
  const std::string env = "GMMGEN_CACHE_DIR=" + dir_.string();
  ProcessResult r = run_process({"env", env, GMMGEN_CLI, "cache", "path"});
  EXPECT_EQ(dir_.string() + "\n", r.output);
  r = run_process({"env", env, GMMGEN_CLI, "cache", "ls"});
  EXPECT_NE(r.output.find("1 entries"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("gmm_f32xf32_f32_k24_n20_g4_t8x16x8_"), std::string::npos) << r.output;
  r = run_process({"env", env, GMMGEN_CLI, "cache", "clear"});
  EXPECT_NE(r.output.find("removed 1 entries"), std::string::npos) << r.output;
  EXPECT_TRUE(DiskCache(dir_).list().empty());
}

// GMMGEN_DISABLE_JIT reads yes/no words as GMMGEN_LOG does, and nothing else; GMMGEN_NUM_THREADS
// takes digits only. (GMMGEN_CXX=echo tells the two JIT states apart without compiling: its
// version probe succeeds, so enabled, the build fails having written no kernel.so; disabled, it
// is refused before.)
TEST(RuntimeEnv, YesNoWordsAndThreadCountsAreValidated) {
  const testing::Scratch cache("gmmgen_env");
  setenv("GMMGEN_CACHE_DIR", cache.path.c_str(), 1);
  setenv("GMMGEN_CXX", "echo", 1);
  const KernelSpec spec = parse_text("k=24,n=20,g=3,lhs=f32,rhs=f32,tm=8,tk=8,tn=8");
  for (const char* yes : {"1", "true", "YES", "on"}) {
    setenv("GMMGEN_DISABLE_JIT", yes, 1);
    Runtime rt;
    EXPECT_THROW(rt.warmup({spec}), JitDisabledError) << yes;
  }
  for (const char* no : {"0", "false", "No", "off", ""}) {
    setenv("GMMGEN_DISABLE_JIT", no, 1);
    Runtime rt;
    EXPECT_THROW(rt.warmup({spec}), CompileError) << "'" << no << "'";
  }
  for (const char* bad : {"2", "maybe", " 1", "enable"}) {
    setenv("GMMGEN_DISABLE_JIT", bad, 1);
    try {
      Runtime rt;
      ADD_FAILURE() << "accepted GMMGEN_DISABLE_JIT=" << bad;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("GMMGEN_DISABLE_JIT="), std::string::npos) << e.what();
    }
  }
  unsetenv("GMMGEN_DISABLE_JIT");
  unsetenv("GMMGEN_CXX");

  setenv("GMMGEN_NUM_THREADS", "3", 1);
  EXPECT_EQ(3, Runtime().num_threads());
  setenv("GMMGEN_NUM_THREADS", "", 1);  // empty: unset
  EXPECT_EQ(int(std::max(1u, std::thread::hardware_concurrency())), Runtime().num_threads());
  for (const char* bad : {" 4", "+4", "4 ", "0", "4097", "x", "99999999999999999999", "-1"}) {
    setenv("GMMGEN_NUM_THREADS", bad, 1);
    try {
      Runtime rt;
      ADD_FAILURE() << "accepted GMMGEN_NUM_THREADS='" << bad << "'";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("GMMGEN_NUM_THREADS="), std::string::npos) << e.what();
    }
  }
  unsetenv("GMMGEN_NUM_THREADS");
  unsetenv("GMMGEN_CACHE_DIR");
}

}  // namespace
}  // namespace gmmgen
