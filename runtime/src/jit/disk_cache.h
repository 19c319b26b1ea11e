// The on-disk cache of compiled kernels (docs/runtime.md).
//
// Layout under the root (created 0700):
//   <key>/kernel.so     the shared object, reporting its key through gmmgen_cache_key()
//   <key>/entry.json    key, size and XXH3-128 of kernel.so, spec, compiler, flags
//   <key>/*.cpp, *.h    the sources it was built from
//   <key>/last-use      empty; its mtime is when a process last loaded the entry (for prune)
//   .locks/<key>.lock   per-key lock file (flock), so concurrent processes build a key once
//   .tmp/               entries being built; installed with one rename after fsync
//   .pch/               precompiled preludes (jit/prelude.h), unless $GMMGEN_PCH_DIR names
//                       another folder
// An entry is used only if the root, the entry folder and its files belong to the current user
// and are not writable by group or others (otherwise: CacheError, nothing is loaded), and if
// kernel.so has the size and hash recorded in entry.json (otherwise it is rebuilt).
#pragma once

#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gmmgen/errors.hpp"

namespace gmmgen {

class DiskCache {
 public:
  // The artifact's file in an entry (a shared object for the C++ target's backend).
  static constexpr const char* kArtifactFile = "kernel.so";

  // $GMMGEN_CACHE_DIR, else $XDG_CACHE_HOME/gmm-gen, else $HOME/.cache/gmm-gen.
  static std::filesystem::path default_root();

  // Creates the root (0700) if missing; throws CacheError if it is unsafe to use. Removes the
  // build folders that killed processes left (a build's folder lives under its key's lock).
  explicit DiskCache(std::filesystem::path root);
  // The cache at an existing root, for reading it (list): creates nothing, not even the root.
  // nullopt when the root does not exist; CacheError if it is unsafe to use.
  static std::optional<DiskCache> open_existing(std::filesystem::path root);
  const std::filesystem::path& root() const { return root_; }

  enum class State { kMissing, kValid, kCorrupt };
  // Checks the entry of `key` without loading anything. Throws CacheError for unsafe ownership
  // or permissions; kCorrupt says why in `why`.
  State check(const std::string& key, std::string* why = nullptr) const;

  // Folder of a valid entry.
  std::filesystem::path entry_dir(const std::string& key) const { return root_ / key; }

  // Builds the entry of `key` under the key's lock unless a valid one appears meanwhile:
  // build(dir) must write the sources and `kernel.so` into dir (a fresh mkdtemp folder) and
  // return entry metadata; trial(dir / "kernel.so") must load the object and return "" if it is
  // good, else why not (CompileError then, nothing installed). The folder is synced and renamed
  // into place; an existing corrupt entry is replaced. Filesystem failures are CacheError.
  // Returns true if this call built it, false if another process had.
  bool build_locked(const std::string& key,
                    const std::function<nlohmann::json(const std::filesystem::path&)>& build,
                    const std::function<std::string(const std::filesystem::path&)>& trial);

  // Marks a valid-looking entry as bad (e.g. the loaded object reported another key) so the
  // next build_locked replaces it.
  void invalidate(const std::string& key);

  // Records that the entry of `key` was loaded now: the mtime of <key>/last-use (created
  // O_NOFOLLOW if missing). Once per process and entry, so a hot path never touches the disk;
  // failures are ignored (the mark only orders prune).
  void touch(const std::string& key) const;

  // Every name in the root but the hidden ones and tuning/; links and files are listed with a
  // note, never followed.
  struct Listing {
    std::string key;
    std::string note;      // empty for an entry folder, else why it is not an entry
    nlohmann::json entry;  // entry.json, or null if unreadable
    uintmax_t bytes = 0;
    int64_t built = 0;  // Unix seconds: entry.json's mtime (the folder's if it has none)
    int64_t used = 0;   // Unix seconds: last-use's mtime, else `built`
  };
  std::vector<Listing> list() const;
  // Removes every entry (and temporary leftovers), the precompiled preludes of .pch/, and every
  // name that is not an entry (a link goes, never its target); returns the number of entries
  // removed.
  int clear();

  // Removes entries, least recently used first: every entry last used before `unused_before`
  // (Unix seconds), then more until the entries left hold at most `max_bytes`. Names that are
  // not entries (links, stray files) and tuning/ are left alone; links are never followed.
  // Each entry goes under its key's lock, renamed away first. Returns the removed entries.
  std::vector<Listing> prune(std::optional<int64_t> unused_before,
                             std::optional<uintmax_t> max_bytes);

 private:
  struct NoCreate {};
  DiskCache(std::filesystem::path root, NoCreate) : root_(std::move(root)) {}
  std::filesystem::path root_;
};

// Creates p (O_EXCL | O_NOFOLLOW, 0600) holding content; CacheError with the system's reason
// (e.g. "No space left on device") otherwise.
void write_new_file(const std::filesystem::path& p, std::string_view content);

// XXH3-128 (hex) of a file's bytes; empty string if it cannot be read.
std::string file_hash(const std::filesystem::path& p);

}  // namespace gmmgen
