// Writing an emitted set: only what changed, all or nothing, never through a symlink or at a
// predictable temporary path.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>

#include "gmmgen/emit.h"

namespace gmmgen {
namespace fs = std::filesystem;
namespace {

[[noreturn]] void io_error(const std::string& what, const fs::path& p, int err) {
  throw WriteError("emit: cannot " + what + " " + p.string() + ": " + std::strerror(err));
}

// The content of p if it is a regular file (not a symlink), else nothing.
bool read_regular(const fs::path& p, std::string& out) {
  struct stat st;
  if (lstat(p.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  out = ss.str();
  return bool(in);
}

// A new file of a random name in dir (O_CREAT | O_EXCL, mode 0600: never an existing file or a
// symlink); returns its descriptor and sets path.
int create_temporary(const fs::path& dir, const std::string& base, fs::path& path) {
  std::string templ = (dir / ("." + base + ".XXXXXX")).string();
  const int fd = mkstemp(templ.data());
  if (fd < 0) io_error("create a temporary file in", dir, errno);
  path = templ;
  return fd;
}

// Writes content to a new temporary file beside dir/base; returns its path.
fs::path write_temporary(const fs::path& dir, const std::string& base, const std::string& content) {
  fs::path tmp;
  const int fd = create_temporary(dir, base, tmp);
  size_t done = 0;
  while (done < content.size()) {
    const ssize_t n = write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      close(fd);
      unlink(tmp.c_str());
      io_error("write", tmp, err);
    }
    done += size_t(n);
  }
  if (fchmod(fd, 0644) != 0 || close(fd) != 0) {
    const int err = errno;
    unlink(tmp.c_str());
    io_error("finish", tmp, err);
  }
  return tmp;
}

// A second name (hard link) for an existing target beside it, to put it back if the set cannot
// be installed whole; empty if there is no target. The name comes from mkstemp, freed just
// before link(), which never replaces an existing name: a collision is retried.
fs::path keep_previous(const fs::path& target) {
  struct stat st;
  if (lstat(target.c_str(), &st) != 0) {
    if (errno == ENOENT) return {};
    io_error("inspect", target, errno);
  }
  if (S_ISDIR(st.st_mode)) io_error("replace", target, EISDIR);
  for (int attempt = 0;; ++attempt) {
    fs::path backup;
    close(create_temporary(target.parent_path(), target.filename().string(), backup));
    unlink(backup.c_str());
    if (link(target.c_str(), backup.c_str()) == 0) return backup;
    if (errno != EEXIST || attempt == 100) io_error("keep the previous", target, errno);
  }
}

// One file of the set on its way in: its new content in `tmp`, the previous file (if any)
// under `backup` once installation starts.
struct Staged {
  fs::path tmp, target, backup;
  bool installed = false;
};

// Puts back every file installed so far and removes every temporary (best effort: this runs
// after a failure, whose error is the one reported).
void roll_back(std::vector<Staged>& staged) {
  for (auto it = staged.rbegin(); it != staged.rend(); ++it) {
    if (it->installed) {
      // Should putting the previous file back fail, its backup stays: the only copy left.
      if (it->backup.empty())
        unlink(it->target.c_str());
      else
        rename(it->backup.c_str(), it->target.c_str());
    } else {  // the target still is the previous file
      unlink(it->tmp.c_str());
      if (!it->backup.empty()) unlink(it->backup.c_str());
    }
  }
}

// The files a previous emission into dir listed in its manifest.json.
std::set<std::string> previous_files(const fs::path& dir) {
  std::set<std::string> out;
  std::string text;
  if (!read_regular(dir / "manifest.json", text)) return out;
  const auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return out;
  auto add = [&](const nlohmann::json& files) {
    if (!files.is_array()) return;
    for (const auto& f : files)
      if (f.is_string()) out.insert(f.get<std::string>());
  };
  if (j.contains("kernels") && j["kernels"].is_array())
    for (const auto& k : j["kernels"])
      if (k.is_object() && k.contains("files")) add(k["files"]);
  if (j.contains("bundle") && j["bundle"].is_object() && j["bundle"].contains("files"))
    add(j["bundle"]["files"]);
  return out;
}

}  // namespace

WriteReport write_files(const fs::path& dir, const std::vector<EmittedFile>& files) {
  WriteReport report;
  const std::set<std::string> before = previous_files(dir);
  std::vector<Staged> staged;
  std::vector<fs::path> made_dirs;  // folders this call created, outermost first
  try {
    for (const auto& f : files) {
      const fs::path target = dir / f.path;
      std::string old;
      if (read_regular(target, old) && old == f.content) {
        report.unchanged.push_back(f.path);
        continue;
      }
      std::vector<fs::path> missing;
      std::error_code ec;
      for (fs::path p = target.parent_path(); !p.empty() && !fs::exists(fs::symlink_status(p, ec));
           p = p.parent_path())
        missing.insert(missing.begin(), p);
      fs::create_directories(target.parent_path(), ec);
      if (ec) io_error("create", target.parent_path(), ec.value());
      made_dirs.insert(made_dirs.end(), missing.begin(), missing.end());
      staged.push_back(
          {write_temporary(target.parent_path(), target.filename().string(), f.content),
           target,
           {},
           false});
      report.written.push_back(f.path);
    }
    // Everything is on disk: install it, keeping each previous file until the whole set is in.
    // rename() replaces a symlink itself, never its target.
    for (auto& s : staged) {
      s.backup = keep_previous(s.target);
      if (rename(s.tmp.c_str(), s.target.c_str()) != 0) io_error("rename into", s.target, errno);
      s.installed = true;
    }
  } catch (...) {
    roll_back(staged);
    std::error_code ec;
    for (auto it = made_dirs.rbegin(); it != made_dirs.rend(); ++it) fs::remove(*it, ec);
    throw;
  }
  for (const auto& s : staged)
    if (!s.backup.empty()) unlink(s.backup.c_str());
  std::set<std::string> now;
  for (const auto& f : files) now.insert(f.path);
  for (const auto& old : before) {
    const fs::path p = (dir / old).lexically_normal();
    const auto rel = p.lexically_relative(dir);
    if (now.count(old) || rel.empty() || *rel.begin() == "..") continue;  // stays inside dir
    struct stat st;
    if (lstat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && unlink(p.c_str()) == 0)
      report.removed.push_back(old);
  }
  return report;
}

}  // namespace gmmgen
