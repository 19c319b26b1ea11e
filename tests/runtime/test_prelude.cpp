// Precompiled preludes (runtime/src/jit/prelude.h): what goes into one, that kernels of one
// compiler and flag set share it, that the objects match plain compiles byte for byte (g++ and
// clang++), that a broken one costs a retry, never a failed build, and that GMMGEN_PCH=off turns
// them off.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "gmmgen/cache.hpp"
#include "gmmgen/runtime.hpp"
#include "gmmgen/spec.h"
#include "jit/disk_cache.h"
#include "jit/prelude.h"
#include "jit/toolchain.h"
#include "runtime_fixtures.h"
#include "scratch.h"

namespace gmmgen {
namespace {
namespace fs = std::filesystem;
using testing::read_file;
using testing::Scratch;

// Two kernels of one family (so one prelude), small and quick to compile.
const char* const kSpecs[] = {"op=gmm,lhs=f32,rhs=f32,out=f32,k=20,n=9,g=3,tm=8,tk=8,tn=16",
                              "op=gmm,lhs=f32,rhs=f32,out=f32,k=20,n=9,g=3,tm=8,tk=8,tn=32"};

// Sets an environment variable for the test's lifetime (restores the old value).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    const char* old = std::getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (had_)
      setenv(name_, old_.c_str(), 1);
    else
      unsetenv(name_);
  }

 private:
  const char* name_;
  bool had_ = false;
  std::string old_;
};

// The prelude folders (not lock files) of a store.
std::vector<fs::path> preludes(const fs::path& store) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(store, ec))
    if (e.is_directory()) out.push_back(e.path());
  return out;
}

RuntimeOptions private_cache(const fs::path& dir) {
  RuntimeOptions o;
  o.cache_dir = dir;
  o.num_threads = 1;
  return o;
}

TEST(Prelude, TextListsEachSystemHeaderOnceSorted) {
  const std::string a =
      "#include \"kernel.h\"\n#include <vector>\n  #  include <cmath>  // a comment\n"
      "// #include <string>\n#include <vector>\n";
  const std::string b = "#pragma once\n#include <immintrin.h>\n#include\t<cmath>\n";
  EXPECT_EQ("#include <cmath>\n#include <immintrin.h>\n#include <vector>\n",
            prelude_text({{"a.cpp", a}, {"b.h", b}}));
  EXPECT_EQ("", prelude_text({{"c.cpp", "#include \"only_local.h\"\nint x;\n"}}));
}

// Per compiler: both kernels use one prelude (built once, in GMMGEN_PCH_DIR, not in the cache),
// and the installed kernel.so of the second (built with a prelude it did not build) is the
// object a plain compile of its entry makes.
TEST(Prelude, KernelsShareOnePreludeAndMatchPlainCompilesByteForByte) {
  for (const std::string& cxx : {testing::on_path("g++"), testing::on_path("clang++")}) {
    if (cxx.empty()) continue;
    SCOPED_TRACE(cxx);
    const Scratch cache("gmmgen_prelude"), pch("gmmgen_prelude_pch");
    const ScopedEnv use_cxx("GMMGEN_CXX", cxx), use_pch("GMMGEN_PCH_DIR", pch.path.string());
    Runtime rt(private_cache(cache.path));
    for (const char* text : kSpecs) rt.warmup({parse_text(text)});
    EXPECT_EQ(2, rt.stats().compiles);
    const std::vector<fs::path> made = preludes(pch.path);
    ASSERT_EQ(1u, made.size());
    EXPECT_TRUE(fs::is_regular_file(made[0] / "prelude.h.gch"));
    EXPECT_NE(std::string::npos, read_file(made[0] / "prelude.h").find("#include <immintrin.h>"));
    EXPECT_FALSE(fs::exists(cache.path / ".pch"));
    const KernelSpec spec = parse_text(kSpecs[1]);
    const fs::path entry = cache.path / cache_key(spec), plain = cache.path / "plain.so";
    run_build(compile_command(backend_for(spec).toolchain(spec), entry / "entry.cpp", entry, plain),
              entry / "entry.cpp", plain);
    EXPECT_EQ(read_file(plain), read_file(entry / "kernel.so"));
  }
}

// A precompiled header the compiler rejects (here truncated): the compile goes on without it, the
// prelude is dropped, and the next process builds it again. `cache clear` removes it.
TEST(Prelude, ABrokenPreludeIsDroppedAndTheBuildGoesOnWithoutIt) {
  const Scratch cache("gmmgen_prelude");
  const ScopedEnv no_pch_dir("GMMGEN_PCH_DIR", "");
  Runtime(private_cache(cache.path)).warmup({parse_text(kSpecs[0])});
  const std::vector<fs::path> made = preludes(cache.path / ".pch");
  ASSERT_EQ(1u, made.size());
  const fs::path gch = made[0] / "prelude.h.gch";
  const uintmax_t bytes = fs::file_size(gch);
  fs::resize_file(gch, bytes / 2);
  {
    Runtime rt(private_cache(cache.path));
    rt.warmup({parse_text(kSpecs[1])});
    EXPECT_EQ(1, rt.stats().compiles);
    EXPECT_FALSE(fs::exists(gch)) << "the broken prelude was kept";
  }
  EXPECT_EQ(DiskCache::State::kValid,
            DiskCache(cache.path).check(cache_key(parse_text(kSpecs[1]))));
  KernelCache::open(cache.path)->clear();
  EXPECT_TRUE(preludes(cache.path / ".pch").empty());
  Runtime rt(private_cache(cache.path));
  rt.warmup({parse_text(kSpecs[0])});
  ASSERT_TRUE(fs::is_regular_file(gch)) << "not built again";
  EXPECT_GT(fs::file_size(gch), bytes * 9 / 10) << "built again, whole";  // (not byte-stable)
  EXPECT_EQ(1u, KernelCache::open(cache.path)->clear());
  EXPECT_TRUE(preludes(cache.path / ".pch").empty());
}

// GMMGEN_PCH=off: kernels compile without a prelude and none is built; another value than a
// boolean is an error naming the variable, raised when the runtime is made.
TEST(Prelude, OffCompilesWithoutOneAndABadValueIsNamed) {
  const Scratch cache("gmmgen_prelude"), pch("gmmgen_prelude_pch");
  const ScopedEnv use_pch("GMMGEN_PCH_DIR", pch.path.string());
  {
    const ScopedEnv off("GMMGEN_PCH", "off");
    Runtime rt(private_cache(cache.path));
    rt.warmup({parse_text(kSpecs[0])});
    EXPECT_EQ(1, rt.stats().compiles);
    EXPECT_TRUE(preludes(pch.path).empty());
    EXPECT_EQ(DiskCache::State::kValid,
              DiskCache(cache.path).check(cache_key(parse_text(kSpecs[0]))));
  }
  const ScopedEnv bad("GMMGEN_PCH", "sometimes");
  try {
    Runtime rt(private_cache(cache.path));
    ADD_FAILURE() << "GMMGEN_PCH=sometimes was taken";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string::npos, std::string(e.what()).find("GMMGEN_PCH=sometimes")) << e.what();
  }
}

}  // namespace
}  // namespace gmmgen
