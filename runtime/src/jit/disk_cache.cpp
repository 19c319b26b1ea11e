#include "jit/disk_cache.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>

#include "gmmgen/hash.h"
#include "jit/cache_entry.h"
#include "jit/cache_files.h"
#include "jit/prelude.h"
#include "jit/toolchain.h"

namespace gmmgen {
namespace fs = std::filesystem;
namespace {

// Runs fn, turning the library's filesystem and JSON errors into CacheError, so that callers
// see the cache's error type (a full disk, a read-only root) and nothing else.
template <typename Fn>
auto cache_errors(const std::string& what, Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const fs::filesystem_error& e) {
    throw CacheError("cache: " + what + ": " + e.what());
  } catch (const nlohmann::json::exception& e) {
    throw CacheError("cache: " + what + ": " + e.what());
  }
}

// Removes a folder by first renaming it out of the way (so readers never see half of it).
void discard(const fs::path& root, const fs::path& dir) {
  std::error_code ec;
  fs::path trash;
  try {
    trash = make_temp_dir(root / ".tmp", "trash");
    fs::rename(dir, trash / "old", ec);
  } catch (const CacheError&) {
    ec = std::make_error_code(std::errc::io_error);
  }
  if (ec) fs::remove_all(dir, ec);  // could not move it: remove it where it is
  if (!trash.empty()) fs::remove_all(trash, ec);
}

// Removes the build folders (<key>-XXXXXX in .tmp) of builds that no longer run: a process
// killed mid-compile leaves its folder. A build holds its key's lock for as long as its folder
// exists, so a folder whose key's lock is free is no one's. Discarded entries (trash-XXXXXX)
// go once they are an hour old.
void reclaim_stale_builds(const fs::path& root) {
  std::error_code ec;
  const auto cutoff = fs::file_time_type::clock::now() - std::chrono::hours(1);
  for (const auto& e : fs::directory_iterator(root / ".tmp", ec)) {
    const std::string name = e.path().filename().string();
    if (name.size() < 8 || name[name.size() - 7] != '-') continue;
    const std::string key = name.substr(0, name.size() - 7);
    std::error_code fec;
    if (e.symlink_status(fec).type() != fs::file_type::directory) continue;
    if (key == "trash") {
      if (e.last_write_time(fec) < cutoff) fs::remove_all(e.path(), fec);
      continue;
    }
    if (key.find_first_not_of("0123456789abcdef") != std::string::npos) continue;
    const int fd = open((root / ".locks" / (key + ".lock")).c_str(),
                        O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) continue;
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) fs::remove_all(e.path(), fec);
    close(fd);  // releases the lock
  }
}

}  // namespace

std::string file_hash(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return "";
  std::ostringstream ss;
  ss << in.rdbuf();
  const std::string bytes = ss.str();
  return hash128_hex({bytes});
}

fs::path DiskCache::default_root() {
  if (const char* d = std::getenv("GMMGEN_CACHE_DIR"); d && *d) return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return fs::path(x) / "gmm-gen";
  if (const char* h = std::getenv("HOME"); h && *h) return fs::path(h) / ".cache" / "gmm-gen";
  throw CacheError("cache: none of GMMGEN_CACHE_DIR, XDG_CACHE_HOME, HOME is set");
}

DiskCache::DiskCache(fs::path root) : root_(std::move(root)) {
  std::error_code ec;
  if (!root_.parent_path().empty()) fs::create_directories(root_.parent_path(), ec);
  make_cache_dir(root_);
  make_cache_dir(root_ / ".locks");
  make_cache_dir(root_ / ".tmp");
  reclaim_stale_builds(root_);
}

std::optional<DiskCache> DiskCache::open_existing(fs::path root) {
  struct stat st;
  if (lstat(root.c_str(), &st) != 0) {
    if (errno == ENOENT) return std::nullopt;
    throw CacheError("cache: cannot stat " + root.string() + ": " + std::strerror(errno));
  }
  require_safe(root, true);
  return DiskCache(std::move(root), NoCreate{});
}

DiskCache::State DiskCache::check(const std::string& key, std::string* why) const {
  auto corrupt = [&](const std::string& reason) {
    if (why) *why = reason;
    return State::kCorrupt;
  };
  const fs::path dir = root_ / key;
  struct stat st;
  if (lstat(dir.c_str(), &st) != 0) return State::kMissing;
  require_safe(root_, true);
  require_safe(dir, true);
  const fs::path json_path = dir / "entry.json", so = dir / kArtifactFile;
  struct stat so_st;
  if (lstat(json_path.c_str(), &st) != 0 || lstat(so.c_str(), &so_st) != 0)
    return corrupt("entry is incomplete");
  require_safe(json_path, false);
  require_safe(so, false);
  if (st.st_size > kMaxEntryJsonBytes)
    return corrupt("entry.json has " + std::to_string(st.st_size) + " bytes, more than the " +
                   std::to_string(kMaxEntryJsonBytes) + " an entry may have");
  std::ifstream in(json_path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  if (!in) return corrupt("entry.json is unreadable");
  const std::string bad =
      entry_mismatch(text.str(), key, uintmax_t(so_st.st_size), [&] { return file_hash(so); });
  if (!bad.empty()) return corrupt(bad);
  return State::kValid;
}

bool DiskCache::build_locked(const std::string& key,
                             const std::function<nlohmann::json(const fs::path&)>& build,
                             const std::function<std::string(const fs::path&)>& trial) {
  FileLock lock(root_ / ".locks" / (key + ".lock"));
  if (check(key) == State::kValid) return false;  // another process finished it first
  const fs::path tmp = make_temp_dir(root_ / ".tmp", key);
  try {
    return cache_errors("building " + key, [&] {
      nlohmann::json entry = build(tmp);
      const fs::path so = tmp / kArtifactFile;
      struct stat st;
      if (lstat(so.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
        throw CompileError("cache: the build of " + key + " wrote no " + kArtifactFile);
      // Nothing is installed that does not load and report its key.
      if (const std::string bad = trial(so); !bad.empty())
        throw CompileError("cache: the object built for key " + key + " is unusable: " + bad);
      entry["key"] = key;
      entry["so_bytes"] = uintmax_t(st.st_size);
      entry["so_hash"] = file_hash(so);
      write_new_file(tmp / "entry.json", entry.dump(2) + "\n");
      for (const auto& f : fs::recursive_directory_iterator(tmp)) {
        if (f.symlink_status().type() == fs::file_type::regular) {
          if (chmod(f.path().c_str(), 0644) != 0)
            throw CacheError("cache: chmod " + f.path().string() + ": " + std::strerror(errno));
          fsync_path(f.path(), false);
        } else if (f.symlink_status().type() == fs::file_type::directory) {
          fsync_path(f.path(), true);
        }
      }
      fsync_path(tmp, true);
      struct stat old;
      if (lstat((root_ / key).c_str(), &old) == 0) discard(root_, root_ / key);
      if (rename(tmp.c_str(), (root_ / key).c_str()) != 0)
        throw CacheError("cache: cannot install " + (root_ / key).string() + ": " +
                         std::strerror(errno));
      fsync_path(root_, true);
      return true;
    });
  } catch (...) {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    throw;
  }
}

void DiskCache::invalidate(const std::string& key) {
  FileLock lock(root_ / ".locks" / (key + ".lock"));
  struct stat st;
  if (lstat((root_ / key).c_str(), &st) == 0) discard(root_, root_ / key);
}

void DiskCache::touch(const std::string& key) const {
  // Process-wide, never destroyed: runtimes may be destroyed during static destruction.
  static std::mutex& mutex = *new std::mutex;
  static std::set<std::string>& done = *new std::set<std::string>;
  const fs::path mark = root_ / key / "last-use";
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (!done.insert(mark.string()).second) return;
  }
  const int fd = open(mark.c_str(), O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return;
  futimens(fd, nullptr);  // now
  close(fd);
}

namespace {

int64_t mtime_of(const fs::path& p) {
  struct stat st;
  return lstat(p.c_str(), &st) == 0 ? int64_t(st.st_mtim.tv_sec) : 0;
}

}  // namespace

std::vector<DiskCache::Listing> DiskCache::list() const {
  return cache_errors("listing " + root_.string(), [&] {
    std::vector<Listing> out;
    for (const auto& e : fs::directory_iterator(root_)) {
      const std::string name = e.path().filename().string();
      if (name.empty() || name[0] == '.') continue;
      // tuning/ holds the tables `gmm-gen tune` writes: measurements, not compiled kernels, so
      // neither listed nor cleared with them.
      if (name == "tuning") continue;
      Listing l;
      l.key = name;
      // Never followed: a link planted here (to / say) is not an entry, whatever it points to.
      const fs::file_type type = e.symlink_status().type();
      if (type != fs::file_type::directory) {
        l.note = type == fs::file_type::symlink ? "not a cache entry: a symbolic link"
                                                : "not a cache entry: not a folder";
        out.push_back(std::move(l));
        continue;
      }
      try {
        std::ifstream in(e.path() / "entry.json");
        l.entry = nlohmann::json::parse(in);
      } catch (const std::exception&) {
        l.entry = nullptr;
      }
      l.built = mtime_of(e.path() / "entry.json");
      if (l.built == 0) l.built = mtime_of(e.path());
      l.used = std::max(l.built, mtime_of(e.path() / "last-use"));
      std::error_code ec;
      for (auto it = fs::recursive_directory_iterator(e.path(), ec);
           !ec && it != fs::recursive_directory_iterator(); it.increment(ec))
        if (it->symlink_status(ec).type() == fs::file_type::regular) l.bytes += it->file_size(ec);
      out.push_back(std::move(l));
    }
    std::sort(out.begin(), out.end(),
              [](const Listing& a, const Listing& b) { return a.key < b.key; });
    return out;
  });
}

int DiskCache::clear() {
  int removed = 0;
  for (const auto& l : list()) {
    if (l.note.empty()) {
      FileLock lock(root_ / ".locks" / (l.key + ".lock"));
      discard(root_, root_ / l.key);
      ++removed;
    } else if (unlink((root_ / l.key).c_str()) != 0 && errno != ENOENT) {
      // A link or a stray file: the name itself goes, never what a link points to.
      throw CacheError("cache: cannot remove " + (root_ / l.key).string() + ": " +
                       std::strerror(errno));
    }
  }
  // The precompiled preludes kept in this cache (not those of $GMMGEN_PCH_DIR, which other
  // caches may share).
  PreludeStore(root_ / ".pch").clear();
  std::error_code ec;
  // Lock files stay: another process may hold one, and a new file would give a second lock.
  // Temporary folders go once they are an hour old (a live build takes seconds).
  const auto cutoff = fs::file_time_type::clock::now() - std::chrono::hours(1);
  for (const auto& e : fs::directory_iterator(root_ / ".tmp", ec))
    if (e.path().filename().string().rfind("trash-", 0) == 0 ||
        e.symlink_status(ec).type() != fs::file_type::directory || e.last_write_time(ec) < cutoff)
      fs::remove_all(e.path(), ec);
  return removed;
}

std::vector<DiskCache::Listing> DiskCache::prune(std::optional<int64_t> unused_before,
                                                 std::optional<uintmax_t> max_bytes) {
  std::vector<Listing> entries;
  for (auto& l : list())
    if (l.note.empty()) entries.push_back(std::move(l));
  // Least recently used first; the key breaks ties, so the order does not depend on the listing.
  std::sort(entries.begin(), entries.end(), [](const Listing& a, const Listing& b) {
    return a.used != b.used ? a.used < b.used : a.key < b.key;
  });
  uintmax_t total = 0;
  for (const auto& l : entries) total += l.bytes;
  std::vector<Listing> removed;
  for (auto& l : entries) {
    const bool stale = unused_before && l.used < *unused_before;
    const bool over = max_bytes && total > *max_bytes;
    if (!stale && !over) continue;
    FileLock lock(root_ / ".locks" / (l.key + ".lock"));
    discard(root_, root_ / l.key);
    total -= l.bytes;
    removed.push_back(std::move(l));
  }
  return removed;
}

void write_new_file(const fs::path& p, std::string_view content) {
  const int fd = open(p.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) throw CacheError("cache: cannot create " + p.string() + ": " + std::strerror(errno));
  size_t done = 0;
  while (done < content.size()) {
    const ssize_t n = write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      close(fd);
      throw CacheError("cache: cannot write " + p.string() + ": " + std::strerror(err));
    }
    done += size_t(n);
  }
  if (close(fd) != 0)
    throw CacheError("cache: cannot write " + p.string() + ": " + std::strerror(errno));
}

}  // namespace gmmgen
