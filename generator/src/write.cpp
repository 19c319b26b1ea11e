// Writing an emitted set: only what changed, all or nothing, never through a symlink below the
// output folder, never at a predictable temporary path.
//
// Every file operation is relative to a descriptor of its folder, and each folder below the
// output folder is opened with O_NOFOLLOW: a subfolder that another user replaced by a symlink
// (or any other non-folder) stops the write with an error, and a stale file named by a planted
// manifest is removed only if it is a regular file inside the output folder.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <stdexcept>
#include <utility>

#include "gmmgen/emit.h"
#include "gmmgen/fd.h"

namespace gmmgen {
namespace fs = std::filesystem;
namespace {

[[noreturn]] void io_error(const std::string& what, const fs::path& p, int err) {
  throw WriteError("emit: cannot " + what + " " + p.string() + ": " + std::strerror(err));
}

// A relative path's components, or nothing if it is not a plain path below its folder (absolute,
// empty, or with an empty, "." or ".." component).
bool plain_components(const std::string& rel, std::vector<std::string>& out) {
  out.clear();
  if (rel.empty() || rel.front() == '/') return false;
  size_t start = 0;
  while (start <= rel.size()) {
    const size_t end = std::min(rel.find('/', start), rel.size());
    std::string c = rel.substr(start, end - start);
    if (c.empty() || c == "." || c == "..") return false;
    out.push_back(std::move(c));
    start = end + 1;
  }
  return true;
}

// A random name for a new file beside `base` in its folder: ".<base>.<12 characters>".
std::string temporary_name(const std::string& base) {
  static constexpr char kAlphabet[] =
      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::string name = "." + base + ".";
  for (int i = 0; i < 12; ++i) name += kAlphabet[rng() % (sizeof kAlphabet - 1)];
  return name;
}

// A path below the output folder, split into its folder (relative to the output folder) and name.
struct Place {
  std::string folder, name;
};
Place place_of(const std::string& rel) {
  const size_t slash = rel.rfind('/');
  if (slash == std::string::npos) return {"", rel};
  return {rel.substr(0, slash), rel.substr(slash + 1)};
}

// The output folder and the subfolders opened below it (each without following a symlink);
// paths are relative to the output folder, "" being the folder itself.
class Tree {
 public:
  explicit Tree(const fs::path& dir) : dir_(dir) {
    const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) io_error("open the output folder", dir, errno);
    folders_.emplace("", UniqueFd(fd));
  }

  // Removes the (empty) folder `rel` that folder() made (best effort, for a roll back).
  void remove_folder(const std::string& rel) {
    folders_.erase(rel);
    const Place at = place_of(rel);
    if (auto it = folders_.find(at.folder); it != folders_.end())
      unlinkat(it->second.get(), at.name.c_str(), AT_REMOVEDIR);
  }

  // The descriptor of folder `rel` (a plain relative path or ""), creating the folders that are
  // missing when `create` (each appended to `made`, outermost first); -1 if a folder is missing
  // and !create. Throws WriteError if a component exists but is not a folder (a symlink to one
  // included).
  int folder(const std::string& rel, bool create, std::vector<std::string>* made) {
    if (auto it = folders_.find(rel); it != folders_.end()) return it->second.get();
    std::vector<std::string> parts;
    if (!plain_components(rel, parts))
      throw WriteError("emit: not a path below the output folder: " + rel);
    std::string path;
    int parent = folders_.at("").get();
    for (const std::string& part : parts) {
      path += (path.empty() ? "" : "/") + part;
      if (auto it = folders_.find(path); it != folders_.end()) {
        parent = it->second.get();
        continue;
      }
      int fd = openat(parent, part.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (fd < 0 && errno == ENOENT) {
        if (!create) return -1;
        if (mkdirat(parent, part.c_str(), 0777) != 0 && errno != EEXIST)
          io_error("create", dir_ / path, errno);
        if (made) made->push_back(path);
        fd = openat(parent, part.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      }
      if (fd < 0) {
        if (errno == ELOOP || errno == ENOTDIR)
          throw WriteError("emit: " + (dir_ / path).string() +
                           " is not a folder (a symlink or a file): nothing is written through it");
        io_error("open", dir_ / path, errno);
      }
      parent = folders_.emplace(path, UniqueFd(fd)).first->second.get();
    }
    return parent;
  }

 private:
  fs::path dir_;
  std::map<std::string, UniqueFd> folders_;
};

// The content of `name` in folder `dfd` if it is a regular file (not a symlink), else nothing.
bool read_regular(int dfd, const std::string& name, std::string& out) {
  const UniqueFd fd(openat(dfd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  struct stat st;
  if (fd.get() < 0 || fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
  return read_to_end(fd.get(), out);
}

// Writes content to a new file of a random name beside `name` in folder `dfd` (O_CREAT |
// O_EXCL | O_NOFOLLOW: never an existing file or a symlink); returns the new file's name.
std::string write_temporary(int dfd, const fs::path& shown_dir, const std::string& name,
                            const std::string& content) {
  std::string tmp;
  int fd = -1;
  for (int attempt = 0; fd < 0; ++attempt) {
    tmp = temporary_name(name);
    fd = openat(dfd, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0 && (errno != EEXIST || attempt == 100))
      io_error("create a temporary file in", shown_dir, errno);
  }
  size_t done = 0;
  while (done < content.size()) {
    const ssize_t n = write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      close(fd);
      unlinkat(dfd, tmp.c_str(), 0);
      io_error("write", shown_dir / tmp, err);
    }
    done += size_t(n);
  }
  if (fchmod(fd, 0644) != 0 || close(fd) != 0) {
    const int err = errno;
    unlinkat(dfd, tmp.c_str(), 0);
    io_error("finish", shown_dir / tmp, err);
  }
  return tmp;
}

// A second name (hard link) for an existing `name` in folder `dfd`, to put it back if the set
// cannot be installed whole; empty if there is none. link never replaces an existing name: a
// collision is retried.
std::string keep_previous(int dfd, const fs::path& shown_dir, const std::string& name) {
  struct stat st;
  if (fstatat(dfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return {};
    io_error("inspect", shown_dir / name, errno);
  }
  if (S_ISDIR(st.st_mode)) io_error("replace", shown_dir / name, EISDIR);
  for (int attempt = 0;; ++attempt) {
    const std::string backup = temporary_name(name);
    if (linkat(dfd, name.c_str(), dfd, backup.c_str(), 0) == 0) return backup;
    if (errno != EEXIST || attempt == 100) io_error("keep the previous", shown_dir / name, errno);
  }
}

// One file of the set on its way in: its new content under `tmp`, the previous file (if any)
// under `backup` once installation starts; names in folder `dfd`.
struct Staged {
  int dfd;
  fs::path shown_dir;
  std::string name, tmp, backup;
  bool installed = false;
};

// Puts back every file installed so far and removes every temporary (best effort: this runs
// after a failure, whose error is the one reported).
void roll_back(std::vector<Staged>& staged) {
  for (auto it = staged.rbegin(); it != staged.rend(); ++it) {
    if (it->installed) {
      // Should putting the previous file back fail, its backup stays: the only copy left.
      if (it->backup.empty())
        unlinkat(it->dfd, it->name.c_str(), 0);
      else
        renameat(it->dfd, it->backup.c_str(), it->dfd, it->name.c_str());
    } else {  // the target still is the previous file
      unlinkat(it->dfd, it->tmp.c_str(), 0);
      if (!it->backup.empty()) unlinkat(it->dfd, it->backup.c_str(), 0);
    }
  }
}

// The files a previous emission into the folder listed in its manifest.json.
std::set<std::string> previous_files(Tree& tree) {
  std::set<std::string> out;
  std::string text;
  if (!read_regular(tree.folder("", false, nullptr), "manifest.json", text)) return out;
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

// Removes `rel` if it is a regular file below the output folder, reached through folders only.
bool remove_stale(Tree& tree, const std::string& rel) {
  std::vector<std::string> parts;
  if (!plain_components(rel, parts)) return false;
  const Place at = place_of(rel);
  int dfd = -1;
  try {
    dfd = tree.folder(at.folder, false, nullptr);
  } catch (const WriteError&) {
    return false;  // a component is not a folder: nothing behind it is ours
  }
  struct stat st;
  return dfd >= 0 && fstatat(dfd, at.name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
         S_ISREG(st.st_mode) && unlinkat(dfd, at.name.c_str(), 0) == 0;
}

}  // namespace

WriteReport write_files(const fs::path& dir, const std::vector<EmittedFile>& files) {
  WriteReport report;
  std::vector<std::string> parts;
  for (const auto& f : files)
    if (!plain_components(f.path, parts))
      throw WriteError("emit: not a path below the output folder: " + f.path);
  // The output folder itself is the caller's choice (a symlink to a folder is followed); the
  // folders missing on the way to it are made, and removed again on failure.
  std::vector<fs::path> made_above;
  std::error_code ec;
  for (fs::path p = dir; !p.empty() && !fs::exists(fs::symlink_status(p, ec));
       p = p.parent_path()) {
    made_above.insert(made_above.begin(), p);
    if (p == p.parent_path()) break;
  }
  fs::create_directories(dir, ec);
  if (ec) io_error("create", dir, ec.value());
  std::vector<std::string> made;  // folders this call created below dir, outermost first
  std::vector<Staged> staged;
  std::optional<Tree> opened;  // outlives the try: rolling back needs its folders
  try {
    Tree& tree = opened.emplace(dir);
    const std::set<std::string> before = previous_files(tree);
    for (const auto& f : files) {
      const Place at = place_of(f.path);
      const int dfd = tree.folder(at.folder, true, &made);
      const fs::path shown_dir = at.folder.empty() ? dir : dir / at.folder;
      std::string old;
      if (read_regular(dfd, at.name, old) && old == f.content) {
        report.unchanged.push_back(f.path);
        continue;
      }
      staged.push_back({dfd,
                        shown_dir,
                        at.name,
                        write_temporary(dfd, shown_dir, at.name, f.content),
                        {},
                        false});
      report.written.push_back(f.path);
    }
    // Everything is on disk: install it, keeping each previous file until the whole set is in.
    // renameat replaces a symlink itself, never its target.
    for (auto& s : staged) {
      s.backup = keep_previous(s.dfd, s.shown_dir, s.name);
      if (renameat(s.dfd, s.tmp.c_str(), s.dfd, s.name.c_str()) != 0)
        io_error("rename into", s.shown_dir / s.name, errno);
      s.installed = true;
    }
    for (const auto& s : staged)
      if (!s.backup.empty()) unlinkat(s.dfd, s.backup.c_str(), 0);
    std::set<std::string> now;
    for (const auto& f : files) now.insert(f.path);
    for (const auto& old : before)
      if (!now.count(old) && remove_stale(tree, old)) report.removed.push_back(old);
    return report;
  } catch (...) {
    roll_back(staged);
    if (opened)
      for (auto it = made.rbegin(); it != made.rend(); ++it) opened->remove_folder(*it);
    for (auto it = made_above.rbegin(); it != made_above.rend(); ++it) fs::remove(*it, ec);
    throw;
  }
}

}  // namespace gmmgen
