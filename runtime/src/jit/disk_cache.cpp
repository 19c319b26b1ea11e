#include "jit/disk_cache.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>

#include "gmmgen/hash.h"

namespace gmmgen {
namespace fs = std::filesystem;
namespace {

// Throws unless p (not followed if a symlink) belongs to us and is not group/other-writable.
void require_safe(const fs::path& p, bool want_dir) {
  struct stat st;
  if (lstat(p.c_str(), &st) != 0)
    throw CacheError("cache: cannot stat " + p.string() + ": " + std::strerror(errno));
  if (want_dir ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode))
    throw CacheError("cache: refusing " + p.string() + ": not a " +
                     (want_dir ? "directory" : "regular file"));
  if (st.st_uid != geteuid())
    throw CacheError("cache: refusing " + p.string() + ": owned by uid " +
                     std::to_string(st.st_uid) + ", not by the current user (uid " +
                     std::to_string(geteuid()) + ")");
  if (st.st_mode & (S_IWGRP | S_IWOTH))
    throw CacheError("cache: refusing " + p.string() + ": writable by group or others (mode " +
                     [&] {
                       std::ostringstream os;
                       os << std::oct << (st.st_mode & 07777);
                       return os.str();
                     }() +
                     ")");
}

void make_private_dir(const fs::path& p) {
  if (mkdir(p.c_str(), 0700) != 0 && errno != EEXIST)
    throw CacheError("cache: cannot create " + p.string() + ": " + std::strerror(errno));
  require_safe(p, true);
}

void fsync_path(const fs::path& p, bool dir) {
  const int fd = open(p.c_str(), (dir ? O_DIRECTORY : 0) | O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw CacheError("cache: cannot open " + p.string() + ": " + std::strerror(errno));
  const int rc = fsync(fd);
  close(fd);
  if (rc != 0) throw CacheError("cache: fsync " + p.string() + ": " + std::strerror(errno));
}

std::string unique_suffix() {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  return std::to_string(getpid()) + "-" + std::to_string(rng());
}

// Removes a folder by first renaming it out of the way (so readers never see half of it).
void discard(const fs::path& root, const fs::path& dir) {
  const fs::path trash = root / ".tmp" / ("trash-" + unique_suffix());
  std::error_code ec;
  fs::rename(dir, trash, ec);
  fs::remove_all(ec ? dir : trash, ec);
}

// flock-held lock file, released on destruction.
class FileLock {
 public:
  explicit FileLock(const fs::path& p) {
    fd_ = open(p.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd_ < 0)
      throw CacheError("cache: cannot open lock " + p.string() + ": " + std::strerror(errno));
    while (flock(fd_, LOCK_EX) != 0) {
      if (errno != EINTR) {
        close(fd_);
        throw CacheError("cache: cannot lock " + p.string() + ": " + std::strerror(errno));
      }
    }
  }
  ~FileLock() { close(fd_); }  // closing releases the flock
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_ = -1;
};

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
  make_private_dir(root_);
  make_private_dir(root_ / ".locks");
  make_private_dir(root_ / ".tmp");
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
  const fs::path json_path = dir / "entry.json", so = dir / "kernel.so";
  if (!fs::exists(json_path) || !fs::exists(so)) return corrupt("entry is incomplete");
  require_safe(json_path, false);
  require_safe(so, false);
  nlohmann::json entry;
  try {
    std::ifstream in(json_path);
    entry = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    return corrupt(std::string("entry.json is unreadable: ") + e.what());
  }
  if (entry.value("key", "") != key) return corrupt("entry.json names another key");
  if (entry.value("so_bytes", uintmax_t{0}) != fs::file_size(so))
    return corrupt("kernel.so has the wrong size (truncated?)");
  if (entry.value("so_hash", "") != file_hash(so)) return corrupt("kernel.so has the wrong hash");
  return State::kValid;
}

bool DiskCache::build_locked(const std::string& key,
                             const std::function<nlohmann::json(const fs::path&)>& build) {
  FileLock lock(root_ / ".locks" / (key + ".lock"));
  if (check(key) == State::kValid) return false;  // another process finished it first
  const fs::path tmp = root_ / ".tmp" / (key + "-" + unique_suffix());
  make_private_dir(tmp);
  try {
    nlohmann::json entry = build(tmp);
    const fs::path so = tmp / "kernel.so";
    entry["key"] = key;
    entry["so_bytes"] = fs::file_size(so);
    entry["so_hash"] = file_hash(so);
    {
      std::ofstream out(tmp / "entry.json");
      out << entry.dump(2) << "\n";
      if (!out) throw CacheError("cache: cannot write " + (tmp / "entry.json").string());
    }
    for (const auto& f : fs::recursive_directory_iterator(tmp)) {
      if (f.is_regular_file()) {
        fs::permissions(f.path(), fs::perms::owner_read | fs::perms::owner_write |
                                      fs::perms::group_read | fs::perms::others_read);
        fsync_path(f.path(), false);
      } else if (f.is_directory()) {
        fsync_path(f.path(), true);
      }
    }
    fsync_path(tmp, true);
    if (fs::exists(root_ / key)) discard(root_, root_ / key);
    fs::rename(tmp, root_ / key);
    fsync_path(root_, true);
  } catch (...) {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    throw;
  }
  return true;
}

void DiskCache::invalidate(const std::string& key) {
  FileLock lock(root_ / ".locks" / (key + ".lock"));
  if (fs::exists(root_ / key)) discard(root_, root_ / key);
}

std::vector<DiskCache::Listing> DiskCache::list() const {
  std::vector<Listing> out;
  for (const auto& e : fs::directory_iterator(root_)) {
    const std::string name = e.path().filename().string();
    if (!e.is_directory() || name.empty() || name[0] == '.') continue;
    Listing l;
    l.key = name;
    try {
      std::ifstream in(e.path() / "entry.json");
      l.entry = nlohmann::json::parse(in);
    } catch (const std::exception&) {
      l.entry = nullptr;
    }
    std::error_code ec;
    for (const auto& f : fs::recursive_directory_iterator(e.path(), ec))
      if (f.is_regular_file()) l.bytes += f.file_size();
    out.push_back(std::move(l));
  }
  std::sort(out.begin(), out.end(),
            [](const Listing& a, const Listing& b) { return a.key < b.key; });
  return out;
}

int DiskCache::clear() {
  int removed = 0;
  for (const auto& l : list()) {
    FileLock lock(root_ / ".locks" / (l.key + ".lock"));
    discard(root_, root_ / l.key);
    ++removed;
  }
  std::error_code ec;
  // Lock files stay: another process may hold one, and a new file would give a second lock.
  // Temporary folders go once they are an hour old (a live build takes seconds).
  const auto cutoff = fs::file_time_type::clock::now() - std::chrono::hours(1);
  for (const auto& e : fs::directory_iterator(root_ / ".tmp", ec))
    if (e.path().filename().string().rfind("trash-", 0) == 0 || e.last_write_time(ec) < cutoff)
      fs::remove_all(e.path(), ec);
  return removed;
}

}  // namespace gmmgen
