// An owned file descriptor, and reading a whole file through one: for the code that opens files
// relative to a folder it holds open (emit's writer, the runtime's tuning-table reader), so that
// no rename or symlink another user makes between a check and the use changes what is used.
#pragma once

#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <string>
#include <utility>

namespace gmmgen {

class UniqueFd {
 public:
  explicit UniqueFd(int fd = -1) : fd_(fd) {}
  UniqueFd(UniqueFd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    if (this != &o) {
      if (fd_ >= 0) close(fd_);
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() {
    if (fd_ >= 0) close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

// Reads fd to its end into out (replaced). False on a read error (errno set) or once the content
// passes `limit` bytes.
inline bool read_to_end(int fd, std::string& out, int64_t limit = INT64_MAX) {
  out.clear();
  char buf[65536];
  for (;;) {
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    if (n == 0) return true;
    if (int64_t(out.size()) + n > limit) {
      errno = EFBIG;
      return false;
    }
    out.append(buf, size_t(n));
  }
}

}  // namespace gmmgen
