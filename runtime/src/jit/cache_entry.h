// The check of a disk cache entry's entry.json: pure (text in, verdict out), so that a fuzzer can
// drive it; DiskCache::check reads the files and calls it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace gmmgen {

// entry.json may be at most this long (a planted huge file is corrupt, not read).
inline constexpr int64_t kMaxEntryJsonBytes = int64_t{1} << 20;

// Why `json` (entry.json's text) does not describe the entry of `key` whose kernel.so has
// `so_bytes` bytes and the hash so_hash() (called only once everything else matched); "" when it
// does. Every field is checked for its type: entry.json is data, and bad data means rebuild.
// Never throws for any text.
std::string entry_mismatch(std::string_view json, const std::string& key, uintmax_t so_bytes,
                           const std::function<std::string()>& so_hash);

}  // namespace gmmgen
