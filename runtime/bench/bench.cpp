// Timing a kernel beside its baseline, and checking both.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <random>
#include <thread>

#include "baseline.h"
#include "gmmgen/naming.h"
#include "gmmgen/verify/numeric.h"

namespace gmmgen::bench {
namespace {

// A buffer of `count` elements of dtype d, 64-byte aligned.
struct Buffer {
  DType dtype;
  std::vector<unsigned char> bytes;
  size_t offset = 0;
  Buffer(DType d, int64_t count)
      : dtype(d), bytes(size_t(std::max<int64_t>(count, 1)) * size_t(bits_of(d) / 8) + 64) {
    offset = (64 - reinterpret_cast<uintptr_t>(bytes.data()) % 64) % 64;
  }
  void* data() { return bytes.data() + offset; }
  double get(int64_t i) const { return load_element(dtype, bytes.data() + offset, i); }
  void fill(std::mt19937_64& rng, int64_t count) {
    std::uniform_real_distribution<double> u(-1.0, 1.0);
    for (int64_t i = 0; i < count; ++i) store_element(dtype, data(), i, u(rng));
  }
};

double median_ms(const std::function<void()>& fn, int reps) {
  for (int i = 0; i < 2; ++i) fn();  // warm-up: caches, pages, thread pools
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// Checks sampled outputs against a float64 reference of the same inputs: one rounding to the
// output dtype plus f32 summation of `terms` products.
struct Checker {
  const KernelSpec& s;
  std::string failure;
  void element(double got, double ref, double abs_sum, int64_t terms, const std::string& where) {
    if (!failure.empty()) return;
    const double bound = 2 * std::ldexp(1.0, -dtype_info(s.out).precision) * std::fabs(ref) +
                         double(terms + 2) * std::ldexp(1.0, -24) * abs_sum + 1e-30;
    if (!(std::fabs(got - ref) <= bound))
      failure = where + ": got " + std::to_string(got) + ", float64 reference " +
                std::to_string(ref) + " (bound " + std::to_string(bound) + ")";
  }
};

}  // namespace

BaselineKind parse_baseline(const std::string& name) {
  if (name == "onednn") return BaselineKind::kOneDnn;
  if (name == "openblas") return BaselineKind::kOpenBlas;
  if (name == "none") return BaselineKind::kNone;
  throw InvalidArgument("--baseline " + name + " is not one of: onednn, openblas, none");
}

std::string to_string(BaselineKind k) {
  return k == BaselineKind::kOneDnn ? "onednn" : k == BaselineKind::kOpenBlas ? "openblas" : "none";
}

bool baseline_available(BaselineKind k) {
#if defined(GMMGEN_HAVE_ONEDNN)
  if (k == BaselineKind::kOneDnn) return true;
#endif
#if defined(GMMGEN_HAVE_OPENBLAS)
  if (k == BaselineKind::kOpenBlas) return true;
#endif
  return k == BaselineKind::kNone;
}

nlohmann::ordered_json Row::to_json() const {
  // A row whose output failed its check reports no speed (null), so no script picks it up.
  const auto speed = [&](double v) { return ok ? nlohmann::ordered_json(v) : nullptr; };
  return {{"shape", shape},
          {"op", op},
          {"lhs", lhs},
          {"rhs", rhs},
          {"out", out},
          {"kernel", kernel},
          {"m", m},
          {"k", k},
          {"n", n},
          {"g", g},
          {"ms", speed(ms)},
          {"gflops", speed(gflops)},
          {"baseline", baseline},
          {"baseline_ms", baseline_ms},
          {"baseline_gflops", baseline_gflops},
          {"ratio", speed(ratio)},
          {"peak_gflops", peak_gflops},
          {"peak_fraction", speed(peak_fraction)},
          {"ok", ok},
          {"failure", failure}};
}

Row run(Runtime& rt, const KernelSpec& spec, const Workload& work, const Options& o,
        const Machine& machine) {
  validate(spec);
  if (spec.g_local != spec.g)
    throw InvalidArgument("bench: sharded specs (g_local < g) are not benchmarked");
  if (int64_t(work.group_sizes.size()) != spec.g)
    throw InvalidArgument("bench: " + std::to_string(work.group_sizes.size()) +
                          " group sizes for g=" + std::to_string(spec.g));
  Row row;
  row.shape = work.shape, row.op = std::string(to_string(spec.op));
  row.lhs = std::string(to_string(spec.lhs)), row.rhs = std::string(to_string(spec.rhs));
  row.out = std::string(to_string(spec.out)), row.kernel = kernel_name(spec);
  row.m = work.m, row.k = spec.k, row.n = spec.n, row.g = spec.g;
  int64_t rows = 0;
  for (int32_t v : work.group_sizes) rows += v;
  row.flops = 2.0 * double(rows) * double(spec.k) * double(spec.n);
  row.peak_gflops = machine.peak_gflops;

  const bool tgmm = spec.op == Op::kTgmm;
  const int64_t M = work.m, K = spec.k, N = spec.n, G = spec.g;
  std::mt19937_64 rng(o.seed);
  Buffer lhs(spec.lhs, M * K), rhs(spec.rhs, tgmm ? M * N : G * K * N);
  Buffer out(spec.out, tgmm ? G * K * N : M * N);
  lhs.fill(rng, M * K);
  rhs.fill(rng, tgmm ? M * N : G * K * N);

  gmmgen_args a{};
  a.abi_version = GMMGEN_ABI_VERSION;
  a.m = M;
  a.lhs = lhs.data(), a.rhs = rhs.data(), a.out = out.data();
  a.group_sizes = work.group_sizes.data();
  if (spec.out_mode != OutMode::kPlain) a.existing_out = out.data();
  const gmmgen_kernel_entry& kernel = rt.kernel(spec);
  row.ms = median_ms([&] { rt.run(kernel, a); }, o.reps);
  row.gflops = row.flops / (row.ms * 1e6);
  row.peak_fraction = row.peak_gflops > 0 ? row.gflops / row.peak_gflops : 0;

  // The float64 reference on a sample of the output.
  Checker check{spec, ""};
  std::vector<int64_t> start(size_t(G) + 1, 0);
  for (int64_t g = 0; g < G; ++g)
    start[size_t(g) + 1] = start[size_t(g)] + work.group_sizes[size_t(g)];
  auto lhs_at = [&](int64_t r, int64_t k) {
    return lhs.get(spec.lhs_layout == LhsLayout::kKM ? k * M + r : r * K + k);
  };
  if (spec.out_mode == OutMode::kPlain) {
    for (int t = 0; t < 24 && check.failure.empty(); ++t) {
      const int64_t g = int64_t(rng() % uint64_t(G));
      const int64_t lo = start[size_t(g)], hi = start[size_t(g) + 1];
      if (!tgmm) {
        if (hi == lo) continue;
        const int64_t r = lo + int64_t(rng() % uint64_t(hi - lo));
        for (int64_t n = 0; n < N; n += 1 + N / 64) {
          double ref = 0, abs_sum = 0;
          for (int64_t k = 0; k < K; ++k) {
            const double w =
                rhs.get(spec.transpose_rhs ? (g * N + n) * K + k : (g * K + k) * N + n);
            ref += lhs_at(r, k) * w, abs_sum += std::fabs(lhs_at(r, k) * w);
          }
          check.element(out.get(r * N + n), ref, abs_sum, K,
                        "out[" + std::to_string(r) + ", " + std::to_string(n) + "]");
        }
      } else {
        const int64_t k = int64_t(rng() % uint64_t(K));
        for (int64_t n = 0; n < N; n += 1 + N / 64) {
          double ref = 0, abs_sum = 0;
          for (int64_t r = lo; r < hi; ++r)
            ref += lhs_at(r, k) * rhs.get(r * N + n),
                abs_sum += std::fabs(lhs_at(r, k) * rhs.get(r * N + n));
          const int64_t at = spec.transpose_rhs ? (g * N + n) * K + k : (g * K + k) * N + n;
          check.element(out.get(at), ref, abs_sum, hi - lo,
                        "out[" + std::to_string(g) + "][" + std::to_string(k) + ", " +
                            std::to_string(n) + "]");
        }
      }
    }
  }

  // The baseline, side by side; its output must agree with the kernel's.
  row.baseline = to_string(o.baseline);
  if (o.baseline != BaselineKind::kNone) {
    const Operands ops{&spec, &work, lhs.data(), rhs.data()};
    std::unique_ptr<Baseline> base;
    try {
      base = o.baseline == BaselineKind::kOneDnn ? make_onednn(ops, o.threads)
                                                 : make_openblas(ops, o.threads);
    } catch (const std::exception& e) {
      row.baseline += " (unavailable: " + std::string(e.what()) + ")";
    }
    if (base) {
      row.baseline_ms = median_ms([&] { base->run(); }, o.reps);
      row.baseline_gflops = row.flops / (row.baseline_ms * 1e6);
      row.ratio = row.gflops / row.baseline_gflops;
      if (spec.out_mode == OutMode::kPlain) {
        double worst = 0, scale = 0;
        const auto& b = base->output();
        for (size_t i = 0; i < b.size(); ++i) {
          int64_t at = int64_t(i);
          if (tgmm && spec.transpose_rhs) {  // baseline [G][K][N], kernel [G][N][K]
            const int64_t g = at / (K * N), k = at / N % K, n = at % N;
            at = (g * N + n) * K + k;
          }
          worst = std::max(worst, std::fabs(out.get(at) - double(b[i])));
          scale = std::max(scale, std::fabs(double(b[i])));
        }
        const double tol = 4 * std::ldexp(1.0, -dtype_info(spec.out).precision) + 1e-4;
        if (!(worst <= tol * scale) && check.failure.empty())
          check.failure = "differs from the baseline by " + std::to_string(worst) + " (scale " +
                          std::to_string(scale) + ")";
      }
      // Let the baseline's worker threads go back to sleep before anything else is timed.
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    } else if (row.baseline == to_string(o.baseline)) {
      row.baseline += " (not found at configure time)";
    }
  }
  row.ok = check.failure.empty();
  row.failure = check.failure;
  if (!row.ok)
    row.ms = row.gflops = row.ratio = row.peak_fraction = 0;  // a wrong kernel has no speed
  return row;
}

}  // namespace gmmgen::bench
