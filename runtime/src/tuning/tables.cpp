#include "tuning/tables.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "gmmgen/fd.h"
#include "gmmgen/heuristics.h"
#include "gmmgen/platform.hpp"

namespace gmmgen::tuning {
namespace fs = std::filesystem;

namespace {

std::string tiling_text(const Tiling& t) {
  return "tm=" + std::to_string(t.tm) + ",tk=" + std::to_string(t.tk) +
         ",tn=" + std::to_string(t.tn);
}

std::string rows_text(double rows) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", rows);
  return buf;
}

// Why a table folder or file is not read ("" when it is): like the cache root, it must belong
// to the current user and be writable by no one else, or another user would choose this
// user's tilings and what gets compiled into this user's cache.
std::string not_ours(const struct stat& st) {
  if (st.st_uid != geteuid())
    return "owned by uid " + std::to_string(st.st_uid) + ", not by the current user (uid " +
           std::to_string(geteuid()) + ")";
  if (st.st_mode & (S_IWGRP | S_IWOTH)) {
    char mode[16];
    std::snprintf(mode, sizeof mode, "%04o", unsigned(st.st_mode & 07777));
    return std::string("writable by group or others (mode ") + mode + ")";
  }
  return "";
}

// The names of the folder's *.json entries but hidden ones; false (errno set) if it cannot be
// listed.
bool list_folder(int dir, std::vector<std::string>& names) {
  const int fd = dup(dir);
  DIR* d = fd < 0 ? nullptr : fdopendir(fd);
  if (!d) {
    if (fd >= 0) close(fd);
    return false;
  }
  errno = 0;
  while (const dirent* e = readdir(d)) {
    const std::string_view name = e->d_name;
    if (!name.empty() && name[0] != '.' && name.size() > 5 && name.ends_with(".json"))
      names.emplace_back(name);
  }
  const int err = errno;
  closedir(d);
  errno = err;
  return err == 0;
}

// Reads table `name` of the folder into text; "" on success, else why not (a suffix for
// "tuning table ignored: <path>").
std::string read_own_file(int dir, const std::string& name, std::string& text) {
  const UniqueFd fd(openat(dir, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  struct stat st;
  if (fd.get() < 0)
    return errno == ELOOP ? " is a symlink" : std::string(": ") + std::strerror(errno);
  if (fstat(fd.get(), &st) != 0) return std::string(": ") + std::strerror(errno);
  if (!S_ISREG(st.st_mode)) return " is not a regular file";
  if (const std::string why = not_ours(st); !why.empty()) return ": " + why;
  if (st.st_size > kMaxTableBytes)
    return " has " + std::to_string(st.st_size) + " bytes, more than the " +
           std::to_string(kMaxTableBytes) + " a table may have";
  if (!read_to_end(fd.get(), text, kMaxTableBytes))
    return errno == EFBIG
               ? " grew past the " + std::to_string(kMaxTableBytes) + " bytes a table may have"
               : ": cannot be read";
  return "";
}

}  // namespace

fs::path cache_tuning_dir(const fs::path& cache_root) {
  return cache_root / "tuning";
}

std::vector<TableSource> default_sources(const fs::path& cache_root) {
  std::vector<TableSource> out;
  if (const char* d = std::getenv("GMMGEN_TUNING_DIR"); d && *d)
    out.push_back({std::string("GMMGEN_TUNING_DIR=") + d, d, {}});
  out.push_back({cache_tuning_dir(cache_root).string(), cache_tuning_dir(cache_root), {}});
  for (const ShippedTable& t : shipped_tables())
    out.push_back({"shipped:" + std::string(t.name), {}, t.text});
  return out;
}

Tables::Tables(std::vector<TableSource> sources, bool log, Log info, Log warn)
    : sources_(std::move(sources)), log_(log), info_(std::move(info)), warn_(std::move(warn)) {
  if (!warn_)
    warn_ = [](const std::string& m) { std::fprintf(stderr, "gmm-gen: warning: %s\n", m.c_str()); };
}

KernelSpec Tables::problem_key(KernelSpec s) {
  s.tiling = Tiling{};
  s.isa = Isa::kNative;
  return s;
}

size_t Tables::KeyHash::operator()(const KernelSpec& s) const {
  // A few fields that tell problems apart; == settles the rest.
  uint64_t h = uint64_t(s.k) * 0x9e3779b97f4a7c15ull;
  for (uint64_t v : {uint64_t(s.n), uint64_t(s.g), uint64_t(s.g_local), uint64_t(s.op),
                     uint64_t(s.lhs), uint64_t(s.rhs), uint64_t(s.out)})
    h = (h ^ v) * 0x100000001b3ull;
  return size_t(h);
}

void Tables::read_table(std::string_view text, const std::string& origin) const {
  std::vector<std::string> skipped;
  Table t;
  try {
    t = parse_table(text, origin, &skipped);
  } catch (const TableError& e) {
    warn_(std::string("tuning table ignored: ") + e.what());
    return;
  }
  for (const auto& why : skipped) warn_("tuning table entry ignored: " + why);
  Isa device_isa;
  try {
    device_isa = parse_isa(t.device.isa, "device.isa");
  } catch (const SpecError& e) {
    warn_("tuning table ignored: " + origin + ": " + e.what());
    return;
  }
  if (!host_supports(device_isa)) {
    if (log_ && info_)
      info_("tuning: " + origin + " was tuned on isa=" + t.device.isa +
            ", which this CPU cannot run: skipped");
    return;
  }
  for (size_t i = 0; i < t.entries.size(); ++i) {
    const Entry& e = t.entries[i];
    Indexed x;
    x.tiling = e.spec.tiling;
    // An explicit family this CPU cannot run: the tiling still serves, on the native family.
    if (e.spec.isa != Isa::kNative && host_supports(e.spec.isa)) x.isa = e.spec.isa;
    x.bucket = e.rows_per_group;
    x.where =
        origin + " entry " + std::to_string(i) + " (rows_per_group " + to_string(e.rows_per_group);
    if (e.gflops > 0) {
      char buf[96];
      std::snprintf(buf, sizeof buf, ", tuned %.1f GFLOP/s, heuristic %.1f", e.gflops,
                    e.baseline_gflops);
      x.where += buf;
    }
    x.where += ")";
    index_[problem_key(e.spec)].push_back(std::move(x));
    ++count_;
  }
  if (log_ && info_)
    info_("tuning: read " + std::to_string(t.entries.size()) + " entries from " + origin);
}

void Tables::load() const {
  for (const TableSource& src : sources_) {
    if (src.dir.empty()) {
      read_table(src.text, src.origin);
      continue;
    }
    const std::string origin = escape_control(src.origin);
    // The folder is opened once, without following a symlink, and every file is read through
    // it: no rename or link another user makes between the checks and the read changes what is
    // read.
    const UniqueFd dir(open(src.dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (dir.get() < 0) {
      const int err = errno;
      // The cache's folder exists only once something was tuned; a folder the user named must.
      struct stat link;
      const bool symlink = lstat(src.dir.c_str(), &link) == 0 && S_ISLNK(link.st_mode);
      if (err != ENOENT || symlink || src.origin.rfind("GMMGEN_TUNING_DIR=", 0) == 0)
        warn_("tuning tables: " + origin + " is not a folder: ignored" +
              (symlink ? " (a symlink)" : ""));
      continue;
    }
    struct stat st;
    if (fstat(dir.get(), &st) != 0) continue;
    if (const std::string why = not_ours(st); !why.empty()) {
      warn_("tuning tables: " + origin + " ignored: " + why);
      continue;
    }
    std::vector<std::string> names;
    if (!list_folder(dir.get(), names)) {
      warn_("tuning tables: cannot list " + escape_control(src.dir.string()) + ": " +
            std::strerror(errno));
      continue;
    }
    std::sort(names.begin(), names.end());
    for (const std::string& name : names) {
      const std::string shown = escape_control((src.dir / name).string());
      std::string text;
      if (const std::string why = read_own_file(dir.get(), name, text); !why.empty()) {
        warn_("tuning table ignored: " + shown + why);
        continue;
      }
      read_table(text, shown);
    }
  }
}

void Tables::once(const std::string& key, const std::string& message) const {
  {
    std::lock_guard<std::mutex> lock(log_mutex_);
    if (!logged_.insert(key).second) return;
  }
  if (info_) info_(message);
}

std::optional<TilingChoice> Tables::lookup(const KernelSpec& problem, double rows) const {
  std::call_once(loaded_, [this] { load(); });
  if (!index_.empty())
    if (const auto it = index_.find(problem_key(problem)); it != index_.end())
      for (const Indexed& e : it->second)
        if (e.bucket.contains(rows)) {
          if (log_) {
            const std::string p = problem_text(problem);
            once(p + "|" + e.where,
                 "tuning: " + p + " at " + rows_text(rows) +
                     " rows/group: " + tiling_text(e.tiling) +
                     (e.isa ? ",isa=" + std::string(to_string(*e.isa)) : std::string()) + " from " +
                     e.where);
          }
          return TilingChoice{e.tiling, TilingSource::kTable, e.where, e.isa};
        }
  if (log_) {
    const std::string p = problem_text(problem);
    const Bucket b = bucket_of(rows);
    once(p + "|" + to_string(b), "tuning: " + p + " at " + rows_text(rows) +
                                     " rows/group: no table entry; the heuristic's " +
                                     tiling_text(heuristic_tiling(problem, rows)));
  }
  return std::nullopt;
}

size_t Tables::size() const {
  std::call_once(loaded_, [this] { load(); });
  return count_;
}

}  // namespace gmmgen::tuning
