#include "jit/cache_files.h"

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
#include <sstream>

#include "gmmgen/errors.hpp"
#include "jit/toolchain.h"

namespace gmmgen {
namespace fs = std::filesystem;

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

void make_cache_dir(const fs::path& p) {
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

fs::path make_temp_dir(const fs::path& parent, const std::string& prefix) {
  std::string templ = (parent / (prefix + "-XXXXXX")).string();
  if (!mkdtemp(templ.data()))
    throw CacheError("cache: cannot create a folder in " + parent.string() + ": " +
                     std::strerror(errno));
  return templ;
}

FileLock::FileLock(const fs::path& p) {
  using Clock = std::chrono::steady_clock;
  const int limit_s = 3 * compile_timeout_seconds() + 2;
  const auto deadline = Clock::now() + std::chrono::seconds(limit_s);
  fd_ = open(p.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd_ < 0)
    throw CacheError("cache: cannot open lock " + p.string() + ": " + std::strerror(errno));
  for (int pause_us = 1000; flock(fd_, LOCK_EX | LOCK_NB) != 0;) {
    if (errno == EINTR) continue;
    if (errno != EWOULDBLOCK || Clock::now() >= deadline) {
      const int err = errno;
      const std::string holder = holder_pid();
      close(fd_);
      if (err != EWOULDBLOCK)
        throw CacheError("cache: cannot lock " + p.string() + ": " + std::strerror(err));
      throw CacheError("cache: gave up after " + std::to_string(limit_s) + " s waiting for " +
                       p.string() + ", held by pid " + holder +
                       " (building the same artifact); a holder stopped or hung that long "
                       "blocks this key: end it, or raise GMMGEN_COMPILE_TIMEOUT");
    }
    usleep(useconds_t(pause_us));
    pause_us = std::min(pause_us * 2, 50'000);
  }
  char pid[24];
  const int n = std::snprintf(pid, sizeof pid, "%d\n", int(getpid()));
  if (ftruncate(fd_, 0) != 0 || pwrite(fd_, pid, size_t(n), 0) != n) {
    // Only the message of a later waiter loses the pid.
  }
}

FileLock::~FileLock() {
  close(fd_);
}

std::string FileLock::holder_pid() const {
  char buf[24] = {0};
  const ssize_t n = pread(fd_, buf, sizeof buf - 1, 0);
  std::string s(buf, size_t(std::max<ssize_t>(n, 0)));
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos ? s : "unknown";
}

}  // namespace gmmgen
