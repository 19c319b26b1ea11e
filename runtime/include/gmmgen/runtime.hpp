// gmmgen::Runtime: turns a call into a spec, finds or builds its kernel, runs it on a pool.
//
// A call's tiling: the caller's override, else a tuning table entry for the problem, else the
// heuristic (gmmgen/heuristics.h): choose_tiling(). Its kernel: one compiled into the program
// for the problem (registry keyed by problem; any tiling serves unless the caller overrides it),
// then the in-memory table, then the disk cache, then a fresh compile (unless JIT is disabled).
// Every method is thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "gmmgen/errors.hpp"
#include "gmmgen/kernel_abi.h"
#include "gmmgen/quantize.hpp"
#include "gmmgen/spec.h"

namespace gmmgen {

// A view of a row-major tensor: `ld` elements between consecutive rows (0: packed). For a
// 3-D tensor [b, rows, cols], matrices follow each other with stride rows * ld.
struct TensorView {
  void* data = nullptr;
  DType dtype = DType::kF32;
  int ndim = 0;
  std::array<int64_t, 3> shape{};
  int64_t ld = 0;

  static TensorView matrix(const void* p, DType d, int64_t rows, int64_t cols, int64_t ld = 0) {
    return {const_cast<void*>(p), d, 2, {rows, cols, 0}, ld};
  }
  static TensorView batch(const void* p, DType d, int64_t b, int64_t rows, int64_t cols,
                          int64_t ld = 0) {
    return {const_cast<void*>(p), d, 3, {b, rows, cols}, ld};
  }
};

// The scales of a quantized operand (docs/quantization.md): its scheme and the f32 scale array,
// laid out as gmmgen/kernel_abi.h says ("Scales"), rows `ld` floats apart (0: packed). An operand
// of a quantized dtype (i8, i4, nf4, t2: always; fp8: optionally) names its scheme here; the kernel
// checks the scales it reads (finite and > 0).
struct Scales {
  Quant scheme;  // kind kNone: the operand has no scales
  const float* data = nullptr;
  int64_t ld = 0;
};

// Activations a gmm call quantizes itself (docs/quantization.md): its f32 or bf16 lhs [M, K]
// becomes `dtype` codes with `scheme` scales along K (tensor, channel, block:B; none for fp8) by
// `calibration`, exactly as gmmgen::quantize would make them of the f32 values (bf16 widened,
// exactly), on the runtime's threads; then the kernel of that lhs dtype and scheme runs on them.
// The codes live in the call's scratch.
struct LhsQuantization {
  DType dtype = DType::kI8;
  Quant scheme{QuantKind::kBlock, 32, 0};
  Calibration calibration;
};

struct GmmOptions {
  bool transpose_rhs = false;                   // rhs is [G_local, N, K]
  int32_t group_offset = 0;                     // first active group
  const TensorView* existing_out = nullptr;     // keep rows outside the active groups from here
  bool accumulate = false;                      // with existing_out: active rows add existing_out
  std::optional<Tiling> tiling;                 // default: the heuristic (gmmgen/heuristics.h)
  Scales lhs_scales, rhs_scales;                // quantized lhs / rhs (docs/quantization.md)
  std::optional<LhsQuantization> quantize_lhs;  // lhs is f32 or bf16: quantize it in the call
};

struct TgmmOptions {
  int32_t group_offset = 0;                  // first active group
  bool lhs_transposed = false;               // lhs is given as [K, M] (read in place)
  bool transpose_out = false;                // out is [G_local, N, K]
  const TensorView* existing_out = nullptr;  // out = existing_out + product (may alias out)
  std::optional<Tiling> tiling;
  Scales lhs_scales, rhs_scales;  // quantized lhs / rhs: blocks of global rows along M
};

// Where a call's tiling comes from, in this order: the caller's, a tuning table's entry for the
// problem at the call's rows per active group (docs/tuning.md), the heuristic
// (gmmgen/heuristics.h).
enum class TilingSource { kOverride, kTable, kHeuristic };

// A call's tiling and where it came from (Runtime::choose_tiling).
struct TilingChoice {
  Tiling tiling;
  TilingSource source = TilingSource::kHeuristic;
  // kTable: "<table> entry <i> (rows_per_group [lo, hi), ...)", valid while the Runtime lives.
  std::string_view entry;
  std::optional<Isa> isa;  // a table entry's ISA family, when it names one this CPU runs
};
// "override", "table <entry>" or "heuristic".
std::string to_string(const TilingChoice& c);

// The 9-tuple tiling of the backward pass: (tm, tk, tn) for the forward, dlhs and drhs
// products; each part optional (heuristic when absent). `forward` is what gmm() would use.
struct VjpTiling {
  std::optional<Tiling> forward, dlhs, drhs;
};

// The backward of a quantized forward (docs/quantization.md; seeds 000 and 004). With a forward
// out = gmm(lhs codes 1xB, rhs codes) the products are
//   dlhs = gmm(dout quantized 1xB along N, rhs codes read transposed: the same codes, the same
//          scale array), drhs = tgmm(lhs codes Bx1 along M, dout quantized Bx1 along M),
// dout being dual-quantized by the runtime in one call (quantize_dual). gmm_vjp's `lhs` is then
// the activation as tgmm reads it: the column-wise half of quantize_dual (or any f32/bf16
// activation, e.g. dequantized codes, with scheme none).
struct QuantVjp {
  // lhs scales as tgmm reads them (gmmgen/kernel_abi.h "Scales", tgmm lhs): block:B along M
  // [ceil(M/B), K] (quantize_dual's col_scales), tensor, channel [K], or none.
  Scales lhs_scales;
  // The forward's rhs scales, exactly as given to gmm. tensor and block:BxC are read
  // transposed as they are (block:BxC then serves as block:CxB: the same array and ld);
  // channel ([G_local, N]: one scale per column of N, the contraction axis of dlhs) is folded
  // into dout (dout'[r, n] = dout[r, n] * s[group of r, n]) and the codes are read with a
  // tensor scale of 1; block:B (1-D blocks along K, a scale per K-block and column) has no
  // transposed reading and is rejected.
  Scales rhs_scales;
  // dout's codes (f8e5m2, or f8e4m3); nullopt: dout stays f32 (no gradient quantization).
  std::optional<DType> grad_dtype = DType::kF8E5M2;
  int64_t grad_block = 128;  // B of dout's 1xB (dlhs) and Bx1 (drhs) blocks
  Calibration grad_calibration;
};

struct GmmVjpOptions {
  bool transpose_rhs = false;  // as in the forward: rhs is [G_local, N, K]
  int32_t group_offset = 0;
  VjpTiling tiling;
  std::optional<QuantVjp> quant;  // a quantized forward (above); dout must then be f32
};

// How much the runtime says on stderr (each level includes the ones before it):
//   error: failures the runtime reports as exceptions, as they happen (for callers that swallow
//          them, e.g. a Python layer); warn (the default): also a corrupt cache entry rebuilt, an
//          unreadable tuning table; info: also the spec and kernel of each new problem, cache
//          hits, tuning entries used, and one statistics line when the Runtime goes away (or at
//          process exit); debug: also each compile as a command line to copy and paste, and the
//          time of each compile and cache load.
enum class LogLevel { kError, kWarn, kInfo, kDebug };

// GMMGEN_LOG: error | warn | info | debug (any case); 1 (also true, yes, on) means info, 0 (also
// false, no, off) or unset means warn. Throws InvalidArgument naming the variable otherwise.
LogLevel log_level_from_env();

struct RuntimeOptions {
  std::filesystem::path cache_dir;    // empty: GMMGEN_CACHE_DIR / XDG_CACHE_HOME / ~/.cache
  int num_threads = 0;                // 0: GMMGEN_NUM_THREADS, else the machine's cores
  std::optional<bool> jit;            // unset: enabled unless GMMGEN_DISABLE_JIT=1
  std::optional<bool> log;            // true: info, false: warn (unless log_level is set)
  std::optional<LogLevel> log_level;  // unset: `log`, else GMMGEN_LOG (log_level_from_env)
  // At info and debug, the statistics line printed once when the Runtime is destroyed or the
  // process exits; false leaves it to the caller (e.g. a tool summing several runtimes).
  bool log_stats = true;
};

struct RuntimeStats {
  int64_t lookups = 0;           // kernel lookups (one per call)
  int64_t registry_hits = 0;     // served by a kernel compiled into the program
  int64_t memory_hits = 0;       // served by the in-memory table
  int64_t disk_hits = 0;         // loaded from the disk cache
  int64_t compiles = 0;          // compiled by this process
  int64_t rebuilds = 0;          // corrupt or mismatching cache entries replaced
  double compile_seconds = 0;    // wall time in compiles
  double disk_load_seconds = 0;  // wall time verifying and loading cache entries
};

// One line: "12 lookups (registry 3, memory 5, disk 2, compiled 2), 2 compiles in 3.41 s, ...".
std::string to_string(const RuntimeStats& s);

class Runtime {
 public:
  explicit Runtime(RuntimeOptions options = {});
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // out[r, :] = lhs[r, :] @ rhs[group of r] (docs/operations.md). lhs [M, K], rhs [G_local, K, N]
  // (or [G_local, N, K] with transpose_rhs), group_sizes [G], out [M, N]; dtypes from the views.
  void gmm(const TensorView& lhs, const TensorView& rhs, std::span<const int32_t> group_sizes,
           const TensorView& out, const GmmOptions& options = {});

  // The spec a gmm call with these arguments would use (validated).
  KernelSpec gmm_spec(const TensorView& lhs, const TensorView& rhs,
                      std::span<const int32_t> group_sizes, const TensorView& out,
                      const GmmOptions& options = {}) const;

  // The tiling a call of `problem` (a spec; its own tiling is ignored) gets on these group sizes:
  // `override`, else the tuning table entry for the problem at its rows per active group, else
  // the heuristic. gmm(), tgmm() and their _spec() decide here; so do `gmm-gen bench` and `tune`.
  TilingChoice choose_tiling(const KernelSpec& problem, std::span<const int32_t> group_sizes,
                             int32_t group_offset = 0,
                             const std::optional<Tiling>& override = std::nullopt) const;

  // out[j] = lhs[rows of g]^T @ rhs[rows of g], g = group_offset + j (docs/operations.md).
  // lhs [M, K] (or [K, M] with lhs_transposed), rhs [M, N], out [G_local, K, N] (or
  // [G_local, N, K] with transpose_out).
  void tgmm(const TensorView& lhs, const TensorView& rhs, std::span<const int32_t> group_sizes,
            const TensorView& out, const TgmmOptions& options = {});
  KernelSpec tgmm_spec(const TensorView& lhs, const TensorView& rhs,
                       std::span<const int32_t> group_sizes, const TensorView& out,
                       const TgmmOptions& options = {}) const;

  // Backward of out = gmm(lhs, rhs): dlhs = gmm(dout, rhs, transpose_rhs = !t) [M, K] and
  // drhs = tgmm(lhs, dout) [G_local, K, N] (or [G_local, N, K] when t), with no transposed
  // copy of any operand. dlhs rows outside the active groups are zero. With options.quant, the
  // backward of a quantized forward (QuantVjp): every argument, dout's values and the scales
  // the products read are checked before the runtime allocates dout's codes.
  void gmm_vjp(const TensorView& dout, const TensorView& lhs, const TensorView& rhs,
               std::span<const int32_t> group_sizes, const TensorView& dlhs, const TensorView& drhs,
               const GmmVjpOptions& options = {});

  // The kernel of exactly this spec: compiled in, in memory, on disk, or built (throws
  // CompileError, CacheError, JitDisabledError).
  const gmmgen_kernel_entry& kernel(const KernelSpec& spec);

  // Makes every spec ready ahead of time so that a serving path never compiles: up to `jobs`
  // kernels are built at once (0: the machine's cores). Every spec is tried; the first failure,
  // in the order of `specs`, is thrown after all are done. Distinct kernels also build
  // concurrently when several threads call kernel(), gmm(), ...; callers of a kernel being
  // built wait for that one build.
  void warmup(const std::vector<KernelSpec>& specs, int jobs = 0);

  // Whether the disk cache holds a valid-looking entry of spec's kernel under the current
  // compiler settings (cache_key); nothing is loaded or built. Lets a tool say "cached" or
  // "compiled" without counting another thread's compiles. InvalidArgument for a target the
  // runtime does not build (target=pallas).
  bool cached(const KernelSpec& spec) const;

  // Adds kernels compiled into the program (a bundle's table); they win over cached ones and
  // serve every call of their problem that names no tiling. Kernels of an ISA family this CPU
  // cannot run are skipped.
  void register_kernels(const gmmgen_kernel_entry* table, int32_t count);

  // Runs an already-found kernel on prepared arguments: plan, then the items on the pool.
  void run(const gmmgen_kernel_entry& kernel, const gmmgen_args& args);

  RuntimeStats stats() const;
  int num_threads() const;
  const std::filesystem::path& cache_dir() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Compiles an emitted C++ kernel source (`gmm-gen emit`'s <name>.cpp; its headers in
// include_dir) into the shared object `output` with the runtime's compiler settings
// ($GMMGEN_CXX, $GMMGEN_CXXFLAGS) and the flags the spec needs, without loading it: e.g. a
// kernel of an ISA family this CPU cannot run. Throws CompileError with the compiler's message,
// InvalidArgument for a target the runtime does not build (target=pallas).
void compile_kernel(const KernelSpec& spec, const std::filesystem::path& source,
                    const std::filesystem::path& include_dir, const std::filesystem::path& output);

// A command line as one printable string, arguments quoted where needed (as the runtime logs
// compile commands at GMMGEN_LOG=debug).
std::string format_command(const std::vector<std::string>& argv);

// Kills the compilers this process runs now (SIGKILL to their process groups, which a
// terminal's Ctrl-C does not reach). Async-signal-safe: for a signal handler that then ends
// the process.
void kill_running_compiles();

// The cache key of a spec under the current compiler settings: hash of the spec hash (canonical
// spec, generator version, templates), the compiler's identity (its version, not its path), the
// flags, and the target ISA (for isa=native, the host CPU's model and feature flags).
// InvalidArgument for a target the runtime does not build (target=pallas).
std::string cache_key(const KernelSpec& spec);

}  // namespace gmmgen
