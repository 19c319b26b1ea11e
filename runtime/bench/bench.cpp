// Timing a kernel beside its baseline, and checking both.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>
#include <tuple>

#include "aligned.h"
#include "baseline.h"
#include "gmmgen/codes.h"
#include "gmmgen/heuristics.h"
#include "gmmgen/naming.h"
#include "gmmgen/quantize.hpp"
#include "gmmgen/verify/distributions.h"
#include "gmmgen/verify/numeric.h"

namespace gmmgen::bench {
namespace {

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// A buffer of `count` elements of float dtype d, operand_offset() bytes past a 64-byte boundary.
struct Buffer {
  DType dtype;
  Aligned mem;
  Buffer(DType d, int64_t count)
      : dtype(d),
        mem(size_t(std::max<int64_t>(count, 1)) * size_t(bits_of(d) / 8),
            size_t(operand_offset())) {}
  void* data() { return mem.data(); }
  double get(int64_t i) const { return load_element(dtype, mem.data(), i); }
  void fill(std::mt19937_64& rng, int64_t count) {
    for (int64_t i = 0; i < count; ++i)
      store_element(dtype, data(), i, uniform_real(rng, -1.0, 1.0));
  }
};

// An input operand as the kernel reads it: `batch` matrices [rows, cols] stored row-major and
// packed one after the other, of a float dtype or of codes (sub-byte codes packed along the row)
// with f32 scales laid out as gmmgen/kernel_abi.h's "Scales" says. `axis` is the contraction axis
// of the stored matrices: the one scale blocks run along.
struct Operand {
  DType dtype;
  Quant scheme;
  QuantAxis axis;
  int64_t batch, rows, cols;
  int64_t ld;  // elements per stored row: cols, rounded up to whole bytes for sub-byte codes
  Aligned mem;
  std::vector<float> scales;
  ScaleShape grid;  // the scales of one matrix (all of them with tensor scales)

  Operand(DType d, const Quant& q, QuantAxis a, int64_t b, int64_t r, int64_t c)
      : dtype(d),
        scheme(q),
        axis(a),
        batch(b),
        rows(r),
        cols(c),
        ld(codes::is_quantized(d) ? packed_codes_ld(d, c) : c),
        mem(size_t(ceil_div(std::max<int64_t>(b * r * ld, 1) * bits_of(d), 8)),
            size_t(operand_offset())) {}

  bool quantized() const { return codes::is_quantized(dtype); }
  int64_t count() const { return batch * rows * cols; }
  // One scale for every matrix (tensor; none has no scales): the batch is quantized as one
  // [batch * rows, cols] matrix. Channel and block scales are per matrix, matrix by matrix.
  bool whole() const {
    return scheme.kind == QuantKind::kTensor || scheme.kind == QuantKind::kNone;
  }
  QuantizeOptions options() const {
    QuantizeOptions o;
    o.dtype = dtype, o.scheme = scheme, o.axis = axis;
    return o;
  }
  size_t code_bytes_per_matrix() const { return size_t(rows * ld * bits_of(dtype) / 8); }
  int64_t scales_per_matrix() const { return grid.rows * grid.cols; }
  const float* scale_data() const {
    return scheme.kind == QuantKind::kNone ? nullptr : scales.data();
  }

  // Random floats, uniform in [-1, 1); quantized operands hold their absmax codes and scales.
  void fill(std::mt19937_64& rng) {
    if (!quantized()) {
      for (int64_t i = 0; i < count(); ++i)
        store_element(dtype, mem.data(), i, uniform_real(rng, -1.0, 1.0));
      return;
    }
    std::vector<float> x(static_cast<size_t>(count()));
    for (float& v : x) v = float(uniform_real(rng, -1.0, 1.0));
    const QuantizeOptions o = options();
    if (whole()) {
      grid = scale_shape(scheme, axis, batch * rows, cols);
      scales.assign(size_t(std::max<int64_t>(1, grid.rows * grid.cols)), 0.0f);
      quantize(x.data(), batch * rows, cols, 0, o, mem.data(), 0, scales.data(), 0);
      return;
    }
    grid = scale_shape(scheme, axis, rows, cols);
    scales.assign(size_t(batch * scales_per_matrix()), 0.0f);
    for (int64_t b = 0; b < batch; ++b)
      quantize(x.data() + b * rows * cols, rows, cols, 0, o,
               mem.data() + size_t(b) * code_bytes_per_matrix(), 0,
               scales.data() + b * scales_per_matrix(), 0);
  }

  // The exact value of stored element (b, r, c): decode(code) * scale in float64 (the kernel
  // works with this value, docs/quantization.md), or the float element.
  double value(int64_t b, int64_t r, int64_t c) const {
    const int64_t i = (b * rows + r) * ld + c;
    if (!quantized()) return load_element(dtype, mem.data(), i);
    const double v = codes::decode(dtype, codes::get_code(mem.data(), i, bits_of(dtype)));
    return scheme.kind == QuantKind::kNone ? v : v * double(scales[size_t(scale_index(b, r, c))]);
  }
  int64_t scale_index(int64_t b, int64_t r, int64_t c) const {
    const bool along_cols = axis == QuantAxis::kCols;
    switch (scheme.kind) {
      case QuantKind::kChannel:  // one scale per row (contraction along cols) or column
        return along_cols ? b * rows + r : b * cols + c;
      case QuantKind::kBlock: {
        // block_k along the contraction axis, block_n (or 1) along the other one.
        const int64_t other = scheme.block_n ? scheme.block_n : 1;
        const int64_t br = along_cols ? other : scheme.block_k;
        const int64_t bc = along_cols ? scheme.block_k : other;
        return b * scales_per_matrix() + (r / br) * grid.cols + c / bc;
      }
      default:
        return 0;
    }
  }

  // The operand as a float buffer of dtype d: gmmgen::dequantize's f32 values (or the float
  // elements) rounded to d. The baseline's input.
  Buffer as_float(DType d) const {
    Buffer out(d, count());
    if (!quantized()) {
      for (int64_t i = 0; i < count(); ++i)
        store_element(d, out.data(), i, load_element(dtype, mem.data(), i));
      return out;
    }
    // f32 values straight into the output, or into a temporary rounded to d afterwards.
    std::vector<float> f32;
    if (d != DType::kF32) f32.resize(size_t(count()));
    float* x = d == DType::kF32 ? static_cast<float*>(out.data()) : f32.data();
    const QuantizeOptions o = options();
    if (whole()) {
      dequantize(mem.data(), 0, scale_data(), 0, batch * rows, cols, o, x, 0);
    } else {
      for (int64_t b = 0; b < batch; ++b)
        dequantize(mem.data() + size_t(b) * code_bytes_per_matrix(), 0,
                   scales.data() + b * scales_per_matrix(), 0, rows, cols, o, x + b * rows * cols,
                   0);
    }
    if (d != DType::kF32)
      for (int64_t i = 0; i < count(); ++i) store_element(d, out.data(), i, double(f32[size_t(i)]));
    return out;
  }
};

// An input operand's dtype, scales and stored shape: what decides its random contents (with the
// random stream it is filled from).
struct OperandShape {
  DType dtype;
  Quant scheme;
  QuantAxis axis;
  int64_t batch, rows, cols;
  std::string key() const {
    return std::string(to_string(dtype)) + "@" + to_string(scheme) + "/" +
           std::to_string(int(axis)) + ":" + std::to_string(batch) + "x" + std::to_string(rows) +
           "x" + std::to_string(cols);
  }
  Operand make() const { return Operand(dtype, scheme, axis, batch, rows, cols); }
};

// A run's two input operands, lhs filled first from the run's random stream, then rhs.
struct Inputs {
  Operand lhs, rhs;
  Inputs(const OperandShape& l, const OperandShape& r, std::mt19937_64& rng)
      : lhs(l.make()), rhs(r.make()) {
    lhs.fill(rng);
    rhs.fill(rng);
  }
};

// The operands of the previous run, reused by the next run that asks for the same ones: a tuning
// sweep times dozens of tilings of one problem, and S3's f32 weights alone are 1 GiB that take
// seconds to fill. Filling is deterministic (the stream's state is part of the key), so a reused
// pair is byte for byte what a fresh fill would give. Only one pair is kept: the previous one is
// released before a different pair is made.
std::shared_ptr<const Inputs> inputs_for(const OperandShape& l, const OperandShape& r,
                                         std::mt19937_64& rng) {
  static std::mutex mutex;
  static std::shared_ptr<const Inputs> last;
  static std::string last_key;
  static std::mt19937_64 after;  // the stream as the fill left it
  std::ostringstream state;
  state << rng;
  const std::string key = l.key() + "|" + r.key() + "|" + state.str();
  std::lock_guard<std::mutex> lock(mutex);
  if (last && key == last_key) {
    rng = after;  // where a fresh fill would leave it: the samples checked are the same too
    return last;
  }
  last.reset();
  last = std::make_shared<const Inputs>(l, r, rng);
  last_key = key, after = rng;
  return last;
}

// A run's operands: stored layouts and contraction axes gmm lhs [M, K] along K; rhs [G][K, N]
// along K, or [G][N, K] with transpose_rhs; tgmm lhs [M, K] (or [K, M]) and rhs [M, N] along M.
std::shared_ptr<const Inputs> inputs_of(const KernelSpec& spec, int64_t M, std::mt19937_64& rng) {
  const int64_t K = spec.k, N = spec.n, G = spec.g;
  const bool tgmm = spec.op == Op::kTgmm, km = spec.lhs_layout == LhsLayout::kKM;
  const OperandShape lhs_shape =
      !tgmm ? OperandShape{spec.lhs, spec.lhs_quant, QuantAxis::kCols, 1, M, K}
      : km  ? OperandShape{spec.lhs, spec.lhs_quant, QuantAxis::kCols, 1, K, M}
            : OperandShape{spec.lhs, spec.lhs_quant, QuantAxis::kRows, 1, M, K};
  const OperandShape rhs_shape =
      tgmm                 ? OperandShape{spec.rhs, spec.rhs_quant, QuantAxis::kRows, 1, M, N}
      : spec.transpose_rhs ? OperandShape{spec.rhs, spec.rhs_quant, QuantAxis::kCols, G, N, K}
                           : OperandShape{spec.rhs, spec.rhs_quant, QuantAxis::kRows, G, K, N};
  return inputs_for(lhs_shape, rhs_shape, rng);
}

// The output of a run: [M, N] for gmm, [G][K, N] (or [G][N, K]) for tgmm.
Buffer output_of(const KernelSpec& spec, int64_t M) {
  return Buffer(spec.out, spec.op == Op::kTgmm ? spec.g * spec.k * spec.n : M * spec.n);
}

// The arguments of a call on `in` into `out` (packed operands, scales with ld 0).
gmmgen_args args_of(const KernelSpec& spec, const Workload& work, const Inputs& in, Buffer& out) {
  gmmgen_args a{};
  a.abi_version = GMMGEN_ABI_VERSION;
  a.m = work.m;
  a.lhs = in.lhs.mem.data(), a.rhs = in.rhs.mem.data(), a.out = out.data();
  a.lhs_scale = in.lhs.scale_data(), a.rhs_scale = in.rhs.scale_data();
  a.group_sizes = work.group_sizes.data();
  if (spec.out_mode != OutMode::kPlain) a.existing_out = out.data();
  return a;
}

// One contender of a timed round: what to run, and how long to wait after each run before the
// next contender starts (a baseline whose OpenMP workers spin-wait after a call would steal the
// next one's cores).
struct Contender {
  std::function<void()> run;
  std::chrono::milliseconds settle{0};
};

// Times the contenders side by side: two warm-up runs of each (caches, pages, thread pools), then
// `reps` rounds of one run of each in turn, and returns each one's median ms. Round robin rather
// than one contender's runs after another's: on a shared machine the memory bandwidth and the
// cores' share change over seconds, and a ratio of medians taken at different times measured that
// change as much as the kernels (oneDNN's own S3 rows moved by 30% from run to run).
std::vector<double> median_ms(const std::vector<Contender>& contenders, int reps) {
  for (int i = 0; i < 2; ++i)
    for (const Contender& c : contenders) {
      c.run();
      std::this_thread::sleep_for(c.settle);
    }
  std::vector<std::vector<double>> ms(contenders.size());
  for (int i = 0; i < reps; ++i)
    for (size_t j = 0; j < contenders.size(); ++j) {
      const auto t0 = std::chrono::steady_clock::now();
      contenders[j].run();
      ms[j].push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      std::this_thread::sleep_for(contenders[j].settle);
    }
  std::vector<double> medians;
  for (auto& m : ms) {
    std::sort(m.begin(), m.end());
    medians.push_back(m[m.size() / 2]);
  }
  return medians;
}

// Checks sampled outputs against a float64 reference of the same inputs, as the checker's bound
// (gmmgen/verify/checker.h) with one more output rounding of slack: 2 u_out |ref| +
// (terms + c) u S, u = 2^-24, S = sum |lhs * rhs|. Float operands: terms = the products, c = 2
// (f32 summation, one rounding to the output dtype). Quantized operands: c = 4 (each scale
// block's partial sum, the scale product and the scaling rounded in f32); terms = the products,
// or the scale blocks when both operands are integer (exact i32 partial sums).
struct Checker {
  DType out;
  int slack;
  std::string failure;
  void element(double got, double ref, double abs_sum, int64_t terms, const std::string& where) {
    if (!failure.empty()) return;
    const double floor = out == DType::kF16 ? std::ldexp(1.0, -25) : 1e-30;  // f16 subnormals
    const double bound = 2 * std::ldexp(1.0, -dtype_info(out).precision) * std::fabs(ref) +
                         double(terms + slack) * std::ldexp(1.0, -24) * abs_sum + floor;
    if (!(std::fabs(got - ref) <= bound))
      failure = where + ": got " + std::to_string(got) + ", float64 reference " +
                std::to_string(ref) + " (bound " + std::to_string(bound) + ")";
  }
};

// The scale block along the contraction: the smallest block_k of the block-scaled operands (they
// nest, being powers of two); 0 when neither has blocks.
int64_t scale_block(const KernelSpec& s) {
  int64_t b = 0;
  for (const Quant* q : {&s.lhs_quant, &s.rhs_quant})
    if (q->kind == QuantKind::kBlock) b = b ? std::min(b, q->block_k) : q->block_k;
  return b;
}

// One sampled output element of the baseline, with the float64 product of the baseline's own
// operands (quantized rows: the dequantized values it was given).
struct BaselineSample {
  int64_t index;  // in the baseline's output (gmm [m, N], tgmm [G, K, N])
  double ref, abs_sum;
  int64_t terms;
  std::string where;
};

}  // namespace

// ---- Quantized rows -----------------------------------------------------------------------------

const std::vector<QuantPreset>& quant_presets() {
  static const std::vector<QuantPreset> presets = [] {
    const Quant none, channel{QuantKind::kChannel, 0, 0};
    const auto block = [](int64_t b, int64_t c = 0) { return Quant{QuantKind::kBlock, b, c}; };
    return std::vector<QuantPreset>{
        {"bf16-fp8-block", DType::kBF16, DType::kF8E4M3, none, block(128, 128)},
        {"bf16-int8-channel", DType::kBF16, DType::kI8, none, channel},
        {"bf16-int4-block", DType::kBF16, DType::kI4, none, block(128)},
        {"bf16-nf4-block", DType::kBF16, DType::kNF4, none, block(64)},
        {"bf16-t2-channel", DType::kBF16, DType::kT2, none, channel},
        {"f32-int8-channel", DType::kF32, DType::kI8, none, channel},
        {"fp8-block", DType::kF8E4M3, DType::kF8E4M3, block(128), block(128, 128)},
        {"int8-channel", DType::kI8, DType::kI8, channel, channel}};
  }();
  return presets;
}

std::optional<KernelSpec> weight_gradient(const KernelSpec& tgmm, const QuantPreset& p) {
  if (!codes::is_fp8(p.lhs) || p.lhs_quant.kind != QuantKind::kBlock || p.lhs_quant.block_n != 0)
    return std::nullopt;
  KernelSpec s = tgmm;
  s.lhs = p.lhs, s.rhs = DType::kF8E5M2;
  s.lhs_quant = s.rhs_quant = Quant{QuantKind::kBlock, p.lhs_quant.block_k, 0};
  return s;
}

bool is_quantized(const KernelSpec& s) {
  return codes::is_quantized(s.lhs) || codes::is_quantized(s.rhs);
}

DType activation_dtype(const KernelSpec& s) {
  return s.lhs == DType::kBF16 ? DType::kBF16 : DType::kF32;
}

KernelSpec with_quant(const KernelSpec& spec, const QuantPreset& p) {
  KernelSpec s = spec;
  s.lhs = p.lhs, s.rhs = p.rhs;
  s.lhs_quant = p.lhs_quant, s.rhs_quant = p.rhs_quant;
  return s;
}

KernelSpec float_counterpart(const KernelSpec& spec) {
  KernelSpec s = spec;
  s.lhs = s.rhs = activation_dtype(spec);
  s.lhs_quant = s.rhs_quant = Quant{};
  return s;
}

std::vector<QuantPreset> parse_quant_set(const std::string& text) {
  const auto& presets = quant_presets();
  std::string names;
  for (const auto& p : presets) names += (names.empty() ? "" : ", ") + p.name;
  const std::string items = "`default`, a preset (" + names +
                            ") or LHS[@SCHEME]/RHS[@SCHEME] (dtypes and schemes as in specs, e.g. "
                            "bf16/i4@block:128)";
  if (text.empty() || text.back() == ',')
    throw InvalidArgument("--quant '" + text + "': an empty item; each item is one of: " + items);
  std::vector<QuantPreset> out;
  const auto add = [&](const QuantPreset& p) {
    const bool seen = std::any_of(out.begin(), out.end(), [&](const QuantPreset& q) {
      return q.lhs == p.lhs && q.rhs == p.rhs && q.lhs_quant == p.lhs_quant &&
             q.rhs_quant == p.rhs_quant;
    });
    if (!seen) out.push_back(p);
  };
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    if (item.empty())
      throw InvalidArgument("--quant '" + text + "': an empty item; each item is one of: " + items);
    if (item == "default") {
      for (const auto& p : presets) add(p);
      continue;
    }
    const auto named = std::find_if(presets.begin(), presets.end(),
                                    [&](const QuantPreset& q) { return q.name == item; });
    if (named != presets.end()) {
      add(*named);
      continue;
    }
    const size_t slash = item.find('/');
    if (slash == std::string::npos || item.find('/', slash + 1) != std::string::npos)
      throw InvalidArgument("--quant: '" + item + "' is not one of: " + items);
    // Each side through the spec's own field parsers, then the spec's rules on a gmm (nf4 and t2
    // only for rhs, BxC only for rhs, scales where codes need them, ...): their messages name the
    // field and the rule.
    KernelSpec probe;
    probe.op = Op::kGmm, probe.out = DType::kF32;
    probe.k = 1024, probe.n = 1024, probe.g = probe.g_local = 8;
    try {
      const auto side = [&](const std::string& part, const char* dtype_key, const char* quant_key) {
        const size_t at = part.find('@');
        set_field(spec_field(dtype_key), probe, part.substr(0, at));
        if (at != std::string::npos) set_field(spec_field(quant_key), probe, part.substr(at + 1));
      };
      side(item.substr(0, slash), "lhs", "lhs_quant");
      side(item.substr(slash + 1), "rhs", "rhs_quant");
    } catch (const std::exception& e) {
      throw InvalidArgument("--quant: '" + item + "': " + e.what());
    }
    if (!is_quantized(probe))
      throw InvalidArgument("--quant: '" + item +
                            "' quantizes neither operand (one must be f8e4m3, f8e5m2, i8, i4, "
                            "nf4 or t2)");
    try {
      probe.tiling = default_tiling(probe);
      validate(probe);
    } catch (const std::exception& e) {
      throw InvalidArgument("--quant: '" + item + "': " + e.what());
    }
    add(QuantPreset{item, probe.lhs, probe.rhs, probe.lhs_quant, probe.rhs_quant});
  }
  return out;
}

// ---- Baselines and rows -------------------------------------------------------------------------

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
  nlohmann::ordered_json j = {{"shape", shape}, {"op", op}, {"lhs", lhs}, {"rhs", rhs}};
  if (quantized) j["lhs_quant"] = lhs_quant, j["rhs_quant"] = rhs_quant;
  j["out"] = out;
  j["kernel"] = kernel;
  j["tiling"] = {{"tm", tiling.tm}, {"tk", tiling.tk}, {"tn", tiling.tn}};
  if (!tiling_source.empty()) j["tiling_source"] = tiling_source;
  j["m"] = m, j["k"] = k, j["n"] = n, j["g"] = g;
  j["group_sizes"] = group_sizes;
  j["ms"] = speed(ms);
  j["gflops"] = speed(gflops);
  j["baseline"] = baseline;
  // Quantized rows: the baseline ran on both operands dequantized to this dtype.
  if (quantized) j["baseline_dtype"] = baseline_dtype;
  j["baseline_ms"] = baseline_ms;
  j["baseline_gflops"] = baseline_gflops;
  j["ratio"] = speed(ratio);
  if (quantized) {
    j["float_gflops"] = float_gflops > 0 ? nlohmann::ordered_json(float_gflops) : nullptr;
    j["vs_float"] = ok && vs_float > 0 ? nlohmann::ordered_json(vs_float) : nullptr;
  }
  if (end_to_end_ms > 0) {
    j["quantize_ms"] = speed(quantize_ms);
    j["quantize_gbs"] = speed(quantize_gbs);
    j["quantize_bandwidth_fraction"] =
        quantize_bandwidth_fraction > 0 ? speed(quantize_bandwidth_fraction) : nullptr;
    j["end_to_end_ms"] = speed(end_to_end_ms);
    j["end_to_end_bf16_ms"] = speed(end_to_end_bf16_ms);
    j["end_to_end_gflops"] = speed(end_to_end_gflops);
    j["end_to_end_ratio"] = end_to_end_ratio > 0 ? speed(end_to_end_ratio) : nullptr;
    j["end_to_end_vs_float"] =
        ok && end_to_end_vs_float > 0 ? nlohmann::ordered_json(end_to_end_vs_float) : nullptr;
  }
  j["peak_gflops"] = peak_gflops;
  j["peak_fraction"] = speed(peak_fraction);
  j["path"] = path;
  j["path_peak_gflops"] = path_peak_gflops > 0 ? nlohmann::ordered_json(path_peak_gflops) : nullptr;
  j["path_fraction"] = path_peak_gflops > 0 ? speed(path_fraction) : nullptr;
  j["bytes"] = bytes;
  j["roofline_ms"] = bound.empty() ? nullptr : nlohmann::ordered_json(roofline_ms);
  j["roofline_fraction"] = bound.empty() ? nullptr : speed(roofline_fraction);
  j["bound"] = bound.empty() ? nullptr : nlohmann::ordered_json(bound);
  j["ok"] = ok;
  j["failure"] = failure;
  return j;
}

std::string dtypes_label(const std::string& lhs, const std::string& lhs_quant,
                         const std::string& rhs, const std::string& rhs_quant,
                         const std::string& out) {
  const auto side = [](const std::string& d, const std::string& q) {
    return q == "none" ? d : d + "@" + q;
  };
  return side(lhs, lhs_quant) + "x" + side(rhs, rhs_quant) + "->" + out;
}

void set_machine_figures(Row& r, const Machine& machine, const std::string& key) {
  const double bandwidth_gbs = machine.bandwidth_gbs;
  r.peak_gflops = machine.peak_gflops;
  r.peak_fraction = r.peak_gflops > 0 ? r.gflops / r.peak_gflops : 0;
  r.path_peak_gflops = machine.path_peak(key);
  r.path_fraction = r.path_peak_gflops > 0 ? r.gflops / r.path_peak_gflops : 0;
  r.quantize_bandwidth_fraction =
      bandwidth_gbs > 0 && r.quantize_gbs > 0 ? r.quantize_gbs / bandwidth_gbs : 0;
  r.roofline_ms = r.roofline_fraction = 0;
  r.bound.clear();
  if (r.path_peak_gflops <= 0 || bandwidth_gbs <= 0 || r.ms <= 0) return;
  const double compute_ms = r.flops / (r.path_peak_gflops * 1e6);
  const double memory_ms = r.bytes / (bandwidth_gbs * 1e6);
  r.roofline_ms = std::max(compute_ms, memory_ms);
  r.roofline_fraction = r.roofline_ms / r.ms;
  r.bound = compute_ms >= memory_ms ? "compute" : "memory";
}

Row run(Runtime& rt, const KernelSpec& spec, const Workload& work, const Options& o,
        const Machine& machine, const KernelSpec* float_spec) {
  validate(spec);
  if (spec.g_local != spec.g)
    throw InvalidArgument("bench: sharded specs (g_local < g) are not benchmarked");
  if (int64_t(work.group_sizes.size()) != spec.g)
    throw InvalidArgument("bench: " + std::to_string(work.group_sizes.size()) +
                          " group sizes for g=" + std::to_string(spec.g));
  if (float_spec) {  // the float counterpart, tiled as it may be
    KernelSpec want = float_counterpart(spec);
    want.tiling = float_spec->tiling;
    if (!is_quantized(spec) || !(*float_spec == want))
      throw InvalidArgument(
          "bench: the float kernel timed beside a quantized row is its float_counterpart");
  }
  Row row;
  row.shape = work.shape, row.op = std::string(to_string(spec.op));
  row.lhs = std::string(to_string(spec.lhs)), row.rhs = std::string(to_string(spec.rhs));
  row.out = std::string(to_string(spec.out)), row.kernel = kernel_name(spec);
  row.tiling = spec.tiling;
  row.lhs_quant = to_string(spec.lhs_quant), row.rhs_quant = to_string(spec.rhs_quant);
  row.quantized = is_quantized(spec);
  row.m = work.m, row.k = spec.k, row.n = spec.n, row.g = spec.g;
  row.group_sizes = work.group_sizes;
  int64_t rows = 0;
  for (int32_t v : work.group_sizes) rows += v;
  row.flops = 2.0 * double(rows) * double(spec.k) * double(spec.n);
  row.path = std::string(to_string(product_path(spec, run_family(spec))));
  row.bytes = double(cost_estimate(spec).bytes.at(work.m));

  const bool tgmm = spec.op == Op::kTgmm;
  const int64_t M = work.m, K = spec.k, N = spec.n, G = spec.g;
  std::mt19937_64 rng(o.seed);
  const bool km = spec.lhs_layout == LhsLayout::kKM;
  const std::shared_ptr<const Inputs> inputs = inputs_of(spec, M, rng);
  const Operand& lhs = inputs->lhs;
  const Operand& rhs = inputs->rhs;
  Buffer out = output_of(spec, M);
  gmmgen_args a = args_of(spec, work, *inputs, out);
  const gmmgen_kernel_entry& kernel = rt.kernel(spec);

  // Quantized rows: both operands dequantized to the activation dtype (made outside the timing,
  // only for a baseline that exists or gmm-gen's float kernel), the input of both.
  const DType base_dtype = row.quantized ? activation_dtype(spec) : spec.lhs;
  row.baseline_dtype = std::string(to_string(base_dtype));
  std::unique_ptr<Buffer> base_lhs, base_rhs;
  if (row.quantized &&
      (float_spec || (o.baseline != BaselineKind::kNone && baseline_available(o.baseline)))) {
    base_lhs = std::make_unique<Buffer>(lhs.as_float(base_dtype));
    base_rhs = std::make_unique<Buffer>(rhs.as_float(base_dtype));
  }

  // The baseline (its primitives made outside the timing).
  row.baseline = to_string(o.baseline);
  std::unique_ptr<Baseline> base;
  KernelSpec base_spec = spec;
  if (row.quantized) {
    base_spec.lhs = base_spec.rhs = base_dtype;
    base_spec.lhs_quant = base_spec.rhs_quant = Quant{};
  }
  if (o.baseline != BaselineKind::kNone) {
    const Operands ops{&base_spec, &work, base_lhs ? base_lhs->data() : lhs.mem.data(),
                       base_rhs ? base_rhs->data() : rhs.mem.data()};
    try {
      base = o.baseline == BaselineKind::kOneDnn ? make_onednn(ops, o.threads)
                                                 : make_openblas(ops, o.threads);
    } catch (const std::exception& e) {
      row.baseline += " (unavailable: " + std::string(e.what()) + ")";
    }
    if (!base && row.baseline == to_string(o.baseline))
      row.baseline += " (not found at configure time)";
  }

  // gmm-gen's kernel on the float counterpart, on the baseline's operands.
  const gmmgen_kernel_entry* float_kernel = float_spec ? &rt.kernel(*float_spec) : nullptr;
  std::unique_ptr<Buffer> float_out;
  gmmgen_args fa = a;
  if (float_kernel) {
    float_out = std::make_unique<Buffer>(spec.out, tgmm ? G * K * N : M * N);
    fa.lhs = base_lhs->data(), fa.rhs = base_rhs->data(), fa.out = float_out->data();
    fa.lhs_scale = fa.rhs_scale = nullptr;
    if (spec.out_mode != OutMode::kPlain) fa.existing_out = float_out->data();
  }

  // Activations quantized in the call (gmm with lhs codes): other f32 activations of the same
  // distribution, quantized by gmmgen::quantize into the lhs's dtype and scheme in one pass
  // (ValueCheck::kWhileWriting, gmmgen_quantize_one_pass; timed alone),
  // and given to Runtime::gmm with GmmOptions::quantize_lhs, which quantizes them and runs this
  // row's kernel, into an output of its own (end to end); and the same from those activations
  // rounded to bf16. Only for isa=native rows: the runtime's call runs the host's best family.
  const bool quantizes_activations =
      !tgmm && codes::is_quantized(spec.lhs) && spec.isa == Isa::kNative;
  std::vector<float> act;
  std::vector<uint16_t> act_bf16;
  std::unique_ptr<Operand> act_q;
  std::unique_ptr<Buffer> act_out;
  GmmOptions fused;
  TensorView act_view, act_bf16_view, rhs_view, out_view;
  if (quantizes_activations) {
    act.resize(size_t(M * K));
    for (float& v : act) v = float(uniform_real(rng, -1.0, 1.0));
    act_bf16.resize(act.size());
    for (size_t i = 0; i < act.size(); ++i)
      store_element(DType::kBF16, act_bf16.data(), int64_t(i), act[i]);
    act_q = std::make_unique<Operand>(lhs.dtype, lhs.scheme, lhs.axis, 1, M, K);
    act_q->grid = lhs.grid;
    act_q->scales.assign(std::max<size_t>(lhs.scales.size(), 1), 0.0f);
    act_out = std::make_unique<Buffer>(spec.out, M * N);
    act_view = TensorView::matrix(act.data(), DType::kF32, M, K);
    act_bf16_view = TensorView::matrix(act_bf16.data(), DType::kBF16, M, K);
    rhs_view = TensorView::batch(rhs.mem.data(), spec.rhs, spec.g_local, spec.transpose_rhs ? N : K,
                                 spec.transpose_rhs ? K : N);
    out_view = TensorView::matrix(act_out->data(), spec.out, M, N);
    fused.transpose_rhs = spec.transpose_rhs;
    fused.tiling = spec.tiling;
    fused.rhs_scales = {spec.rhs_quant, rhs.scale_data(), 0};
    fused.quantize_lhs = LhsQuantization{spec.lhs, spec.lhs_quant, {}};
    if (spec.out_mode != OutMode::kPlain) {
      fused.existing_out = &out_view;
      fused.accumulate = spec.out_mode == OutMode::kAccumulate;
    }
    if (rt.gmm_spec(act_view, rhs_view, work.group_sizes, out_view, fused) != spec)
      throw std::logic_error("bench: the end-to-end call would run another kernel than " +
                             row.kernel);
  }
  QuantizeOptions one_pass = act_q ? act_q->options() : QuantizeOptions{};
  one_pass.check = ValueCheck::kWhileWriting;
  const auto quantize_activations = [&] {
    quantize(act.data(), M, K, 0, one_pass, act_q->mem.data(), 0,
             act_q->scheme.kind == QuantKind::kNone ? nullptr : act_q->scales.data(), 0);
  };

  // The kernel, the float kernel, the quantizer alone, the call that quantizes and runs the kernel,
  // and the baseline, round robin. The baseline's OpenMP workers spin after each call (libgomp:
  // 300000 pause loops, ~5-12 ms) before they sleep; 50 ms lets them go to sleep before the next
  // contender starts.
  std::vector<Contender> contenders{{[&] { rt.run(kernel, a); }}};
  const size_t float_at = contenders.size();
  if (float_kernel) contenders.push_back({[&] { rt.run(*float_kernel, fa); }});
  const size_t quantize_at = contenders.size();
  if (quantizes_activations) {
    contenders.push_back({quantize_activations});
    contenders.push_back({[&] { rt.gmm(act_view, rhs_view, work.group_sizes, out_view, fused); }});
    contenders.push_back(
        {[&] { rt.gmm(act_bf16_view, rhs_view, work.group_sizes, out_view, fused); }});
  }
  if (base) contenders.push_back({[&] { base->run(); }, std::chrono::milliseconds(50)});
  const std::vector<double> ms = median_ms(contenders, o.reps);
  row.ms = ms[0];
  row.gflops = row.flops / (row.ms * 1e6);
  if (float_kernel) {
    row.float_gflops = row.flops / (ms[float_at] * 1e6);
    row.vs_float = row.gflops / row.float_gflops;
  }
  if (base) {
    row.baseline_ms = ms.back();
    row.baseline_gflops = row.flops / (row.baseline_ms * 1e6);
    row.ratio = row.gflops / row.baseline_gflops;
  }
  if (quantizes_activations) {
    row.quantize_ms = ms[quantize_at];
    row.quantize_gbs = double(M * K) * 4 / (row.quantize_ms * 1e6);
    row.end_to_end_ms = ms[quantize_at + 1];
    row.end_to_end_bf16_ms = ms[quantize_at + 2];
    row.end_to_end_gflops = row.flops / (row.end_to_end_ms * 1e6);
    if (base) row.end_to_end_ratio = row.baseline_ms / row.end_to_end_ms;
    if (float_kernel) row.end_to_end_vs_float = row.end_to_end_gflops / row.float_gflops;
  }
  set_machine_figures(row, machine, path_key(spec));

  // The float64 reference on a sample of the output. Logical accessors: lhs (r, k), rhs (g, k, n)
  // for gmm and (r, n) for tgmm.
  const int64_t sb = scale_block(spec);
  const bool integer_product = is_integer(spec.lhs) && is_integer(spec.rhs);
  Checker check{spec.out, row.quantized ? 4 : 2, ""};
  std::vector<BaselineSample> base_samples;
  std::vector<int64_t> start(size_t(G) + 1, 0);
  for (int64_t g = 0; g < G; ++g)
    start[size_t(g) + 1] = start[size_t(g)] + work.group_sizes[size_t(g)];
  auto lhs_at = [&](int64_t r, int64_t k) { return km ? lhs.value(0, k, r) : lhs.value(0, r, k); };
  auto gmm_rhs_index = [&](int64_t g, int64_t k, int64_t n) {
    return spec.transpose_rhs ? (g * N + n) * K + k : (g * K + k) * N + n;
  };
  auto lhs_index = [&](int64_t r, int64_t k) { return km ? k * M + r : r * K + k; };
  if (spec.out_mode == OutMode::kPlain) {
    for (int t = 0; t < 24 && check.failure.empty(); ++t) {
      const int64_t g = int64_t(rng() % uint64_t(G));
      const int64_t lo = start[size_t(g)], hi = start[size_t(g) + 1];
      if (!tgmm) {
        if (hi == lo) continue;
        const int64_t r = lo + int64_t(rng() % uint64_t(hi - lo));
        const int64_t terms = integer_product ? (sb ? ceil_div(K, sb) : 1) : K;
        for (int64_t n = 0; n < N; n += 1 + N / 64) {
          double ref = 0, abs_sum = 0, bref = 0, babs = 0;
          for (int64_t k = 0; k < K; ++k) {
            const double x = lhs_at(r, k);
            const double w = spec.transpose_rhs ? rhs.value(g, n, k) : rhs.value(g, k, n);
            ref += x * w, abs_sum += std::fabs(x * w);
            if (base_lhs) {
              const double bx = base_lhs->get(lhs_index(r, k));
              const double bw = base_rhs->get(gmm_rhs_index(g, k, n));
              bref += bx * bw, babs += std::fabs(bx * bw);
            }
          }
          const std::string where = "out[" + std::to_string(r) + ", " + std::to_string(n) + "]";
          check.element(out.get(r * N + n), ref, abs_sum, terms, where);
          if (base_lhs) base_samples.push_back({r * N + n, bref, babs, K, where});
        }
      } else {
        const int64_t k = int64_t(rng() % uint64_t(K));
        // Integer products: one exact partial sum per block of sb global rows the group touches.
        const int64_t terms = !integer_product ? hi - lo
                              : hi == lo       ? 0
                              : sb             ? (hi - 1) / sb - lo / sb + 1
                                               : 1;
        for (int64_t n = 0; n < N; n += 1 + N / 64) {
          double ref = 0, abs_sum = 0, bref = 0, babs = 0;
          for (int64_t r = lo; r < hi; ++r) {
            const double p = lhs_at(r, k) * rhs.value(0, r, n);
            ref += p, abs_sum += std::fabs(p);
            if (base_lhs) {
              const double bp = base_lhs->get(lhs_index(r, k)) * base_rhs->get(r * N + n);
              bref += bp, babs += std::fabs(bp);
            }
          }
          const int64_t at = spec.transpose_rhs ? (g * N + n) * K + k : (g * K + k) * N + n;
          const std::string where = "out[" + std::to_string(g) + "][" + std::to_string(k) + ", " +
                                    std::to_string(n) + "]";
          check.element(out.get(at), ref, abs_sum, terms, where);
          if (base_lhs) base_samples.push_back({(g * K + k) * N + n, bref, babs, hi - lo, where});
        }
      }
    }
  }

  // The baseline's output. Float rows: it must agree with the kernel's. Quantized rows: it ran on
  // rounded operands (the kernel did not), so each sampled element must match the float64 product
  // of its own operands (f32 output, float bound).
  if (base) {
    const auto& b = base->output();
    if (row.quantized) {
      Checker base_check{DType::kF32, 2, ""};
      for (const BaselineSample& s : base_samples)
        base_check.element(double(b[size_t(s.index)]), s.ref, s.abs_sum, s.terms,
                           "baseline " + s.where);
      if (!base_check.failure.empty() && check.failure.empty()) check.failure = base_check.failure;
    } else if (spec.out_mode == OutMode::kPlain) {
      double worst = 0, scale = 0;
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
  }
  row.ok = check.failure.empty();
  row.failure = check.failure;
  if (!row.ok)  // a wrong kernel has no speed
    row.ms = row.gflops = row.ratio = row.peak_fraction = row.float_gflops = row.vs_float =
        row.path_fraction = row.roofline_fraction = 0;
  return row;
}

nlohmann::ordered_json AbRow::to_json() const {
  const auto time = [&](double v) { return ok ? nlohmann::ordered_json(v) : nullptr; };
  nlohmann::ordered_json j = {{"shape", shape}, {"op", op}, {"lhs", lhs}, {"rhs", rhs}};
  j["lhs_quant"] = lhs_quant, j["rhs_quant"] = rhs_quant, j["out"] = out;
  j["kernel_a"] = kernel_a, j["kernel_b"] = kernel_b;
  j["m"] = m, j["k"] = k, j["n"] = n, j["g"] = g;
  j["rounds"] = rounds;
  j["a_ms"] = time(a_ms), j["b_ms"] = time(b_ms);
  j["ratio"] = time(ratio), j["ratio_p25"] = time(ratio_p25), j["ratio_p75"] = time(ratio_p75);
  j["ok"] = ok;
  j["failure"] = failure;
  return j;
}

int ab_rounds(int reps) {
  return (reps + 1) / 2 * 2;
}

AbRow run_ab(Runtime& rt_a, const KernelSpec& a, Runtime& rt_b, const KernelSpec& b,
             const Workload& work, const Options& o, const Machine& machine) {
  KernelSpec same = b;
  same.tiling = a.tiling;
  if (!(same == a))
    throw InvalidArgument("bench --ab: the two sides run different problems (" + to_text(a) +
                          " and " + to_text(b) + "); they may differ in tiling only");
  AbRow r;
  r.shape = work.shape, r.op = std::string(to_string(a.op));
  r.lhs = std::string(to_string(a.lhs)), r.rhs = std::string(to_string(a.rhs));
  r.out = std::string(to_string(a.out));
  r.lhs_quant = to_string(a.lhs_quant), r.rhs_quant = to_string(a.rhs_quant);
  r.kernel_a = kernel_name(a), r.kernel_b = kernel_name(b);
  r.m = work.m, r.k = a.k, r.n = a.n, r.g = a.g;
  Options once = o;
  once.reps = 1, once.baseline = BaselineKind::kNone;
  for (const auto& [rt, spec, side] :
       {std::tuple<Runtime*, const KernelSpec*, const char*>{&rt_a, &a, "A"}, {&rt_b, &b, "B"}}) {
    const Row checked = run(*rt, *spec, work, once, machine);
    if (!checked.ok && r.ok) r.ok = false, r.failure = std::string(side) + ": " + checked.failure;
  }
  if (!r.ok) return r;

  std::mt19937_64 rng(o.seed);
  const std::shared_ptr<const Inputs> inputs = inputs_of(a, work.m, rng);
  // Two outputs, one for the first call of every round and one for the second, whichever side
  // makes it: an output of its own per side gave that side its memory's speed as well (an A/A
  // of S3's tgmm, 1 GiB of output each, read 0.92 on this KVM guest).
  Buffer out_first = output_of(a, work.m), out_second = output_of(b, work.m);
  const gmmgen_args args_a[2] = {args_of(a, work, *inputs, out_first),
                                 args_of(a, work, *inputs, out_second)};
  const gmmgen_args args_b[2] = {args_of(b, work, *inputs, out_first),
                                 args_of(b, work, *inputs, out_second)};
  const gmmgen_kernel_entry& ka = rt_a.kernel(a);
  const gmmgen_kernel_entry& kb = rt_b.kernel(b);
  const auto timed = [](const std::function<void()>& f) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  };
  // One call of side A (or B) into the output of the round's first (or second) place.
  const auto call = [&](bool side_a, int place) {
    side_a ? rt_a.run(ka, args_a[place]) : rt_b.run(kb, args_b[place]);
  };
  for (int i = 0; i < 2; ++i)
    for (int place = 0; place < 2; ++place) call(true, place), call(false, place);
  // Rounds in pairs, A first in one and B first in the other, one ratio per pair: each side
  // runs once in each place of a round.
  const int rounds = ab_rounds(o.reps);
  std::vector<double> ta, tb, ratios;
  for (int i = 0; i < rounds; ++i) {
    const bool a_first = i % 2 == 0;
    const double first = timed([&] { call(a_first, 0); });
    const double second = timed([&] { call(!a_first, 1); });
    ta.push_back(a_first ? first : second), tb.push_back(a_first ? second : first);
    if (!a_first) ratios.push_back((tb[i - 1] + tb[i]) / (ta[i - 1] + ta[i]));
  }
  const auto at = [](std::vector<double> v, double q) {
    std::sort(v.begin(), v.end());
    return v[size_t(q * double(v.size() - 1) + 0.5)];
  };
  r.rounds = rounds;
  r.a_ms = at(ta, 0.5), r.b_ms = at(tb, 0.5);
  r.ratio = at(ratios, 0.5), r.ratio_p25 = at(ratios, 0.25), r.ratio_p75 = at(ratios, 0.75);
  return r;
}

}  // namespace gmmgen::bench
