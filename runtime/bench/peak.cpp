// The peaks of the product paths (f32 FMA, bf16 and integer dot products, AMX tiles): register-
// only loops of independent chains of one instruction in the host's families, on `threads`
// threads at once; and the DRAM read bandwidth.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "aligned.h"
#include "gmmgen/bench/bench.h"
#include "gmmgen/heuristics.h"
#include "gmmgen/platform.hpp"
#include "jit/toolchain.h"

#if defined(__x86_64__)
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace gmmgen::bench {
namespace {

constexpr int64_t kIters = 40'000'000;

// 12 chains: enough to cover FMA latency x throughput on the machines seen (4 x 2, 5 x 2). The
// loops touch no memory; in a sanitizer build they are left uninstrumented, so that the chains
// stay in registers (bench and the tests of it run there too, and a peak that takes ten times
// longer to measure measures nothing).
#define GMMGEN_REGISTER_ONLY __attribute__((no_sanitize("address", "undefined")))

// The sum of the lanes (of type T) of a loop's accumulators: its result, so that the compiler
// keeps every chain.
template <class T, class V, size_t N>
double lane_sum(const V (&a)[N]) {
  double s = 0;
  for (const V& v : a) {
    T t[sizeof(V) / sizeof(T)];
    std::memcpy(t, &v, sizeof(V));
    for (T x : t) s += double(x);
  }
  return s;
}

#if defined(__x86_64__)
GMMGEN_REGISTER_ONLY __attribute__((target("avx512f"))) double fma_zmm() {
  __m512 a[12];
  for (int i = 0; i < 12; ++i) a[i] = _mm512_set1_ps(1.0f + float(i) * 1e-7f);
  const __m512 b = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
  for (int64_t it = 0; it < kIters; ++it)
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) a[i] = _mm512_fmadd_ps(a[i], b, c);
  return lane_sum<float>(a);
}
GMMGEN_REGISTER_ONLY __attribute__((target("avx2,fma"))) double fma_ymm() {
  __m256 a[12];
  for (int i = 0; i < 12; ++i) a[i] = _mm256_set1_ps(1.0f + float(i) * 1e-7f);
  const __m256 b = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
  for (int64_t it = 0; it < kIters; ++it)
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) a[i] = _mm256_fmadd_ps(a[i], b, c);
  return lane_sum<float>(a);
}
// Twelve chains of one dot-product instruction `insn` (acc += b . c per lane) in named variables
// a0..a11, one asm statement a step: an array of accumulators, each element an asm operand,
// lives in memory (GCC 12 loads and stores every element around its asm, and the loop then
// times store forwarding, not the instruction).
#define GMMGEN_DOT_CHAINS(insn, b, c)                                                             \
  for (int64_t it = 0; it < kIters; ++it)                                                         \
  asm(insn " %13, %12, %0\n\t" insn " %13, %12, %1\n\t" insn " %13, %12, %2\n\t" insn             \
           " %13, %12, %3\n\t" insn " %13, %12, %4\n\t" insn " %13, %12, %5\n\t" insn             \
           " %13, %12, %6\n\t" insn " %13, %12, %7\n\t" insn " %13, %12, %8\n\t" insn             \
           " %13, %12, %9\n\t" insn " %13, %12, %10\n\t" insn " %13, %12, %11"                    \
      : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5), "+v"(a6), "+v"(a7), "+v"(a8), \
        "+v"(a9), "+v"(a10), "+v"(a11)                                                            \
      : "v"(b), "v"(c))
// vdpbf16ps: per f32 lane the products of two bf16 pairs, 64 flops an instruction.
GMMGEN_REGISTER_ONLY __attribute__((target("avx512f,avx512bf16"))) double bf16_dot_zmm() {
  __m512 a0 = _mm512_set1_ps(0), a1 = _mm512_set1_ps(1e-7f), a2 = _mm512_set1_ps(2e-7f),
         a3 = _mm512_set1_ps(3e-7f), a4 = _mm512_set1_ps(4e-7f), a5 = _mm512_set1_ps(5e-7f),
         a6 = _mm512_set1_ps(6e-7f), a7 = _mm512_set1_ps(7e-7f), a8 = _mm512_set1_ps(8e-7f),
         a9 = _mm512_set1_ps(9e-7f), a10 = _mm512_set1_ps(1e-6f), a11 = _mm512_set1_ps(1.1e-6f);
  const __m512i b = _mm512_set1_epi32(0x3f803f80), c = _mm512_set1_epi32(0x33d633d6);
  GMMGEN_DOT_CHAINS("vdpbf16ps", b, c);
  const __m512 a[12] = {a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11};
  return lane_sum<float>(a);
}
// vpdpbusd: per i32 lane four u8 x s8 products, 128 integer ops an instruction (the kernels use
// inline asm for it too: templates/cpp/ukernel/avx512bf16.inc).
GMMGEN_REGISTER_ONLY __attribute__((target("avx512f,avx512vnni"))) double int_dot_zmm() {
  __m512i a0 = _mm512_set1_epi32(0), a1 = _mm512_set1_epi32(1), a2 = _mm512_set1_epi32(2),
          a3 = _mm512_set1_epi32(3), a4 = _mm512_set1_epi32(4), a5 = _mm512_set1_epi32(5),
          a6 = _mm512_set1_epi32(6), a7 = _mm512_set1_epi32(7), a8 = _mm512_set1_epi32(8),
          a9 = _mm512_set1_epi32(9), a10 = _mm512_set1_epi32(10), a11 = _mm512_set1_epi32(11);
  const __m512i b = _mm512_set1_epi8(1), c = _mm512_set1_epi8(-1);
  GMMGEN_DOT_CHAINS("vpdpbusd", b, c);
  const __m512i a[12] = {a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11};
  return lane_sum<int32_t>(a);
}
#undef GMMGEN_DOT_CHAINS
// vpmaddwd then vpaddd (the avx2 kernels' integer dot product): per i32 lane two i16 x i16
// products, 32 integer ops a pair of instructions. Each pair is one asm statement on its chain:
// a product of loop invariants alone would be computed once, before the loop, and the loop would
// time the adds. 8 chains in named variables (each one add deep) stay in registers; an array of
// 12 spilled. (A macro, not a lambda: clang does not give a lambda its function's target.)
#define GMMGEN_MADD_ADD(acc, p, b, c) \
  asm("vpmaddwd %3, %2, %1\n\tvpaddd %1, %0, %0" : "+v"(acc), "=&v"(p) : "v"(b), "v"(c))
GMMGEN_REGISTER_ONLY __attribute__((target("avx2"))) double int_dot_ymm() {
  __m256i a0 = _mm256_set1_epi32(0), a1 = _mm256_set1_epi32(1), a2 = _mm256_set1_epi32(2),
          a3 = _mm256_set1_epi32(3), a4 = _mm256_set1_epi32(4), a5 = _mm256_set1_epi32(5),
          a6 = _mm256_set1_epi32(6), a7 = _mm256_set1_epi32(7);
  const __m256i b = _mm256_set1_epi16(1), c = _mm256_set1_epi16(-1);
  for (int64_t it = 0; it < kIters; ++it) {
    __m256i p;
    GMMGEN_MADD_ADD(a0, p, b, c);
    GMMGEN_MADD_ADD(a1, p, b, c);
    GMMGEN_MADD_ADD(a2, p, b, c);
    GMMGEN_MADD_ADD(a3, p, b, c);
    GMMGEN_MADD_ADD(a4, p, b, c);
    GMMGEN_MADD_ADD(a5, p, b, c);
    GMMGEN_MADD_ADD(a6, p, b, c);
    GMMGEN_MADD_ADD(a7, p, b, c);
  }
  const __m256i a[8] = {a0, a1, a2, a3, a4, a5, a6, a7};
  return lane_sum<int32_t>(a);
}
#undef GMMGEN_MADD_ADD

// AMX tdpbf16ps on four independent 16 x 16 f32 C tiles (tmm0-3) from two A tiles (tmm4-5, 16
// rows x 32 bf16) and two B tiles (tmm6-7, 16 pair rows x 16 columns), as the kernels' 32 x 32
// block does: 16 x 16 x 32 products, 16384 flops an instruction; or (S8) tdpbssd on the same
// tiles read as s8 (16 rows x 64, 16 quad rows x 16 columns into i32): 16 x 16 x 64 products. The
// tile state is granted per process (arch_prctl ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) and
// configured per thread, so each call configures its own and releases it. The operands are
// loaded once from ones and small values (not zero tiles, which a machine could skip). Raw
// instructions: no compiler flags.
constexpr int64_t kTileIters = kIters / 16;
bool tiles_granted() {
  static const bool granted =
      syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */) == 0;
  return granted;
}
template <bool S8>
GMMGEN_REGISTER_ONLY double amx_tiles() {
  struct alignas(64) {
    uint8_t palette = 1, start_row = 0, reserved[14] = {};
    uint16_t colsb[16] = {64, 64, 64, 64, 64, 64, 64, 64};
    uint8_t rows[16] = {16, 16, 16, 16, 16, 16, 16, 16};
  } config;
  alignas(64) uint16_t operand[2][16 * 32];
  std::fill(operand[0], operand[0] + 16 * 32, uint16_t(0x3f80));  // 1.0
  std::fill(operand[1], operand[1] + 16 * 32, uint16_t(0x3380));  // 2^-24
  asm volatile(
      "ldtilecfg %[cfg]\n\t"
      "tilezero %%tmm0\n\ttilezero %%tmm1\n\ttilezero %%tmm2\n\ttilezero %%tmm3\n\t"
      "tileloadd (%[a],%[ld],1), %%tmm4\n\ttileloadd (%[a],%[ld],1), %%tmm5\n\t"
      "tileloadd (%[b],%[ld],1), %%tmm6\n\ttileloadd (%[b],%[ld],1), %%tmm7"
      :
      : [cfg] "m"(config), [a] "r"(operand[0]), [b] "r"(operand[1]), [ld] "r"(int64_t(64))
      : "memory");
  for (int64_t it = 0; it < kTileIters; ++it)
    if constexpr (S8)
      asm volatile(
          "tdpbssd %%tmm6, %%tmm4, %%tmm0\n\ttdpbssd %%tmm7, %%tmm4, %%tmm1\n\t"
          "tdpbssd %%tmm6, %%tmm5, %%tmm2\n\ttdpbssd %%tmm7, %%tmm5, %%tmm3" ::);
    else
      asm volatile(
          "tdpbf16ps %%tmm6, %%tmm4, %%tmm0\n\ttdpbf16ps %%tmm7, %%tmm4, %%tmm1\n\t"
          "tdpbf16ps %%tmm6, %%tmm5, %%tmm2\n\ttdpbf16ps %%tmm7, %%tmm5, %%tmm3" ::);
  alignas(64) float c[4][16 * 16];  // the C tiles, 64-byte rows, for the result (i32 bits for S8)
  asm volatile(
      "tilestored %%tmm0, (%0,%1,1)\n\ttilestored %%tmm1, 1024(%0,%1,1)\n\t"
      "tilestored %%tmm2, 2048(%0,%1,1)\n\ttilestored %%tmm3, 3072(%0,%1,1)"
      :
      : "r"(c), "r"(int64_t(64))
      : "memory");
  asm volatile("tilerelease" ::: "memory");
  double s = 0;
  for (const auto& t : c)
    for (float x : t) s += double(x);
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

// The bracketed word of the kernel's transparent huge page setting ("[madvise]" -> madvise).
std::string thp_mode() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  std::getline(in, line);
  const size_t open = line.find('['), close = line.find(']');
  return open != std::string::npos && close > open ? line.substr(open + 1, close - open - 1)
                                                   : "unknown";
}

std::atomic<bool> huge_pages_on{false};
std::atomic<int> operand_offset_bytes{0};

}  // namespace

namespace {

// GFLOP/s (or integer GOP/s) of `loop` on `threads` threads at once, `flops` a call: the best of
// repeats over about a second (on a shared VM one short window can lose a core).
double best_rate(double (*loop)(), double flops, int threads) {
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
    best = std::max(best, flops * threads / s / 1e9);
  }
  return best;
}

// Sums 64-bit words of [p, p + bytes) with SSE2 loads (every x86-64 has them), four streams.
GMMGEN_REGISTER_ONLY uint64_t sum_words(const unsigned char* p, size_t bytes) {
#if defined(__x86_64__)
  __m128i s[4] = {_mm_setzero_si128(), _mm_setzero_si128(), _mm_setzero_si128(),
                  _mm_setzero_si128()};
  for (size_t i = 0; i + 64 <= bytes; i += 64)
    for (int j = 0; j < 4; ++j)
      s[j] = _mm_add_epi64(s[j], _mm_load_si128(reinterpret_cast<const __m128i*>(p + i) + j));
  alignas(16) uint64_t t[2];
  uint64_t r = 0;
  for (auto& v : s) {
    _mm_store_si128(reinterpret_cast<__m128i*>(t), v);
    r += t[0] + t[1];
  }
  return r;
#else
  uint64_t r = 0;
  for (size_t i = 0; i + 8 <= bytes; i += 8) r += *reinterpret_cast<const uint64_t*>(p + i);
  return r;
#endif
}

}  // namespace

double measure_peak_gflops(int threads) {
  return measure_path_peak_gflops(ProductPath::kF32Fma, isa_family(host_isa()), threads);
}

double measure_path_peak_gflops(ProductPath path, const IsaFamily& f, int threads) {
  const IsaFamily& host = isa_family(host_isa());
  switch (path) {
    case ProductPath::kF32Fma:
#if defined(__x86_64__)
      if (f.vec == 16 && host.vec == 16) return best_rate(fma_zmm, 2.0 * 16 * 12 * kIters, threads);
      if (f.vec >= 8 && host.vec >= 8) return best_rate(fma_ymm, 2.0 * 8 * 12 * kIters, threads);
#endif
      return best_rate(fma_scalar, 2.0 * 12 * (kIters / 4), threads);
#if defined(__x86_64__)
    case ProductPath::kBf16Dot:
      return host.bf16_dot ? best_rate(bf16_dot_zmm, 4.0 * 16 * 12 * kIters, threads) : 0;
    case ProductPath::kIntDot:
      if (!f.int_dot || !host.int_dot) return 0;
      if (f.vec == 16 && host.vec == 16)
        return best_rate(int_dot_zmm, 8.0 * 16 * 12 * kIters, threads);
      return best_rate(int_dot_ymm, 4.0 * 8 * 8 * kIters, threads);
    case ProductPath::kTiles:
      if (!f.tiles || !host.tiles || !tiles_granted()) return 0;
      return best_rate(amx_tiles<false>, 2.0 * 16 * 16 * 32 * 4 * kTileIters, threads);
    case ProductPath::kIntTiles:
      if (!f.tiles || !host.tiles || !tiles_granted()) return 0;
      return best_rate(amx_tiles<true>, 2.0 * 16 * 16 * 64 * 4 * kTileIters, threads);
#endif
    default:
      return 0;
  }
}

double measure_read_bandwidth_gbs(int threads) {
  // 256 MiB per thread: far past any cache of the machines seen (up to 1 GiB of L3 is shared
  // by many cores; a VM's two cores see a slice of it).
  const size_t per_thread = size_t(256) << 20;
  const Aligned buf(per_thread * size_t(threads));
  const unsigned char* base = buf.data();
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    std::vector<uint64_t> sink(static_cast<size_t>(threads));
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> ts;
    for (int t = 0; t < threads; ++t)
      ts.emplace_back(
          [&, t] { sink[size_t(t)] = sum_words(base + size_t(t) * per_thread, per_thread); });
    for (auto& t : ts) t.join();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, double(per_thread) * threads / s / 1e9);
  }
  return best;
}

const IsaFamily& run_family(const KernelSpec& spec) {
  return isa_family(spec.isa == Isa::kNative ? host_isa() : spec.isa);
}

std::string path_key(const KernelSpec& spec) {
  const IsaFamily& f = run_family(spec);
  return std::string(to_string(product_path(spec, f))) + " " + std::string(f.name);
}

void measure_paths(Machine& machine, const std::vector<KernelSpec>& specs) {
  for (const KernelSpec& s : specs) {
    const std::string key = path_key(s);
    if (machine.path_peak_gflops.count(key) || machine.path_peak(key) > 0) continue;
    const IsaFamily& f = run_family(s);
    machine.path_peak_gflops[key] =
        measure_path_peak_gflops(product_path(s, f), f, machine.threads);
  }
  if (machine.bandwidth_gbs == 0)
    machine.bandwidth_gbs = measure_read_bandwidth_gbs(machine.threads);
}

void set_huge_pages(bool on) {
  huge_pages_on = on;
}
bool huge_pages() {
  return huge_pages_on;
}
void set_operand_offset(int bytes) {
  if (bytes < 0 || bytes >= 64 || bytes % 16 != 0)
    throw std::invalid_argument("offset " + std::to_string(bytes) +
                                ": must be 0, 16, 32 or 48 (bytes past a 64-byte boundary)");
  operand_offset_bytes = bytes;
}
int operand_offset() {
  return operand_offset_bytes;
}
std::string describe_offset(int bytes) {
  return std::to_string(bytes) + " bytes past a 64-byte boundary (operands and outputs)";
}

Machine describe_machine(int threads, bool measure_peak) {
  Machine m;
  m.cpu = cpuinfo_field("model name");
  m.flags = cpuinfo_field("flags");
  m.isa = std::string(to_string(host_isa()));
  m.compiler = compiler_identity(default_compiler({}).cxx);
  m.threads = threads;
  m.pages = (huge_pages() ? "2 MiB asked (MADV_HUGEPAGE)" : "the allocator's") +
            std::string(", transparent huge pages: ") + thp_mode();
  m.operand_offset = operand_offset();
  m.peak_gflops = measure_peak ? measure_peak_gflops(threads) : 0.0;
  return m;
}

namespace {
std::string host_f32_key() {
  return std::string(to_string(ProductPath::kF32Fma)) + " " +
         std::string(isa_family(host_isa()).name);
}
}  // namespace

double Machine::path_peak(const std::string& key) const {
  if (const auto it = path_peak_gflops.find(key); it != path_peak_gflops.end()) return it->second;
  return key == host_f32_key() ? peak_gflops : 0;
}

nlohmann::ordered_json Machine::to_json() const {
  nlohmann::ordered_json paths = nlohmann::ordered_json::object();
  for (const auto& [key, gflops] : path_peak_gflops) paths[key] = gflops;
  if (peak_gflops > 0 && !paths.contains(host_f32_key())) paths[host_f32_key()] = peak_gflops;
  return {{"cpu", cpu},
          {"flags", flags},
          {"isa", isa},
          {"compiler", compiler},
          {"threads", threads},
          {"peak_gflops", peak_gflops},
          {"path_peak_gflops", paths},
          {"bandwidth_gbs", bandwidth_gbs},
          {"pages", pages},
          {"operand_offset", operand_offset}};
}

}  // namespace gmmgen::bench
