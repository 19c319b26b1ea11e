#include "jit/jit_cache.h"

#include <chrono>
#include <cstdio>

namespace gmmgen {
namespace fs = std::filesystem;
namespace {

int64_t ns_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
      .count();
}

void write_sources(const fs::path& dir, const JitSources& src) {
  for (const auto& [rel, content] : src.files) {
    const fs::path p = dir / rel;
    fs::create_directories(p.parent_path());  // filesystem_error: CacheError in build_locked
    write_new_file(p, content);
  }
}

std::string seconds_text(int64_t ns) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f s", double(ns) * 1e-9);
  return buf;
}

// The section of the cache-entry wrapper (templates/cpp/cache_entry.cpp.mustache) holding the key.
constexpr const char* kKeySection = ".gmmgen_cache_key";

}  // namespace

JitCache::JitCache(fs::path root, Log log) : root_(std::move(root)), log_(std::move(log)) {}

std::shared_ptr<SharedObject> JitCache::load(const fs::path& so, const std::string& key,
                                             const Accept& accept, std::string* why) {
  try {
    // The key first, read from the file: nothing of a mismatching object runs, not even its
    // static constructors. The same read checks that dlopen would map nothing past the end.
    if (const std::string in_file = read_elf_section(so, kKeySection, 256); in_file != key) {
      *why = "the object's " + std::string(kKeySection) + " section holds key " + in_file;
      return nullptr;
    }
    auto obj = std::make_shared<SharedObject>(SharedObject::open(so));
    auto* reported = reinterpret_cast<const char* (*)()>(obj->find("gmmgen_cache_key"));
    if (!reported || std::string(reported()) != key) {
      *why = "the object reports key " + std::string(reported ? reported() : "(none)");
      return nullptr;
    }
    if (std::string bad = accept(*obj); !bad.empty()) {
      *why = bad;
      return nullptr;
    }
    return obj;
  } catch (const CacheError& e) {  // not an ELF object, truncated, dlopen failed
    *why = e.what();
    return nullptr;
  }
}

DiskCache& JitCache::disk() {
  std::call_once(disk_once_, [&] { disk_ = std::make_unique<DiskCache>(root_); });
  return *disk_;
}

bool JitCache::valid(const std::string& key) {
  return disk().check(key) == DiskCache::State::kValid;
}

std::shared_ptr<SharedObject> JitCache::get(const std::string& key, const CompilerConfig& cc,
                                            const std::function<JitSources()>& sources,
                                            const Accept& accept, bool compile) {
  disk();
  std::string why;
  const auto t0 = std::chrono::steady_clock::now();
  DiskCache::State state = disk_->check(key, &why);
  if (state == DiskCache::State::kValid) {
    if (auto obj = load(disk_->entry_dir(key) / "kernel.so", key, accept, &why)) {
      const int64_t ns = ns_since(t0);
      counters_.disk_load_ns += ns;
      ++counters_.disk_hits;
      disk_->touch(key);
      log_(Level::kInfo, "disk cache hit " + key);
      log_(Level::kDebug,
           "loaded " + (disk_->entry_dir(key) / "kernel.so").string() + " in " + seconds_text(ns));
      return obj;
    }
    disk_->invalidate(key);
    state = DiskCache::State::kCorrupt;
  }
  if (state == DiskCache::State::kCorrupt) {
    ++counters_.rebuilds;
    log_(Level::kWarn, "cache entry " + key + " is bad (" + why + "): rebuilding");
  }
  if (!compile) return nullptr;
  // The trial load of the new object in its temporary folder; kept open so that loading the
  // installed entry (the same file, renamed) does not map it again.
  std::shared_ptr<SharedObject> trial;
  auto try_load = [&](const fs::path& so) {
    std::string bad;
    trial = load(so, key, accept, &bad);
    return bad;
  };
  std::string main;
  int64_t compile_ns = 0;
  const bool built = disk_->build_locked(
      key,
      [&](const fs::path& dir) {
        const JitSources src = sources();
        write_sources(dir, src);
        main = src.main;
        log_(Level::kInfo, "compiling " + key);
        const auto c0 = std::chrono::steady_clock::now();
        compile_shared_object(cc, dir / src.main, dir, dir / "kernel.so");
        compile_ns = ns_since(c0);
        counters_.compile_ns += compile_ns;
        nlohmann::json meta = src.metadata;
        meta["compiler"] = compiler_identity(cc.cxx);
        meta["flags"] = cc.flags;
        return meta;
      },
      try_load);
  ++(built ? counters_.compiles : counters_.disk_hits);  // or another process built it first
  if (built) {
    // The command that ran, with the installed entry's paths in place of the temporary folder
    // (the sources stay in the entry), writing kernel.so into the current folder.
    const fs::path entry = disk_->entry_dir(key);
    std::vector<std::string> argv{cc.cxx};
    argv.insert(argv.end(), cc.flags.begin(), cc.flags.end());
    argv.insert(argv.end(), {"-I", entry.string(), "-o", "kernel.so", (entry / main).string()});
    log_(Level::kDebug,
         "compiled " + key + " in " + seconds_text(compile_ns) + ": " + format_command(argv));
  }
  auto obj = load(disk_->entry_dir(key) / "kernel.so", key, accept, &why);
  if (!obj) throw CompileError("cache entry " + key + " is still bad after a rebuild: " + why);
  disk_->touch(key);
  return obj;
}

}  // namespace gmmgen
