#include "gmmgen/verify/distributions.h"

#include <algorithm>

namespace gmmgen {

const char* to_string(Distribution d) {
  switch (d) {
    case Distribution::kUniform:
      return "uniform";
    case Distribution::kSkewedEmpty:
      return "skewed+empty";
    case Distribution::kManyTiny:
      return "many-tiny";
    case Distribution::kRandom:
      return "random";
  }
  return "?";
}

std::vector<int32_t> make_group_sizes(Distribution d, int32_t g, int64_t rows,
                                      std::mt19937_64& rng) {
  std::vector<int32_t> sizes(g, 0);
  switch (d) {
    case Distribution::kUniform:
      for (int32_t i = 0; i < g; ++i) sizes[i] = int32_t(rows / g + (i < rows % g ? 1 : 0));
      break;
    case Distribution::kSkewedEmpty: {
      // About a quarter of the groups get rows, weighted 1, 2, 4, ...; first and last empty.
      std::vector<int32_t> chosen;
      for (int32_t i = 1; i + 1 < g; ++i)
        if (rng() % 4 == 0) chosen.push_back(i);
      if (chosen.empty()) chosen.push_back(g > 2 ? g / 2 : g - 1);
      double total_w = 0;
      std::vector<double> w;
      for (size_t i = 0; i < chosen.size(); ++i)
        total_w += w.emplace_back(std::ldexp(1.0, int(i % 5)));
      int64_t left = rows;
      for (size_t i = 0; i < chosen.size(); ++i) {
        int64_t take = i + 1 == chosen.size() ? left : int64_t(double(rows) * w[i] / total_w);
        take = std::min(take, left);
        sizes[chosen[i]] = int32_t(take);
        left -= take;
      }
      break;
    }
    case Distribution::kManyTiny: {
      int64_t left = rows;
      for (int32_t i = 0; i < g && left > 0; ++i) {
        sizes[i] = int32_t(std::min<int64_t>(left, int64_t(rng() % 4)));
        left -= sizes[i];
      }
      sizes[g - 1] += int32_t(left);
      break;
    }
    case Distribution::kRandom: {
      std::vector<int64_t> cuts{0, rows};
      for (int32_t i = 0; i + 1 < g; ++i) cuts.push_back(rows ? int64_t(rng() % (rows + 1)) : 0);
      std::sort(cuts.begin(), cuts.end());
      for (int32_t i = 0; i < g; ++i) sizes[i] = int32_t(cuts[i + 1] - cuts[i]);
      break;
    }
  }
  return sizes;
}

}  // namespace gmmgen
