// Group-size distributions and the standard shapes of docs/performance.md.
#include <algorithm>
#include <cmath>
#include <random>
#include <sstream>

#include "gmmgen/bench/bench.h"

namespace gmmgen::bench {
namespace {

// Scales weights to integer sizes summing to m (largest remainders get the leftover rows).
std::vector<int32_t> apportion(const std::vector<double>& w, int64_t m) {
  double total = 0;
  for (double x : w) total += x;
  std::vector<int32_t> sizes(w.size(), 0);
  std::vector<std::pair<double, size_t>> rest;
  int64_t used = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    const double exact = total > 0 ? double(m) * w[i] / total : 0;
    sizes[i] = int32_t(std::floor(exact));
    used += sizes[i];
    rest.emplace_back(exact - sizes[i], i);
  }
  std::stable_sort(rest.begin(), rest.end(), [](auto& a, auto& b) { return a.first > b.first; });
  for (size_t i = 0; used < m && i < rest.size(); ++i, ++used) ++sizes[rest[i].second];
  return sizes;
}

}  // namespace

std::vector<int32_t> group_sizes(const std::string& dist, int32_t g, int64_t m, uint64_t seed) {
  if (g < 1) throw InvalidArgument("groups: g=" + std::to_string(g) + " must be >= 1");
  if (m < 0 || m > INT32_MAX)
    throw InvalidArgument("m=" + std::to_string(m) + " must be in [0, 2^31)");
  std::mt19937_64 rng(seed);
  if (dist == "uniform") {
    std::vector<int32_t> s(g);
    for (int32_t i = 0; i < g; ++i) s[i] = int32_t(m / g + (i < m % g ? 1 : 0));
    return s;
  }
  if (dist == "zipf") {  // s = 1.2 over the non-empty groups; every 8th group empty
    std::vector<int32_t> active;
    for (int32_t i = 0; i < g; ++i)
      if (g < 8 || i % 8 != 7) active.push_back(i);
    std::shuffle(active.begin(), active.end(), rng);  // the big groups land anywhere
    std::vector<double> w(g, 0.0);
    for (size_t rank = 0; rank < active.size(); ++rank)
      w[active[rank]] = std::pow(double(rank + 1), -1.2);
    return apportion(w, m);
  }
  if (dist == "tiny") {  // ragged small groups around the mean m / g
    const int64_t mean = std::max<int64_t>(1, (m + g - 1) / g), hi = 2 * mean - 1;  // g*hi >= m
    std::vector<int32_t> s(g);
    int64_t sum = 0;
    for (auto& v : s) sum += v = int32_t(1 + int64_t(rng() % uint64_t(hi)));
    while (sum > m) {
      int32_t& v = s[rng() % uint64_t(g)];
      if (v > 0) --v, --sum;
    }
    while (sum < m) {
      int32_t& v = s[rng() % uint64_t(g)];
      if (v < hi) ++v, ++sum;
    }
    return s;
  }
  if (dist == "decode") {  // each row picks a group at random
    std::vector<int32_t> s(g, 0);
    for (int64_t r = 0; r < m; ++r) ++s[rng() % uint64_t(g)];
    return s;
  }
  if (dist.rfind("sizes:", 0) == 0) {
    std::vector<int32_t> s;
    std::stringstream in(dist.substr(6));
    int64_t total = 0;
    for (std::string item; std::getline(in, item, ',');) {
      char* end = nullptr;
      const long long v = std::strtoll(item.c_str(), &end, 10);
      if (item.empty() || *end || v < 0 || v > INT32_MAX)
        throw InvalidArgument("--dist " + dist + ": '" + item + "' is not a group size >= 0");
      s.push_back(int32_t(v));
      total += v;
    }
    if (int32_t(s.size()) != g)
      throw InvalidArgument("--dist " + dist + ": " + std::to_string(s.size()) +
                            " sizes given, the spec has g=" + std::to_string(g));
    if (total > m)
      throw InvalidArgument("--dist " + dist + ": the sizes sum to " + std::to_string(total) +
                            ", more than m=" + std::to_string(m));
    return s;
  }
  throw InvalidArgument("--dist " + dist +
                        " is not one of: uniform, zipf, tiny, decode, sizes:a,b,...");
}

std::vector<std::string> standard_shape_names() {
  return {"S1", "S2", "S3", "S4"};
}

TilingChoice workload_tiling(const Runtime& rt, const KernelSpec& spec, const Workload& w,
                             const std::optional<Tiling>& override) {
  return rt.choose_tiling(spec, w.group_sizes, 0, override);
}

Shape standard_shape(const std::string& name, Op op, DType lhs, DType rhs, DType out) {
  struct Def {
    const char* name;
    int64_t m, k, n, g;
    const char* dist;
  };
  static constexpr Def kShapes[] = {{"S1", 4096, 1024, 1408, 8, "uniform"},
                                    {"S2", 8192, 2048, 1408, 64, "zipf"},
                                    {"S3", 2048, 4096, 512, 128, "tiny"},
                                    {"S4", 512, 2048, 2048, 32, "decode"}};
  for (const Def& d : kShapes) {
    if (name != d.name) continue;
    std::vector<int32_t> sizes = group_sizes(d.dist, int32_t(d.g), d.m, 12345);
    Shape s;
    s.spec.op = op, s.spec.lhs = lhs, s.spec.rhs = rhs, s.spec.out = out;
    s.spec.k = d.k, s.spec.n = d.n, s.spec.g = s.spec.g_local = d.g;
    s.work.shape = d.name;
    s.work.m = d.m;
    s.work.group_sizes = std::move(sizes);
    return s;
  }
  throw InvalidArgument("--shapes: '" + name + "' is not one of: S1, S2, S3, S4");
}

}  // namespace gmmgen::bench
