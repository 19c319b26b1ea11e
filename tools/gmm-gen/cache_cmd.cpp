// gmm-gen cache: show, list, prune or clear the disk cache of compiled kernels.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <memory>

#include "commands.h"
#include "gmmgen/cache.hpp"
#include "gmmgen/errors.hpp"
#include "usage.h"

namespace gmmgen::cli {
namespace {

constexpr const char* kActions[] = {"path", "ls", "prune", "clear"};

// "1.5 MiB": binary units, three significant digits.
std::string human_bytes(uintmax_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = double(b);
  int u = 0;
  while (v >= 1024 && u < 4) v /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf,
                u == 0    ? "%.0f %s"
                : v < 10  ? "%.2f %s"
                : v < 100 ? "%.1f %s"
                          : "%.0f %s",
                v, units[u]);
  return buf;
}

// "45s", "12m", "5h", "3d": the largest unit that fits.
std::string human_age(int64_t seconds) {
  seconds = std::max<int64_t>(0, seconds);
  const std::pair<int64_t, char> units[] = {{86400, 'd'}, {3600, 'h'}, {60, 'm'}};
  for (const auto& [s, c] : units)
    if (seconds >= s) return std::to_string(seconds / s) + c;
  return std::to_string(seconds) + "s";
}

// A number with a unit: "7d" -> 7 * 86400 with units {{"d", 86400}, ...}; the unit may be
// required. Throws InvalidArgument naming the option and the accepted form.
double with_unit(const std::string& option, const std::string& text,
                 const std::vector<std::pair<std::string, double>>& units, bool unit_required,
                 const std::string& form) {
  const auto bad = [&](const std::string& why) {
    return InvalidArgument(option + " " + text.substr(0, 100) + ": " + why + " (" + form + ")");
  };
  char* end = nullptr;
  errno = 0;
  const double v = text.empty() ? 0 : std::strtod(text.c_str(), &end);
  if (text.empty() || end == text.c_str() || errno != 0 || !std::isfinite(v) || v < 0 ||
      !std::isdigit(static_cast<unsigned char>(text[0])))
    throw bad("not a number >= 0 with a unit");
  std::string unit(end);
  for (char& c : unit) c = char(std::tolower(static_cast<unsigned char>(c)));
  if (unit.empty()) {
    if (unit_required) throw bad("give a unit");
    return v;
  }
  for (const auto& [name, scale] : units)
    if (unit == name) return v * scale;
  throw bad("unknown unit '" + std::string(end) + "'");
}

int64_t parse_duration(const std::string& text) {
  const double s = with_unit("--older-than", text,
                             {{"s", 1}, {"m", 60}, {"h", 3600}, {"d", 86400}, {"w", 7 * 86400}},
                             true, "e.g. 30m, 12h, 7d, 2w");
  if (s > 1e12) throw InvalidArgument("--older-than " + text + ": at most 1e12 seconds");
  return int64_t(s);
}

uintmax_t parse_size(const std::string& text) {
  std::vector<std::pair<std::string, double>> units{{"b", 1}};
  double scale = 1;
  for (const char* u : {"k", "m", "g", "t"}) {
    scale *= 1024;
    for (const char* tail : {"", "b", "ib"}) units.emplace_back(std::string(u) + tail, scale);
  }
  const double b = with_unit("--max-size", text, units, false,
                             "bytes, or with a unit: 500M, 2G, 1.5GiB; powers of 1024");
  if (b > 1e18) throw InvalidArgument("--max-size " + text + ": at most 1e18 bytes");
  return uintmax_t(b);
}

// The kernel's name and spec from entry.json ("(unreadable entry)" when it has none).
std::string describe(const CacheEntry& e) {
  if (e.kernel.empty()) return "(unreadable entry)";
  return e.spec.empty() ? e.kernel : e.kernel + "  " + e.spec;
}

int list(const std::filesystem::path& root) {
  const auto cache = KernelCache::open(root);  // creates nothing
  if (!cache) {
    std::cout << "0 entries, 0 bytes in " << root.string() << " (no cache folder yet)\n";
    return kExitOk;
  }
  const int64_t now = int64_t(std::time(nullptr));
  uintmax_t total = 0;
  size_t count = 0;
  const auto entries = cache->list();
  bool header = false;
  for (const auto& e : entries) {
    if (!e.note.empty()) {  // a link or a stray file: named, never followed
      std::cout << e.key << "  (" << e.note << ")\n";
      continue;
    }
    if (!header) {
      std::printf("%-32s %10s %5s %8s  %s\n", "key", "size", "age", "last use", "kernel  spec");
      header = true;
    }
    ++count;
    total += e.bytes;
    std::printf("%-32s %10s %5s %8s  %s\n", e.key.c_str(), human_bytes(e.bytes).c_str(),
                human_age(now - e.built).c_str(), (human_age(now - e.used) + " ago").c_str(),
                describe(e).c_str());
  }
  std::fflush(stdout);
  std::cout << count << " entries, " << total << " bytes (" << human_bytes(total) << ") in "
            << cache->root().string() << "\n";
  return kExitOk;
}

int prune(const std::filesystem::path& root, const std::string& older_than,
          const std::string& max_size) {
  if (older_than.empty() && max_size.empty())
    throw InvalidArgument(
        "cache prune needs --older-than D (e.g. 7d) and/or --max-size S (e.g. 2G)");
  // Both checked before anything is removed.
  // Seconds as a plain value beside a flag: g++ 12 warns (-Wmaybe-uninitialized) on reading an
  // engaged std::optional<int64_t> here.
  const bool by_age = !older_than.empty();
  const int64_t age = by_age ? parse_duration(older_than) : 0;
  const std::optional<uintmax_t> size =
      max_size.empty() ? std::nullopt : std::optional<uintmax_t>(parse_size(max_size));
  auto cache = KernelCache::open(root);
  if (!cache) {
    std::cout << "pruned 0 entries: no cache folder at " << root.string() << "\n";
    return kExitOk;
  }
  const int64_t now = int64_t(std::time(nullptr));
  uintmax_t freed = 0;
  const auto removed =
      cache->prune(by_age ? std::optional<int64_t>(now - age) : std::nullopt, size);
  for (const auto& e : removed) {
    freed += e.bytes;
    std::printf("removed %s %10s, last used %s ago  %s\n", e.key.c_str(),
                human_bytes(e.bytes).c_str(), human_age(now - e.used).c_str(), describe(e).c_str());
  }
  const CacheStats left = cache->stats();
  std::printf("pruned %zu entries (%s); %zu entries (%s) left in %s\n", removed.size(),
              human_bytes(freed).c_str(), left.entries, human_bytes(left.bytes).c_str(),
              cache->root().c_str());
  return kExitOk;
}

}  // namespace

Command add_cache(CLI::App& app) {
  struct Options {
    std::string action, older_than, max_size;
  };
  auto o = std::make_shared<Options>();
  CLI::App* cmd =
      app.add_subcommand("cache", "Show, list, prune or clear the disk cache of compiled kernels");
  cmd->add_option("action", o->action, "path | ls | prune | clear")
      ->required()
      ->check([](const std::string& a) -> std::string {
        std::vector<std::string> names(std::begin(kActions), std::end(kActions));
        if (std::find(names.begin(), names.end(), a) != names.end()) return "";
        const std::string near = nearest(a, names);
        return "'" + a + "' is not one of path, ls, prune, clear" +
               (near.empty() ? "" : "; did you mean '" + near + "'?");
      });
  cmd->add_option("--older-than", o->older_than,
                  "prune: remove entries last used longer ago than this: 30m, 12h, 7d, 2w");
  cmd->add_option("--max-size", o->max_size,
                  "prune: then remove the least recently used entries until the rest hold at "
                  "most this: 500M, 2G (powers of 1024)");
  cmd->footer(
      "The cache lives in $GMMGEN_CACHE_DIR, else $XDG_CACHE_HOME/gmm-gen, else ~/.cache/gmm-gen.\n"
      "ls: each entry's key, size, age (since it was built), last use (the last process that\n"
      "loaded it) and kernel; it creates nothing. prune removes entries least recently used\n"
      "first; clear removes them all. Links and stray files in the folder are never followed;\n"
      "clear removes them (the link, not its target), prune leaves them. Tuning tables\n"
      "(<cache>/tuning/) are kept by both.\n"
      "Example:\n  gmm-gen cache ls\n  gmm-gen cache prune --older-than 30d --max-size 2G");
  return {cmd, [o] {
            if (o->action != "prune" && (!o->older_than.empty() || !o->max_size.empty()))
              throw InvalidArgument("--older-than and --max-size apply to 'cache prune' only");
            const std::filesystem::path root = KernelCache::default_root();
            if (o->action == "path") {
              std::cout << root.string() << "\n";
              return kExitOk;
            }
            if (o->action == "ls") return list(root);
            if (o->action == "prune") return prune(root, o->older_than, o->max_size);
            auto cache = KernelCache::open(root);
            if (!cache) {
              std::cout << "removed 0 entries: no cache folder at " << root.string() << "\n";
              return kExitOk;
            }
            std::cout << "removed " << cache->clear() << " entries from " << cache->root().string()
                      << "\n";
            return kExitOk;
          }};
}

}  // namespace gmmgen::cli
