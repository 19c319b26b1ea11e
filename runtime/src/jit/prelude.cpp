#include "jit/prelude.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "gmmgen/hash.h"
#include "jit/cache_files.h"
#include "jit/disk_cache.h"

namespace gmmgen {
namespace fs = std::filesystem;
namespace {

constexpr const char* kHeader = "prelude.h";
constexpr const char* kPrecompiled = "prelude.h.gch";

std::string read_small_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The header list of `line` if it is `#include <name>` (spaces allowed, a comment after it).
std::string system_include(const std::string& line) {
  size_t i = line.find_first_not_of(" \t");
  if (i == std::string::npos || line[i] != '#') return "";
  i = line.find_first_not_of(" \t", i + 1);
  if (i == std::string::npos || line.compare(i, 7, "include") != 0) return "";
  i = line.find_first_not_of(" \t", i + 7);
  if (i == std::string::npos || line[i] != '<') return "";
  const size_t end = line.find('>', i);
  return end == std::string::npos ? "" : line.substr(i, end - i + 1);
}

// Whether folder holds the complete prelude `text` (both files ours, the header unchanged).
bool complete(const fs::path& folder, const std::string& text) {
  struct stat st;
  if (lstat((folder / kPrecompiled).c_str(), &st) != 0) return false;
  require_safe(folder, true);
  require_safe(folder / kHeader, false);
  require_safe(folder / kPrecompiled, false);
  if (read_small_file(folder / kHeader) != text)
    throw CacheError("cache: " + (folder / kHeader).string() + " lists other headers");
  return true;
}

}  // namespace

std::string prelude_text(const std::vector<std::pair<std::string, std::string>>& files) {
  std::set<std::string> headers;
  for (const auto& [path, content] : files) {
    std::istringstream in(content);
    for (std::string line; std::getline(in, line);)
      if (std::string h = system_include(line); !h.empty()) headers.insert(std::move(h));
  }
  std::string text;
  for (const auto& h : headers) text += "#include " + h + "\n";
  return text;
}

fs::path PreludeStore::default_dir(const fs::path& cache_root) {
  if (const char* d = std::getenv("GMMGEN_PCH_DIR"); d && *d) return d;
  return cache_root / ".pch";
}

std::optional<fs::path> PreludeStore::header(const CompilerConfig& cc, const std::string& text,
                                             std::string* why, bool* built) {
  if (built) *built = false;
  if (text.empty()) {
    if (why) *why = "the sources include no system header";
    return std::nullopt;
  }
  const std::string key = hash128_hex({cache_key(hash128_hex({text}), cc), cc.cxx});
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (failed_.count(key)) {
      if (why) *why = "it failed earlier in this process";
      return std::nullopt;
    }
  }
  const fs::path folder = dir_ / key;
  try {
    if (complete(folder, text)) return folder / kHeader;
    std::error_code ec;
    if (!dir_.parent_path().empty()) fs::create_directories(dir_.parent_path(), ec);
    make_cache_dir(dir_);
    FileLock lock(dir_ / (key + ".lock"));
    make_cache_dir(folder);
    struct stat st;
    if (lstat((folder / kHeader).c_str(), &st) != 0) {
      write_new_file(folder / kHeader, text);
      fsync_path(folder / kHeader, false);
    }
    if (complete(folder, text)) return folder / kHeader;  // another process built it meanwhile
    // Leftovers of builds that were killed (this process holds the lock: none runs now).
    for (const auto& e : fs::directory_iterator(folder))
      if (e.path().filename().string().rfind("build-", 0) == 0) fs::remove_all(e.path(), ec);
    const fs::path tmp = make_temp_dir(folder, "build");
    std::vector<std::string> argv{cc.cxx};
    argv.insert(argv.end(), cc.flags.begin(), cc.flags.end());
    argv.insert(argv.end(), {"-x", "c++-header", (folder / kHeader).string(), "-o",
                             (tmp / kPrecompiled).string()});
    try {
      run_build(argv, folder / kHeader, tmp / kPrecompiled);
      fsync_path(tmp / kPrecompiled, false);
      if (rename((tmp / kPrecompiled).c_str(), (folder / kPrecompiled).c_str()) != 0)
        throw CacheError("cache: cannot install " + (folder / kPrecompiled).string());
      fsync_path(folder, true);
    } catch (...) {
      fs::remove_all(tmp, ec);
      throw;
    }
    fs::remove_all(tmp, ec);
    if (built) *built = true;
    return folder / kHeader;
  } catch (const std::exception& e) {
    std::lock_guard<std::mutex> lock(mutex_);
    failed_.insert(key);
    if (why) *why = e.what();
    return std::nullopt;
  }
}

void PreludeStore::drop(const fs::path& header) {
  const fs::path folder = header.parent_path();
  const std::string key = folder.filename().string();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    failed_.insert(key);
  }
  try {
    FileLock lock(dir_ / (key + ".lock"));
    unlink((folder / kPrecompiled).c_str());
  } catch (const CacheError&) {
    // The next build replaces it, or goes without.
  }
}

int PreludeStore::clear() {
  int removed = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    const std::string key = e.path().filename().string();
    if (e.symlink_status(ec).type() != fs::file_type::directory ||
        key.find_first_not_of("0123456789abcdef") != std::string::npos)
      continue;
    FileLock lock(dir_ / (key + ".lock"));
    std::error_code rec;
    fs::remove_all(e.path(), rec);
    ++removed;
  }
  return removed;
}

}  // namespace gmmgen
