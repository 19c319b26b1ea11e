// The JIT: objects found in the disk cache, or compiled, trial-loaded and installed there.
// Knows nothing of GMM: the caller supplies the key, the sources, the flags and a check of what
// a loaded object says about itself.
#pragma once

#include <atomic>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "jit/disk_cache.h"
#include "jit/loader.h"
#include "jit/toolchain.h"

namespace gmmgen {

struct JitSources {
  std::vector<std::pair<std::string, std::string>> files;  // relative path, content
  std::string main;                                        // the file to compile
  nlohmann::json metadata;                                 // recorded in entry.json
};

struct JitCounters {
  std::atomic<int64_t> disk_hits{0}, compiles{0}, rebuilds{0};
  std::atomic<int64_t> compile_ns{0}, disk_load_ns{0};
};

class JitCache {
 public:
  // After the object reported its key, the caller's own check of it ("" = accepted, else why).
  using Accept = std::function<std::string(const SharedObject&)>;
  // What get() reports: kWarn a bad entry rebuilt; kInfo hits and compiles; kDebug the compile
  // command (to copy and paste) and the times.
  enum class Level { kWarn, kInfo, kDebug };
  using Log = std::function<void(Level, const std::string&)>;

  JitCache(std::filesystem::path root, Log log);

  // The object of `key`: from the disk cache when a valid entry is there and passes `accept`;
  // otherwise, if `compile` is set, built from sources() with cc under the key's lock (once
  // across processes), trial-loaded in its temporary folder, installed and loaded; otherwise
  // nullptr. Thread-safe; callers building the same key at once wait on its lock and load the
  // one build. An entry that fails any check (metadata, size, hash, the key in its ELF section,
  // dlopen, the key it reports, `accept`) is rebuilt once; a second bad build is a CompileError.
  std::shared_ptr<SharedObject> get(const std::string& key, const CompilerConfig& cc,
                                    const std::function<JitSources()>& sources,
                                    const Accept& accept, bool compile);

  // Whether the disk cache holds a valid-looking entry for key (DiskCache::check).
  bool valid(const std::string& key);

  const JitCounters& counters() const { return counters_; }
  const std::filesystem::path& root() const { return root_; }

 private:
  // Loads `so` if it holds `key` (read from the file first) and passes accept; else nullptr
  // and why.
  DiskCache& disk();
  std::shared_ptr<SharedObject> load(const std::filesystem::path& so, const std::string& key,
                                     const Accept& accept, std::string* why);
  std::filesystem::path root_;
  Log log_;
  std::once_flag disk_once_;
  std::unique_ptr<DiskCache> disk_;  // created at first use
  JitCounters counters_;
};

}  // namespace gmmgen
