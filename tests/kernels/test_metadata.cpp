// The emitted metadata builders against a brute-force builder written from megablox's
// definition: enumerate, group by group, the m-tiles each group touches.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>

#include "kernels_under_test.h"

namespace gmmgen::testing {
namespace {

struct Metadata {
  std::vector<int32_t> group_offsets, group_ids, m_tile_ids;
  int64_t num_tiles = 0;
};

Metadata brute_force(const std::vector<int32_t>& sizes, int64_t m, int64_t tm, int32_t start,
                     int32_t count, bool visit_empty) {
  const int32_t G = int32_t(sizes.size());
  const int64_t tiles_m = (m + tm - 1) / tm;
  const int64_t len = std::max<int64_t>(1, tiles_m + G - 1);
  Metadata md;
  md.group_offsets = {0};
  for (int32_t s : sizes) md.group_offsets.push_back(md.group_offsets.back() + s);
  // Every (group, m-tile) step, in group order. An empty group, when visited, takes the tile
  // holding its start (clamped to the last tile: an empty group at row m has no tile).
  std::vector<std::pair<int32_t, int32_t>> steps;
  for (int32_t g = 0; g < G; ++g) {
    const int64_t s = md.group_offsets[g], e = md.group_offsets[g + 1];
    if (s < e) {
      for (int64_t t = s / tm; t * tm < e; ++t) steps.push_back({g, int32_t(t)});
    } else if (visit_empty) {
      steps.push_back({g, int32_t(std::min(s / tm, std::max<int64_t>(tiles_m - 1, 0)))});
    }
  }
  for (auto [g, t] : steps) {
    md.group_ids.push_back(g);
    md.m_tile_ids.push_back(t);
    if (g >= start && g < start + count) ++md.num_tiles;
  }
  // Tiles past the rows of any group follow, once each; then padding to len (last group id,
  // last tile id), as jnp.repeat(total_repeat_length=len) pads.
  const int64_t covered = (md.group_offsets.back() + tm - 1) / tm;
  for (int64_t t = covered; t < tiles_m; ++t) md.m_tile_ids.push_back(int32_t(t));
  md.group_ids.resize(len, G - 1);
  md.m_tile_ids.resize(len, int32_t(std::max<int64_t>(tiles_m - 1, 0)));
  // Sharding: rotate the steps of groups before `start` to the end.
  const auto first =
      std::count_if(steps.begin(), steps.end(), [&](auto p) { return p.first < start; });
  std::rotate(md.group_ids.begin(), md.group_ids.begin() + first, md.group_ids.end());
  std::rotate(md.m_tile_ids.begin(), md.m_tile_ids.begin() + first, md.m_tile_ids.end());
  return md;
}

constexpr int32_t kCanary = -777;

Metadata emitted(const gmmgen_kernel_entry& k, const std::vector<int32_t>& sizes, int64_t m,
                 int32_t start, int32_t count, bool visit_empty) {
  const int32_t G = int32_t(sizes.size());
  const int64_t len = std::max<int64_t>(1, (m + k.info()->tm - 1) / k.info()->tm + G - 1);
  // Canaries past the documented lengths catch writes out of bounds.
  Metadata md;
  md.group_offsets.assign(G + 1 + 8, kCanary);
  md.group_ids.assign(len + 8, kCanary);
  md.m_tile_ids.assign(len + 8, kCanary);
  EXPECT_EQ(GMMGEN_OK, k.make_group_metadata(sizes.data(), G, m, start, count, visit_empty,
                                             md.group_offsets.data(), md.group_ids.data(),
                                             md.m_tile_ids.data(), &md.num_tiles));
  for (auto* v : {&md.group_offsets, &md.group_ids, &md.m_tile_ids}) {
    for (size_t i = v->size() - 8; i < v->size(); ++i)
      EXPECT_EQ(kCanary, (*v)[i]) << "written past the end";
    v->resize(v->size() - 8);
  }
  return md;
}

void expect_same(const Metadata& want, const Metadata& got, const std::string& where) {
  EXPECT_EQ(want.group_offsets, got.group_offsets) << where;
  EXPECT_EQ(want.group_ids, got.group_ids) << where;
  EXPECT_EQ(want.m_tile_ids, got.m_tile_ids) << where;
  EXPECT_EQ(want.num_tiles, got.num_tiles) << where;
}

// One kernel per distinct tm among the kernels under test.
std::vector<KernelUnderTest> one_per_tm() {
  std::vector<KernelUnderTest> out;
  std::set<int64_t> seen;
  for (auto& k : all_kernels())
    if (seen.insert(k.spec.tiling.tm).second) out.push_back(k);
  return out;
}

class MetadataTest : public ::testing::TestWithParam<KernelUnderTest> {};

std::string describe(const std::vector<int32_t>& sizes, int64_t m, int32_t start, int32_t count,
                     bool visit) {
  std::string s = "m=" + std::to_string(m) + " start=" + std::to_string(start) +
                  " count=" + std::to_string(count) + " visit_empty=" + std::to_string(visit) +
                  " sizes=[";
  for (size_t i = 0; i < sizes.size() && i < 40; ++i) s += std::to_string(sizes[i]) + " ";
  return s + (sizes.size() > 40 ? "...]" : "]");
}

TEST_P(MetadataTest, MatchesBruteForceOnRandomPartitions) {
  const auto& k = GetParam();
  const int64_t tm = k.spec.tiling.tm;
  std::mt19937_64 rng(tm * 7919);
  for (int trial = 0; trial < 300; ++trial) {
    const int32_t G = int32_t(1 + rng() % (trial % 3 == 0 ? 70 : 9));
    // Tile counts up to ~5000 (above 4096), not powers of two.
    const int64_t tiles = int64_t(rng() % (trial % 10 == 0 ? 5000 : 40));
    const int64_t m = std::max<int64_t>(0, tiles * tm - int64_t(rng() % tm));
    const int64_t rows = m - (trial % 2 ? int64_t(rng() % (m / 4 + 1)) : 0);  // sum <= m
    std::vector<int32_t> sizes(G, 0);
    std::vector<int64_t> cuts{0, rows};
    for (int32_t i = 0; i + 1 < G; ++i) cuts.push_back(rows ? int64_t(rng() % (rows + 1)) : 0);
    std::sort(cuts.begin(), cuts.end());
    for (int32_t i = 0; i < G; ++i) sizes[i] = int32_t(cuts[i + 1] - cuts[i]);
    if (trial % 4 == 1) sizes.front() += std::exchange(sizes.back(), 0);       // empty last group
    if (trial % 4 == 2 && G > 1) sizes[1] += std::exchange(sizes.front(), 0);  // empty first
    const int32_t start = int32_t(rng() % G);
    const int32_t count = int32_t(rng() % (G - start + 1));
    for (bool visit : {false, true})
      expect_same(brute_force(sizes, m, tm, start, count, visit),
                  emitted(*k.fns, sizes, m, start, count, visit),
                  describe(sizes, m, start, count, visit));
    if (HasFailure()) return;
  }
}

TEST_P(MetadataTest, EdgeCases) {
  const auto& k = GetParam();
  const int32_t tm = int32_t(k.spec.tiling.tm);
  struct Case {
    std::vector<int32_t> sizes;
    int64_t m;
  };
  const std::vector<Case> cases = {
      {{tm, tm, 0}, 2 * tm},                       // empty last group starts at row m (sentinel)
      {{0, tm, tm}, 2 * tm},                       // empty first group
      {{tm, 0, tm}, 2 * tm},                       // empty middle group, aligned
      {{tm + 1, 0, tm - 1}, 2 * tm},               // empty middle group starting mid-tile
      {{2 * tm}, 2 * tm},                          // G = 1
      {{1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, 10},        // G > tiles when tm > 1
      {{0, 0, 0}, 0},                              // M = 0
      {{0, 0, 0}, 5},                              // every row outside the groups
      {{3, 0, 5, 0, 0, 7}, 15 + 3 * int64_t(tm)},  // groups starting mid-tile, rows left over
      {std::vector<int32_t>(64, tm), 64 * int64_t(tm)},  // every group aligned: all sentinels
  };
  for (const auto& c : cases) {
    const int32_t G = int32_t(c.sizes.size());
    for (bool visit : {false, true})
      for (auto [start, count] : {std::pair{0, G}, std::pair{0, 1}, std::pair{G - 1, 1},
                                  std::pair{G / 2, G - G / 2}, std::pair{0, 0}})
        expect_same(brute_force(c.sizes, c.m, tm, start, count, visit),
                    emitted(*k.fns, c.sizes, c.m, start, count, visit),
                    describe(c.sizes, c.m, start, count, visit));
  }
}

TEST_P(MetadataTest, RejectsBadArguments) {
  const auto& k = GetParam();
  std::vector<int32_t> off(4), ids(64), tiles(64);
  int64_t n = 0;
  auto call = [&](std::vector<int32_t> sizes, int64_t m, int32_t start, int32_t count) {
    return k.fns->make_group_metadata(sizes.data(), int32_t(sizes.size()), m, start, count, 0,
                                      off.data(), ids.data(), tiles.data(), &n);
  };
  EXPECT_EQ(GMMGEN_ERR_INVALID_ARGUMENT, call({1, -1, 2}, 8, 0, 3));  // negative size
  EXPECT_EQ(GMMGEN_ERR_INVALID_ARGUMENT, call({4, 4, 4}, 8, 0, 3));   // sum > m
  EXPECT_EQ(GMMGEN_ERR_INVALID_ARGUMENT, call({1, 1, 1}, 8, 2, 2));   // shard past G
  EXPECT_EQ(GMMGEN_ERR_INVALID_ARGUMENT, call({1, 1, 1}, -1, 0, 3));  // negative m
  EXPECT_EQ(GMMGEN_OK, call({1, 1, 1}, 8, 1, 2));
}

INSTANTIATE_TEST_SUITE_P(PerTm, MetadataTest, ::testing::ValuesIn(one_per_tm()),
                         [](const auto& info) {
                           return "tm" + std::to_string(info.param.spec.tiling.tm);
                         });

// The brute force itself, on a hand-worked example (tm = 4):
// sizes [3, 0, 6, 2], m = 16: group 0 rows 0-2 (tile 0), group 2 rows 3-8 (tiles 0-2),
// group 3 rows 9-10 (tile 2); tile 3 holds no group.
TEST(MetadataBruteForce, HandWorkedExample) {
  const Metadata md = brute_force({3, 0, 6, 2}, 16, 4, 0, 4, false);
  EXPECT_EQ((std::vector<int32_t>{0, 3, 3, 9, 11}), md.group_offsets);
  EXPECT_EQ((std::vector<int32_t>{0, 2, 2, 2, 3, 3, 3}), md.group_ids);
  EXPECT_EQ((std::vector<int32_t>{0, 0, 1, 2, 2, 3, 3}), md.m_tile_ids);
  EXPECT_EQ(5, md.num_tiles);
  const Metadata shard = brute_force({3, 0, 6, 2}, 16, 4, 2, 1, false);
  EXPECT_EQ((std::vector<int32_t>{2, 2, 2, 3, 3, 3, 0}), shard.group_ids);
  EXPECT_EQ((std::vector<int32_t>{0, 1, 2, 2, 3, 3, 0}), shard.m_tile_ids);
  EXPECT_EQ(3, shard.num_tiles);
}

}  // namespace
}  // namespace gmmgen::testing
