// Hardening tests (issue 9) of the emitted kernels, the ABI and the runtime's validation: sizes
// are checked (overflow-free) before anything is allocated, outputs may not overlap inputs,
// and the ABI says what the kernels do.
#include <gtest/gtest.h>
#include <link.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "gmmgen/emit.h"
#include "gmmgen/runtime.hpp"
#include "gmmgen/runtime_c.h"
#include "gmmgen/verify/checker.h"
#include "kernels_under_test.h"
#include "scratch.h"

namespace gmmgen::testing {
namespace {

namespace fs = std::filesystem;

// The smoke set's first kernel: gmm f32, k=37, n=29, g=5, tm=8 (tests/specs/smoke_kernels.json).
const KernelUnderTest& gmm_f32() {
  return find_kernel([](const KernelSpec& s) {
    return s.op == Op::kGmm && s.lhs == DType::kF32 && s.rhs == DType::kF32 &&
           s.out == DType::kF32 && s.out_mode == OutMode::kPlain && s.g_local == s.g &&
           !s.transpose_rhs && s.k == 37 && s.n == 29;
  });
}
const KernelUnderTest& gmm_f32_accumulate() {
  return find_kernel([](const KernelSpec& s) {
    return s.op == Op::kGmm && s.out_mode == OutMode::kAccumulate && s.lhs == DType::kF32 &&
           s.out == DType::kF32;
  });
}
const KernelUnderTest& tgmm_f32() {
  return find_kernel([](const KernelSpec& s) {
    return s.op == Op::kTgmm && s.lhs == DType::kF32 && s.rhs == DType::kF32 &&
           s.out == DType::kF32 && s.out_mode == OutMode::kPlain &&
           s.lhs_layout == LhsLayout::kMK && !s.transpose_rhs;
  });
}

// Resident bytes of this process (/proc/self/statm, second field, in pages).
int64_t resident_bytes() {
  std::ifstream in("/proc/self/statm");
  int64_t size = 0, resident = 0;
  in >> size >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}
constexpr int64_t kFewMB = int64_t{16} << 20;

const int64_t kHugeM[] = {int64_t{1} << 35, int64_t{1} << 36, int64_t{1} << 40, INT64_MAX};

// Valid packed f32 arguments for a kernel (gmm or tgmm) with m rows, half of them in group 0.
struct Call {
  const KernelUnderTest& k;
  int64_t m;
  std::vector<float> lhs, rhs, out, existing;
  std::vector<int32_t> sizes;
  gmmgen_args a{};

  explicit Call(const KernelUnderTest& kernel, int64_t rows = 16) : k(kernel), m(rows) {
    const bool tgmm = k.spec.op == Op::kTgmm;
    const int64_t weights = k.spec.g_local * k.spec.k * k.spec.n;
    lhs.assign(m * k.spec.k, 0.5f);
    rhs.assign(tgmm ? m * k.spec.n : weights, 0.25f);
    out.assign(tgmm ? weights : m * k.spec.n, 7.0f);
    existing.assign(out.size(), 1.0f);
    sizes.assign(k.spec.g, 0);
    sizes[0] = int32_t(m / 2);
    a.abi_version = GMMGEN_ABI_VERSION;
    a.m = m;
    a.lhs = lhs.data();
    a.rhs = rhs.data();
    a.group_sizes = sizes.data();
    a.out = out.data();
    if (k.spec.out_mode != OutMode::kPlain) a.existing_out = existing.data();
  }

  // The one-shot entry rejects the call with `code` and a message holding `needle`, and no
  // buffer changed (outputs may alias inputs here, so every buffer is compared).
  void expect_rejected(const std::string& needle, int code = GMMGEN_ERR_INVALID_ARGUMENT) {
    const auto l = lhs, r = rhs, o = out, e = existing;
    const auto s = sizes;
    char err[512] = {0};
    EXPECT_EQ(code, k.fns->run(&a, err, sizeof err)) << err;
    EXPECT_NE(std::string(err).find(needle), std::string::npos)
        << "message '" << err << "' does not mention '" << needle << "'";
    EXPECT_TRUE(l == lhs && r == rhs && o == out && e == existing && s == sizes)
        << "a buffer was written";
  }
};

// ---- Item 4: sizes validated before allocation ------------------------------------------------

// A kernel keeps its per-thread scratch on the heap and only a pointer to it in thread-local
// storage: the program's static TLS block, which glibc carves out of every thread's stack, stays
// small however many kernels are compiled in (with the scratch itself there, this program's few
// hundred kernels held 8.5 MiB of it, and threads with 8 MiB stacks crashed).
TEST(HardeningKernels, CompiledInKernelsKeepScratchOutOfStaticTls) {
  size_t tls = 0;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        if (info->dlpi_name == nullptr || info->dlpi_name[0] != '\0') return 0;  // the program
        for (int i = 0; i < info->dlpi_phnum; ++i)
          if (info->dlpi_phdr[i].p_type == PT_TLS)
            *static_cast<size_t*>(data) = info->dlpi_phdr[i].p_memsz;
        return 1;
      },
      &tls);
  const size_t kernels = all_kernels().size();
  ASSERT_GT(kernels, 10u);
  EXPECT_LT(tls, 64 * kernels + 16384)
      << "static TLS of " << tls << " bytes for " << kernels << " kernels";
  // And a compiled-in kernel runs on a thread whose stack is half a megabyte.
  const KernelUnderTest& k = gmm_f32();
  CheckCase c;
  c.m = 50;
  c.group_sizes.assign(size_t(k.spec.g), 9);
  c.seed = 3;
  CheckResult r;
  pthread_attr_t attr;
  ASSERT_EQ(0, pthread_attr_init(&attr));
  ASSERT_EQ(0, pthread_attr_setstacksize(&attr, 512 * 1024));
  struct Job {
    const KernelUnderTest* k;
    const CheckCase* c;
    CheckResult* r;
  } job{&k, &c, &r};
  pthread_t thread;
  ASSERT_EQ(0, pthread_create(
                   &thread, &attr,
                   [](void* p) -> void* {
                     const Job& j = *static_cast<Job*>(p);
                     *j.r = check_kernel(*j.k->fns, j.k->spec, *j.c);
                     return nullptr;
                   },
                   &job));
  pthread_join(thread, nullptr);
  pthread_attr_destroy(&attr);
  EXPECT_TRUE(r.ok) << r.failure;
}

TEST(HardeningKernels, WorkspaceBytesRejectsMOutsideTheAbiLimit) {
  for (const auto& k : all_kernels()) {
    SCOPED_TRACE(k.name);
    for (int64_t m : {int64_t{-1}, INT64_MIN, int64_t{1} << 31, int64_t{1} << 35, int64_t{1} << 36,
                      int64_t{1} << 40, INT64_MAX})
      EXPECT_EQ(-1, k.fns->workspace_bytes(m)) << "m=" << m;
    EXPECT_GT(k.fns->workspace_bytes(GMMGEN_MAX_M), 0);
    EXPECT_GT(k.fns->workspace_bytes(0), 0);
  }
}

// Runtime with the test set compiled in and compiling disabled: every call is served by a
// registered kernel or rejected.
class HardeningRuntime : public ::testing::Test {
 protected:
  void SetUp() override {
    RuntimeOptions o;
    o.cache_dir = dir_.path / "cache";
    o.num_threads = 2;
    o.jit = false;
    rt_ = std::make_unique<Runtime>(o);
    rt_->register_kernels(smoke_kernels_kernels, smoke_kernels_kernel_count);
  }
  void TearDown() override { rt_.reset(); }
  Scratch dir_{"gmmgen_hk"};
  std::unique_ptr<Runtime> rt_;
};

TEST_F(HardeningRuntime, HugeMIsRejectedBeforeAnyAllocation) {
  const auto& k = gmm_f32();
  Call c(k);
  const int64_t before = resident_bytes();
  for (int64_t m : kHugeM) {
    SCOPED_TRACE("M=" + std::to_string(m));
    // The C++ API: lhs [M, K], out [M, N] (the buffers are small: nothing may be read).
    try {
      rt_->gmm(TensorView::matrix(c.lhs.data(), DType::kF32, m, k.spec.k),
               TensorView::batch(c.rhs.data(), DType::kF32, k.spec.g, k.spec.k, k.spec.n), c.sizes,
               TensorView::matrix(c.out.data(), DType::kF32, m, k.spec.n));
      ADD_FAILURE() << "accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("must be in [0, 2^31)"), std::string::npos) << e.what();
    }
    try {
      rt_->tgmm(TensorView::matrix(c.lhs.data(), DType::kF32, m, k.spec.k),
                TensorView::matrix(c.rhs.data(), DType::kF32, m, k.spec.n), c.sizes,
                TensorView::batch(c.out.data(), DType::kF32, k.spec.g, k.spec.k, k.spec.n));
      ADD_FAILURE() << "accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("must be in [0, 2^31)"), std::string::npos) << e.what();
    }
    // A kernel called through the runtime directly.
    gmmgen_args a = c.a;
    a.m = m;
    EXPECT_THROW(rt_->run(*k.fns, a), InvalidArgument);
    EXPECT_TRUE(std::all_of(c.out.begin(), c.out.end(), [](float v) { return v == 7.0f; }));
  }
  EXPECT_LT(resident_bytes() - before, kFewMB);
}

// A call with a valid but large m that the kernel rejects for another reason (a negative group
// size) grows no workspace: 2^28 rows need 256 MiB of metadata with tm=8.
TEST_F(HardeningRuntime, RejectedCallKeepsNoWorkspace) {
  const auto& k = gmm_f32();
  Call c(k);
  c.sizes[1] = -1;
  gmmgen_args a = c.a;
  a.m = int64_t{1} << 28;
  ASSERT_GT(k.fns->workspace_bytes(a.m), int64_t{128} << 20);
  const int64_t before = resident_bytes();
  try {
    rt_->run(*k.fns, a);
    ADD_FAILURE() << "accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("group_sizes[1]=-1 is negative"), std::string::npos)
        << e.what();
  }
  EXPECT_LT(resident_bytes() - before, kFewMB);
}

TEST_F(HardeningRuntime, HugeLeadingDimensionIsRejected) {
  const auto& k = gmm_f32();
  Call c(k);
  try {
    rt_->gmm(TensorView::matrix(c.lhs.data(), DType::kF32, 16, k.spec.k, INT64_MAX / 2),
             TensorView::batch(c.rhs.data(), DType::kF32, k.spec.g, k.spec.k, k.spec.n), c.sizes,
             TensorView::matrix(c.out.data(), DType::kF32, 16, k.spec.n));
    ADD_FAILURE() << "accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("lhs [16, 37] with ld="), std::string::npos) << e.what();
  }
  // The kernel itself: the extent of lhs overflows.
  c.a.lhs_ld = INT64_MAX / 2;
  c.expect_rejected("lhs_ld=4611686018427387903 makes lhs span more than the address space");
}

TEST(HardeningKernels, HugeMIsRejectedByTheCApi) {
  const Scratch dir("gmmgen_hkc");
  setenv("GMMGEN_CACHE_DIR", (dir.path / "cache").c_str(), 1);
  setenv("GMMGEN_DISABLE_JIT", "1", 1);
  char err[512] = {0};
  gmmgen_runtime* rt = nullptr;
  ASSERT_EQ(GMMGEN_OK, gmmgen_runtime_create(&rt, err, sizeof err)) << err;
  ASSERT_EQ(GMMGEN_OK, gmmgen_runtime_register(rt, smoke_kernels_kernels,
                                               smoke_kernels_kernel_count, err, sizeof err))
      << err;
  const auto& k = gmm_f32();
  Call c(k);
  const int64_t before = resident_bytes();
  for (int64_t m : kHugeM) {
    SCOPED_TRACE("M=" + std::to_string(m));
    const gmmgen_tensor lhs{c.lhs.data(), GMMGEN_DTYPE_F32, 2, {m, k.spec.k, 0}, 0};
    const gmmgen_tensor rhs{c.rhs.data(), GMMGEN_DTYPE_F32, 3, {k.spec.g, k.spec.k, k.spec.n}, 0};
    const gmmgen_tensor out{c.out.data(), GMMGEN_DTYPE_F32, 2, {m, k.spec.n, 0}, 0};
    EXPECT_EQ(GMMGEN_ERR_INVALID_ARGUMENT,
              gmmgen_runtime_gmm(rt, &lhs, &rhs, c.sizes.data(), int32_t(c.sizes.size()), &out,
                                 nullptr, err, sizeof err))
        << err;
    EXPECT_NE(std::string(err).find("must be in [0, 2^31)"), std::string::npos) << err;
  }
  EXPECT_TRUE(std::all_of(c.out.begin(), c.out.end(), [](float v) { return v == 7.0f; }));
  EXPECT_LT(resident_bytes() - before, kFewMB);
  gmmgen_runtime_destroy(rt);
  unsetenv("GMMGEN_DISABLE_JIT");
  unsetenv("GMMGEN_CACHE_DIR");
}

// ---- Item 7: outputs must not overlap inputs --------------------------------------------------

// Points out into `input` (lhs, rhs or group_sizes) at element `shift`. The operands share one
// buffer with room for out after them, so that even a kernel that accepted the call would write
// inside it; the call is rejected and the buffer unchanged.
void expect_out_overlap_rejected(const KernelUnderTest& k, const std::string& input,
                                 int64_t shift) {
  SCOPED_TRACE(k.name + ": out overlaps " + input);
  Call c(k);
  const size_t nl = c.lhs.size(), nr = c.rhs.size(), ns = c.sizes.size();
  std::vector<float> arena(nl + nr + ns + c.out.size(), 0.5f);
  float* lhs = arena.data();
  float* rhs = lhs + nl;
  float* sizes = rhs + nr;
  std::memcpy(sizes, c.sizes.data(), ns * sizeof(int32_t));
  c.a.lhs = lhs;
  c.a.rhs = rhs;
  c.a.group_sizes = reinterpret_cast<const int32_t*>(sizes);
  c.a.out = (input == "lhs" ? lhs : input == "rhs" ? rhs : sizes) + shift;
  const std::vector<float> before = arena;
  char err[512] = {0};
  EXPECT_EQ(GMMGEN_ERR_INVALID_ARGUMENT, k.fns->run(&c.a, err, sizeof err)) << err;
  EXPECT_NE(std::string(err).find("out overlaps " + input), std::string::npos) << err;
  EXPECT_TRUE(before == arena) << "a buffer was written";
}

TEST(HardeningKernels, OutputOverlappingAnInputIsRejected) {
  const auto& k = gmm_f32();
  const Call c(k);
  expect_out_overlap_rejected(k, "lhs", 3);
  expect_out_overlap_rejected(k, "rhs", int64_t(c.rhs.size()) - 1);  // one shared element
  expect_out_overlap_rejected(k, "group_sizes", 1);
  const auto& t = tgmm_f32();
  const Call ct(t);
  expect_out_overlap_rejected(t, "lhs", int64_t(ct.lhs.size()) - 2);
  expect_out_overlap_rejected(t, "rhs", 0);
  expect_out_overlap_rejected(t, "group_sizes", 0);
  {  // out ends right where lhs starts: adjacent, not overlapping
    Call a(k);
    std::vector<float> both(a.out.size() + a.lhs.size(), 0.5f);
    a.a.out = both.data();
    a.a.lhs = both.data() + a.out.size();
    char err[512];
    EXPECT_EQ(GMMGEN_OK, k.fns->run(&a.a, err, sizeof err)) << err;
  }
}

TEST(HardeningKernels, ExistingOutMayBeOutButNotOverlapIt) {
  const auto& k = gmm_f32_accumulate();
  {
    Call c(k);
    c.a.existing_out = c.out.data();  // in place: documented
    char err[512];
    EXPECT_EQ(GMMGEN_OK, k.fns->run(&c.a, err, sizeof err)) << err;
  }
  {
    Call c(k);
    c.out.resize(c.out.size() + k.spec.n, 7.0f);
    c.a.out = c.out.data();
    c.a.existing_out = c.out.data() + k.spec.n;  // one row later: partial overlap
    c.expect_rejected("out overlaps existing_out");
  }
}

// ---- Item 10: the ABI says what the kernels do ------------------------------------------------

TEST(HardeningKernels, InfoCarriesTheDtypesScalesAndAbiVersion4) {
  static_assert(GMMGEN_ABI_VERSION == 4, "ABI 4: scale pointers in gmmgen_args");
  for (const auto& k : all_kernels()) {
    const gmmgen_kernel_info* i = k.fns->info();
    EXPECT_EQ(4u, i->abi_version) << k.name;
    EXPECT_EQ(int(k.spec.lhs), i->lhs_dtype) << k.name;
    EXPECT_EQ(int(k.spec.rhs), i->rhs_dtype) << k.name;
    EXPECT_EQ(int(k.spec.out), i->out_dtype) << k.name;
    EXPECT_EQ(int(k.spec.lhs_quant.kind), i->lhs_quant) << k.name;
    EXPECT_EQ(int(k.spec.rhs_quant.kind), i->rhs_quant) << k.name;
    EXPECT_EQ(k.spec.lhs_quant.block_k, i->lhs_block_k) << k.name;
    EXPECT_EQ(k.spec.rhs_quant.block_k, i->rhs_block_k) << k.name;
    EXPECT_EQ(k.spec.rhs_quant.block_n, i->rhs_block_n) << k.name;
  }
}

TEST(HardeningKernels, MisalignedWorkspaceSaysSo) {
  static_assert(GMMGEN_WORKSPACE_ALIGNMENT == 64, "the documented alignment");
  const auto& k = gmm_f32();
  Call c(k);
  const int64_t bytes = k.fns->workspace_bytes(c.m);
  std::vector<char> storage(bytes + 2 * GMMGEN_WORKSPACE_ALIGNMENT);
  char* ws = storage.data() + (64 - reinterpret_cast<uintptr_t>(storage.data()) % 64) % 64;
  char err[512];
  int64_t items = 0;
  EXPECT_EQ(GMMGEN_ERR_WORKSPACE, k.fns->plan(&c.a, ws + 8, bytes, &items, err, sizeof err));
  EXPECT_EQ(0, std::string(err).find("workspace must be 64-byte aligned [")) << err;
  EXPECT_EQ(GMMGEN_ERR_WORKSPACE, k.fns->plan(&c.a, ws, bytes - 1, &items, err, sizeof err));
  EXPECT_EQ(0, std::string(err).find("workspace_bytes=" + std::to_string(bytes - 1) +
                                     " is below the " + std::to_string(bytes) + " bytes"))
      << err;
  // A NULL workspace checks the arguments only.
  EXPECT_EQ(GMMGEN_ERR_WORKSPACE, k.fns->plan(&c.a, nullptr, 0, &items, err, sizeof err));
  c.a.m = -1;
  EXPECT_EQ(GMMGEN_ERR_INVALID_ARGUMENT, k.fns->plan(&c.a, nullptr, 0, &items, err, sizeof err));
}

TEST(HardeningKernels, GmmWithoutRowsNeedsNoOperands) {
  const auto& k = gmm_f32();
  Call c(k, 0);
  c.a.lhs = c.a.rhs = nullptr;
  c.a.out = nullptr;
  char err[512];
  EXPECT_EQ(GMMGEN_OK, k.fns->run(&c.a, err, sizeof err)) << err;
}

TEST(HardeningKernels, RunItemsRefusesAWorkspaceItDidNotPlan) {
  const auto& k = gmm_f32();
  Call c(k);
  const int64_t bytes = k.fns->workspace_bytes(c.m);
  std::vector<int64_t> storage(bytes / 8 + 16, 0);
  int64_t* ws = storage.data() + (64 - reinterpret_cast<uintptr_t>(storage.data()) % 64) % 64 / 8;
  ws[0] = c.m;  // looks like a plan for these args, with no items: still not a plan
  EXPECT_EQ(GMMGEN_ERR_INVALID_ARGUMENT, k.fns->run_items(&c.a, ws, 0, 0));
  char err[512];
  int64_t items = 0;
  ASSERT_EQ(GMMGEN_OK, k.fns->plan(&c.a, ws, bytes, &items, err, sizeof err)) << err;
  EXPECT_EQ(GMMGEN_ERR_INVALID_ARGUMENT, k.fns->run_items(&c.a, ws, 1, 0));
  EXPECT_EQ(GMMGEN_ERR_INVALID_ARGUMENT, k.fns->run_items(&c.a, ws, -1, items));
  EXPECT_EQ(GMMGEN_ERR_INVALID_ARGUMENT, k.fns->run_items(&c.a, ws, 0, items + 1));
  EXPECT_EQ(GMMGEN_ERR_INVALID_ARGUMENT, k.fns->run_items(&c.a, nullptr, 0, items));
  // Another kernel's plan is not this kernel's.
  const auto& other = gmm_f32_accumulate();
  EXPECT_EQ(GMMGEN_ERR_INVALID_ARGUMENT, other.fns->run_items(&c.a, ws, 0, 0));
  EXPECT_EQ(GMMGEN_OK, k.fns->run_items(&c.a, ws, 0, items));
}

TEST(HardeningKernels, MessagesPutTheRuleBeforeTheKernelName) {
  const auto& k = gmm_f32();
  Call c(k);
  c.a.m = -1;
  char small[32];
  EXPECT_EQ(GMMGEN_ERR_INVALID_ARGUMENT, k.fns->run(&c.a, small, sizeof small));
  EXPECT_EQ("m=-1 must be in [0, 2^31) [gmm_", std::string(small));
  char full[512];
  k.fns->run(&c.a, full, sizeof full);
  EXPECT_EQ("m=-1 must be in [0, 2^31) [" + k.name + "]", std::string(full));
}

// Tiles up to 8192 are valid for any problem: tk and tn are clamped to K and N before the
// scratch limit applies (the kernel runs the clamped tiles; its info reports the spec's).
TEST(HardeningKernels, LargeTilesAreClampedToTheProblem) {
  for (const char* text : {"op=gmm,lhs=f32,rhs=f32,out=f32,k=7,n=5,g=2,tm=8192,tk=8192,tn=8192",
                           "op=tgmm,lhs=f32,rhs=f32,out=f32,k=7,n=5,g=2,tm=8192,tk=8192,tn=8192"}) {
    SCOPED_TRACE(text);
    const KernelSpec s = parse_text(text);
    EXPECT_LE(scratch_bytes(s), kMaxScratchBytes);
    EXPECT_EQ(7, run_tiling(s).tk);
    EXPECT_EQ(5, run_tiling(s).tn);
    EXPECT_EQ(8192, run_tiling(s).tm);
    EmittedKernel e;
    ASSERT_NO_THROW(e = emit_kernel(s));
    std::string source;
    for (const auto& f : e.files) source += f.content;
    EXPECT_NE(source.find("constexpr int64_t TK = 7;"), std::string::npos);
    EXPECT_NE(source.find("constexpr int64_t TN = 5;"), std::string::npos);
    EXPECT_NE(source.find("i.tk = 8192;"), std::string::npos);  // info: the spec's tiling
  }
}

}  // namespace
}  // namespace gmmgen::testing
