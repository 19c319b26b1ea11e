// gmm-gen bench (docs/performance.md): times a kernel side by side with a per-group baseline in one
// run, checks it, and reports GFLOP/s, the ratio to the baseline and the fraction of the
// machine's measured FMA peak. Quantized kernels (docs/quantization.md) run on random floats
// quantized by the library's absmax quantizers; their baseline runs on the dequantized operands.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "gmmgen/heuristics.h"
#include "gmmgen/runtime.hpp"
#include "gmmgen/spec.h"

namespace gmmgen::bench {

// A problem to time: rows and group sizes for a spec's K, N, G.
struct Workload {
  std::string shape;  // S1..S4, or "custom"
  int64_t m = 0;
  std::vector<int32_t> group_sizes;  // [G]
};

// Group sizes of a named distribution (docs/performance.md): uniform | zipf (s = 1.2 over 7/8 of
// the groups, every 8th empty) | tiny (1..2*mean-1 rows, ~M/G on average) | decode (each row picks
// a group at random) | sizes:a,b,... (explicit). The sum is m, except for explicit sizes, whose sum
// must not exceed it. Throws InvalidArgument naming the rule.
std::vector<int32_t> group_sizes(const std::string& dist, int32_t g, int64_t m, uint64_t seed);

// The standard shapes of docs/performance.md (S1..S4) for an op and dtypes: the problem (its
// tiling the spec default; a row takes workload_tiling's) and the workload.
struct Shape {
  KernelSpec spec;
  Workload work;
};
Shape standard_shape(const std::string& name, Op op, DType lhs, DType rhs, DType out);
// The tiling rt gives a call of spec's problem on w's group sizes (Runtime::choose_tiling: the
// override, else its tuning tables, else the heuristic), and where it came from.
TilingChoice workload_tiling(const Runtime& rt, const KernelSpec& spec, const Workload& w,
                             const std::optional<Tiling>& override = std::nullopt);
std::vector<std::string> standard_shape_names();

// ---- Quantized rows -----------------------------------------------------------------------------

// The lhs and rhs dtypes and scale schemes of a quantized problem (gmm-gen bench --quant).
struct QuantPreset {
  std::string name;  // as given: a preset name or LHS[@SCHEME]/RHS[@SCHEME]
  DType lhs = DType::kBF16, rhs = DType::kI8;
  Quant lhs_quant, rhs_quant;
};

// The named presets, in the order of the `default` set:
//   bf16-fp8-block     bf16 x f8e4m3 block:128x128      bf16-int8-channel  bf16 x i8 channel
//   bf16-int4-block    bf16 x i4 block:128              bf16-nf4-block     bf16 x nf4 block:64
//   bf16-t2-channel    bf16 x t2 channel                f32-int8-channel   f32 x i8 channel
//   fp8-block          f8e4m3 block:128 x f8e4m3 block:128x128 (block FP8)
//   int8-channel       i8 channel x i8 channel
const std::vector<QuantPreset>& quant_presets();

// A --quant value: `default` (every named preset) or a comma list of preset names and of
// LHS[@SCHEME]/RHS[@SCHEME] pairs (dtype and scheme as in specs, e.g. bf16/i4@block:128,
// i8@block:128/i8@channel). Each must make a valid gmm spec with a quantized operand. Throws
// InvalidArgument naming --quant, the item and the rule; duplicates are dropped.
std::vector<QuantPreset> parse_quant_set(const std::string& text);

// A spec with the preset's dtypes and schemes (and the same tiling).
KernelSpec with_quant(const KernelSpec& spec, const QuantPreset& p);

// The weight gradient of a preset's forward, where it runs on codes: with fp8 activations in
// 1-D blocks of B (fp8-block), gmm_vjp's drhs = tgmm(lhs, dout) reads the activations in blocks of
// B rows along M (their column-wise copy from quantize_dual) and dout quantized to its default
// gradient dtype, f8e5m2 in blocks of B (docs/quantization.md): `tgmm` (a tgmm spec) with those
// dtypes and schemes. nullopt for every other preset (their weight gradients take float
// activations).
std::optional<KernelSpec> weight_gradient(const KernelSpec& tgmm, const QuantPreset& p);

// Whether either operand of the spec holds codes (i8, i4, nf4, t2, fp8).
bool is_quantized(const KernelSpec& spec);

// The float dtype a quantized problem's activations are computed in: bf16 when lhs is bf16, else
// f32 (integer, fp8, f16 and f32 lhs). The baseline runs on both operands dequantized to it, and
// `vs float` compares with gmm-gen's kernel on it.
DType activation_dtype(const KernelSpec& spec);

// The float problem a quantized spec is compared with: both operands in activation_dtype, no
// scales, the same output, layouts and tiling.
KernelSpec float_counterpart(const KernelSpec& spec);

enum class BaselineKind { kOneDnn, kOpenBlas, kNone };
BaselineKind parse_baseline(const std::string& name);  // onednn | openblas | none
std::string to_string(BaselineKind k);
bool baseline_available(BaselineKind k);

struct Machine {
  std::string cpu;       // lscpu's model name
  std::string flags;     // the CPU's feature flags
  std::string isa;       // the best ISA family gmm-gen has for it
  std::string compiler;  // the compiler kernels are built with
  int threads = 1;
  double peak_gflops = 0;  // f32 FMA peak with `threads` threads, measured
  // The peak of each product path a row uses (measure_paths), keyed by path_key, but the host
  // family's f32 FMA where peak_gflops holds it; and the DRAM read bandwidth with `threads`
  // threads (GB/s; 0: not measured).
  std::map<std::string, double> path_peak_gflops;
  double bandwidth_gbs = 0;
  // The operands' pages: what bench asked for (--huge-pages) and the OS's transparent huge page
  // mode (always, madvise, never; "unknown" where it does not say).
  std::string pages;
  // Bytes past a 64-byte boundary at which the operands and outputs start (set_operand_offset).
  int operand_offset = 0;
  // A path's peak: path_peak_gflops, else for the host family's f32 FMA peak_gflops; 0 if neither.
  double path_peak(const std::string& key) const;
  nlohmann::ordered_json to_json() const;  // path_peak_gflops with the host's f32 FMA entry
};

// Whether bench's buffers made from now on (operands, outputs, the bandwidth probe's) ask for 2 MiB
// pages (MADV_HUGEPAGE; bench --huge-pages). Off by default: the allocator's pages.
void set_huge_pages(bool on);
bool huge_pages();
// Bytes past a 64-byte boundary at which bench's operand and output buffers made from now on start
// (bench --offset): 0 (the default), 16, 32 or 48; numpy puts its large arrays 16 bytes past one.
// The bandwidth probe's buffer stays aligned. Another value throws std::invalid_argument.
void set_operand_offset(int bytes);
int operand_offset();
// The header's words for an offset: "16 bytes past a 64-byte boundary (operands and outputs)".
std::string describe_offset(int bytes);

// Measures the f32 FMA peak with a register-only loop of the host's best family (about a second).
double measure_peak_gflops(int threads);
// The peak of one product path of family f (a register-only loop of that instruction, about a
// second): f32 FMA of the family's width, vdpbf16ps, vpdpbusd (avx512bf16) or vpmaddwd + vpaddd
// (avx2), AMX tdpbf16ps on four C tiles. 0 for a path the host cannot run (AMX: also where the OS
// refuses the tile state).
double measure_path_peak_gflops(ProductPath path, const IsaFamily& f, int threads);
// The DRAM read bandwidth: `threads` threads summing a buffer far larger than the caches.
double measure_read_bandwidth_gbs(int threads);
// The family a spec's kernel runs on here (native: the host's) and the key of its path's peak.
const IsaFamily& run_family(const KernelSpec& spec);
std::string path_key(const KernelSpec& spec);
// Measures, once each, the peaks of the paths these specs use that path_peak does not know yet,
// and the read bandwidth.
void measure_paths(Machine& machine, const std::vector<KernelSpec>& specs);
// The host: CPU model and flags, ISA family, compiler, threads; peak_gflops measured only when
// asked (tune names the machine in its table; it needs no peak).
Machine describe_machine(int threads, bool measure_peak = true);

struct Options {
  int threads = 2;
  int reps = 7;  // timed runs after warm-up; the median is reported
  BaselineKind baseline = BaselineKind::kOneDnn;
  uint64_t seed = 1;
};

struct Row {
  std::string shape, op, lhs, rhs, out, kernel;
  Tiling tiling;              // the kernel's
  std::string tiling_source;  // to_string(TilingChoice): override, table <entry>, heuristic
                              // ("" when the caller did not say; run() leaves it to the caller)
  std::string lhs_quant, rhs_quant;  // scale schemes ("none" for float operands)
  bool quantized = false;            // an operand holds codes (docs/quantization.md)
  int64_t m = 0, k = 0, n = 0, g = 0;
  std::vector<int32_t> group_sizes;  // the call's (whose sum is at most m)
  double flops = 0;                  // 2 * rows in groups * K * N
  double ms = 0, gflops = 0;
  std::string baseline;
  // The dtype the baseline's operands have: the spec's for float rows; for quantized rows the
  // activation dtype, both operands dequantized to it (outside the timing).
  std::string baseline_dtype;
  double baseline_ms = 0, baseline_gflops = 0, ratio = 0;
  // Quantized rows: GFLOP/s of gmm-gen's kernel of float_counterpart(spec) on the same workload,
  // timed round robin with this row's kernel, and this row's GFLOP/s over those (run() with a
  // float_spec; 0 when not timed or the row failed).
  double float_gflops = 0, vs_float = 0;
  // gmm rows whose lhs holds codes: other f32 activations [M, K] quantized by gmmgen::quantize
  // into the lhs's dtype and scheme, timed alone (quantize_ms; GB/s of f32 input, and that over
  // the measured bandwidth), and given to Runtime::gmm with GmmOptions::quantize_lhs, which
  // quantizes them and runs the row's kernel (end_to_end_*: GFLOP/s, the baseline's time over it,
  // and its GFLOP/s over float_gflops); end_to_end_bf16_ms: the same call on those activations
  // rounded to bf16. 0 elsewhere.
  double quantize_ms = 0, quantize_gbs = 0, quantize_bandwidth_fraction = 0;
  double end_to_end_ms = 0, end_to_end_gflops = 0, end_to_end_ratio = 0, end_to_end_vs_float = 0;
  double end_to_end_bf16_ms = 0;
  double peak_gflops = 0, peak_fraction = 0;
  // The roofline: the row's product path and its peak (0: not measured), the bytes the cost
  // model says it moves, and max(flops / path peak, bytes / bandwidth); roofline_fraction is that
  // time over the measured one; bound says which term is larger ("compute" or "memory"; "" and
  // 0 without both figures).
  std::string path;
  double path_peak_gflops = 0, path_fraction = 0;
  double bytes = 0, roofline_ms = 0, roofline_fraction = 0;
  std::string bound;
  bool ok = true;  // the output matched the float64 reference (sampled) and the baseline
  std::string failure;
  nlohmann::ordered_json to_json() const;
};

// "lhs x rhs -> out" with the scale schemes of quantized operands, as the tables print a row's
// dtypes: bf16xi8@channel->f32.
std::string dtypes_label(const std::string& lhs, const std::string& lhs_quant,
                         const std::string& rhs, const std::string& rhs_quant,
                         const std::string& out);

// Sets a timed row's shares of the machine's measured figures, each where it is known: of the f32
// FMA peak; of its path's peak (machine.path_peak(key), key: path_key of its spec); of its
// roofline, max(flops / path peak, bytes / bandwidth) against the measured time, and which term
// bounds it; and its quantizer's GB/s over the bandwidth. run() sets them; bench sets them again
// where the figures measured after the rows were higher.
void set_machine_figures(Row& r, const Machine& machine, const std::string& key);

// Runs one spec on one workload: the kernel (through the runtime, compiled or cached) and the
// baseline, each warmed up, then timed `reps` times; both outputs are checked against a float64
// reference on sampled elements. Quantized operands: uniform [-1, 1) floats quantized by
// gmmgen::quantize (absmax, the spec's scheme), the scales passed in gmmgen_args; the reference
// is the exact decoded value times its scale, within the checker's quantized bound
// (docs/quantization.md, gmmgen/verify/checker.h); the baseline runs on gmmgen::dequantize's values
// rounded to activation_dtype and is checked against the float64 product of exactly those values.
// float_spec (quantized rows): gmm-gen's kernel of float_counterpart(spec) (any tiling), run on
// the baseline's operands and timed with the others, fills float_gflops and vs_float. A gmm whose
// lhs holds codes also times the quantizer on f32 activations alone, and Runtime::gmm quantizing
// them in the call (quantize_ms, end_to_end_*).
// The kernel, the float kernel and the baseline are timed round robin, one run of each per
// round, so that all of them meet the same machine (docs/performance.md: side by side in one run).
Row run(Runtime& rt, const KernelSpec& spec, const Workload& work, const Options& o,
        const Machine& machine, const KernelSpec* float_spec = nullptr);

// ---- A/B (gmm-gen bench --ab) ----------------------------------------------------------------

// Two kernels of one problem (their specs may differ in tiling only) timed in alternating rounds.
struct AbRow {
  std::string shape, op, lhs, rhs, out, lhs_quant, rhs_quant, kernel_a, kernel_b;
  int64_t m = 0, k = 0, n = 0, g = 0;
  int rounds = 0;
  double a_ms = 0, b_ms = 0;  // medians
  // b / a of each pair of rounds (one of each order): the median and its 25th and 75th
  // percentiles (the spread).
  double ratio = 0, ratio_p25 = 0, ratio_p75 = 0;
  bool ok = true;  // both outputs matched the float64 reference (sampled)
  std::string failure;
  nlohmann::ordered_json to_json() const;
};

// Checks each kernel's output against the float64 reference (as run does, one timed run each),
// then times them on the same inputs: two warm-up runs each, then o.reps rounds (rounded up to
// even) of one run of each, A first in even rounds and B first in odd ones, the first call of a
// round writing one output and the second another, each pair of rounds giving one ratio (so
// that a drift of the machine within a round, and the outputs' places in memory, fall on both
// alike). Throws InvalidArgument when the specs differ in more than their tiling. A wrong kernel
// gets no times.
AbRow run_ab(Runtime& rt_a, const KernelSpec& a, Runtime& rt_b, const KernelSpec& b,
             const Workload& work, const Options& o, const Machine& machine);
// The rounds run_ab times for --reps `reps`: whole pairs.
int ab_rounds(int reps);

}  // namespace gmmgen::bench
