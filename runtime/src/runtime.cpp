#include "gmmgen/runtime.hpp"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <thread>
#include <unordered_map>

#include "gmmgen/compiler.h"
#include "gmmgen/disk_cache.h"
#include "gmmgen/emit.h"
#include "gmmgen/hash.h"
#include "gmmgen/heuristics.h"
#include "gmmgen/kernel_library.h"
#include "gmmgen/templates.h"
#include "thread_pool.h"

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

// The compiler's identity: its version banner and target triple, never its install path.
std::string compiler_identity(const std::string& cxx) {
  static std::mutex mutex;
  static std::map<std::string, std::string> known;
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = known.find(cxx); it != known.end()) return it->second;
  const ProcessResult version = run_process({cxx, "--version"});
  const ProcessResult machine = run_process({cxx, "-dumpmachine"});
  if (version.status != 0 || machine.status != 0)
    throw CompileError("compiler '" + cxx +
                       "' cannot be run (set GMMGEN_CXX to a C++17 compiler): " +
                       (version.status != 0 ? version.output : machine.output));
  const std::string banner = version.output.substr(0, version.output.find('\n'));
  const std::string triple = machine.output.substr(0, machine.output.find('\n'));
  return known[cxx] = banner + " / " + triple;
}

// What -march=native means on this host: the CPU model and its feature flags.
const std::string& host_cpu_signature() {
  static const std::string sig = [] {
    std::ifstream in("/proc/cpuinfo");
    std::string line, model, flags;
    while (std::getline(in, line) && (model.empty() || flags.empty())) {
      if (model.empty() && line.rfind("model name", 0) == 0) model = line;
      if (flags.empty() && line.rfind("flags", 0) == 0) flags = line;
    }
    return hash128_hex({model, flags});
  }();
  return sig;
}

struct SpecHasher {
  size_t operator()(const KernelSpec& s) const {
    uint64_t h = 1469598103934665603ull;
    auto mix = [&](uint64_t v) { h = (h ^ v) * 1099511628211ull; };
    mix(uint64_t(s.op)), mix(uint64_t(s.lhs)), mix(uint64_t(s.rhs)), mix(uint64_t(s.out));
    mix(uint64_t(s.lhs_quant.kind)), mix(uint64_t(s.lhs_quant.block_k));
    mix(uint64_t(s.rhs_quant.kind)), mix(uint64_t(s.rhs_quant.block_k));
    mix(uint64_t(s.rhs_quant.block_n)), mix(uint64_t(s.k)), mix(uint64_t(s.n));
    mix(uint64_t(s.g)), mix(uint64_t(s.g_local)), mix(uint64_t(s.tiling.tm));
    mix(uint64_t(s.tiling.tk)), mix(uint64_t(s.tiling.tn)), mix(uint64_t(s.transpose_rhs));
    mix(uint64_t(s.lhs_layout)), mix(uint64_t(s.out_mode)), mix(uint64_t(s.target));
    mix(uint64_t(s.isa));
    return size_t(h);
  }
};

struct TableEntry {
  gmmgen_kernel_entry fns{};
  std::shared_ptr<KernelLibrary> library;  // null for registered (compiled-in) kernels
  bool registered = false;
};

}  // namespace

std::string cache_key(const KernelSpec& spec) {
  const CompilerConfig cc = default_compiler(spec.isa);
  const std::string isa = spec.isa == Isa::kNative ? "native:" + host_cpu_signature()
                                                   : std::string(to_string(spec.isa));
  return hash128_hex({spec_hash(spec), compiler_identity(cc.cxx), format_command(cc.flags), isa});
}

struct Runtime::Impl {
  explicit Impl(const RuntimeOptions& o)
      : jit(o.jit.value_or(!env_flag("GMMGEN_DISABLE_JIT"))),
        log(o.log.value_or(env_flag("GMMGEN_LOG"))),
        pool(o.num_threads > 0 ? o.num_threads : env_threads()),
        cache_dir(o.cache_dir.empty() ? DiskCache::default_root() : o.cache_dir) {}

  bool jit, log;
  ThreadPool pool;
  fs::path cache_dir;
  std::unique_ptr<DiskCache> disk;  // created at first use, under build_mutex

  mutable std::shared_mutex table_mutex;
  std::unordered_map<KernelSpec, TableEntry, SpecHasher> table;
  std::mutex build_mutex;  // one kernel built or loaded at a time in this process

  std::atomic<int64_t> lookups{0}, registry_hits{0}, memory_hits{0}, disk_hits{0}, compiles{0},
      rebuilds{0};
  std::atomic<int64_t> compile_ns{0}, disk_load_ns{0};

  template <typename... Args>
  void say(const char* fmt, Args... args) const {
    if (!log) return;
    std::fprintf(stderr, "gmm-gen: ");
    std::fprintf(stderr, fmt, args...);
    std::fprintf(stderr, "\n");
  }

  // Builds the sources and kernel.so of a cache entry into dir; returns entry metadata.
  nlohmann::json build_entry(const KernelSpec& spec, const std::string& key, const fs::path& dir) {
    const EmittedKernel k = emit_kernel(spec);
    std::vector<EmittedFile> files = k.files;
    files.push_back({"gmmgen/kernel_abi.h", std::string(embedded_file("gmmgen/kernel_abi.h"))});
    files.push_back(emit_cache_entry(k.name, key));
    write_files(dir, files);
    const CompilerConfig cc = default_compiler(spec.isa);
    say("compile %s: %s ... %s", k.name.c_str(), cc.cxx.c_str(), format_command(cc.flags).c_str());
    const auto t0 = std::chrono::steady_clock::now();
    compile_shared_object(cc, dir / "entry.cpp", dir, dir / "kernel.so");
    compile_ns +=
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
            .count();
    return {{"name", k.name},    {"spec", to_text(spec)},
            {"hash", k.hash},    {"compiler", compiler_identity(cc.cxx)},
            {"flags", cc.flags}, {"generator_version", std::string(generator_version())}};
  }

  // Loads a valid-looking entry and checks what the object says about itself.
  std::shared_ptr<KernelLibrary> load(const KernelSpec& spec, const std::string& key,
                                      std::string* why) {
    auto lib =
        std::make_shared<KernelLibrary>(KernelLibrary::open(disk->entry_dir(key) / "kernel.so"));
    // The key first: nothing else of a mismatching object is used.
    auto* reported = reinterpret_cast<const char* (*)()>(lib->find("gmmgen_cache_key"));
    if (!reported || std::string(reported()) != key) {
      *why = "the object reports key " + std::string(reported ? reported() : "(none)");
      return nullptr;
    }
    lib->bind(kernel_name(spec));
    if (lib->info().hash != spec_hash(spec)) {
      *why = "the object reports kernel hash " + std::string(lib->info().hash);
      return nullptr;
    }
    return lib;
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
    if (!disk) disk = std::make_unique<DiskCache>(cache_dir);
    const std::string key = cache_key(spec);
    say("spec %s -> %s (cache key %s)", to_text(spec).c_str(), kernel_name(spec).c_str(),
        key.c_str());

    std::string why;
    std::shared_ptr<KernelLibrary> lib;
    const auto t0 = std::chrono::steady_clock::now();
    DiskCache::State state = disk->check(key, &why);
    if (state == DiskCache::State::kValid) {
      lib = load(spec, key, &why);
      if (lib) {
        disk_load_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(
                            std::chrono::steady_clock::now() - t0)
                            .count();
        ++disk_hits;
        say("disk cache hit %s", kernel_name(spec).c_str());
      } else {
        disk->invalidate(key);
        state = DiskCache::State::kCorrupt;
      }
    }
    if (!lib) {
      if (state == DiskCache::State::kCorrupt) {
        ++rebuilds;
        say("cache entry %s is bad (%s): rebuilding", key.c_str(), why.c_str());
      }
      if (!jit)
        throw JitDisabledError("kernel " + kernel_name(spec) +
                               " is neither compiled in nor cached in " + cache_dir.string() +
                               ", and compiling is disabled (GMMGEN_DISABLE_JIT=1); "
                               "warm it up ahead of time. Spec: " +
                               to_text(spec));
      const bool built =
          disk->build_locked(key, [&](const fs::path& dir) { return build_entry(spec, key, dir); });
      if (built)
        ++compiles;
      else
        ++disk_hits;  // another process built it while we waited for the lock
      lib = load(spec, key, &why);
      if (!lib) throw CacheError("cache entry " + key + " is still bad after a rebuild: " + why);
    }
    std::unique_lock<std::shared_mutex> lock(table_mutex);
    TableEntry& e = table[spec];
    e.library = lib;
    e.fns = lib->fns();
    return e.fns;
  }
};

Runtime::Runtime(RuntimeOptions options) : impl_(std::make_unique<Impl>(options)) {}
Runtime::~Runtime() = default;

const gmmgen_kernel_entry& Runtime::kernel(const KernelSpec& spec) {
  ++impl_->lookups;
  {
    std::shared_lock<std::shared_mutex> lock(impl_->table_mutex);
    if (auto it = impl_->table.find(spec); it != impl_->table.end()) {
      ++(it->second.registered ? impl_->registry_hits : impl_->memory_hits);
      return it->second.fns;
    }
  }
  return impl_->find_or_build(spec);
}

void Runtime::warmup(const std::vector<KernelSpec>& specs) {
  for (const auto& s : specs) kernel(s);
}

void Runtime::register_kernels(const gmmgen_kernel_entry* table, int32_t count) {
  if (!table && count > 0) throw InvalidArgument("register_kernels: table is NULL");
  std::unique_lock<std::shared_mutex> lock(impl_->table_mutex);
  for (int32_t i = 0; i < count; ++i) {
    const gmmgen_kernel_info* info = table[i].info();
    if (info->abi_version != GMMGEN_ABI_VERSION)
      throw InvalidArgument(std::string("register_kernels: ") + info->name + " has ABI version " +
                            std::to_string(info->abi_version) + ", expected " +
                            std::to_string(GMMGEN_ABI_VERSION));
    TableEntry& e = impl_->table[parse_text(info->spec)];
    e.fns = table[i];
    e.library.reset();
    e.registered = true;
    impl_->say("registered %s", info->name);
  }
}

namespace {

// A kernel call whose arguments the kernel has checked and whose metadata is built.
struct Planned {
  const gmmgen_kernel_entry* kernel;
  const gmmgen_args* args;
  void* workspace;
  int64_t items;
};

// Plans a call into `storage` (grown as needed and reused, so a warm path does not allocate).
Planned plan_call(const gmmgen_kernel_entry& k, const gmmgen_args& args,
                  std::vector<unsigned char>& storage) {
  const int64_t bytes = k.workspace_bytes(args.m);
  if (bytes < 0) throw InvalidArgument("m=" + std::to_string(args.m) + " must be >= 0");
  if (storage.size() < size_t(bytes) + 64) storage.resize(size_t(bytes) + 64);
  void* ws = storage.data() + (64 - reinterpret_cast<uintptr_t>(storage.data()) % 64) % 64;
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

void check_groups(std::span<const int32_t> group_sizes) {
  if (group_sizes.empty() || group_sizes.size() > (1u << 20))
    throw InvalidArgument("group_sizes must have 1 to 2^20 entries, got " +
                          std::to_string(group_sizes.size()));
}

void check_existing(const TensorView& out, const TensorView* existing) {
  if (!existing) return;
  if (existing->ndim != out.ndim || existing->shape != out.shape)
    throw InvalidArgument("existing_out " + shape_of(*existing) + " must have out's shape " +
                          shape_of(out));
  if (existing->dtype != out.dtype)
    throw InvalidArgument("existing_out dtype " + std::string(to_string(existing->dtype)) +
                          " differs from out dtype " + std::string(to_string(out.dtype)));
}

gmmgen_args make_args(const TensorView& lhs, const TensorView& rhs, std::span<const int32_t> sizes,
                      const TensorView& out, int32_t group_offset, const TensorView* existing,
                      int64_t m) {
  gmmgen_args a{};
  a.abi_version = GMMGEN_ABI_VERSION;
  a.m = m;
  a.lhs = lhs.data, a.lhs_ld = lhs.ld;
  a.rhs = rhs.data, a.rhs_ld = rhs.ld;
  a.group_sizes = sizes.data();
  a.group_offset = group_offset;
  a.out = out.data, a.out_ld = out.ld;
  if (existing) a.existing_out = existing->data, a.existing_out_ld = existing->ld;
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
  check_groups(group_sizes);
  const int64_t m = lhs.shape[0], k = lhs.shape[1];
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
  s.k = k, s.n = n, s.g = int64_t(group_sizes.size()), s.g_local = rhs.shape[0];
  s.transpose_rhs = o.transpose_rhs;
  s.out_mode = o.existing_out ? (o.accumulate ? OutMode::kAccumulate : OutMode::kExistingOut)
                              : OutMode::kPlain;
  s.tiling = o.tiling ? *o.tiling : default_tiling(s);
  return s;
}

void Runtime::gmm(const TensorView& lhs, const TensorView& rhs,
                  std::span<const int32_t> group_sizes, const TensorView& out,
                  const GmmOptions& o) {
  const gmmgen_kernel_entry& k = kernel(gmm_spec(lhs, rhs, group_sizes, out, o));
  run(k, make_args(lhs, rhs, group_sizes, out, o.group_offset, o.existing_out, lhs.shape[0]));
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
  check_groups(group_sizes);
  const int64_t m = o.lhs_transposed ? lhs.shape[1] : lhs.shape[0];
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
  s.k = k, s.n = n, s.g = int64_t(group_sizes.size()), s.g_local = out.shape[0];
  s.transpose_rhs = o.transpose_out;
  s.lhs_layout = o.lhs_transposed ? LhsLayout::kKM : LhsLayout::kMK;
  s.out_mode = o.existing_out ? OutMode::kAccumulate : OutMode::kPlain;
  s.tiling = o.tiling ? *o.tiling : default_tiling(s);
  return s;
}

void Runtime::tgmm(const TensorView& lhs, const TensorView& rhs,
                   std::span<const int32_t> group_sizes, const TensorView& out,
                   const TgmmOptions& o) {
  const gmmgen_kernel_entry& k = kernel(tgmm_spec(lhs, rhs, group_sizes, out, o));
  run(k, make_args(lhs, rhs, group_sizes, out, o.group_offset, o.existing_out, rhs.shape[0]));
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
  const gmmgen_kernel_entry& k_dlhs = kernel(gmm_spec(dout, rhs, group_sizes, dlhs, dl));
  const gmmgen_kernel_entry& k_drhs = kernel(tgmm_spec(lhs, dout, group_sizes, drhs, dr));
  const gmmgen_args a_dlhs =
      make_args(dout, rhs, group_sizes, dlhs, o.group_offset, nullptr, dout.shape[0]);
  const gmmgen_args a_drhs =
      make_args(lhs, dout, group_sizes, drhs, o.group_offset, nullptr, dout.shape[0]);
  // Both calls are planned (every argument checked) before either output is written.
  thread_local std::vector<unsigned char> storage_dlhs, storage_drhs;
  const Planned p_dlhs = plan_call(k_dlhs, a_dlhs, storage_dlhs);
  const Planned p_drhs = plan_call(k_drhs, a_drhs, storage_drhs);
  execute(impl_->pool, p_dlhs);
  execute(impl_->pool, p_drhs);
}

RuntimeStats Runtime::stats() const {
  RuntimeStats s;
  s.lookups = impl_->lookups, s.registry_hits = impl_->registry_hits;
  s.memory_hits = impl_->memory_hits, s.disk_hits = impl_->disk_hits;
  s.compiles = impl_->compiles, s.rebuilds = impl_->rebuilds;
  s.compile_seconds = double(impl_->compile_ns) * 1e-9;
  s.disk_load_seconds = double(impl_->disk_load_ns) * 1e-9;
  return s;
}

int Runtime::num_threads() const {
  return impl_->pool.size();
}
const fs::path& Runtime::cache_dir() const {
  return impl_->cache_dir;
}

}  // namespace gmmgen
