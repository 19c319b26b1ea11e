// Runtime backends (runtime/src/backend/): one per target the runtime runs, agreeing with the
// generator's target capabilities; the C++ backend's toolchain, loader and executor used through
// the interface alone, as the Runtime uses them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <vector>

#include "backend/backend.h"
#include "gmmgen/naming.h"
#include "gmmgen/runtime.hpp"
#include "gmmgen/target.h"
#include "runtime_fixtures.h"
#include "scratch.h"

namespace gmmgen {
namespace {

namespace fs = std::filesystem;
using testing::Scratch;

TEST(Backends, EveryTargetTheRuntimeRunsHasOneAndNoOtherHas) {
  for (const Target* t : targets())
    EXPECT_EQ(t->caps().runtime_runs, backend_of(t->kind()) != nullptr) << to_string(t->kind());
}

TEST(Backends, AKernelOfATargetWithoutOneIsRefusedNamingTheTargetBeforeAnythingIsWritten) {
  const Scratch dir("gmmgen_backends");
  RuntimeOptions o;
  o.cache_dir = dir.path / "cache";
  Runtime rt(o);
  const KernelSpec s = parse_text("op=gmm,lhs=f32,rhs=f32,out=f32,k=64,n=64,g=2,target=pallas");
  try {
    rt.kernel(s);
    FAIL() << "accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("target=pallas"), std::string::npos) << e.what();
  }
  EXPECT_THROW(cache_key(s), InvalidArgument);
  EXPECT_FALSE(fs::exists(o.cache_dir));
}

// Sources written to a folder, built by the backend's command, the artifact's key read back,
// loaded, planned and executed on a pool of 2 threads: a ragged f32 gmm against a float64 loop,
// its output poisoned first.
TEST(Backends, CppBackendBuildsLoadsAndRunsAKernelThroughTheInterface) {
  const KernelSpec spec =
      parse_text("op=gmm,lhs=f32,rhs=f32,out=f32,k=20,n=9,g=3,tm=8,tk=8,tn=16,isa=generic");
  const Backend& backend = backend_for(spec);
  const Scratch dir("gmmgen_backends");
  const std::string key = cache_key(spec);
  const JitSources src = backend.sources(spec, key);
  for (const auto& [rel, content] : src.files) {
    fs::create_directories((dir.path / rel).parent_path());
    std::ofstream(dir.path / rel) << content;
  }
  const fs::path artifact = dir.path / "kernel.so";
  run_build(
      backend.build_command(backend.toolchain(spec), dir.path / src.main, dir.path, artifact, {}),
      dir.path / src.main, artifact);
  EXPECT_EQ(key, backend.artifact_key(artifact));
  EXPECT_EQ(kernel_name(spec), src.metadata["name"]);
  EXPECT_THROW(backend.load(artifact, key + "0", spec), CacheError);  // reports another key
  const LoadedKernel k = backend.load(artifact, key, spec);
  ASSERT_NE(k.holder, nullptr);

  const int64_t M = 37, K = 20, N = 9;
  const std::vector<int32_t> sizes{10, 0, 20};  // an empty group; rows 30..36 in none
  std::vector<float> lhs(M * K), rhs(3 * K * N), out(M * N, std::nanf(""));
  for (size_t i = 0; i < lhs.size(); ++i) lhs[i] = float(int(i * 7 % 13) - 6) / 8;
  for (size_t i = 0; i < rhs.size(); ++i) rhs[i] = float(int(i * 5 % 11) - 5) / 4;
  gmmgen_args a{};
  a.abi_version = GMMGEN_ABI_VERSION;
  a.m = M, a.lhs = lhs.data(), a.rhs = rhs.data(), a.out = out.data();
  a.group_sizes = sizes.data();
  std::vector<unsigned char> ws(size_t(k.fns.workspace_bytes(M)) + GMMGEN_WORKSPACE_ALIGNMENT);
  void* aligned = ws.data() + (GMMGEN_WORKSPACE_ALIGNMENT - reinterpret_cast<uintptr_t>(ws.data()) %
                                                                GMMGEN_WORKSPACE_ALIGNMENT) %
                                  GMMGEN_WORKSPACE_ALIGNMENT;
  char err[256] = {0};
  int64_t items = 0;
  ASSERT_EQ(GMMGEN_OK, k.fns.plan(&a, aligned, k.fns.workspace_bytes(M), &items, err, sizeof err))
      << err;
  ThreadPool pool(2);
  ExecResources resources{pool};
  backend.execute({&k.fns, &a, aligned, items}, resources);

  std::vector<int64_t> group_of(M, -1);
  for (int64_t g = 0, r = 0; g < 3; ++g)
    for (int32_t i = 0; i < sizes[size_t(g)]; ++i) group_of[size_t(r++)] = g;
  for (int64_t r = 0; r < M; ++r)
    for (int64_t n = 0; n < N; ++n) {
      double want = 0;  // rows in no group: zero
      if (const int64_t g = group_of[size_t(r)]; g >= 0)
        for (int64_t kk = 0; kk < K; ++kk)
          want += double(lhs[size_t(r * K + kk)]) * rhs[size_t((g * K + kk) * N + n)];
      // Multiples of 1/32 summed exactly in any order.
      EXPECT_EQ(float(want), out[size_t(r * N + n)]) << "row " << r << " column " << n;
    }
}

}  // namespace
}  // namespace gmmgen
