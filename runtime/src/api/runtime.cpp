#include "gmmgen/runtime.hpp"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <shared_mutex>
#include <thread>
#include <unordered_map>

#include "dispatch/kernel_entry.h"
#include "dispatch/registry.h"
#include "dispatch/select.h"
#include "exec/thread_pool.h"
#include "gmmgen/emit.h"
#include "gmmgen/templates.h"
#include "jit/jit_cache.h"

namespace gmmgen {
namespace fs = std::filesystem;
namespace {

bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v && *v && std::string(v) != "0";
}

int env_threads() {
  if (const char* v = std::getenv("GMMGEN_NUM_THREADS"); v && *v) {
    char* end = nullptr;
    const long n = std::strtol(v, &end, 10);
    if (*end != '\0' || n < 1 || n > 4096)
      throw InvalidArgument(std::string("GMMGEN_NUM_THREADS=") + v +
                            " must be an integer in [1, 4096]");
    return int(n);
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

CompilerConfig compiler_for(const KernelSpec& spec) {
  return default_compiler(target_of(spec.target).toolchain_flags(spec));
}

// A JIT-built kernel: its entry points and the object that holds them.
struct TableEntry {
  gmmgen_kernel_entry fns{};
  std::shared_ptr<SharedObject> object;
};

}  // namespace

std::string cache_key(const KernelSpec& spec) {
  return cache_key(spec_hash(spec), compiler_for(spec));
}

struct Runtime::Impl {
  explicit Impl(const RuntimeOptions& o)
      : jit_enabled(o.jit.value_or(!env_flag("GMMGEN_DISABLE_JIT"))),
        log(o.log.value_or(env_flag("GMMGEN_LOG"))),
        pool(o.num_threads > 0 ? o.num_threads : env_threads()),
        cache_dir(o.cache_dir.empty() ? DiskCache::default_root() : o.cache_dir),
        jit(cache_dir, [this](const std::string& m) { say("%s", m.c_str()); }) {}

  bool jit_enabled, log;
  ThreadPool pool;
  fs::path cache_dir;
  Registry registry;
  JitCache jit;
  const TuningSource* tuning = nullptr;  // no tuning tables yet

  mutable std::shared_mutex table_mutex;
  std::unordered_map<KernelSpec, TableEntry, SpecKeyHash> table;
  std::mutex build_mutex;  // one kernel built or loaded at a time in this process

  std::atomic<int64_t> lookups{0}, registry_hits{0}, memory_hits{0};

  template <typename... Args>
  void say(const char* fmt, Args... args) const {
    if (!log) return;
    std::fprintf(stderr, "gmm-gen: ");
    std::fprintf(stderr, fmt, args...);
    std::fprintf(stderr, "\n");
  }

  // What the disk-cache entry of a spec is built from: the kernel, the ABI header and the
  // wrapper that reports the key.
  static JitSources sources(const KernelSpec& spec, const std::string& key) {
    const EmittedKernel k = emit_kernel(spec);
    JitSources src;
    for (const auto& f : k.files) src.files.emplace_back(f.path, f.content);
    for (const auto& f : target_of(spec.target).support_files())
      src.files.emplace_back(f.path, f.content);
    const EmittedFile entry = emit_cache_entry(k.name, key);
    src.files.emplace_back(entry.path, entry.content);
    src.main = entry.path;
    src.metadata = {{"name", k.name},
                    {"spec", to_text(spec)},
                    {"hash", k.hash},
                    {"generator_version", std::string(generator_version())}};
    return src;
  }

  const gmmgen_kernel_entry& find_or_build(const KernelSpec& spec) {
    std::lock_guard<std::mutex> build_lock(build_mutex);
    {
      std::shared_lock<std::shared_mutex> lock(table_mutex);
      if (auto it = table.find(spec); it != table.end()) {
        ++memory_hits;
        return it->second.fns;
      }
    }
    validate(spec);
    const std::string name = kernel_name(spec), hash = spec_hash(spec);
    const std::string key = cache_key(spec);
    say("spec %s -> %s (cache key %s)", to_text(spec).c_str(), name.c_str(), key.c_str());
    gmmgen_kernel_entry fns{};
    // Beyond its key, the object must hold this kernel and report this kernel's hash.
    auto accept = [&](const SharedObject& so) -> std::string {
      try {
        fns = bind_entry_points(so, name);
      } catch (const CacheError& e) {
        return e.what();
      }
      const std::string reported = fns.info()->hash ? fns.info()->hash : "";
      return reported == hash ? "" : "the object reports kernel hash " + reported;
    };
    auto object = jit.get(
        key, compiler_for(spec), [&] { return sources(spec, key); }, accept, jit_enabled);
    if (!object) {
      std::string near;
      for (const auto& m : registry.near_misses(spec)) near += "\n  " + m;
      throw JitDisabledError(
          "kernel " + name + " is neither compiled in nor cached in " + cache_dir.string() +
          ", and compiling is disabled (GMMGEN_DISABLE_JIT=1); warm it up "
          "ahead of time. Spec: " +
          to_text(spec) + (near.empty() ? "" : "\nClosest compiled-in kernels:" + near));
    }
    std::unique_lock<std::shared_mutex> lock(table_mutex);
    TableEntry& e = table[spec];
    e.object = std::move(object);
    e.fns = fns;
    return e.fns;
  }

  const gmmgen_kernel_entry& lookup(const KernelSpec& spec) {
    ++lookups;
    if (const gmmgen_kernel_entry* k = registry.exact(spec)) {
      ++registry_hits;
      return *k;
    }
    {
      std::shared_lock<std::shared_mutex> lock(table_mutex);
      if (auto it = table.find(spec); it != table.end()) {
        ++memory_hits;
        return it->second.fns;
      }
    }
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

Runtime::Runtime(RuntimeOptions options) : impl_(std::make_unique<Impl>(options)) {}
Runtime::~Runtime() = default;

const gmmgen_kernel_entry& Runtime::kernel(const KernelSpec& spec) {
  return impl_->lookup(spec);
}

void Runtime::warmup(const std::vector<KernelSpec>& specs) {
  for (const auto& s : specs) kernel(s);
}

void Runtime::register_kernels(const gmmgen_kernel_entry* table, int32_t count) {
  std::vector<std::string> skipped;
  impl_->registry.add(table, count, &skipped);
  for (const auto& name : skipped)
    impl_->say("not registered: %s (this CPU cannot run its ISA family)", name.c_str());
  impl_->say("registered %d kernels", int(count - int32_t(skipped.size())));
}

namespace {

// A kernel call whose arguments the kernel has checked and whose metadata is built.
struct Planned {
  const gmmgen_kernel_entry* kernel;
  const gmmgen_args* args;
  void* workspace;
  int64_t items;
};

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

void execute(ThreadPool& pool, const Planned& p) {
  pool.parallel_for(p.items, [&](int64_t begin, int64_t end) {
    p.kernel->run_items(p.args, p.workspace, begin, end);
  });
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

KernelSpec Runtime::gmm_spec(const TensorView& lhs, const TensorView& rhs,
                             std::span<const int32_t> group_sizes, const TensorView& out,
                             const GmmOptions& o) const {
  if (lhs.ndim != 2) throw InvalidArgument("lhs must be 2-D [M, K], got " + shape_of(lhs));
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
  s.tiling = select_tiling(s, o.tiling, impl_->tuning, 0).tiling;
  return s;
}

void Runtime::gmm(const TensorView& lhs, const TensorView& rhs,
                  std::span<const int32_t> group_sizes, const TensorView& out,
                  const GmmOptions& o) {
  const gmmgen_kernel_entry& k =
      impl_->dispatch(gmm_spec(lhs, rhs, group_sizes, out, o), o.tiling.has_value());
  run(k, make_args(lhs, rhs, group_sizes, out, o.group_offset, o.existing_out, lhs.shape[0],
                   o.lhs_scales, o.rhs_scales));
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
  s.tiling = select_tiling(s, o.tiling, impl_->tuning, 0).tiling;
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

void Runtime::gmm_vjp(const TensorView& dout, const TensorView& lhs, const TensorView& rhs,
                      std::span<const int32_t> group_sizes, const TensorView& dlhs,
                      const TensorView& drhs, const GmmVjpOptions& o) {
  // dout must have the forward output's shape.
  GmmOptions fwd;
  fwd.transpose_rhs = o.transpose_rhs;
  fwd.group_offset = o.group_offset;
  gmm_spec(lhs, rhs, group_sizes, dout, fwd);
  // Both specs are built (and their kernels found) before either output is written.
  GmmOptions dl;
  dl.transpose_rhs = !o.transpose_rhs;
  dl.group_offset = o.group_offset;
  dl.tiling = o.tiling.dlhs;
  TgmmOptions dr;
  dr.group_offset = o.group_offset;
  dr.transpose_out = o.transpose_rhs;
  dr.tiling = o.tiling.drhs;
  const gmmgen_kernel_entry& k_dlhs =
      impl_->dispatch(gmm_spec(dout, rhs, group_sizes, dlhs, dl), dl.tiling.has_value());
  const gmmgen_kernel_entry& k_drhs =
      impl_->dispatch(tgmm_spec(lhs, dout, group_sizes, drhs, dr), dr.tiling.has_value());
  const gmmgen_args a_dlhs =
      make_args(dout, rhs, group_sizes, dlhs, o.group_offset, nullptr, dout.shape[0]);
  const gmmgen_args a_drhs =
      make_args(lhs, dout, group_sizes, drhs, o.group_offset, nullptr, dout.shape[0]);
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
  RuntimeStats s;
  const JitCounters& j = impl_->jit.counters();
  s.lookups = impl_->lookups, s.registry_hits = impl_->registry_hits;
  s.memory_hits = impl_->memory_hits, s.disk_hits = j.disk_hits;
  s.compiles = j.compiles, s.rebuilds = j.rebuilds;
  s.compile_seconds = double(j.compile_ns) * 1e-9;
  s.disk_load_seconds = double(j.disk_load_ns) * 1e-9;
  return s;
}

int Runtime::num_threads() const {
  return impl_->pool.size();
}
const fs::path& Runtime::cache_dir() const {
  return impl_->cache_dir;
}

}  // namespace gmmgen
