// Bad arguments are rejected with a message naming them, and the output is left untouched.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <string>

#include "kernels_under_test.h"

namespace gmmgen::testing {
namespace {

// Valid packed f32 arguments for the kernel (gmm or tgmm), m rows, half of them in group 0.
struct Fixture {
  const KernelUnderTest& k;
  int64_t m;
  std::vector<float> lhs, rhs;  // f32 kernels only
  std::vector<float> out, existing;
  std::vector<int32_t> sizes;
  gmmgen_args a{};

  explicit Fixture(const KernelUnderTest& kernel, int64_t rows = 16) : k(kernel), m(rows) {
    const bool tgmm = k.spec.op == Op::kTgmm;
    const int64_t weights = k.spec.g_local * k.spec.k * k.spec.n;
    lhs.assign(m * k.spec.k, 0.5f);  // [m, K] or [K, m]
    rhs.assign(tgmm ? m * k.spec.n : weights, 0.25f);
    out.assign(tgmm ? weights : m * k.spec.n, 0.0f);
    std::memset(out.data(), 0x7f, out.size() * sizeof(float));  // poison
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

  // Calls the one-shot entry and checks the result code, the message and the untouched output.
  void expect_rejected(int code, const std::string& needle) {
    const std::vector<float> before = out;
    char err[512] = {0};
    EXPECT_EQ(code, k.fns->run(&a, err, sizeof err)) << err;
    EXPECT_NE(std::string(err).find(needle), std::string::npos)
        << "message '" << err << "' does not mention '" << needle << "'";
    EXPECT_EQ(0, std::memcmp(before.data(), out.data(), out.size() * sizeof(float)))
        << "output was written";
  }
};

bool f32_plain(const KernelSpec& s) {
  return s.op == Op::kGmm && s.lhs == DType::kF32 && s.rhs == DType::kF32 && s.out == DType::kF32 &&
         s.out_mode == OutMode::kPlain && s.g_local < s.g;
}

TEST(BadInput, EveryKindIsRejectedAndOutputUntouched) {
  const auto& k = find_kernel(f32_plain);
  {
    Fixture f(k);
    char err[256];
    EXPECT_EQ(GMMGEN_OK, k.fns->run(&f.a, err, sizeof err)) << err;  // the baseline is valid
  }
  {
    Fixture f(k);
    f.sizes[1] = -3;
    f.expect_rejected(GMMGEN_ERR_INVALID_ARGUMENT, "group_sizes[1]=-3 is negative");
  }
  {
    Fixture f(k);
    f.sizes[1] = int32_t(f.m);
    f.expect_rejected(GMMGEN_ERR_INVALID_ARGUMENT, "sum(group_sizes)");
  }
  {
    Fixture f(k);
    f.a.group_offset = -1;
    f.expect_rejected(GMMGEN_ERR_INVALID_ARGUMENT, "group_offset=-1");
  }
  {
    Fixture f(k);
    f.a.group_offset = int32_t(k.spec.g - k.spec.g_local + 1);
    f.expect_rejected(GMMGEN_ERR_INVALID_ARGUMENT, "group_offset=");
  }
  {
    Fixture f(k);
    f.a.lhs = nullptr;
    f.expect_rejected(GMMGEN_ERR_INVALID_ARGUMENT, "lhs is NULL");
  }
  {
    Fixture f(k);
    f.a.rhs = nullptr;
    f.expect_rejected(GMMGEN_ERR_INVALID_ARGUMENT, "rhs is NULL");
  }
  {
    Fixture f(k);
    f.a.group_sizes = nullptr;
    f.expect_rejected(GMMGEN_ERR_INVALID_ARGUMENT, "group_sizes is NULL");
  }
  {
    Fixture f(k);
    f.a.lhs = reinterpret_cast<const char*>(f.lhs.data()) + 1;
    f.expect_rejected(GMMGEN_ERR_INVALID_ARGUMENT, "lhs is not 4-byte aligned");
  }
  {
    Fixture f(k);
    f.a.rhs = reinterpret_cast<const char*>(f.rhs.data()) + 2;
    f.expect_rejected(GMMGEN_ERR_INVALID_ARGUMENT, "rhs is not 4-byte aligned");
  }
  {
    Fixture f(k);
    f.a.m = -1;
    f.expect_rejected(GMMGEN_ERR_INVALID_ARGUMENT, "m=-1");
  }
  {
    Fixture f(k);
    f.a.lhs_ld = k.spec.k - 1;
    f.expect_rejected(GMMGEN_ERR_INVALID_ARGUMENT, "lhs_ld=");
  }
  {
    Fixture f(k);
    f.a.rhs_ld = 1;
    f.expect_rejected(GMMGEN_ERR_INVALID_ARGUMENT, "rhs_ld=1");
  }
  {
    Fixture f(k);
    f.a.out_ld = 1;
    f.expect_rejected(GMMGEN_ERR_INVALID_ARGUMENT, "out_ld=1");
  }
  {
    Fixture f(k);
    f.a.existing_out = f.existing.data();
    f.expect_rejected(GMMGEN_ERR_INVALID_ARGUMENT, "existing_out must be NULL");
  }
  {
    Fixture f(k);
    f.a.abi_version = 99;
    f.expect_rejected(GMMGEN_ERR_ABI, "abi_version=99");
  }
  {
    Fixture f(k);
    f.a.reserved0 = 1;
    f.expect_rejected(GMMGEN_ERR_INVALID_ARGUMENT, "reserved0");
  }
}

TEST(BadInput, ExistingModesNeedExistingOut) {
  const auto& k = find_kernel([](const KernelSpec& s) {
    return s.op == Op::kGmm && s.out_mode == OutMode::kAccumulate && s.lhs == DType::kF32 &&
           s.out == DType::kF32;
  });
  Fixture f(k);
  f.a.existing_out = nullptr;
  f.expect_rejected(GMMGEN_ERR_INVALID_ARGUMENT, "existing_out is NULL");
}

TEST(BadInput, PlanChecksWorkspaceAndRunItemsChecksRange) {
  const auto& k = find_kernel(f32_plain);
  Fixture f(k);
  char err[256];
  int64_t items = 0;
  alignas(64) static char small[64];
  EXPECT_EQ(GMMGEN_ERR_WORKSPACE, k.fns->plan(&f.a, small, sizeof small, &items, err, sizeof err));
  std::vector<char> ws_storage(k.fns->workspace_bytes(f.m) + 64);
  void* ws = ws_storage.data() + (64 - reinterpret_cast<uintptr_t>(ws_storage.data()) % 64) % 64;
  ASSERT_EQ(GMMGEN_OK, k.fns->plan(&f.a, ws, k.fns->workspace_bytes(f.m), &items, err, sizeof err));
  EXPECT_EQ(GMMGEN_ERR_INVALID_ARGUMENT, k.fns->run_items(&f.a, ws, 0, items + 1));
  EXPECT_EQ(GMMGEN_ERR_INVALID_ARGUMENT, k.fns->run_items(&f.a, ws, -1, 1));
  EXPECT_EQ(GMMGEN_OK, k.fns->run_items(&f.a, ws, 0, items));
  EXPECT_EQ(-1, k.fns->workspace_bytes(-1));
}

// tgmm kernels of the test set, f32 throughout: plain [M, K] lhs and [G_local, K, N] out, and
// accumulate with lhs [K, M] and out [G_local, N, K].
bool tgmm_f32_plain(const KernelSpec& s) {
  return s.op == Op::kTgmm && s.lhs == DType::kF32 && s.rhs == DType::kF32 &&
         s.out == DType::kF32 && s.out_mode == OutMode::kPlain && s.g_local < s.g &&
         s.lhs_layout == LhsLayout::kMK && !s.transpose_rhs;
}
bool tgmm_f32_km_accumulate(const KernelSpec& s) {
  return s.op == Op::kTgmm && s.lhs == DType::kF32 && s.rhs == DType::kF32 &&
         s.out == DType::kF32 && s.out_mode == OutMode::kAccumulate &&
         s.lhs_layout == LhsLayout::kKM && s.transpose_rhs;
}

TEST(BadInput, TgmmEveryKindIsRejectedAndOutputUntouched) {
  const auto& k = find_kernel(tgmm_f32_plain);
  {
    Fixture f(k);
    char err[256];
    EXPECT_EQ(GMMGEN_OK, k.fns->run(&f.a, err, sizeof err)) << err;  // the baseline is valid
  }
  {
    Fixture f(k);
    f.sizes[2] = -1;
    f.expect_rejected(GMMGEN_ERR_INVALID_ARGUMENT, "group_sizes[2]=-1 is negative");
  }
  {
    Fixture f(k);
    f.sizes.back() = int32_t(f.m);
    f.expect_rejected(GMMGEN_ERR_INVALID_ARGUMENT, "sum(group_sizes)=24 exceeds m=16");
  }
  {
    Fixture f(k);
    f.a.group_offset = -1;
    f.expect_rejected(GMMGEN_ERR_INVALID_ARGUMENT, "group_offset=-1 must be in [0, G - G_local]");
  }
  {
    Fixture f(k);
    f.a.group_offset = int32_t(k.spec.g - k.spec.g_local + 1);
    f.expect_rejected(GMMGEN_ERR_INVALID_ARGUMENT,
                      "group_offset=" + std::to_string(k.spec.g - k.spec.g_local + 1));
  }
  {
    Fixture f(k);
    f.a.group_sizes = nullptr;
    f.expect_rejected(GMMGEN_ERR_INVALID_ARGUMENT, "group_sizes is NULL");
  }
  {
    Fixture f(k);
    f.a.group_sizes =
        reinterpret_cast<const int32_t*>(reinterpret_cast<const char*>(f.sizes.data()) + 2);
    f.expect_rejected(GMMGEN_ERR_INVALID_ARGUMENT, "group_sizes is not 4-byte aligned");
  }
  {
    Fixture f(k);
    f.a.lhs = nullptr;
    f.expect_rejected(GMMGEN_ERR_INVALID_ARGUMENT, "lhs is NULL");
  }
  {
    Fixture f(k);
    f.a.rhs = nullptr;
    f.expect_rejected(GMMGEN_ERR_INVALID_ARGUMENT, "rhs is NULL");
  }
  {
    Fixture f(k);
    f.a.out = nullptr;
    f.expect_rejected(GMMGEN_ERR_INVALID_ARGUMENT, "out is NULL");
  }
  {  // out [G_local, K, N] is written whatever m is: it is needed even without rows
    Fixture f(k);
    f.a.m = 0;
    std::fill(f.sizes.begin(), f.sizes.end(), 0);
    f.a.out = nullptr;
    f.expect_rejected(GMMGEN_ERR_INVALID_ARGUMENT, "out is NULL");
  }
  {
    Fixture f(k);
    f.a.lhs = reinterpret_cast<const char*>(f.lhs.data()) + 1;
    f.expect_rejected(GMMGEN_ERR_INVALID_ARGUMENT, "lhs is not 4-byte aligned");
  }
  {
    Fixture f(k);
    f.a.rhs = reinterpret_cast<const char*>(f.rhs.data()) + 2;
    f.expect_rejected(GMMGEN_ERR_INVALID_ARGUMENT, "rhs is not 4-byte aligned");
  }
  {
    Fixture f(k);
    f.a.out = reinterpret_cast<char*>(f.out.data()) + 2;
    f.expect_rejected(GMMGEN_ERR_INVALID_ARGUMENT, "out is not 4-byte aligned");
  }
  {
    Fixture f(k);
    f.a.m = -1;
    f.expect_rejected(GMMGEN_ERR_INVALID_ARGUMENT, "m=-1 must be in [0, 2^31)");
  }
  {
    Fixture f(k);
    f.a.m = int64_t(1) << 31;
    f.expect_rejected(GMMGEN_ERR_INVALID_ARGUMENT, "must be in [0, 2^31)");
  }
  {
    Fixture f(k);
    f.a.lhs_ld = k.spec.k - 1;
    f.expect_rejected(GMMGEN_ERR_INVALID_ARGUMENT,
                      "lhs_ld=" + std::to_string(k.spec.k - 1) + " is below the row length K=");
  }
  {
    Fixture f(k);
    f.a.rhs_ld = k.spec.n - 1;
    f.expect_rejected(GMMGEN_ERR_INVALID_ARGUMENT,
                      "rhs_ld=" + std::to_string(k.spec.n - 1) + " is below the row length N=");
  }
  {
    Fixture f(k);
    f.a.out_ld = k.spec.n - 1;  // out[j] is [K, N]: its rows hold N elements
    f.expect_rejected(GMMGEN_ERR_INVALID_ARGUMENT,
                      "out_ld=" + std::to_string(k.spec.n - 1) + " is below the row length");
  }
  {
    Fixture f(k);
    f.a.existing_out = f.existing.data();
    f.expect_rejected(GMMGEN_ERR_INVALID_ARGUMENT, "existing_out must be NULL");
  }
  {
    Fixture f(k);
    f.a.abi_version = 99;
    f.expect_rejected(GMMGEN_ERR_ABI, "abi_version=99");
  }
  {
    Fixture f(k);
    f.a.reserved0 = 1;
    f.expect_rejected(GMMGEN_ERR_INVALID_ARGUMENT, "reserved0=1 must be 0");
  }
}

TEST(BadInput, TgmmLayoutsAndAccumulateRules) {
  const auto& k = find_kernel(tgmm_f32_km_accumulate);
  {
    Fixture f(k);
    char err[256];
    EXPECT_EQ(GMMGEN_OK, k.fns->run(&f.a, err, sizeof err)) << err;  // the baseline is valid
    f.a.existing_out = f.out.data();                                 // in place, both packed
    EXPECT_EQ(GMMGEN_OK, k.fns->run(&f.a, err, sizeof err)) << err;
  }
  {  // lhs is [K, M]: its rows hold M elements (K would be accepted by an [M, K] kernel)
    Fixture f(k);
    f.a.lhs_ld = f.m - 1;
    f.expect_rejected(GMMGEN_ERR_INVALID_ARGUMENT,
                      "lhs_ld=" + std::to_string(f.m - 1) +
                          " is below the row length M=" + std::to_string(f.m) + " (lhs is [K, M])");
  }
  {  // out[j] is [N, K]: its rows hold K elements
    Fixture f(k);
    f.a.out_ld = k.spec.k - 1;
    f.expect_rejected(GMMGEN_ERR_INVALID_ARGUMENT, "out_ld=" + std::to_string(k.spec.k - 1) +
                                                       " is below the row length " +
                                                       std::to_string(k.spec.k));
  }
  {
    Fixture f(k);
    f.a.existing_out = nullptr;
    f.expect_rejected(GMMGEN_ERR_INVALID_ARGUMENT, "existing_out is NULL");
  }
  {  // accumulate adds to existing_out even when there are no rows
    Fixture f(k);
    f.a.m = 0;
    std::fill(f.sizes.begin(), f.sizes.end(), 0);
    f.a.existing_out = nullptr;
    f.expect_rejected(GMMGEN_ERR_INVALID_ARGUMENT, "existing_out is NULL");
  }
  {
    Fixture f(k);
    f.a.existing_out = reinterpret_cast<const char*>(f.existing.data()) + 2;
    f.expect_rejected(GMMGEN_ERR_INVALID_ARGUMENT, "existing_out is not 4-byte aligned");
  }
  {
    Fixture f(k);
    f.a.existing_out_ld = k.spec.k - 1;
    f.expect_rejected(
        GMMGEN_ERR_INVALID_ARGUMENT,
        "existing_out_ld=" + std::to_string(k.spec.k - 1) + " is below the row length");
  }
  {
    Fixture f(k);
    f.a.existing_out = f.out.data();
    f.a.existing_out_ld = k.spec.k + 1;
    f.expect_rejected(GMMGEN_ERR_INVALID_ARGUMENT,
                      "existing_out aliases out with a different leading dimension");
  }
}

// Without rows, tgmm needs neither lhs nor rhs, and every group is empty: out is all zeros.
TEST(BadInput, TgmmWithoutRowsWritesZeros) {
  const auto& k = find_kernel(tgmm_f32_plain);
  Fixture f(k, 0);
  f.a.lhs = nullptr;
  f.a.rhs = nullptr;
  char err[256];
  ASSERT_EQ(GMMGEN_OK, k.fns->run(&f.a, err, sizeof err)) << err;
  for (float v : f.out) ASSERT_EQ(0.0f, v);
}

TEST(BadInput, TgmmPlanChecksWorkspaceAndRunItemsChecksThePlan) {
  const auto& k = find_kernel(tgmm_f32_plain);
  Fixture f(k);
  char err[256];
  int64_t items = 0;
  alignas(64) static char small[16];
  EXPECT_EQ(GMMGEN_ERR_WORKSPACE, k.fns->plan(&f.a, small, sizeof small, &items, err, sizeof err));
  EXPECT_NE(std::string(err).find("workspace_bytes=16 is below the "), std::string::npos) << err;
  std::vector<char> ws_storage(k.fns->workspace_bytes(f.m) + 64);
  void* ws = ws_storage.data() + (64 - reinterpret_cast<uintptr_t>(ws_storage.data()) % 64) % 64;
  const int64_t ws_bytes = k.fns->workspace_bytes(f.m);
  EXPECT_EQ(GMMGEN_ERR_WORKSPACE,
            k.fns->plan(&f.a, static_cast<char*>(ws) + 8, ws_bytes, &items, err, sizeof err));
  EXPECT_EQ(GMMGEN_ERR_INVALID_ARGUMENT, k.fns->plan(&f.a, ws, ws_bytes, nullptr, err, sizeof err));
  EXPECT_NE(std::string(err).find("num_items is NULL"), std::string::npos) << err;
  ASSERT_EQ(GMMGEN_OK, k.fns->plan(&f.a, ws, ws_bytes, &items, err, sizeof err));
  // One item per (local group, k-tile, n-tile).
  const auto tiles = [](int64_t n, int64_t t) { return (n + t - 1) / t; };
  EXPECT_EQ(k.spec.g_local * tiles(k.spec.k, k.spec.tiling.tk) * tiles(k.spec.n, k.spec.tiling.tn),
            items);
  const std::vector<float> before = f.out;
  EXPECT_EQ(GMMGEN_ERR_INVALID_ARGUMENT, k.fns->run_items(&f.a, ws, 0, items + 1));
  EXPECT_EQ(GMMGEN_ERR_INVALID_ARGUMENT, k.fns->run_items(&f.a, ws, -1, 1));
  EXPECT_EQ(GMMGEN_ERR_INVALID_ARGUMENT, k.fns->run_items(&f.a, ws, 2, 1));
  gmmgen_args other = f.a;  // arguments that do not match the plan
  other.group_offset = 1;
  EXPECT_EQ(GMMGEN_ERR_INVALID_ARGUMENT, k.fns->run_items(&other, ws, 0, items));
  other = f.a;
  other.m = f.m - 1;
  EXPECT_EQ(GMMGEN_ERR_INVALID_ARGUMENT, k.fns->run_items(&other, ws, 0, items));
  EXPECT_EQ(0, std::memcmp(before.data(), f.out.data(), f.out.size() * sizeof(float)))
      << "a rejected run_items wrote the output";
  EXPECT_EQ(GMMGEN_OK, k.fns->run_items(&f.a, ws, 0, items));
  EXPECT_EQ(-1, k.fns->workspace_bytes(-1));
}

}  // namespace
}  // namespace gmmgen::testing
