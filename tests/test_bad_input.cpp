// Bad arguments are rejected with a message naming them, and the output is left untouched.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>

#include "kernels_under_test.h"

namespace gmmgen::testing {
namespace {

// Finds a kernel of the test set by a property.
const KernelUnderTest& find(const std::function<bool(const KernelSpec&)>& pred) {
  static const auto kernels = all_kernels();
  for (const auto& k : kernels)
    if (pred(k.spec)) return k;
  throw std::logic_error("no kernel under test has the property");
}

struct Fixture {
  const KernelUnderTest& k;
  int64_t m;
  std::vector<float> lhs, rhs;  // f32 kernels only
  std::vector<float> out, existing;
  std::vector<int32_t> sizes;
  gmmgen_args a{};

  explicit Fixture(const KernelUnderTest& kernel, int64_t rows = 16) : k(kernel), m(rows) {
    lhs.assign(m * k.spec.k, 0.5f);
    rhs.assign(k.spec.g_local * k.spec.k * k.spec.n, 0.25f);
    out.assign(m * k.spec.n, 0.0f);
    std::memset(out.data(), 0x7f, out.size() * sizeof(float));  // poison
    existing.assign(m * k.spec.n, 1.0f);
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
  return s.lhs == DType::kF32 && s.rhs == DType::kF32 && s.out == DType::kF32 &&
         s.out_mode == OutMode::kPlain && s.g_local < s.g;
}

TEST(BadInput, EveryKindIsRejectedAndOutputUntouched) {
  const auto& k = find(f32_plain);
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
  const auto& k = find([](const KernelSpec& s) {
    return s.out_mode == OutMode::kAccumulate && s.lhs == DType::kF32 && s.out == DType::kF32;
  });
  Fixture f(k);
  f.a.existing_out = nullptr;
  f.expect_rejected(GMMGEN_ERR_INVALID_ARGUMENT, "existing_out is NULL");
}

TEST(BadInput, PlanChecksWorkspaceAndRunItemsChecksRange) {
  const auto& k = find(f32_plain);
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

}  // namespace
}  // namespace gmmgen::testing
