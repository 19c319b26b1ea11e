// The machine's f32 FMA peak: a register-only loop of independent FMA chains in the host's
// best family, on `threads` threads at once.
#include <algorithm>
#include <chrono>
#include <fstream>
#include <thread>
#include <vector>

#include "gmmgen/bench/bench.h"
#include "gmmgen/heuristics.h"
#include "gmmgen/platform.hpp"
#include "jit/toolchain.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace gmmgen::bench {
namespace {

constexpr int64_t kIters = 40'000'000;

// 12 chains: enough to cover FMA latency x throughput on the machines seen (4 x 2, 5 x 2). The
// loops touch no memory; in a sanitizer build they are left uninstrumented, so that the chains
// stay in registers (bench and the tests of it run there too, and a peak that takes ten times
// longer to measure measures nothing).
#define GMMGEN_REGISTER_ONLY __attribute__((no_sanitize("address", "undefined")))
#if defined(__x86_64__)
GMMGEN_REGISTER_ONLY __attribute__((target("avx512f"))) double fma_zmm() {
  __m512 a[12];
  for (int i = 0; i < 12; ++i) a[i] = _mm512_set1_ps(1.0f + float(i) * 1e-7f);
  const __m512 b = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
  for (int64_t it = 0; it < kIters; ++it)
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) a[i] = _mm512_fmadd_ps(a[i], b, c);
  alignas(64) float t[16];
  float s = 0;
  for (int i = 0; i < 12; ++i) {
    _mm512_store_ps(t, a[i]);
    for (float x : t) s += x;
  }
  return s;
}
GMMGEN_REGISTER_ONLY __attribute__((target("avx2,fma"))) double fma_ymm() {
  __m256 a[12];
  for (int i = 0; i < 12; ++i) a[i] = _mm256_set1_ps(1.0f + float(i) * 1e-7f);
  const __m256 b = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
  for (int64_t it = 0; it < kIters; ++it)
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) a[i] = _mm256_fmadd_ps(a[i], b, c);
  alignas(32) float t[8];
  float s = 0;
  for (int i = 0; i < 12; ++i) {
    _mm256_store_ps(t, a[i]);
    for (float x : t) s += x;
  }
  return s;
}
#endif
GMMGEN_REGISTER_ONLY double fma_scalar() {
  float a[12];
  for (int i = 0; i < 12; ++i) a[i] = 1.0f + float(i) * 1e-7f;
  for (int64_t it = 0; it < kIters / 4; ++it)
    for (int i = 0; i < 12; ++i) a[i] = a[i] * 0.999999f + 1e-7f;
  float s = 0;
  for (float x : a) s += x;
  return s;
}

std::string cpuinfo_field(const std::string& key) {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind(key, 0) == 0) return line.substr(line.find(':') + 2);
  return "";
}

}  // namespace

double measure_peak_gflops(int threads) {
  const Isa isa = host_isa();
  const int lanes = int(isa_family(isa).vec);
  double (*loop)() = fma_scalar;
  int64_t iters = kIters / 4;
#if defined(__x86_64__)
  if (lanes == 16) loop = fma_zmm, iters = kIters;
  if (lanes == 8) loop = fma_ymm, iters = kIters;
#endif
  // The best of repeats over about a second: on a shared VM one short window can lose a core.
  double best = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int rep = 0;
       rep < 3 || (rep < 30 && std::chrono::steady_clock::now() - start < std::chrono::seconds(1));
       ++rep) {
    std::vector<double> sink(static_cast<size_t>(threads));
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> ts;
    for (int t = 0; t < threads; ++t) ts.emplace_back([&, t] { sink[size_t(t)] = loop(); });
    for (auto& t : ts) t.join();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, 2.0 * lanes * 12 * double(iters) * threads / s / 1e9);
  }
  return best;
}

Machine describe_machine(int threads, bool measure_peak) {
  Machine m;
  m.cpu = cpuinfo_field("model name");
  m.flags = cpuinfo_field("flags");
  m.isa = std::string(to_string(host_isa()));
  m.compiler = compiler_identity(default_compiler({}).cxx);
  m.threads = threads;
  m.peak_gflops = measure_peak ? measure_peak_gflops(threads) : 0.0;
  return m;
}

nlohmann::ordered_json Machine::to_json() const {
  return {{"cpu", cpu},           {"flags", flags},     {"isa", isa},
          {"compiler", compiler}, {"threads", threads}, {"peak_gflops", peak_gflops}};
}

}  // namespace gmmgen::bench
