// The file primitives of the on-disk caches (kernels, precompiled preludes): private folders,
// ownership checks, durable writes and lock files.
#pragma once

#include <filesystem>
#include <string>

namespace gmmgen {

// Throws CacheError unless p (not followed if a symlink) is a folder (want_dir) or a regular file
// that belongs to the current user and is not writable by group or others.
void require_safe(const std::filesystem::path& p, bool want_dir);

// Creates the folder p (0700) unless it exists, then require_safe(p, true).
void make_cache_dir(const std::filesystem::path& p);

// fsync of a file or folder; CacheError when it fails.
void fsync_path(const std::filesystem::path& p, bool dir);

// A fresh private folder <prefix>-XXXXXX under parent (mkdtemp: never a predictable name).
std::filesystem::path make_temp_dir(const std::filesystem::path& parent, const std::string& prefix);

// flock-held lock file, released on destruction. The holder writes its pid into the file, so
// that a waiter that gives up can name it. The wait is bounded: a holder builds at most one
// artifact (its precompiled prelude, a compile, and the compile again without the prelude if
// that failed, each within the compile time limit), so a lock held for three times that limit
// and more belongs to a process that is stopped (SIGSTOP, a debugger) or hung.
class FileLock {
 public:
  explicit FileLock(const std::filesystem::path& p);
  ~FileLock();  // closing releases the flock
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  std::string holder_pid() const;  // the pid the holder wrote, or "unknown"
  int fd_ = -1;
};

}  // namespace gmmgen
