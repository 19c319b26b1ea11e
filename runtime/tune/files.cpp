// Table files and output files of a sweep: the default table's path, the table merged into, and
// files written in one rename.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "gmmgen/errors.hpp"
#include "gmmgen/tune/tune.h"

namespace gmmgen::tune {

namespace fs = std::filesystem;

namespace {

// Writes `content` to `path` in one rename from a fresh temporary file beside it (mkstemp: no
// predictable name), so a reader sees the old file or the new one, never half of one.
void write_atomically(const fs::path& path, const std::string& content, mode_t mode) {
  const fs::path dir = path.has_parent_path() ? path.parent_path() : fs::path(".");
  std::string tmpl = (dir / ("." + path.filename().string() + ".XXXXXX")).string();
  const int fd = mkstemp(tmpl.data());
  if (fd < 0)
    throw std::runtime_error("cannot write " + path.string() + ": " + std::strerror(errno));
  size_t done = 0;
  bool ok = fchmod(fd, mode) == 0;
  while (ok && done < content.size()) {
    const ssize_t w = write(fd, content.data() + done, content.size() - done);
    if (w < 0 && errno == EINTR) continue;
    ok = w > 0;
    if (ok) done += size_t(w);
  }
  ok = ok && fsync(fd) == 0;
  const int err = errno;
  ok = close(fd) == 0 && ok;
  if (!ok || std::rename(tmpl.c_str(), path.c_str()) != 0) {
    const int e = ok ? errno : err;
    unlink(tmpl.c_str());
    throw std::runtime_error("cannot write " + path.string() + ": " + std::strerror(e));
  }
}

mode_t user_file_mode() {
  const mode_t mask = umask(0);
  umask(mask);
  return 0666 & ~mask;
}

}  // namespace

void check_output_path(const std::string& option, const std::string& path) {
  if (path.empty()) throw InvalidArgument(option + " must not be empty");
  const fs::path p(path);
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw InvalidArgument(option + " " + path + ": the folder " + dir.string() + " does not exist");
  if (fs::is_directory(p, ec))
    throw InvalidArgument(option + " " + path + " is a folder; name a file");
}

fs::path default_table_path(const fs::path& cache_root, const std::string& cpu) {
  std::string slug;
  for (char c : cpu) {
    if (std::isalnum(static_cast<unsigned char>(c)))
      slug += char(std::tolower(static_cast<unsigned char>(c)));
    else if (!slug.empty() && slug.back() != '-')
      slug += '-';
  }
  while (!slug.empty() && slug.back() == '-') slug.pop_back();
  return tuning::cache_tuning_dir(cache_root) / ((slug.empty() ? "host" : slug) + ".json");
}

namespace {

// A folder of the default table's path: created private to the user, like the cache itself.
void make_private_dir(const fs::path& dir) {
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    throw std::runtime_error("cannot create " + dir.string() + ": " + std::strerror(errno));
  struct stat st {};
  if (lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid())
    throw std::runtime_error(dir.string() + " must be a folder owned by this user");
}

}  // namespace

tuning::Table existing_table(const fs::path& path, const tuning::Device& device,
                             const std::string& option) {
  tuning::Table t;
  std::error_code ec;
  if (!fs::exists(path, ec)) return t;
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  if (!in) throw InvalidArgument(option + " " + path.string() + " cannot be read");
  try {
    t = tuning::parse_table(text.str(), path.string());
  } catch (const tuning::TableError& e) {
    throw InvalidArgument(option + " " + path.string() +
                          " exists and is not a tuning table this gmm-gen can merge into (" +
                          e.what() + "); name another file or remove it");
  }
  if (t.device.cpu != device.cpu || t.device.isa != device.isa)
    throw InvalidArgument(option + " " + path.string() + " was tuned on '" + t.device.cpu +
                          "' (isa=" + t.device.isa + "), this machine is '" + device.cpu +
                          "' (isa=" + device.isa +
                          "): a table holds one device; name another file");
  return t;
}

void write_file(const fs::path& path, const std::string& content, bool private_file) {
  write_atomically(path, content, private_file ? 0600 : user_file_mode());
}

void write_table(const fs::path& path, tuning::Table& table, const tuning::Table& tuned,
                 bool default_path) {
  if (default_path) {
    // <cache>/tuning: the cache root and the folder, private to the user.
    const fs::path root = path.parent_path().parent_path();
    if (root.has_parent_path()) fs::create_directories(root.parent_path());
    make_private_dir(root);
    make_private_dir(path.parent_path());
  }
  tuning::merge(table, tuned);
  write_file(path, tuning::dump_table(table), default_path);
}

}  // namespace gmmgen::tune
