#include "tuning/tables.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "gmmgen/heuristics.h"

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
  for (const Entry& e : t.entries) {
    Indexed x;
    x.tiling = e.spec.tiling;
    // An explicit family this CPU cannot run: the tiling still serves, on the native family.
    if (e.spec.isa != Isa::kNative && host_supports(e.spec.isa)) x.isa = e.spec.isa;
    x.bucket = e.rows_per_group;
    x.where = origin + " rows_per_group " + to_string(e.rows_per_group);
    if (e.gflops > 0) {
      char buf[96];
      std::snprintf(buf, sizeof buf, " (tuned %.1f GFLOP/s, heuristic %.1f)", e.gflops,
                    e.baseline_gflops);
      x.where += buf;
    }
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
    std::error_code ec;
    if (!fs::is_directory(src.dir, ec)) {
      // The cache's folder exists only once something was tuned; a folder the user named must.
      if (fs::exists(src.dir, ec) || src.origin.rfind("GMMGEN_TUNING_DIR=", 0) == 0)
        warn_("tuning tables: " + src.origin + " is not a folder: ignored");
      continue;
    }
    std::vector<fs::path> files;
    for (fs::directory_iterator it(src.dir, ec), end; !ec && it != end; it.increment(ec)) {
      const fs::path& p = it->path();
      const std::string name = p.filename().string();
      if (name.empty() || name[0] == '.' || p.extension() != ".json") continue;
      files.push_back(p);
    }
    if (ec) {
      warn_("tuning tables: cannot list " + src.dir.string() + ": " + ec.message());
      continue;
    }
    std::sort(files.begin(), files.end());
    for (const fs::path& p : files) {
      std::error_code fec;
      if (!fs::is_regular_file(p, fec)) {
        warn_("tuning table ignored: " + p.string() + " is not a regular file");
        continue;
      }
      const uintmax_t bytes = fs::file_size(p, fec);
      if (fec || bytes > uintmax_t(kMaxTableBytes)) {
        warn_("tuning table ignored: " + p.string() +
              (fec ? ": " + fec.message()
                   : " has " + std::to_string(bytes) + " bytes, more than the " +
                         std::to_string(kMaxTableBytes) + " a table may have"));
        continue;
      }
      std::ifstream in(p, std::ios::binary);
      std::ostringstream text;
      text << in.rdbuf();
      if (!in) {
        warn_("tuning table ignored: " + p.string() + ": cannot be read");
        continue;
      }
      read_table(text.str(), p.string());
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
