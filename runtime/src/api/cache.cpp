// gmmgen/cache.hpp over the disk cache's internals (jit/disk_cache.h).
#include "gmmgen/cache.hpp"

#include "jit/disk_cache.h"

namespace gmmgen {
namespace {

CacheEntry public_entry(const DiskCache::Listing& l) {
  CacheEntry e;
  e.key = l.key, e.note = l.note, e.bytes = l.bytes, e.built = l.built, e.used = l.used;
  const auto text = [&](const char* key) -> std::string {
    if (!l.entry.is_object()) return "";
    const auto it = l.entry.find(key);
    return it != l.entry.end() && it->is_string() ? it->get<std::string>() : "";
  };
  e.kernel = text("name"), e.spec = text("spec");
  return e;
}

std::vector<CacheEntry> public_entries(const std::vector<DiskCache::Listing>& ls) {
  std::vector<CacheEntry> out;
  out.reserve(ls.size());
  for (const auto& l : ls) out.push_back(public_entry(l));
  return out;
}

}  // namespace

std::filesystem::path KernelCache::default_root() {
  return DiskCache::default_root();
}

std::optional<KernelCache> KernelCache::open(const std::filesystem::path& root) {
  if (!DiskCache::open_existing(root)) return std::nullopt;
  return KernelCache(root);
}

std::vector<CacheEntry> KernelCache::list() const {
  const auto cache = DiskCache::open_existing(root_);
  return cache ? public_entries(cache->list()) : std::vector<CacheEntry>{};
}

CacheStats KernelCache::stats() const {
  CacheStats s;
  for (const CacheEntry& e : list()) {
    if (!e.note.empty()) {
      ++s.other;
      continue;
    }
    ++s.entries;
    s.bytes += e.bytes;
  }
  return s;
}

std::vector<CacheEntry> KernelCache::prune(std::optional<int64_t> unused_before,
                                           std::optional<uintmax_t> max_bytes) {
  return public_entries(DiskCache(root_).prune(unused_before, max_bytes));
}

size_t KernelCache::clear() {
  return size_t(DiskCache(root_).clear());
}

}  // namespace gmmgen
