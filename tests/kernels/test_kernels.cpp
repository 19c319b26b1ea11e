// Every kernel of every linked bundle against the float64 reference; each bundle is an instance,
// so a test's name says its bundle: <bundle>/KernelTest.<test>/<kernel name>.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "gmmgen/verify/checker.h"
#include "kernels_under_test.h"

namespace gmmgen::testing {
namespace {

class KernelTest : public ::testing::TestWithParam<KernelUnderTest> {};

void run_cases(const KernelUnderTest& k, const std::vector<CheckCase>& cases) {
  for (const auto& c : cases) {
    const CheckResult r = check_kernel(*k.fns, k.spec, c);
    ASSERT_TRUE(r.ok) << k.name << ": " << r.failure;
    if (c.m > 0) {
      ASSERT_GT(r.elements, 0) << c.label;
    }
  }
}

// GMMGEN_TEST_CASES=quick (the sanitizer leg of .ci/test) checks verify --quick's subset: every
// shard offset, ragged and empty groups, rows past sum(group_sizes), several m-tiles, strided
// operands -- under ASan the float64 reference of every standard case at the default set's real
// shapes costs minutes.
TEST_P(KernelTest, StandardCasesMatchReference) {
  GMMGEN_SKIP_UNLESS_RUNNABLE(GetParam());
  const char* which = std::getenv("GMMGEN_TEST_CASES");
  const std::string cases = which ? which : "";
  ASSERT_TRUE(cases.empty() || cases == "all" || cases == "quick")
      << "GMMGEN_TEST_CASES=" << cases << " must be all (the default) or quick";
  run_cases(GetParam(), cases == "quick" ? quick_cases(GetParam().spec, 42)
                                         : standard_cases(GetParam().spec, 42));
}

// Named edge cases, on top of the spread of standard_cases.
TEST_P(KernelTest, EdgeCases) {
  const auto& k = GetParam();
  GMMGEN_SKIP_UNLESS_RUNNABLE(k);
  const int32_t G = int32_t(k.spec.g);
  const int64_t tm = k.spec.tiling.tm;
  std::vector<CheckCase> cases;
  auto add = [&](std::string label, int64_t m, std::vector<int32_t> sizes, int32_t offset = 0) {
    CheckCase c;
    c.label = std::move(label);
    c.m = m;
    c.group_sizes = std::move(sizes);
    c.group_offset = offset;
    c.seed = cases.size() + 1;
    cases.push_back(c);
  };
  std::vector<int32_t> sizes(G, 0);
  add("M=0", 0, sizes);
  add("no rows in any group", 2 * tm + 1, sizes);
  sizes.back() = int32_t(tm + 1);
  add("only the last group, sum < M", 2 * tm + 3, sizes);
  std::fill(sizes.begin(), sizes.end(), 0);
  sizes.front() = int32_t(tm + 2);
  add("only the first group", tm + 2, sizes, 0);
  // Every group starts mid-tile.
  std::fill(sizes.begin(), sizes.end(), int32_t(tm / 2 + 1));
  add("all groups start mid-tile", int64_t(G) * (tm / 2 + 1) + 3, sizes);
  std::fill(sizes.begin(), sizes.end(), 1);
  add("groups of size 1", G + 2, sizes);
  // Empty first and last groups around groups of tm + 1 rows (for G <= 2: no rows at all).
  std::fill(sizes.begin(), sizes.end(), int32_t(tm + 1));
  sizes.front() = sizes.back() = 0;
  add("empty groups at both ends", int64_t(std::max(G - 2, 0)) * (tm + 1) + 1, sizes);
  // Group sizes on and just past a multiple of tm (tgmm's row chunks).
  std::fill(sizes.begin(), sizes.end(), 0);
  sizes.front() = int32_t(tm);
  sizes.back() += int32_t(2 * tm + 1);
  add("groups of tm and 2*tm + 1 rows", 3 * tm + 1, sizes);
  // One group of 16 tm rows: tgmm sums it in slices of rows when its output has few tiles.
  std::fill(sizes.begin(), sizes.end(), 0);
  sizes[size_t(G / 2)] = int32_t(16 * tm + 3);
  add("one group of 16*tm + 3 rows", 16 * tm + 5, sizes);
  // The same cases with a NaN in an active group (it must reach only the outputs it feeds) and,
  // in the existing modes, existing_out in a buffer of its own.
  for (size_t i = 0, plain = cases.size(); i < plain; ++i) {  // (push_back invalidates refs)
    CheckCase nan = cases[i];
    nan.label += " nan-expert, existing_out separate";
    nan.nan_expert = true;
    nan.in_place = false;
    cases.push_back(nan);
  }
  // Sharded: the first and the last shard positions.
  if (k.spec.g_local < k.spec.g) {
    std::vector<int32_t> s(G);
    for (int32_t i = 0; i < G; ++i) s[i] = i % 3;
    int64_t total = 0;
    for (int32_t v : s) total += v;
    add("first shard", total + 2, s, 0);
    add("last shard", total + 2, s, int32_t(k.spec.g - k.spec.g_local));
    // Rows only outside the shard at offset 1 (before it and, when there is one, after it):
    // every active group is empty.
    std::vector<int32_t> outside(G, 0);
    outside.front() = int32_t(tm + 1);
    if (G - k.spec.g_local >= 2) outside.back() = int32_t(tm + 1);
    add("rows only outside the shard", 2 * tm + 3, outside, 1);
  }
  run_cases(k, cases);
}

// Also with one large group (tgmm may split it into slices whose partial sums the last slice to
// finish adds, in slice order whatever the order of the items).
TEST_P(KernelTest, ResultsDoNotDependOnItemOrder) {
  const auto& k = GetParam();
  GMMGEN_SKIP_UNLESS_RUNNABLE(k);
  std::mt19937_64 rng(7);
  const int64_t tm = k.spec.tiling.tm;
  for (const int64_t big : {int64_t{0}, 12 * tm}) {  // rows of one extra-large group
    CheckCase c;
    c.m = 3 * tm + 1 + big;
    c.group_sizes = make_group_sizes(Distribution::kRandom, int32_t(k.spec.g), 3 * tm - 1, rng);
    c.group_sizes[rng() % c.group_sizes.size()] += int32_t(big);  // sum = m - 2
    const int64_t m = c.m;
    uint64_t digest[2] = {0, 0};
    for (bool reverse : {false, true}) {
      c.reverse_items = reverse;
      c.label =
          std::string(reverse ? "reverse order" : "forward order") + " m=" + std::to_string(m);
      const CheckResult r = check_kernel(*k.fns, k.spec, c);
      ASSERT_TRUE(r.ok) << r.failure;
      digest[reverse] = r.output_digest;
    }
    EXPECT_EQ(digest[0], digest[1]) << "the output bits depend on the order of the work items";
  }
}

// A kernel may keep work from one tile for the next within a run of items (tgmm: the A operand
// converted once for the n-tiles of its k-tile), never from one run to the next: the buffers of
// the next call may hold other values at the same addresses.
TEST_P(KernelTest, NothingIsKeptFromAnEarlierRunOfItems) {
  const auto& k = GetParam();
  GMMGEN_SKIP_UNLESS_RUNNABLE(k);
  std::mt19937_64 rng(11);
  const int64_t tm = k.spec.tiling.tm;
  CheckCase c;
  c.label = "after a run on other values";
  c.m = 3 * tm + 1;
  c.group_sizes = make_group_sizes(Distribution::kRandom, int32_t(k.spec.g), 3 * tm - 1, rng);
  c.other_values_first = true;
  const CheckResult r = check_kernel(*k.fns, k.spec, c);
  ASSERT_TRUE(r.ok) << r.failure;
}

TEST_P(KernelTest, InfoDescribesTheSpec) {
  const auto& k = GetParam();
  const gmmgen_kernel_info& info = *k.fns->info();
  EXPECT_EQ(GMMGEN_ABI_VERSION, info.abi_version);
  EXPECT_EQ(kernel_name(k.spec), info.name);
  EXPECT_EQ(spec_hash(k.spec), info.hash);
  EXPECT_EQ(k.spec.k, info.k);
  EXPECT_EQ(k.spec.n, info.n);
  EXPECT_EQ(k.spec.g, info.num_groups);
  EXPECT_EQ(k.spec.g_local, info.num_local_groups);
  EXPECT_EQ(k.spec.tiling.tm, info.tm);
  EXPECT_EQ(k.spec.tiling.tk, info.tk);
  EXPECT_EQ(k.spec.tiling.tn, info.tn);
  EXPECT_EQ(int(k.spec.out_mode), info.out_mode);
  EXPECT_EQ(k.spec.op == Op::kTgmm ? GMMGEN_OP_TGMM : GMMGEN_OP_GMM, info.op);
  EXPECT_EQ(k.spec.transpose_rhs ? 1 : 0, info.transpose_rhs);
  EXPECT_EQ(k.spec.lhs_layout == LhsLayout::kKM ? 1 : 0, info.lhs_layout);
}

#define GMMGEN_INSTANTIATE_BUNDLE(b)                                                           \
  INSTANTIATE_TEST_SUITE_P(b, KernelTest,                                                      \
                           ::testing::ValuesIn(bundle_kernels(b##_kernels, b##_kernel_count)), \
                           [](const auto& info) { return test_name(info.param); });
GMMGEN_TEST_BUNDLES(GMMGEN_INSTANTIATE_BUNDLE)
#undef GMMGEN_INSTANTIATE_BUNDLE

}  // namespace
}  // namespace gmmgen::testing
