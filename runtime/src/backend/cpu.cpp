// The C++ target's backend: the system C++ compiler builds a shared object holding the kernel
// and a wrapper reporting its cache key; dlopen loads it; its work items run on the Runtime's
// thread pool.
#include "backend/backend.h"
#include "dispatch/kernel_entry.h"
#include "gmmgen/emit.h"
#include "gmmgen/naming.h"
#include "gmmgen/target.h"
#include "gmmgen/templates.h"
#include "jit/loader.h"

namespace gmmgen {
namespace fs = std::filesystem;
namespace {

// The section of the cache-entry wrapper (templates/cpp/cache_entry.cpp.mustache) holding the key.
constexpr const char* kKeySection = ".gmmgen_cache_key";

class CpuBackend final : public Backend {
 public:
  CompilerConfig toolchain(const KernelSpec& spec) const override {
    return default_compiler(target_of(spec.target).toolchain_flags(spec));
  }

  JitSources sources(const KernelSpec& spec, const std::string& key) const override {
    const EmittedKernel k = emit_kernel(spec);
    JitSources src;
    for (const auto& f : k.files) src.files.emplace_back(f.path, f.content);
    for (const auto& f : target_of(spec.target).support_files())
      src.files.emplace_back(f.path, f.content);
    const EmittedFile entry = emit_cache_entry(k.name, key);
    src.files.emplace_back(entry.path, entry.content);
    src.main = entry.path;
    const CompilerConfig cc = toolchain(spec);
    src.metadata = {{"name", k.name},
                    {"spec", to_text(spec)},
                    {"hash", k.hash},
                    {"generator_version", std::string(generator_version())},
                    {"compiler", compiler_identity(cc.cxx)},
                    {"flags", cc.flags}};
    return src;
  }

  std::vector<std::string> build_command(const CompilerConfig& cc, const fs::path& main,
                                         const fs::path& dir, const fs::path& artifact,
                                         const fs::path& prelude) const override {
    return compile_command(cc, main, dir, artifact, prelude);
  }

  std::string artifact_key(const fs::path& artifact) const override {
    // Also checks that dlopen would map nothing past the end of the file (a truncated object
    // would fault with SIGBUS once mapped).
    return read_elf_section(artifact, kKeySection, 256);
  }

  LoadedKernel load(const fs::path& artifact, const std::string& key,
                    const KernelSpec& spec) const override {
    auto so = std::make_shared<SharedObject>(SharedObject::open(artifact));
    auto* reported = reinterpret_cast<const char* (*)()>(so->find("gmmgen_cache_key"));
    if (!reported || std::string(reported()) != key)
      throw CacheError("the object reports key " + std::string(reported ? reported() : "(none)"));
    // Beyond its key, the object must hold this kernel and report this kernel's hash.
    LoadedKernel k;
    k.fns = bind_entry_points(*so, kernel_name(spec));
    const std::string hash = k.fns.info()->hash ? k.fns.info()->hash : "";
    if (hash != spec_hash(spec)) throw CacheError("the object reports kernel hash " + hash);
    k.holder = std::move(so);
    return k;
  }

  void execute(const Planned& p, ExecResources& res) const override {
    res.pool.parallel_for(p.items, [&](int64_t begin, int64_t end) {
      p.kernel->run_items(p.args, p.workspace, begin, end);
    });
  }
};

}  // namespace

const Backend& cpu_backend() {
  static const CpuBackend backend;
  return backend;
}

}  // namespace gmmgen
