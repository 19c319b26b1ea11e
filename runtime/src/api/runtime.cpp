#include "gmmgen/runtime.hpp"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <limits>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <thread>
#include <unordered_map>

#include "backend/backend.h"
#include "dispatch/registry.h"
#include "dispatch/select.h"
#include "exec/thread_pool.h"
#include "gmmgen/codes.h"
#include "gmmgen/heuristics.h"
#include "gmmgen/naming.h"
#include "jit/jit_cache.h"
#include "quant/quantize_internal.h"
#include "tuning/tables.h"

namespace gmmgen {
namespace fs = std::filesystem;
namespace {

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// A yes/no variable, read as GMMGEN_LOG reads its aliases: 1/true/yes/on or 0/false/no/off (any
// case); unset or empty is `unset`. Anything else is an error, not a silent yes.
bool env_flag(const char* name, bool unset = false) {
  const char* v = std::getenv(name);
  if (!v || !*v) return unset;
  const std::string t = lower(v);
  if (t == "1" || t == "true" || t == "yes" || t == "on") return true;
  if (t == "0" || t == "false" || t == "no" || t == "off") return false;
  throw InvalidArgument(std::string(name) + "=" + quote_value(v) +
                        " must be 1, true, yes, on or 0, false, no, off");
}

// Runtimes that print their statistics line at exit: each prints it once, when destroyed or,
// if still alive then (a global, a handle never freed), from an atexit handler. Never destroyed,
// since a runtime may be destroyed during static destruction after the handler ran.
struct ExitReport {
  virtual void report() = 0;  // prints the line; called at most once, under the lock

 protected:
  ~ExitReport() = default;
};

struct ExitReports {
  std::mutex mutex;
  std::set<ExitReport*> live;
  bool handler = false;
};

ExitReports& exit_reports() {
  static ExitReports& r = *new ExitReports;
  return r;
}

void report_live_runtimes() {
  ExitReports& r = exit_reports();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (ExitReport* e : r.live) e->report();
  r.live.clear();
}

void add_exit_report(ExitReport* e) {
  ExitReports& r = exit_reports();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (!r.handler) r.handler = std::atexit(report_live_runtimes) == 0;
  r.live.insert(e);
}

// Prints e's line unless the atexit handler already did.
void finish_exit_report(ExitReport* e) {
  ExitReports& r = exit_reports();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (r.live.erase(e)) e->report();
}

}  // namespace

std::string cache_key(const KernelSpec& spec) {
  return cache_key(spec_hash(spec), backend_for(spec).toolchain(spec));
}

LogLevel log_level_from_env() {
  const char* v = std::getenv("GMMGEN_LOG");
  if (!v) return LogLevel::kWarn;
  const std::string t = lower(v);
  if (t.empty() || t == "0" || t == "false" || t == "no" || t == "off" || t == "warn")
    return LogLevel::kWarn;
  if (t == "1" || t == "true" || t == "yes" || t == "on" || t == "info") return LogLevel::kInfo;
  if (t == "error") return LogLevel::kError;
  if (t == "debug") return LogLevel::kDebug;
  throw InvalidArgument("GMMGEN_LOG=" + std::string(v).substr(0, 100) +
                        " is not one of: error, warn, info, debug (or 1 = info, 0 = warn)");
}

std::string to_string(const RuntimeStats& s) {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "%lld lookups (registry %lld, memory %lld, disk %lld, compiled %lld), %lld "
                "compiles in %.2f s, %lld rebuilt, disk loads %.3f s",
                (long long)s.lookups, (long long)s.registry_hits, (long long)s.memory_hits,
                (long long)s.disk_hits, (long long)s.compiles, (long long)s.compiles,
                s.compile_seconds, (long long)s.rebuilds, s.disk_load_seconds);
  return buf;
}

struct Runtime::Impl final : ExitReport {
  explicit Impl(const RuntimeOptions& o)
      : jit_enabled(o.jit.value_or(!env_flag("GMMGEN_DISABLE_JIT"))),
        preludes(env_flag("GMMGEN_PCH", true)),
        level(o.log_level ? *o.log_level
              : o.log     ? (*o.log ? LogLevel::kInfo : LogLevel::kWarn)
                          : log_level_from_env()),
        pool(o.num_threads > 0 ? o.num_threads : default_threads()),
        cache_dir(o.cache_dir.empty() ? DiskCache::default_root() : o.cache_dir),
        jit(
            cache_dir,
            [this](JitCache::Level l, const std::string& m) {
              say(l == JitCache::Level::kWarn   ? LogLevel::kWarn
                  : l == JitCache::Level::kInfo ? LogLevel::kInfo
                                                : LogLevel::kDebug,
                  "%s", m.c_str());
            },
            preludes) {
    if (o.log_stats && level >= LogLevel::kInfo) add_exit_report(this);
  }
  ~Impl() { finish_exit_report(this); }

  bool jit_enabled;
  bool preludes;  // GMMGEN_PCH: read with the other variables, before anything is allocated
  LogLevel level;
  ThreadPool pool;
  fs::path cache_dir;
  Registry registry;
  JitCache jit;
  tuning::Tables tuning_tables{
      tuning::default_sources(cache_dir), level >= LogLevel::kInfo,
      [this](const std::string& m) { say(LogLevel::kInfo, "%s", m.c_str()); },
      [this](const std::string& m) { say(LogLevel::kWarn, "%s", m.c_str()); }};

  mutable std::shared_mutex table_mutex;
  std::unordered_map<KernelSpec, LoadedKernel, SpecKeyHash> table;  // JIT-built kernels
  // One build or load per cache key at a time in this process: a caller of a key being built
  // waits for that build, then finds the kernel in `table`; distinct keys build concurrently.
  std::mutex key_locks_mutex;
  std::unordered_map<std::string, std::shared_ptr<std::mutex>> key_locks;
  std::shared_ptr<std::mutex> key_lock(const std::string& key) {
    std::lock_guard<std::mutex> lock(key_locks_mutex);
    auto& m = key_locks[key];
    if (!m) m = std::make_shared<std::mutex>();
    return m;
  }
  const gmmgen_kernel_entry* in_memory(const KernelSpec& spec) {
    std::shared_lock<std::shared_mutex> lock(table_mutex);
    const auto it = table.find(spec);
    if (it == table.end()) return nullptr;
    ++memory_hits;
    return &it->second.fns;
  }

  std::atomic<int64_t> lookups{0}, registry_hits{0}, memory_hits{0};

  // One line on stderr when the level asks for it: "gmm-gen: [error: |warning: ]message".
  template <typename... Args>
  void say(LogLevel at, const char* fmt, Args... args) const {
    if (at > level) return;
    const char* tag = at == LogLevel::kError ? "error: " : at == LogLevel::kWarn ? "warning: " : "";
    std::string line = std::string("gmm-gen: ") + tag;
    const int n = std::snprintf(nullptr, 0, fmt, args...);
    if (n > 0) {
      std::string text(size_t(n) + 1, '\0');
      std::snprintf(text.data(), text.size(), fmt, args...);
      text.resize(size_t(n));
      line += text;
    }
    line += "\n";
    std::fputs(line.c_str(), stderr);  // one write per line, so threads do not interleave
  }

  RuntimeStats stats() const;
  void report() override;

  const gmmgen_kernel_entry& find_or_build(const KernelSpec& spec) {
    validate(spec);
    const std::string name = kernel_name(spec);
    std::string key;
    try {
      key = cache_key(spec);  // runs the compiler for its identity (once per compiler)
    } catch (const std::exception& e) {
      say(LogLevel::kError, "kernel %s: %s", name.c_str(), e.what());
      throw;
    }
    const Backend& backend = backend_for(spec);  // cache_key found it
    const std::shared_ptr<std::mutex> lock_of_key = key_lock(key);
    std::lock_guard<std::mutex> build_lock(*lock_of_key);
    if (const gmmgen_kernel_entry* k = in_memory(spec)) return *k;  // built while we waited
    say(LogLevel::kInfo, "spec %s -> %s (cache key %s)", to_text(spec).c_str(), name.c_str(),
        key.c_str());
    LoadedKernel loaded;
    const CompilerConfig cc = backend.toolchain(spec);
    const JitArtifact artifact{
        [&](const fs::path& main, const fs::path& dir, const fs::path& out,
            const fs::path& prelude) { return backend.build_command(cc, main, dir, out, prelude); },
        [&](const fs::path& file) { return backend.artifact_key(file); },
        [&](const fs::path& file) {
          loaded = backend.load(file, key, spec);
          return std::string();
        },
        cc};
    try {
      if (!jit.get(
              key, artifact, [&] { return backend.sources(spec, key); }, jit_enabled)) {
        std::string near;
        for (const auto& m : registry.near_misses(spec)) near += "\n  " + m;
        throw JitDisabledError(
            "kernel " + name + " is neither compiled in nor cached in " + cache_dir.string() +
            ", and compiling is disabled (GMMGEN_DISABLE_JIT=1); warm it up "
            "ahead of time. Spec: " +
            to_text(spec) + (near.empty() ? "" : "\nClosest compiled-in kernels:" + near));
      }
    } catch (const std::exception& e) {
      // Said here too, for callers that turn exceptions into codes and lose them.
      say(LogLevel::kError, "kernel %s: %s", name.c_str(), e.what());
      throw;
    }
    std::unique_lock<std::shared_mutex> lock(table_mutex);
    LoadedKernel& e = table[spec];
    e = std::move(loaded);
    return e.fns;
  }

  const gmmgen_kernel_entry& lookup(const KernelSpec& spec) {
    ++lookups;
    if (const gmmgen_kernel_entry* k = registry.exact(spec)) {
      ++registry_hits;
      return *k;
    }
    if (const gmmgen_kernel_entry* k = in_memory(spec)) return *k;
    return find_or_build(spec);
  }

  // The kernel of a call: without a tiling override, a compiled-in kernel for the problem
  // whatever its tiling; otherwise (or if none) the kernel of the selected tiling.
  const gmmgen_kernel_entry& dispatch(const KernelSpec& spec, bool overridden) {
    if (!overridden)
      if (const gmmgen_kernel_entry* k = registry.for_problem(spec)) {
        ++lookups;
        ++registry_hits;
        return *k;
      }
    return lookup(spec);
  }
};

RuntimeStats Runtime::Impl::stats() const {
  RuntimeStats s;
  const JitCounters& j = jit.counters();
  s.lookups = lookups, s.registry_hits = registry_hits, s.memory_hits = memory_hits;
  s.disk_hits = j.disk_hits, s.compiles = j.compiles, s.rebuilds = j.rebuilds;
  s.compile_seconds = double(j.compile_ns) * 1e-9;
  s.disk_load_seconds = double(j.disk_load_ns) * 1e-9;
  return s;
}

void Runtime::Impl::report() {
  say(LogLevel::kInfo, "statistics: %s", to_string(stats()).c_str());
}

Runtime::Runtime(RuntimeOptions options) : impl_(std::make_unique<Impl>(options)) {}
Runtime::~Runtime() = default;

const gmmgen_kernel_entry& Runtime::kernel(const KernelSpec& spec) {
  return impl_->lookup(spec);
}

void Runtime::warmup(const std::vector<KernelSpec>& specs, int jobs) {
  if (jobs < 0) throw InvalidArgument("warmup: jobs must be >= 0 (0: the machine's cores)");
  if (jobs == 0) jobs = int(std::max(1u, std::thread::hardware_concurrency()));
  const size_t workers = std::min(specs.size(), size_t(jobs));
  // Each worker takes the next spec; every spec is tried, and the first failure (in spec order)
  // is thrown once all are done.
  std::atomic<size_t> next{0};
  std::vector<std::exception_ptr> failed(specs.size());
  const auto work = [&] {
    for (size_t i; (i = next++) < specs.size();) try {
        kernel(specs[i]);
      } catch (...) {
        failed[i] = std::current_exception();
      }
  };
  std::vector<std::thread> threads;
  for (size_t t = 1; t < workers; ++t) threads.emplace_back(work);
  work();
  for (auto& t : threads) t.join();
  for (const auto& e : failed)
    if (e) std::rethrow_exception(e);
}

void compile_kernel(const KernelSpec& spec, const fs::path& source, const fs::path& include_dir,
                    const fs::path& output) {
  validate(spec);
  const Backend& backend = backend_for(spec);
  run_build(backend.build_command(backend.toolchain(spec), source, include_dir, output, {}), source,
            output);
}

bool Runtime::cached(const KernelSpec& spec) const {
  return impl_->jit.valid(cache_key(spec));
}

void Runtime::register_kernels(const gmmgen_kernel_entry* table, int32_t count) {
  std::vector<std::string> skipped;
  impl_->registry.add(table, count, &skipped);
  for (const auto& name : skipped)
    impl_->say(LogLevel::kInfo, "not registered: %s (this CPU cannot run its ISA family)",
               name.c_str());
  impl_->say(LogLevel::kInfo, "registered %d kernels", int(count - int32_t(skipped.size())));
}

namespace {

// The workspace bytes of a call, once the kernel has checked every argument: _plan with no
// workspace checks them all and then stops at the workspace (GMMGEN_ERR_WORKSPACE), so nothing
// is allocated for a call the kernel would reject.
int64_t checked_workspace_bytes(const gmmgen_kernel_entry& k, const gmmgen_args& args) {
  const int64_t bytes = k.workspace_bytes(args.m);
  if (bytes < 0)
    throw InvalidArgument("m=" + std::to_string(args.m) + " must be in [0, 2^31) (" +
                          k.info()->name + ")");
  char err[512] = {0};
  int64_t items = 0;
  if (const int rc = k.plan(&args, nullptr, 0, &items, err, sizeof err); rc != GMMGEN_ERR_WORKSPACE)
    throw InvalidArgument(rc == GMMGEN_OK ? std::string("the kernel planned without a workspace")
                                          : std::string(err));
  return bytes;
}

// Plans a call into `storage` (grown as needed and reused, so a warm path does not allocate; it
// grows only for a call whose arguments the kernel accepted).
Planned plan_call(const gmmgen_kernel_entry& k, const gmmgen_args& args,
                  std::vector<unsigned char>& storage) {
  constexpr size_t kAlign = GMMGEN_WORKSPACE_ALIGNMENT;
  int64_t bytes = k.workspace_bytes(args.m);
  if (bytes < 0 || storage.size() < size_t(bytes) + kAlign) {
    bytes = checked_workspace_bytes(k, args);
    storage.resize(size_t(bytes) + kAlign);
  }
  void* ws =
      storage.data() + (kAlign - reinterpret_cast<uintptr_t>(storage.data()) % kAlign) % kAlign;
  char err[512] = {0};
  int64_t items = 0;
  if (const int rc = k.plan(&args, ws, bytes, &items, err, sizeof err); rc != GMMGEN_OK)
    throw InvalidArgument(err);
  return {&k, &args, ws, items};
}

// The kernels the runtime hands out are the C++ target's (compiled in or JIT-built): they run on
// its backend's executor. (A second target the runtime runs hands its backend out with its
// kernels.)
void execute(ThreadPool& pool, const Planned& p) {
  ExecResources resources{pool};
  cpu_backend().execute(p, resources);
}

}  // namespace

void Runtime::run(const gmmgen_kernel_entry& k, const gmmgen_args& args) {
  thread_local std::vector<unsigned char> storage;
  execute(impl_->pool, plan_call(k, args, storage));
}

namespace {

std::string shape_of(const TensorView& v) {
  std::string s = "[";
  for (int i = 0; i < v.ndim; ++i) s += (i ? ", " : "") + std::to_string(v.shape[i]);
  return s + "]";
}

// A view's sizes, before anything uses them: dimensions >= 0 and a byte extent ((rows - 1) * ld
// + row elements) that fits in int64 (checked arithmetic), so no later size computation can
// overflow. Leading dimensions below the row length are the kernel's to reject.
void check_view(const char* name, const TensorView& v) {
  if (int(v.dtype) < 0 || int(v.dtype) >= kNumDTypes)  // a cast int, from C++ or C
    throw InvalidArgument(std::string(name) + ".dtype=" + std::to_string(int(v.dtype)) +
                          " is not a DType (0 to " + std::to_string(kNumDTypes - 1) + ")");
  for (int i = 0; i < v.ndim; ++i)
    if (v.shape[i] < 0)
      throw InvalidArgument(std::string(name) + " " + shape_of(v) + " has a negative dimension");
  const int64_t row = v.shape[v.ndim - 1];
  int64_t rows = 1, elems = 0, bits = 0;
  bool overflow = false;
  for (int i = 0; i + 1 < v.ndim; ++i) overflow |= __builtin_mul_overflow(rows, v.shape[i], &rows);
  if (rows > 0 && row > 0)
    overflow |= __builtin_mul_overflow(rows - 1, std::max(v.ld, row), &elems) ||
                __builtin_add_overflow(elems, row, &elems) ||
                __builtin_mul_overflow(elems, int64_t(bits_of(v.dtype)), &bits);
  if (overflow)
    throw InvalidArgument(std::string(name) + " " + shape_of(v) +
                          " with ld=" + std::to_string(v.ld) + " spans more than 2^63 bytes");
}

// The kernels' limit on rows (gmmgen/kernel_abi.h), checked before a kernel is even looked up.
void check_m(int64_t m, const TensorView& v, const char* name) {
  if (m > GMMGEN_MAX_M)
    throw InvalidArgument("M=" + std::to_string(m) + " (" + name + " " + shape_of(v) +
                          ") must be in [0, 2^31)");
}

void check_groups(std::span<const int32_t> group_sizes) {
  if (group_sizes.empty() || group_sizes.size() > (1u << 20))
    throw InvalidArgument("group_sizes must have 1 to 2^20 entries, got " +
                          std::to_string(group_sizes.size()));
}

void check_existing(const TensorView& out, const TensorView* existing) {
  if (!existing) return;
  check_view("existing_out", *existing);
  if (existing->ndim != out.ndim || existing->shape != out.shape)
    throw InvalidArgument("existing_out " + shape_of(*existing) + " must have out's shape " +
                          shape_of(out));
  if (existing->dtype != out.dtype)
    throw InvalidArgument("existing_out dtype " + std::string(to_string(existing->dtype)) +
                          " differs from out dtype " + std::string(to_string(out.dtype)));
}

gmmgen_args make_args(const TensorView& lhs, const TensorView& rhs, std::span<const int32_t> sizes,
                      const TensorView& out, int32_t group_offset, const TensorView* existing,
                      int64_t m, const Scales& lhs_scales = {}, const Scales& rhs_scales = {}) {
  gmmgen_args a{};
  a.abi_version = GMMGEN_ABI_VERSION;
  a.m = m;
  a.lhs = lhs.data, a.lhs_ld = lhs.ld;
  a.rhs = rhs.data, a.rhs_ld = rhs.ld;
  a.group_sizes = sizes.data();
  a.group_offset = group_offset;
  a.out = out.data, a.out_ld = out.ld;
  if (existing) a.existing_out = existing->data, a.existing_out_ld = existing->ld;
  a.lhs_scale = lhs_scales.data, a.lhs_scale_ld = lhs_scales.ld;
  a.rhs_scale = rhs_scales.data, a.rhs_scale_ld = rhs_scales.ld;
  return a;
}

}  // namespace

TilingChoice Runtime::choose_tiling(const KernelSpec& problem, std::span<const int32_t> group_sizes,
                                    int32_t group_offset,
                                    const std::optional<Tiling>& override) const {
  return select_tiling(problem, override, &impl_->tuning_tables,
                       tuning::rows_per_group(group_sizes, group_offset, problem.g_local));
}

KernelSpec Runtime::gmm_spec(const TensorView& lhs, const TensorView& rhs,
                             std::span<const int32_t> group_sizes, const TensorView& out,
                             const GmmOptions& o) const {
  if (lhs.ndim != 2) throw InvalidArgument("lhs must be 2-D [M, K], got " + shape_of(lhs));
  if (o.quantize_lhs) {  // the kernel reads the codes the call makes of lhs
    if (lhs.dtype != DType::kF32 && lhs.dtype != DType::kBF16)
      throw InvalidArgument("quantize_lhs: lhs must hold f32 or bf16 activations, not " +
                            std::string(to_string(lhs.dtype)));
    if (o.lhs_scales.scheme.kind != QuantKind::kNone || o.lhs_scales.data)
      throw InvalidArgument("quantize_lhs: lhs_scales must be empty (the call makes lhs's scales)");
    GmmOptions qo = o;
    qo.quantize_lhs.reset();
    qo.lhs_scales = {o.quantize_lhs->scheme, nullptr, 0};
    return gmm_spec(TensorView::matrix(nullptr, o.quantize_lhs->dtype, lhs.shape[0], lhs.shape[1]),
                    rhs, group_sizes, out, qo);
  }
  if (rhs.ndim != 3)
    throw InvalidArgument(
        "rhs must be 3-D [G_local, K, N] (or [G_local, N, K] with transpose_rhs), got " +
        shape_of(rhs));
  if (out.ndim != 2) throw InvalidArgument("out must be 2-D [M, N], got " + shape_of(out));
  const int64_t m = lhs.shape[0], k = lhs.shape[1];
  check_m(m, lhs, "lhs");
  check_view("lhs", lhs);
  check_view("rhs", rhs);
  check_view("out", out);
  check_groups(group_sizes);
  const int64_t rhs_k = o.transpose_rhs ? rhs.shape[2] : rhs.shape[1];
  const int64_t n = o.transpose_rhs ? rhs.shape[1] : rhs.shape[2];
  if (rhs_k != k)
    throw InvalidArgument("rhs " + shape_of(rhs) + " does not match lhs " + shape_of(lhs) +
                          ": K=" + std::to_string(k) +
                          (o.transpose_rhs ? " must be rhs.shape[2]" : " must be rhs.shape[1]"));
  if (out.shape[0] != m || out.shape[1] != n)
    throw InvalidArgument("out " + shape_of(out) + " must be [M, N] = [" + std::to_string(m) +
                          ", " + std::to_string(n) + "]");
  if (o.accumulate && !o.existing_out) throw InvalidArgument("accumulate needs existing_out");
  check_existing(out, o.existing_out);
  KernelSpec s;
  s.op = Op::kGmm;
  s.lhs = lhs.dtype, s.rhs = rhs.dtype, s.out = out.dtype;
  s.lhs_quant = o.lhs_scales.scheme, s.rhs_quant = o.rhs_scales.scheme;
  s.k = k, s.n = n, s.g = int64_t(group_sizes.size()), s.g_local = rhs.shape[0];
  s.transpose_rhs = o.transpose_rhs;
  s.out_mode = o.existing_out ? (o.accumulate ? OutMode::kAccumulate : OutMode::kExistingOut)
                              : OutMode::kPlain;
  apply_choice(s, choose_tiling(s, group_sizes, o.group_offset, o.tiling));
  return s;
}

KernelSpec Runtime::tgmm_spec(const TensorView& lhs, const TensorView& rhs,
                              std::span<const int32_t> group_sizes, const TensorView& out,
                              const TgmmOptions& o) const {
  if (lhs.ndim != 2)
    throw InvalidArgument("lhs must be 2-D [M, K] (or [K, M] with lhs_transposed), got " +
                          shape_of(lhs));
  if (rhs.ndim != 2) throw InvalidArgument("rhs must be 2-D [M, N], got " + shape_of(rhs));
  if (out.ndim != 3)
    throw InvalidArgument(
        "out must be 3-D [G_local, K, N] (or [G_local, N, K] with transpose_out), got " +
        shape_of(out));
  const int64_t m = o.lhs_transposed ? lhs.shape[1] : lhs.shape[0];
  check_m(m, lhs, "lhs");
  check_view("lhs", lhs);
  check_view("rhs", rhs);
  check_view("out", out);
  check_groups(group_sizes);
  const int64_t k = o.lhs_transposed ? lhs.shape[0] : lhs.shape[1];
  const int64_t n = rhs.shape[1];
  if (rhs.shape[0] != m)
    throw InvalidArgument("rhs " + shape_of(rhs) + " must have M=" + std::to_string(m) +
                          " rows, as lhs " + shape_of(lhs) + " has");
  const int64_t out_k = o.transpose_out ? out.shape[2] : out.shape[1];
  const int64_t out_n = o.transpose_out ? out.shape[1] : out.shape[2];
  if (out_k != k || out_n != n)
    throw InvalidArgument("out " + shape_of(out) + " must be [G_local, " +
                          (o.transpose_out ? std::to_string(n) + ", " + std::to_string(k)
                                           : std::to_string(k) + ", " + std::to_string(n)) +
                          "]");
  check_existing(out, o.existing_out);
  KernelSpec s;
  s.op = Op::kTgmm;
  s.lhs = lhs.dtype, s.rhs = rhs.dtype, s.out = out.dtype;
  s.lhs_quant = o.lhs_scales.scheme, s.rhs_quant = o.rhs_scales.scheme;
  s.k = k, s.n = n, s.g = int64_t(group_sizes.size()), s.g_local = out.shape[0];
  s.transpose_rhs = o.transpose_out;
  s.lhs_layout = o.lhs_transposed ? LhsLayout::kKM : LhsLayout::kMK;
  s.out_mode = o.existing_out ? OutMode::kAccumulate : OutMode::kPlain;
  apply_choice(s, choose_tiling(s, group_sizes, o.group_offset, o.tiling));
  return s;
}

void Runtime::tgmm(const TensorView& lhs, const TensorView& rhs,
                   std::span<const int32_t> group_sizes, const TensorView& out,
                   const TgmmOptions& o) {
  const gmmgen_kernel_entry& k =
      impl_->dispatch(tgmm_spec(lhs, rhs, group_sizes, out, o), o.tiling.has_value());
  run(k, make_args(lhs, rhs, group_sizes, out, o.group_offset, o.existing_out, rhs.shape[0],
                   o.lhs_scales, o.rhs_scales));
}

namespace {

// ---- The backward of a quantized forward (QuantVjp) --------------------------------------------
// Everything below runs before the runtime allocates dout's codes: the kernels check the same
// rules again when they plan, but by then the scratch would exist.

std::string quant_name(const Quant& q) {
  return to_string(q);
}

// [begin, end) of the bytes an array spans; empty when it has no elements.
struct Range {
  uintptr_t begin, end;
};
bool overlap(Range a, Range b) {
  return a.begin < a.end && b.begin < b.end && a.begin < b.end && b.begin < a.end;
}
// A view's bytes (its sizes were checked by check_view: no overflow).
Range byte_range(const TensorView& v) {
  const uintptr_t b = reinterpret_cast<uintptr_t>(v.data);
  int64_t rows = 1;
  for (int i = 0; i + 1 < v.ndim; ++i) rows *= v.shape[i];
  const int64_t row = v.ndim > 0 ? v.shape[v.ndim - 1] : 0;
  if (!v.data || rows == 0 || row == 0) return {b, b};
  const int64_t elems = (rows - 1) * std::max(v.ld, row) + row;
  return {b, b + uintptr_t((elems * bits_of(v.dtype) + 7) / 8)};
}
// `rows` rows of `row` floats, `ld` apart (a scale array: a few floats per block of an operand
// whose extent check_view bounded, so no overflow either).
Range float_range(const float* p, int64_t rows, int64_t row, int64_t ld) {
  const uintptr_t b = reinterpret_cast<uintptr_t>(p);
  if (!p || rows == 0 || row == 0) return {b, b};
  return {b, b + uintptr_t(((rows - 1) * ld + row) * int64_t(sizeof(float)))};
}

// group_offset and group_sizes, by the rules every kernel applies (gmmgen/kernel_abi.h).
void check_group_rows(std::span<const int32_t> sizes, int32_t offset, int64_t g_local, int64_t m) {
  const int64_t g = int64_t(sizes.size());
  if (offset < 0 || offset > g - g_local)
    throw InvalidArgument("group_offset=" + std::to_string(offset) +
                          " must be in [0, G - G_local] = [0, " + std::to_string(g - g_local) +
                          "]");
  int64_t total = 0;
  for (int64_t i = 0; i < g; ++i) {
    if (sizes[size_t(i)] < 0)
      throw InvalidArgument("group_sizes[" + std::to_string(i) +
                            "]=" + std::to_string(sizes[size_t(i)]) + " is negative");
    total += sizes[size_t(i)];
  }
  if (total > m)
    throw InvalidArgument("sum(group_sizes)=" + std::to_string(total) +
                          " exceeds M=" + std::to_string(m));
}

// Calls fn(j, first_row, end_row) for each local group j that has rows.
template <class F>
void for_each_active_group(std::span<const int32_t> sizes, int32_t offset, int64_t g_local,
                           F&& fn) {
  int64_t start = 0;
  for (int32_t i = 0; i < offset; ++i) start += sizes[size_t(i)];
  for (int64_t j = 0; j < g_local; ++j) {
    const int64_t rows = sizes[size_t(offset + j)];
    if (rows > 0) fn(j, start, start + rows);
    start += rows;
  }
}

// No process has memory at or above 2^57 (the kernels' checks use the same bound): an array
// reaching there is not in memory, whatever its leading dimension says.
constexpr uint64_t kAddressLimit = uint64_t(1) << 57;

// Presence, alignment and leading dimension of a scale array of `rows` rows of `row` floats.
void check_scale_array(const std::string& name, const Scales& s, int64_t rows, int64_t row) {
  if (s.scheme.kind == QuantKind::kNone) {
    if (s.data) throw InvalidArgument(name + ".data must be NULL: its scheme is none");
    return;
  }
  if (!s.data) throw InvalidArgument(name + ".data is NULL: its scheme is " + quant_name(s.scheme));
  if (reinterpret_cast<uintptr_t>(s.data) % alignof(float))
    throw InvalidArgument(name + ".data is not 4-byte aligned");
  if (s.ld < 0 || (s.ld != 0 && s.ld < row))
    throw InvalidArgument(name + ".ld=" + std::to_string(s.ld) +
                          " must be 0 (packed) or >= " + std::to_string(row) +
                          ", the row length of " + quant_name(s.scheme) + " scales");
  int64_t bytes = 0;
  if (__builtin_mul_overflow(rows - 1, s.ld ? s.ld : row, &bytes) ||
      __builtin_add_overflow(bytes, row, &bytes) || __builtin_mul_overflow(bytes, 4, &bytes) ||
      uint64_t(bytes) > kAddressLimit ||
      uint64_t(reinterpret_cast<uintptr_t>(s.data)) > kAddressLimit - uint64_t(bytes))
    throw InvalidArgument(name + ".ld=" + std::to_string(s.ld) +
                          " makes the scales span more than the address space");
}

void check_scale_value(const std::string& name, const float* data, int64_t i) {
  const float v = data[i];
  if (!(v > 0.0f && v <= std::numeric_limits<float>::max()))
    throw InvalidArgument(name + "[" + std::to_string(i) + "]=" + std::to_string(v) +
                          ": a scale must be finite and > 0");
}

// QuantVjp::lhs_scales, as drhs's tgmm reads them (lhs [M, K], blocks of global rows along M):
// the scales of the rows of active groups with rows. Returns the bytes the array spans.
Range check_vjp_lhs_scales(const QuantVjp& q, std::span<const int32_t> sizes, int32_t offset,
                           int64_t g_local, int64_t m, int64_t k) {
  const std::string name = "quant.lhs_scales";
  const Scales& s = q.lhs_scales;
  const Quant& sc = s.scheme;
  const int64_t b = sc.kind == QuantKind::kBlock ? sc.block_k : 0;
  if (sc.kind == QuantKind::kBlock && b <= 0)  // the spec's rules were checked; no division by 0
    throw InvalidArgument(name + "=" + quant_name(sc) + ": the block size must be positive");
  const int64_t row = sc.kind == QuantKind::kTensor ? 1 : k;
  const int64_t rows = b ? (m + b - 1) / b : 1;
  check_scale_array(name, s, rows, row);
  if (sc.kind == QuantKind::kNone) return {0, 0};
  const int64_t ld = s.ld ? s.ld : row;
  for_each_active_group(sizes, offset, g_local, [&](int64_t, int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; r = b ? (r / b + 1) * b : end)
      for (int64_t c = 0; c < row; ++c) check_scale_value(name, s.data, (b ? r / b : 0) * ld + c);
  });
  return float_range(s.data, rows, row, ld);
}

// QuantVjp::rhs_scales, laid out as the forward's gmm reads them: the scales of every expert
// that has rows.
void check_vjp_rhs_scales(const QuantVjp& q, std::span<const int32_t> sizes, int32_t offset,
                          int64_t g_local, int64_t k, int64_t n, bool transpose_rhs) {
  const std::string name = "quant.rhs_scales";
  const Scales& s = q.rhs_scales;
  const Quant& sc = s.scheme;
  int64_t rows_per_expert = 1, row = 1;
  if (sc.kind == QuantKind::kChannel) row = n;
  if (sc.kind == QuantKind::kBlock) {
    if (sc.block_k <= 0)  // the spec's rules were checked; no division by 0
      throw InvalidArgument(name + "=" + quant_name(sc) + ": the block sizes must be positive");
    const int64_t kb = (k + sc.block_k - 1) / sc.block_k, nb = (n + sc.block_n - 1) / sc.block_n;
    rows_per_expert = transpose_rhs ? nb : kb;
    row = transpose_rhs ? kb : nb;
  }
  check_scale_array(name, s, sc.kind == QuantKind::kTensor ? 1 : g_local * rows_per_expert, row);
  if (sc.kind == QuantKind::kNone) return;
  const int64_t ld = s.ld ? s.ld : row;
  for_each_active_group(sizes, offset, g_local, [&](int64_t j, int64_t, int64_t) {
    if (sc.kind == QuantKind::kTensor) return check_scale_value(name, s.data, 0);
    const int64_t first = sc.kind == QuantKind::kChannel ? j : j * rows_per_expert;
    for (int64_t y = first; y < first + rows_per_expert; ++y)
      for (int64_t c = 0; c < row; ++c) check_scale_value(name, s.data, y * ld + c);
  });
}

// The schemes QuantVjp can serve (before any spec is built from them).
void check_vjp_schemes(const QuantVjp& q) {
  const Quant& l = q.lhs_scales.scheme;
  if (l.kind == QuantKind::kBlock && l.block_n != 0)
    throw InvalidArgument("quant.lhs_scales=" + quant_name(l) +
                          ": drhs's tgmm reads lhs in Bx1 blocks along M (block:B); block:BxC "
                          "is for gmm's rhs only");
  const Quant& r = q.rhs_scales.scheme;
  if (r.kind == QuantKind::kBlock && r.block_n == 0)
    throw InvalidArgument("quant.rhs_scales=" + quant_name(r) +
                          ": 1-D blocks along K (one scale per K-block and column) cannot be "
                          "read transposed for dlhs nor folded into dout; quantize the weights "
                          "with block:BxC, channel or tensor");
}

void check_grad_quant(const QuantVjp& q) {
  if (!q.grad_dtype) return;
  const DType d = *q.grad_dtype;
  if (d != DType::kF8E5M2 && d != DType::kF8E4M3)
    throw InvalidArgument(
        "quant.grad_dtype=" +
        (int(d) >= 0 && int(d) < kNumDTypes ? std::string(to_string(d)) : std::to_string(int(d))) +
        " must be f8e5m2, f8e4m3 or none (dout stays f32)");
  const int64_t b = q.grad_block;
  if (b < 16 || b > kMaxTile || (b & (b - 1)) != 0)
    throw InvalidArgument("quant.grad_block=" + std::to_string(b) +
                          " must be a power of two in [16, " + std::to_string(kMaxTile) + "]");
  const Calibration& c = q.grad_calibration;
  if (c.kind == Calibration::Kind::kAbsmax) return;
  const std::string what = "quant.grad_calibration=" + to_string(c);
  if (c.kind != Calibration::Kind::kFixed)
    throw InvalidArgument("quant.grad_calibration: kind " + std::to_string(int(c.kind)) +
                          " is not absmax or fixed");
  if (!std::isfinite(c.lo) || !std::isfinite(c.hi))
    throw InvalidArgument(what + ": lo and hi must be finite");
  if (!(c.lo < c.hi)) throw InvalidArgument(what + ": lo < hi required");
  if (std::max(std::fabs(c.lo), std::fabs(c.hi)) / codes::qmax(d) >
      double(std::numeric_limits<float>::max()))
    throw InvalidArgument(what + ": the scale max(|lo|, |hi|) / qmax overflows f32");
}

void check_finite_dout(const TensorView& dout, ThreadPool& pool) {
  const float* p = static_cast<const float*>(dout.data);
  const int64_t m = dout.shape[0], n = dout.shape[1], ld = dout.ld ? dout.ld : n;
  int64_t r, c;
  if (first_not_finite(p, m, n, ld, pool, r, c))
    throw InvalidArgument("dout[" + std::to_string(r) + ", " + std::to_string(c) +
                          "]=" + std::to_string(p[r * ld + c]) +
                          " is not finite: the runtime quantizes dout (quant.grad_dtype)");
}

// The error for a folded dout[r, c] * s[j, c] past the f32 range (it has no code).
[[noreturn]] void fold_overflows(float dout, float s, int64_t j, int64_t r, int64_t c) {
  throw InvalidArgument("dout[" + std::to_string(r) + ", " + std::to_string(c) +
                        "]=" + std::to_string(dout) + " times quant.rhs_scales[" +
                        std::to_string(j) + ", " + std::to_string(c) + "]=" + std::to_string(s) +
                        " overflows f32: the runtime quantizes dout with the weights' channel " +
                        "scales folded in (quant.grad_dtype)");
}

// The scratch of a quantized backward, per thread and reused: dout's codes and scales, and dout
// with the weights' channel scales folded in.
struct VjpScratch {
  std::vector<uint8_t> row_codes, col_codes;
  std::vector<float> row_scales, col_scales, folded;
};

// The codes and scales of a gmm call's quantized lhs (GmmOptions::quantize_lhs), per thread.
struct LhsScratch {
  std::vector<uint8_t> codes;
  std::vector<float> scales;
};

// Grows v to at least n elements (never shrinks, so a warm path does not allocate).
template <class T>
T* at_least(std::vector<T>& v, int64_t n) {
  if (v.size() < size_t(n)) v.resize(size_t(n));
  return v.data();
}

}  // namespace

void Runtime::gmm(const TensorView& lhs, const TensorView& rhs,
                  std::span<const int32_t> group_sizes, const TensorView& out,
                  const GmmOptions& o) {
  if (!o.quantize_lhs) {
    const gmmgen_kernel_entry& k =
        impl_->dispatch(gmm_spec(lhs, rhs, group_sizes, out, o), o.tiling.has_value());
    run(k, make_args(lhs, rhs, group_sizes, out, o.group_offset, o.existing_out, lhs.shape[0],
                     o.lhs_scales, o.rhs_scales));
    return;
  }
  // f32 or bf16 activations quantized by the call: the kernel is the one of the codes' dtype and
  // scheme.
  const LhsQuantization& q = *o.quantize_lhs;
  const KernelSpec spec = gmm_spec(lhs, rhs, group_sizes, out, o);
  const gmmgen_kernel_entry& kernel = impl_->dispatch(spec, o.tiling.has_value());
  const int64_t m = lhs.shape[0], k = lhs.shape[1];
  // The call's arguments are checked before its scratch grows, lhs's values as they are quantized
  // into it (one pass over lhs), and the kernel's own checks (rhs, out, scales) before out is
  // written: a refused call leaves out untouched.
  check_group_rows(group_sizes, o.group_offset, spec.g_local, m);
  QuantizeOptions qopt;
  qopt.dtype = q.dtype, qopt.scheme = q.scheme, qopt.axis = QuantAxis::kCols;
  qopt.calibration = q.calibration;
  const void* x = lhs.data;
  if (m > 0 && k > 0 && !x) throw InvalidArgument("lhs is NULL");
  const auto quantizer = [](const InvalidArgument& e) {
    return InvalidArgument(std::string("quantize_lhs (lhs is the quantizer's x): ") + e.what());
  };
  try {
    check_quantize_args(x, lhs.dtype, m, k, lhs.ld, qopt);
  } catch (const InvalidArgument& e) {
    throw quantizer(e);
  }
  thread_local LhsScratch scratch;
  const ScaleShape ss = scale_shape(q.scheme, QuantAxis::kCols, m, k);
  uint8_t* codes = at_least(
      scratch.codes,
      std::max<int64_t>(1, m * packed_codes_ld(q.dtype, k) / codes::elements_per_byte(q.dtype)));
  float* scales = at_least(scratch.scales, std::max<int64_t>(1, ss.rows * ss.cols));
  if (m == 0 || k == 0)  // no codes, no scale computed: any positive one (none is applied)
    std::fill_n(scales, std::max<int64_t>(1, ss.rows * ss.cols), 1.0f);
  try {
    quantize_into_scratch(x, lhs.dtype, m, k, lhs.ld, qopt, codes, scales, impl_->pool);
  } catch (const InvalidArgument& e) {
    throw quantizer(e);
  }
  const Scales lhs_scales{q.scheme, q.scheme.kind == QuantKind::kNone ? nullptr : scales, 0};
  run(kernel, make_args(TensorView::matrix(codes, q.dtype, m, k), rhs, group_sizes, out,
                        o.group_offset, o.existing_out, m, lhs_scales, o.rhs_scales));
}

void Runtime::gmm_vjp(const TensorView& dout, const TensorView& lhs, const TensorView& rhs,
                      std::span<const int32_t> group_sizes, const TensorView& dlhs,
                      const TensorView& drhs, const GmmVjpOptions& o) {
  if (!o.quant)
    for (auto [name, v] : {std::pair{"lhs", &lhs}, std::pair{"rhs", &rhs}})
      if (int(v->dtype) >= 0 && int(v->dtype) < kNumDTypes && codes::needs_scales(v->dtype))
        throw InvalidArgument(std::string(name) + " dtype " + std::string(to_string(v->dtype)) +
                              " holds codes that need scales: pass GmmVjpOptions::quant (the "
                              "backward of a quantized forward) with them");
  // dout must have the forward output's shape (checked on shapes alone: the forward's dtypes
  // and scales are not this call's business).
  GmmOptions fwd;
  fwd.transpose_rhs = o.transpose_rhs;
  fwd.group_offset = o.group_offset;
  if (!o.quant) {
    gmm_spec(lhs, rhs, group_sizes, dout, fwd);
  } else {
    TensorView l = lhs, r = rhs, d = dout;
    l.dtype = r.dtype = d.dtype = DType::kF32;
    gmm_spec(l, r, group_sizes, d, fwd);
  }
  if (o.quant && drhs.shape != rhs.shape)
    throw InvalidArgument("drhs " + shape_of(drhs) + " must have rhs's shape " + shape_of(rhs));

  const QuantVjp* q = o.quant ? &*o.quant : nullptr;
  const int64_t m = dout.shape[0], n = dout.shape[1], k = lhs.shape[1], g_local = rhs.shape[0];
  const bool quant_grad = q && q->grad_dtype.has_value();
  const bool fold = q && q->rhs_scales.scheme.kind == QuantKind::kChannel;
  const int64_t gb = quant_grad ? q->grad_block : 0;
  static const float kOne = 1.0f;  // the weights' scale once their channel scales are in dout
  if (q) {
    check_vjp_schemes(*q);
    check_grad_quant(*q);
    if ((quant_grad || fold) && dout.dtype != DType::kF32)
      throw InvalidArgument(
          "dout dtype " + std::string(to_string(dout.dtype)) + " must be f32: the runtime " +
          (quant_grad ? "quantizes dout" : "folds the weights' scales into dout"));
  }

  // Both specs are built (and their kernels found) before either output is written.
  GmmOptions dl;
  dl.transpose_rhs = !o.transpose_rhs;
  dl.group_offset = o.group_offset;
  dl.tiling = o.tiling.dlhs;
  TgmmOptions dr;
  dr.group_offset = o.group_offset;
  dr.transpose_out = o.transpose_rhs;
  dr.tiling = o.tiling.drhs;
  TensorView dq_row = dout, dq_col = dout;  // dout as dlhs and drhs read it
  if (q) {
    const Quant grad{QuantKind::kBlock, gb, 0};
    if (quant_grad) {
      dq_row = TensorView::matrix(nullptr, *q->grad_dtype, m, n);
      dq_col = dq_row;
      dl.lhs_scales.scheme = dr.rhs_scales.scheme = grad;
    } else if (fold) {
      dq_row = TensorView::matrix(nullptr, DType::kF32, m, n);
    }
    // The weights as dlhs reads them: block:BxC read transposed is block:CxB on the same array
    // (kernel_abi.h: the transposed layout swaps both the axes and the block sizes).
    dl.rhs_scales = q->rhs_scales;
    if (q->rhs_scales.scheme.kind == QuantKind::kBlock)
      dl.rhs_scales.scheme = {QuantKind::kBlock, q->rhs_scales.scheme.block_n,
                              q->rhs_scales.scheme.block_k};
    if (fold) dl.rhs_scales = {{QuantKind::kTensor, 0, 0}, &kOne, 0};
    dr.lhs_scales = q->lhs_scales;
  }
  auto find = [&](const char* what, auto&& make_spec,
                  bool overridden) -> const gmmgen_kernel_entry& {
    try {
      return impl_->dispatch(make_spec(), overridden);
    } catch (const SpecError& e) {
      throw SpecError(std::string(what) + ": " + e.what());
    }
  };
  const gmmgen_kernel_entry& k_dlhs = find(
      "dlhs = gmm(dout, rhs read transposed)",
      [&] { return gmm_spec(dq_row, rhs, group_sizes, dlhs, dl); }, dl.tiling.has_value());
  const gmmgen_kernel_entry& k_drhs = find(
      "drhs = tgmm(lhs, dout)", [&] { return tgmm_spec(lhs, dq_col, group_sizes, drhs, dr); },
      dr.tiling.has_value());

  Range lhs_scales_range{0, 0};
  if (q) {
    // The values the runtime reads itself or hands to the kernels, before any scratch exists.
    check_group_rows(group_sizes, o.group_offset, g_local, m);
    lhs_scales_range = check_vjp_lhs_scales(*q, group_sizes, o.group_offset, g_local, m, k);
    check_vjp_rhs_scales(*q, group_sizes, o.group_offset, g_local,
                         o.transpose_rhs ? rhs.shape[2] : rhs.shape[1], n, o.transpose_rhs);
    if ((quant_grad || fold) && m > 0 && !dout.data) throw InvalidArgument("dout is NULL");
    if (quant_grad) check_finite_dout(dout, impl_->pool);
  }
  // dlhs is written before drhs's tgmm reads lhs (and its scales): they must not share memory.
  if (overlap(byte_range(dlhs), byte_range(lhs)))
    throw InvalidArgument("dlhs overlaps lhs: drhs reads lhs after dlhs is written");
  if (overlap(byte_range(dlhs), lhs_scales_range))
    throw InvalidArgument("dlhs overlaps quant.lhs_scales: drhs reads them after dlhs is written");

  thread_local VjpScratch scratch;
  if (q && (quant_grad || fold) && m > 0 && n > 0) {
    const float* src = static_cast<const float*>(dout.data);
    const int64_t src_ld = dout.ld ? dout.ld : n;
    const float* row_src = src;  // what dlhs reads: dout, or dout with the channel scales in
    int64_t row_ld = src_ld;
    if (fold) {
      float* f = at_least(scratch.folded, m * n);
      std::fill_n(f, m * n, 0.0f);  // rows outside active groups
      const Scales& s = q->rhs_scales;
      const int64_t ld = s.ld ? s.ld : n;
      for_each_active_group(group_sizes, o.group_offset, g_local,
                            [&](int64_t j, int64_t begin, int64_t end) {
                              const float* sj = s.data + j * ld;
                              for (int64_t r = begin; r < end; ++r)
                                for (int64_t c = 0; c < n; ++c) {
                                  const float v = src[r * src_ld + c] * sj[c];
                                  if (quant_grad && !std::isfinite(v))
                                    fold_overflows(src[r * src_ld + c], sj[c], j, r, c);
                                  f[r * n + c] = v;
                                }
                            });
      row_src = f, row_ld = n;
      dq_row.data = f;
    }
    if (quant_grad) {
      const int64_t nb = (n + gb - 1) / gb, mb = (m + gb - 1) / gb;
      uint8_t* rc = at_least(scratch.row_codes, m * n);
      uint8_t* cc = at_least(scratch.col_codes, m * n);
      float* rs = at_least(scratch.row_scales, m * nb);
      float* cs = at_least(scratch.col_scales, mb * n);
      // The pool's threads quantize runs of whole blocks of gb rows: every block's scales and
      // codes depend on its own rows only, so the split leaves them bit for bit the same.
      // Every argument is checked by now; should a quantizer throw anyway, the error reaches the
      // caller (not a worker thread) before anything is written.
      std::exception_ptr failed;
      std::mutex failed_mutex;
      impl_->pool.parallel_for(mb, [&](int64_t b0, int64_t b1) {
        try {
          const int64_t r0 = b0 * gb, rows = std::min(m, b1 * gb) - r0;
          if (!fold) {  // one pass over dout, both halves
            DualQuantizeOptions d;
            d.dtype = *q->grad_dtype, d.scheme = {QuantKind::kBlock, gb, 0};
            d.calibration = q->grad_calibration;
            quantize_dual(src + r0 * src_ld, rows, n, src_ld, d, rc + r0 * n, 0, rs + r0 * nb, 0,
                          cc + r0 * n, 0, cs + b0 * n, 0);
          } else {
            // dlhs and drhs read different gradients: the folded one row-wise, dout column-wise.
            QuantizeOptions qo;
            qo.dtype = *q->grad_dtype, qo.scheme = {QuantKind::kBlock, gb, 0};
            qo.calibration = q->grad_calibration;
            qo.axis = QuantAxis::kCols;
            quantize(row_src + r0 * row_ld, rows, n, row_ld, qo, rc + r0 * n, 0, rs + r0 * nb, 0);
            qo.axis = QuantAxis::kRows;
            quantize(src + r0 * src_ld, rows, n, src_ld, qo, cc + r0 * n, 0, cs + b0 * n, 0);
          }
        } catch (...) {
          const std::lock_guard<std::mutex> lock(failed_mutex);
          if (!failed) failed = std::current_exception();
        }
      });
      if (failed) std::rethrow_exception(failed);
      dq_row = TensorView::matrix(rc, *q->grad_dtype, m, n);
      dq_col = TensorView::matrix(cc, *q->grad_dtype, m, n);
      dl.lhs_scales.data = rs;
      dr.rhs_scales.data = cs;
    }
  }

  // With no rows there are no codes, and no scale is read; the kernels still want the arrays.
  if (quant_grad && m == 0) dl.lhs_scales.data = dr.rhs_scales.data = &kOne;
  const gmmgen_args a_dlhs = make_args(dq_row, rhs, group_sizes, dlhs, o.group_offset, nullptr, m,
                                       dl.lhs_scales, dl.rhs_scales);
  const gmmgen_args a_drhs = make_args(lhs, dq_col, group_sizes, drhs, o.group_offset, nullptr, m,
                                       dr.lhs_scales, dr.rhs_scales);
  // Both calls are checked before either workspace grows, and planned before either output is
  // written.
  checked_workspace_bytes(k_dlhs, a_dlhs);
  checked_workspace_bytes(k_drhs, a_drhs);
  thread_local std::vector<unsigned char> storage_dlhs, storage_drhs;
  const Planned p_dlhs = plan_call(k_dlhs, a_dlhs, storage_dlhs);
  const Planned p_drhs = plan_call(k_drhs, a_drhs, storage_drhs);
  execute(impl_->pool, p_dlhs);
  execute(impl_->pool, p_drhs);
}

RuntimeStats Runtime::stats() const {
  return impl_->stats();
}

int Runtime::num_threads() const {
  return impl_->pool.size();
}
const fs::path& Runtime::cache_dir() const {
  return impl_->cache_dir;
}

}  // namespace gmmgen
