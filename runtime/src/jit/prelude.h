// Precompiled preludes: the system headers a kernel's sources include (<immintrin.h>, the C++
// library), parsed once per compiler, flags and header set rather than at every compile, where
// they are about half the time of a kernel's build.
//
// A prelude lives in a folder of its own under the store (created 0700):
//   <key>/prelude.h      the sources' `#include <...>` lines, written once and never changed
//   <key>/prelude.h.gch  the precompiled header (GCC's name; Clang reads it too), installed by
//                        rename, so a reader sees all of it or nothing
//   <key>.lock           the lock a build holds (flock)
// A compile then passes `-include <key>/prelude.h`: the compiler finds the .gch beside it and
// checks it against its own flags and headers (GCC ignores one that does not match, Clang
// stops). The headers' own include guards make the sources' includes of them no-ops, so the
// object is the one the plain compile makes. The key is a hash of the compiler's path and
// identity, the flags, the host CPU when a flag targets it, and the header list.
#pragma once

#include <filesystem>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "jit/toolchain.h"

namespace gmmgen {

// The prelude of a set of sources: their `#include <...>` lines (the header names only), sorted
// and without repeats, as a header's text; "" when they include no system header.
std::string prelude_text(const std::vector<std::pair<std::string, std::string>>& files);

class PreludeStore {
 public:
  // $GMMGEN_PCH_DIR, else <cache_root>/.pch.
  static std::filesystem::path default_dir(const std::filesystem::path& cache_root);

  // Creates nothing until a prelude is asked for.
  explicit PreludeStore(std::filesystem::path dir) : dir_(std::move(dir)) {}

  // The header that sources compiled by `cc` pass with -include, its precompiled header built
  // first (under the prelude's lock, once across processes) when missing. nullopt, with the
  // reason in *why, when `text` is empty or the prelude cannot be made (the compiler cannot
  // precompile headers, the store is unusable): the compile then goes without. A prelude that
  // failed is not tried again by this process. `built` is set when this call built it.
  std::optional<std::filesystem::path> header(const CompilerConfig& cc, const std::string& text,
                                              std::string* why, bool* built = nullptr);

  // Removes the precompiled header of a prelude a compile failed with, so that the next call
  // builds it again; this process goes without it from now on.
  void drop(const std::filesystem::path& header);

  // Removes every prelude of the store (each under its lock); returns how many.
  int clear();

 private:
  std::filesystem::path dir_;
  std::mutex mutex_;
  std::set<std::string> failed_;  // keys this process goes without
};

}  // namespace gmmgen
