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
  throw std::runtime_error("emit: cannot " + what + " " + p.string() + ": " + std::strerror(err));
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

// Writes content to a new file of a random name in dir; returns its path.
fs::path write_temporary(const fs::path& dir, const std::string& base, const std::string& content) {
  std::string templ = (dir / ("." + base + ".XXXXXX")).string();
  const int fd = mkstemp(templ.data());  // O_CREAT | O_EXCL, mode 0600
  if (fd < 0) io_error("create a temporary file in", dir, errno);
  const fs::path tmp = templ;
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
  std::vector<std::pair<fs::path, fs::path>> staged;  // temporary -> final
  try {
    for (const auto& f : files) {
      const fs::path target = dir / f.path;
      std::string old;
      if (read_regular(target, old) && old == f.content) {
        report.unchanged.push_back(f.path);
        continue;
      }
      std::error_code ec;
      fs::create_directories(target.parent_path(), ec);
      if (ec) io_error("create", target.parent_path(), ec.value());
      staged.emplace_back(
          write_temporary(target.parent_path(), target.filename().string(), f.content), target);
      report.written.push_back(f.path);
    }
  } catch (...) {
    for (const auto& [tmp, target] : staged) unlink(tmp.c_str());
    throw;
  }
  // Everything is on disk: install it. rename() replaces a symlink itself, never its target.
  for (const auto& [tmp, target] : staged)
    if (rename(tmp.c_str(), target.c_str()) != 0) io_error("rename into", target, errno);
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
