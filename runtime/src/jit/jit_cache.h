// The JIT: artifacts found in the disk cache, or built, trial-loaded and installed there.
// Knows nothing of GMM nor of the kind of artifact: the caller supplies the key, the sources, the
// build command, and how to read an artifact's key and load it (a runtime backend's).
#pragma once

#include <atomic>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "jit/disk_cache.h"
#include "jit/prelude.h"

namespace gmmgen {

struct JitSources {
  std::vector<std::pair<std::string, std::string>> files;  // relative path, content
  std::string main;                                        // the file to compile
  nlohmann::json metadata;                                 // recorded in entry.json
};

// How get() builds and loads one kind of artifact.
struct JitArtifact {
  // The command that builds `out` from the file `main` of the folder `dir` (run by run_build),
  // with `prelude` passed by -include unless it is empty.
  std::function<std::vector<std::string>(
      const std::filesystem::path& main, const std::filesystem::path& dir,
      const std::filesystem::path& out, const std::filesystem::path& prelude)>
      command;
  // The key an artifact file holds, read without running any of it; throws CacheError.
  std::function<std::string(const std::filesystem::path&)> key_of;
  // Loads an artifact whose file holds the key (the caller keeps what it loaded): "" when it is
  // good, else why not; may throw CacheError.
  std::function<std::string(const std::filesystem::path&)> load;
  // The C++ compiler and flags of `command`, when it compiles C++: the sources' system headers
  // are then precompiled once (jit/prelude.h) and included from there.
  std::optional<CompilerConfig> compiler;
};

struct JitCounters {
  std::atomic<int64_t> disk_hits{0}, compiles{0}, rebuilds{0};
  std::atomic<int64_t> compile_ns{0}, disk_load_ns{0};
};

class JitCache {
 public:
  // What get() reports: kWarn a bad entry rebuilt; kInfo hits and compiles; kDebug the compile
  // command (to copy and paste) and the times.
  enum class Level { kWarn, kInfo, kDebug };
  using Log = std::function<void(Level, const std::string&)>;

  // preludes: whether compiles of C++ use precompiled preludes (GMMGEN_PCH).
  JitCache(std::filesystem::path root, Log log, bool preludes);

  // Loads the artifact of `key` (artifact.load): from the disk cache when a valid entry is there
  // and loads; otherwise, if `compile` is set, built from sources() with artifact.command under
  // the key's lock (once across processes), trial-loaded in its temporary folder, installed and
  // loaded; otherwise returns false. A build with a precompiled prelude that fails runs again
  // without it (and the prelude is dropped): the prelude only saves time. Thread-safe; callers
  // building the same key at once wait on its lock and load the one build. An entry that fails any
  // check (metadata, size, hash, the key in its file, artifact.load) is rebuilt once; a second bad
  // build is a CompileError.
  bool get(const std::string& key, const JitArtifact& artifact,
           const std::function<JitSources()>& sources, bool compile);

  // Whether the disk cache holds a valid-looking entry for key (DiskCache::check).
  bool valid(const std::string& key);

  const JitCounters& counters() const { return counters_; }
  const std::filesystem::path& root() const { return root_; }

 private:
  DiskCache& disk();
  // The precompiled prelude of `src` for `cc` (built when missing), or empty: go without.
  std::filesystem::path prelude(const CompilerConfig& cc, const JitSources& src);
  // Loads `file` if it holds `key` (read from the file first); "" or why not.
  static std::string load(const JitArtifact& artifact, const std::filesystem::path& file,
                          const std::string& key);
  std::filesystem::path root_;
  Log log_;
  std::once_flag disk_once_;
  std::unique_ptr<DiskCache> disk_;  // created at first use
  JitCounters counters_;
  PreludeStore preludes_;
  bool use_preludes_;
};

}  // namespace gmmgen
