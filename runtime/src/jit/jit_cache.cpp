#include "jit/jit_cache.h"

#include <chrono>
#include <cstdio>
#include <utility>

#include "jit/toolchain.h"

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

}  // namespace

JitCache::JitCache(fs::path root, Log log, bool preludes)
    : root_(std::move(root)),
      log_(std::move(log)),
      preludes_(PreludeStore::default_dir(root_)),
      use_preludes_(preludes) {}

std::string JitCache::load(const JitArtifact& artifact, const fs::path& file,
                           const std::string& key) {
  try {
    // The key first, read from the file: nothing of a mismatching artifact runs, not even its
    // static constructors.
    if (const std::string in_file = artifact.key_of(file); in_file != key)
      return "the artifact's file holds key " + in_file;
    return artifact.load(file);
  } catch (const CacheError& e) {  // not an artifact of this kind, truncated, loading failed
    return e.what();
  }
}

DiskCache& JitCache::disk() {
  std::call_once(disk_once_, [&] { disk_ = std::make_unique<DiskCache>(root_); });
  return *disk_;
}

bool JitCache::valid(const std::string& key) {
  return disk().check(key) == DiskCache::State::kValid;
}

fs::path JitCache::prelude(const CompilerConfig& cc, const JitSources& src) {
  if (!use_preludes_) {
    log_(Level::kDebug, "no precompiled prelude: GMMGEN_PCH is off");
    return {};
  }
  std::string why;
  bool built = false;
  const auto t0 = std::chrono::steady_clock::now();
  const std::optional<fs::path> header =
      preludes_.header(cc, prelude_text(src.files), &why, &built);
  if (!header) {
    log_(Level::kDebug, "no precompiled prelude: " + why);
    return {};
  }
  if (built)
    log_(Level::kInfo,
         "precompiled the prelude " + header->string() + " in " + seconds_text(ns_since(t0)));
  return *header;
}

bool JitCache::get(const std::string& key, const JitArtifact& artifact,
                   const std::function<JitSources()>& sources, bool compile) {
  disk();
  std::string why;
  const auto t0 = std::chrono::steady_clock::now();
  DiskCache::State state = disk_->check(key, &why);
  const fs::path installed = disk_->entry_dir(key) / DiskCache::kArtifactFile;
  if (state == DiskCache::State::kValid) {
    if ((why = load(artifact, installed, key)).empty()) {
      const int64_t ns = ns_since(t0);
      counters_.disk_load_ns += ns;
      ++counters_.disk_hits;
      disk_->touch(key);
      log_(Level::kInfo, "disk cache hit " + key);
      log_(Level::kDebug, "loaded " + installed.string() + " in " + seconds_text(ns));
      return true;
    }
    disk_->invalidate(key);
    state = DiskCache::State::kCorrupt;
  }
  if (state == DiskCache::State::kCorrupt) {
    ++counters_.rebuilds;
    log_(Level::kWarn, "cache entry " + key + " is bad (" + why + "): rebuilding");
  }
  if (!compile) return false;
  // The trial load of the new artifact in its temporary folder (the caller keeps it loaded, so
  // that loading the installed entry, the same file renamed, does not map it again).
  auto try_load = [&](const fs::path& file) { return load(artifact, file, key); };
  std::string main;
  fs::path prelude;
  int64_t compile_ns = 0;
  const bool built = disk_->build_locked(
      key,
      [&](const fs::path& dir) {
        const JitSources src = sources();
        write_sources(dir, src);
        main = src.main;
        const fs::path out = dir / DiskCache::kArtifactFile;
        const auto c0 = std::chrono::steady_clock::now();
        if (artifact.compiler) prelude = this->prelude(*artifact.compiler, src);
        log_(Level::kInfo, "compiling " + key);
        try {
          run_build(artifact.command(dir / src.main, dir, out, prelude), dir / src.main, out);
        } catch (const CompileError& e) {
          if (prelude.empty()) throw;
          // Again without it: the error is the plain compile's if that fails too; if it does
          // not, the prelude was at fault (say, a header it was built from changed since).
          const fs::path bad = std::exchange(prelude, fs::path());
          std::error_code ec;
          fs::remove(out, ec);
          run_build(artifact.command(dir / src.main, dir, out, prelude), dir / src.main, out);
          preludes_.drop(bad);
          log_(Level::kWarn, "compiling " + key + " with the precompiled prelude " + bad.string() +
                                 " failed, without it succeeded; it is dropped:\n" +
                                 std::string(e.what()).substr(0, 2000));
        }
        compile_ns = ns_since(c0);
        counters_.compile_ns += compile_ns;
        return src.metadata;
      },
      try_load);
  ++(built ? counters_.compiles : counters_.disk_hits);  // or another process built it first
  if (built) {
    // The command that ran, with the installed entry's paths in place of the temporary folder
    // (the sources stay in the entry), writing the artifact into the current folder.
    const fs::path entry = disk_->entry_dir(key);
    log_(Level::kDebug, "compiled " + key + " in " + seconds_text(compile_ns) + ": " +
                            format_command(artifact.command(entry / main, entry,
                                                            DiskCache::kArtifactFile, prelude)));
  }
  if (why = load(artifact, installed, key); !why.empty())
    throw CompileError("cache entry " + key + " is still bad after a rebuild: " + why);
  disk_->touch(key);
  return true;
}

}  // namespace gmmgen
