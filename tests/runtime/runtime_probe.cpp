// A separate process for the runtime tests: runs gmm through gmmgen::Runtime (configured from
// the environment) on several threads at once, checks each result against the float64
// reference, and prints the runtime's stats as one JSON line.
//   runtime_probe <threads> <spec text>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>
#include <vector>

#include "gmmgen/runtime.hpp"
#include "gmmgen/verify/distributions.h"
#include "gmmgen/verify/reference.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: runtime_probe <threads> <spec text of an f32 gmm>\n");
    return 2;
  }
  const int threads = std::atoi(argv[1]);
  const gmmgen::KernelSpec spec = gmmgen::parse_text(argv[2]);
  try {
    gmmgen::Runtime rt;
    std::vector<int> ok(threads, 0);
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        std::mt19937_64 rng(t + 1);
        const int64_t m = 40, K = spec.k, N = spec.n, G = spec.g;
        std::vector<float> lhs(m * K), rhs(G * K * N), out(m * N, -1.0f);
        for (auto& v : lhs) v = float(gmmgen::uniform_real(rng, -1, 1));
        for (auto& v : rhs) v = float(gmmgen::uniform_real(rng, -1, 1));
        std::vector<int32_t> sizes(G, int32_t(m / G));
        gmmgen::GmmOptions o;
        o.tiling = spec.tiling;
        rt.gmm(gmmgen::TensorView::matrix(lhs.data(), gmmgen::DType::kF32, m, K),
               gmmgen::TensorView::batch(rhs.data(), gmmgen::DType::kF32, G, K, N), sizes,
               gmmgen::TensorView::matrix(out.data(), gmmgen::DType::kF32, m, N), o);
        gmmgen::GmmProblem p;
        p.m = m, p.k = K, p.n = N, p.num_groups = p.num_local_groups = int32_t(G);
        p.group_sizes = sizes;
        p.lhs.assign(lhs.begin(), lhs.end());
        p.rhs.assign(rhs.begin(), rhs.end());
        const auto ref = gmmgen::reference_gmm(p);
        bool good = true;
        for (int64_t i = 0; i < m * N; ++i)
          good &= std::abs(out[i] - ref.out[i]) <= 1e-5 * (1 + ref.abs_dot[i]);
        ok[t] = good;
      });
    }
    for (auto& th : pool) th.join();
    const gmmgen::RuntimeStats s = rt.stats();
    bool all_ok = true;
    for (int v : ok) all_ok &= v != 0;
    std::printf("%s\n", nlohmann::json{{"ok", all_ok},
                                       {"lookups", s.lookups},
                                       {"memory_hits", s.memory_hits},
                                       {"disk_hits", s.disk_hits},
                                       {"compiles", s.compiles},
                                       {"rebuilds", s.rebuilds},
                                       {"compile_seconds", s.compile_seconds},
                                       {"disk_load_seconds", s.disk_load_seconds}}
                            .dump()
                            .c_str());
    return all_ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::printf("{\"error\": %s}\n", nlohmann::json(e.what()).dump().c_str());
    return 1;
  }
}
