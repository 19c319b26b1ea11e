// The disk cache of compiled kernels: where it is, what it holds, and removing entries. Every
// Runtime builds into it (docs/runtime.md, "Disk cache"); these calls serve tools (`gmm-gen
// cache`) and programs that manage it. Entries are folders named by cache key (cache_key() in
// gmmgen/runtime.hpp); a name that is not an entry (a link, a stray file) is listed with a note,
// never followed.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace gmmgen {

struct CacheEntry {
  std::string key;     // the folder's name
  std::string note;    // "" for an entry; else why the name is not one
  std::string kernel;  // the kernel's name, from its entry.json ("" when unreadable)
  std::string spec;    // its spec text, likewise
  uintmax_t bytes = 0;
  int64_t built = 0;  // Unix seconds
  int64_t used = 0;   // Unix seconds: when a process last loaded it, else `built`
};

struct CacheStats {
  size_t entries = 0;
  uintmax_t bytes = 0;  // of the entries
  size_t other = 0;     // names that are not entries
};

class KernelCache {
 public:
  // $GMMGEN_CACHE_DIR, else $XDG_CACHE_HOME/gmm-gen, else $HOME/.cache/gmm-gen.
  static std::filesystem::path default_root();
  // The cache at `root` if that folder exists (nothing is created); throws CacheError if it
  // belongs to another user or others may write it.
  static std::optional<KernelCache> open(const std::filesystem::path& root);

  const std::filesystem::path& root() const { return root_; }
  // Every name in the folder but the hidden ones and tuning/ (the tuning tables).
  std::vector<CacheEntry> list() const;
  CacheStats stats() const;
  // Removes entries least recently used first: every one last used before `unused_before` (Unix
  // seconds), then more until the rest hold at most `max_bytes`. Names that are not entries
  // stay. Each entry goes under its key's lock, so a process building or loading it is not
  // disturbed. Returns the removed entries.
  std::vector<CacheEntry> prune(std::optional<int64_t> unused_before,
                                std::optional<uintmax_t> max_bytes);
  // Removes every entry, the precompiled preludes kept in the folder (.pch/), and every name that
  // is not an entry (a link goes, never its target); returns the number of entries removed.
  // Tuning tables stay.
  size_t clear();

 private:
  explicit KernelCache(std::filesystem::path root) : root_(std::move(root)) {}
  std::filesystem::path root_;
};

}  // namespace gmmgen
