// A runtime backend: what the runtime needs from a target to build its kernels into an artifact
// (toolchain), make them callable (loader) and run them (executor). Backends are stateless; the
// Runtime owns the resources they run on (ExecResources). One implementation per target the
// runtime runs (cpu.cpp: the C++ target on this CPU), one row per target in backends.cpp.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "exec/thread_pool.h"
#include "gmmgen/kernel_abi.h"
#include "gmmgen/spec.h"
#include "jit/jit_cache.h"
#include "jit/toolchain.h"

namespace gmmgen {

// A kernel call whose arguments the kernel has checked and whose metadata is built.
struct Planned {
  const gmmgen_kernel_entry* kernel;
  const gmmgen_args* args;
  void* workspace;
  int64_t items;
};

// A loaded kernel: its entry points, valid while `holder` lives.
struct LoadedKernel {
  gmmgen_kernel_entry fns{};
  std::shared_ptr<const void> holder;
};

// What a Runtime lends its backends' executors.
struct ExecResources {
  ThreadPool& pool;
};

class Backend {
 public:
  virtual ~Backend() = default;

  // ---- Toolchain: spec -> artifact.
  // The tool and flags that build spec's artifact; cache_key() hashes their identity with the
  // kernel's hash.
  virtual CompilerConfig toolchain(const KernelSpec& spec) const = 0;
  // The files of spec's artifact (the kernel, what it includes, a wrapper that reports `key`)
  // and the entry metadata (entry.json).
  virtual JitSources sources(const KernelSpec& spec, const std::string& key) const = 0;
  // The command that builds the artifact file `artifact` from `main`, with `dir` (the sources'
  // folder) on the include path and `prelude` (jit/prelude.h) included first unless empty.
  virtual std::vector<std::string> build_command(const CompilerConfig& cc,
                                                 const std::filesystem::path& main,
                                                 const std::filesystem::path& dir,
                                                 const std::filesystem::path& artifact,
                                                 const std::filesystem::path& prelude) const = 0;

  // ---- Loader: artifact -> entry points.
  // The cache key an artifact file holds, read without running any of it; throws CacheError.
  virtual std::string artifact_key(const std::filesystem::path& artifact) const = 0;
  // Loads an artifact and binds the entry points of spec's kernel; throws CacheError naming what
  // is wrong (it reports another key or kernel hash, an entry point is missing).
  virtual LoadedKernel load(const std::filesystem::path& artifact, const std::string& key,
                            const KernelSpec& spec) const = 0;

  // ---- Executor: runs a planned call to its end.
  virtual void execute(const Planned& call, ExecResources& resources) const = 0;
};

// The backend of a target, or nullptr where the runtime builds and runs none of its kernels
// (Target::caps().runtime_runs says the same: a test checks).
const Backend* backend_of(TargetKind target);
// The backend of spec's target; throws InvalidArgument naming the target where there is none.
const Backend& backend_for(const KernelSpec& spec);

// The C++ target's backend: sources compiled by the system C++ compiler into a shared object,
// loaded with dlopen, run as work items on the Runtime's thread pool.
const Backend& cpu_backend();

}  // namespace gmmgen
