// gmm-gen tune: sweeps tilings (and ISA families) of a problem on a group-size distribution,
// compiles the variants in parallel through the runtime's disk cache, benchmarks each with the
// bench machinery, keeps the fastest and writes a tuning table (docs/tuning.md), with a CSV of
// every variant and an SVG heatmap of GFLOP/s over (tm, tn) per tk when asked.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <thread>

#include "commands.h"
#include "gmmgen/bench/bench.h"
#include "gmmgen/heuristics.h"
#include "jit/disk_cache.h"
#include "tuning/table.h"
#include "tuning/tables.h"

namespace gmmgen::cli {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

struct TuneOptions {
  SpecOptions specs;
  KernelFilter filter;
  std::string dist = "uniform", space, isa, table, csv, svg;
  int64_t m = 4096;
  int jobs = 0;       // unless given: the machine's cores
  double budget = 0;  // seconds; unless given: none
  int threads = 0;    // unless given: the runtime's default
  int reps = 5;
  CLI::Option *jobs_given = nullptr, *budget_given = nullptr, *threads_given = nullptr;
};

// ---- The candidate space ------------------------------------------------------------------------

// Values per tile dimension; an empty list takes the family's default.
struct Space {
  std::vector<int64_t> tm, tk, tn;
  bool given = false;  // --space was given (its candidates are not pruned by the cache limit)
};

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t end = s.find(sep, start);
    out.push_back(s.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) return out;
    start = end + 1;
  }
}

// "tm=16,32,64;tk=128;tn=64,128": each key at most once, values integers in [1, kMaxTile].
Space parse_space(const std::string& text) {
  Space s;
  s.given = true;
  const std::string rule = "KEY=V1,V2,... items separated by ';', KEY one of tm, tk, tn";
  for (const std::string& item : split(text, ';')) {
    const size_t eq = item.find('=');
    if (eq == std::string::npos)
      throw InvalidArgument("--space '" + text + "': '" + item + "' is not " + rule);
    const std::string key = item.substr(0, eq);
    std::vector<int64_t>* dim = key == "tm"   ? &s.tm
                                : key == "tk" ? &s.tk
                                : key == "tn" ? &s.tn
                                              : nullptr;
    if (!dim)
      throw InvalidArgument("--space '" + text + "': key '" + key + "' is not one of tm, tk, tn");
    if (!dim->empty()) throw InvalidArgument("--space '" + text + "': " + key + " is given twice");
    for (const std::string& v : split(item.substr(eq + 1), ',')) {
      char* end = nullptr;
      errno = 0;
      const long long x = v.empty() ? 0 : std::strtoll(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || errno != 0 || x < 1 || x > kMaxTile)
        throw InvalidArgument("--space '" + text + "': " + key + " value '" + v +
                              "' is not an integer in [1, " + std::to_string(kMaxTile) + "]");
      if (std::find(dim->begin(), dim->end(), x) == dim->end()) dim->push_back(x);
    }
  }
  return s;
}

// The default values of a tile dimension for a family: powers of two around the heuristic's
// choices; tn in whole register tiles (multiples of the family's nr columns).
std::vector<int64_t> default_values(char dim, const IsaFamily& f) {
  if (dim == 'm') return {16, 32, 64, 128, 256, 512};
  if (dim == 'k') return {32, 64, 128, 256, 512};
  std::vector<int64_t> out;
  for (int64_t v = f.nr; v <= 256; v *= 2) out.push_back(v);
  return out;
}

// The per-core L2 cache of this machine in bytes, 0 when unknown: a tile working set larger than
// this streams from L3 on every pass, so the default space leaves such tilings out.
int64_t l2_bytes() {
#ifdef _SC_LEVEL2_CACHE_SIZE
  if (const long v = sysconf(_SC_LEVEL2_CACHE_SIZE); v > 0) return v;
#endif
  std::ifstream in("/sys/devices/system/cpu/cpu0/cache/index2/size");
  int64_t v = 0;
  char unit = 0;
  if (in >> v) {
    in >> unit;
    return unit == 'K' ? v << 10 : unit == 'M' ? v << 20 : v;
  }
  return 0;
}

// ISA families of --isa: each one this CPU runs, in the order given, without repeats.
std::vector<Isa> parse_isa_list(const std::string& text) {
  std::vector<Isa> out;
  for (const std::string& item : split(text, ',')) {
    Isa isa;
    try {
      isa = parse_isa(item, "--isa");
    } catch (const SpecError& e) {
      throw InvalidArgument(e.what());
    }
    if (!host_supports(isa)) {
      std::string runs;
      for (const IsaFamily& f : isa_families())
        if (host_supports(f.isa)) runs += ", " + std::string(f.name);
      throw InvalidArgument("--isa " + item + ": this CPU cannot run it (it runs native" + runs +
                            ")");
    }
    if (std::find(out.begin(), out.end(), isa) == out.end()) out.push_back(isa);
  }
  return out;
}

// A tiling to time, and what became of it.
struct Variant {
  KernelSpec spec;         // the problem with this tiling and ISA family
  bool heuristic = false;  // the runtime's untuned choice (heuristic tiling, native family)
  double distance = 0;     // from the heuristic's tiling, in octaves (sweep order)
  enum class State { kNotRun, kOk, kMismatch, kFailed } state = State::kNotRun;
  bool cached = false;  // its kernel was in the disk cache before the sweep
  double compile_s = 0, gflops = 0, ms = 0;
  std::string failure;
};

std::string tiling_text(const Tiling& t) {
  return "tm=" + std::to_string(t.tm) + ",tk=" + std::to_string(t.tk) +
         ",tn=" + std::to_string(t.tn);
}

struct Candidates {
  std::vector<Variant> variants;  // the heuristic's first, then nearest first
  int pruned_scratch = 0, pruned_cache = 0;
};

// Every tiling of the space for each family, clamped to the problem (tk <= K, tn <= N: larger
// tiles run as these), without repeats, pruned by the kernels' scratch limit (validate) and, for
// the default space, by the L2 cache; the heuristic's tiling on the native family first.
Candidates candidates(const KernelSpec& problem, double rows_per_group, const Space& space,
                      const std::vector<Isa>& isas, int64_t l2) {
  Candidates out;
  Variant h;
  h.spec = problem;
  h.spec.isa = Isa::kNative;
  h.spec.tiling = heuristic_tiling(h.spec, rows_per_group);
  h.heuristic = true;
  out.variants.push_back(h);
  std::set<std::tuple<int, int64_t, int64_t, int64_t>> seen{
      {int(Isa::kNative), h.spec.tiling.tm, h.spec.tiling.tk, h.spec.tiling.tn}};
  const auto octaves = [](int64_t a, int64_t b) {
    return std::fabs(std::log2(double(a)) - std::log2(double(b)));
  };
  for (size_t fi = 0; fi < isas.size(); ++fi) {
    const Isa isa = isas[fi];
    const IsaFamily& family = isa_family(isa == Isa::kNative ? host_isa() : isa);
    const auto values = [&](const std::vector<int64_t>& given, char dim) {
      return given.empty() ? default_values(dim, family) : given;
    };
    for (int64_t tm : values(space.tm, 'm'))
      for (int64_t tk : values(space.tk, 'k'))
        for (int64_t tn : values(space.tn, 'n')) {
          Variant v;
          v.spec = problem;
          v.spec.isa = isa;
          v.spec.tiling = {tm, std::min(tk, problem.k), std::min(tn, problem.n)};
          const Tiling& t = v.spec.tiling;
          if (!seen.insert({int(isa), t.tm, t.tk, t.tn}).second) continue;
          try {
            validate(v.spec);
          } catch (const SpecError&) {
            ++out.pruned_scratch;
            continue;
          }
          if (!space.given && l2 > 0 && scratch_bytes(v.spec, family) > l2) {
            ++out.pruned_cache;
            continue;
          }
          // Nearest the heuristic's tiling first (a budget-limited sweep explores around it),
          // then the families in --isa order.
          v.distance = octaves(t.tm, h.spec.tiling.tm) + octaves(t.tk, h.spec.tiling.tk) +
                       octaves(t.tn, h.spec.tiling.tn) + 1e-3 * double(fi);
          out.variants.push_back(v);
        }
  }
  std::stable_sort(out.variants.begin() + 1, out.variants.end(),
                   [](const Variant& a, const Variant& b) { return a.distance < b.distance; });
  return out;
}

// ---- Progress
// ------------------------------------------------------------------------------------

// A bar redrawn in place on a terminal; otherwise one flushed line per variant.
class Progress {
 public:
  Progress() : tty_(isatty(STDOUT_FILENO) == 1) {}
  void start(size_t total) { total_ = total, done_ = 0; }
  void status(const std::string& what, double best, double left) {
    if (tty_) draw(what, best, left);
  }
  void variant(const Variant& v, double heuristic_gflops, double best, double left) {
    ++done_;
    if (tty_) {
      draw(label(v) + "  " + outcome(v, heuristic_gflops), best, left);
      return;
    }
    std::printf("[%*zu/%zu] %-36s %s\n", int(std::to_string(total_).size()), done_, total_,
                label(v).c_str(), outcome(v, heuristic_gflops).c_str());
    std::fflush(stdout);
  }
  void retimed(const Variant& h) {
    if (tty_) return;
    // "[again]" in place of "[i/n]", the label column where the other lines have it.
    const int prefix = int(2 * std::to_string(total_).size() + 3);
    std::printf("[again] %-*s %s\n", std::max(1, 36 + prefix - 7), label(h).c_str(),
                outcome(h, 0).c_str());
    std::fflush(stdout);
  }
  void end() {
    if (tty_) std::printf("\n");
    std::fflush(stdout);
  }

  static std::string label(const Variant& v) {
    std::string s = tiling_text(v.spec.tiling);
    if (v.spec.isa != Isa::kNative) s += ",isa=" + std::string(to_string(v.spec.isa));
    return v.heuristic ? s + " (heuristic)" : s;
  }
  static std::string outcome(const Variant& v, double heuristic_gflops) {
    char buf[160];
    const std::string compile = v.cached ? "cached" : "compiled in " + fixed(v.compile_s, 1) + " s";
    switch (v.state) {
      case Variant::State::kOk:
        if (heuristic_gflops > 0)
          std::snprintf(buf, sizeof buf, "%9.1f GFLOP/s  x%.2f  (%s)", v.gflops,
                        v.gflops / heuristic_gflops, compile.c_str());
        else
          std::snprintf(buf, sizeof buf, "%9.1f GFLOP/s  (%s)", v.gflops, compile.c_str());
        return buf;
      case Variant::State::kMismatch:
        return "MISMATCH (wrong results; reported as a bug): " + v.failure;
      case Variant::State::kFailed:
        return "failed: " + v.failure.substr(0, v.failure.find('\n'));
      default:
        return "not run";
    }
  }

 private:
  void draw(const std::string& what, double best, double left) {
    constexpr int kWidth = 24;
    const int filled = total_ ? int(kWidth * done_ / total_) : 0;
    std::string bar(size_t(filled), '#');
    bar.resize(kWidth, '.');
    char tail[96] = "";
    if (best > 0) std::snprintf(tail, sizeof tail, "  best %.1f GFLOP/s", best);
    if (left >= 0)
      std::snprintf(tail + std::strlen(tail), sizeof tail - std::strlen(tail), "  %.0f s left",
                    left);
    std::printf("\r\033[K[%s] %zu/%zu  %s%s", bar.c_str(), done_, total_, what.c_str(), tail);
    std::fflush(stdout);
  }
  bool tty_;
  size_t total_ = 0, done_ = 0;
};

// ---- The sweep ---------------------------------------------------------------------------------

// One problem's sweep and its result.
struct Sweep {
  KernelSpec problem;
  std::vector<Isa> isas;
  bench::Workload work;
  double rows_per_group = 0;
  Candidates cands;
  double seconds = 0;
  bool stopped_by_budget = false;
  const Variant* heuristic() const {
    return cands.variants.empty() ? nullptr : &cands.variants.front();
  }
  double heuristic_gflops() const {
    const Variant* h = heuristic();
    return h && h->state == Variant::State::kOk ? h->gflops : 0;
  }
  const Variant* best() const {
    const Variant* b = nullptr;
    for (const Variant& v : cands.variants)
      if (v.state == Variant::State::kOk && (!b || v.gflops > b->gflops)) b = &v;
    return b;
  }
  size_t attempted() const {
    return size_t(std::count_if(cands.variants.begin(), cands.variants.end(),
                                [](const auto& v) { return v.state != Variant::State::kNotRun; }));
  }
};

// Compiles variants in parallel: -j threads ask the runtime that times them for their kernels
// (it builds distinct kernels at once, each once, through its disk cache).
class Compiler {
 public:
  Compiler(int jobs, Runtime& rt) : jobs_(jobs), rt_(rt) {}
  bool cached(const KernelSpec& s) const { return rt_.cached(s); }
  int jobs() const { return jobs_; }
  // Builds every variant of the batch; a failure is recorded in its variant.
  void build(const std::vector<Variant*>& batch) {
    std::atomic<size_t> next{0};
    const auto work = [&] {
      for (size_t i; (i = next++) < batch.size();) {
        Variant& v = *batch[i];
        const auto t0 = Clock::now();
        try {
          rt_.kernel(v.spec);
        } catch (const std::exception& e) {
          v.state = Variant::State::kFailed;
          v.failure = e.what();
        }
        v.compile_s = seconds_since(t0);
      }
    };
    std::vector<std::thread> threads;
    for (size_t w = 1; w < std::min(batch.size(), size_t(jobs_)); ++w) threads.emplace_back(work);
    work();
    for (auto& t : threads) t.join();
  }

 private:
  int jobs_;
  Runtime& rt_;
};

// Runs one problem's sweep within `share` seconds (0: no limit): batches of up to -j variants
// are compiled in parallel, then timed one by one (never while compiling). A batch starts only
// if the times measured so far say it ends within the share, and a variant is timed only if
// its timing would; the first batch is always compiled and the heuristic's tiling (first, the
// reference) always timed.
void run_sweep(Sweep& sw, double share, Compiler& compiler, Runtime& rt, const bench::Options& bo,
               const bench::Machine& machine, Progress& progress) {
  const auto t0 = Clock::now();
  auto& vs = sw.cands.variants;
  progress.start(vs.size());
  // Measured means, for the budget: wall time of a batch that compiled something, and of one
  // variant's timing (operands, warm-up, repeats, check).
  double compile_walls = 0, bench_walls = 0;
  int compile_batches = 0, benched = 0;
  constexpr double kFirstCompileGuess = 5;  // seconds, before any compile was timed
  const auto left = [&] { return share > 0 ? std::max(0.0, share - seconds_since(t0)) : -1.0; };
  size_t next = 0;
  while (next < vs.size()) {
    size_t n = std::min(vs.size() - next, size_t(compiler.jobs()));
    std::vector<Variant*> batch;
    for (size_t i = 0; i < n; ++i) batch.push_back(&vs[next + i]);
    for (Variant* v : batch) v->cached = compiler.cached(v->spec);
    if (share > 0 && benched > 0) {
      const double bench_est = bench_walls / benched;
      const double compile_est =
          compile_batches ? compile_walls / compile_batches : kFirstCompileGuess;
      // The largest prefix of the batch that fits in what is left.
      while (n > 0) {
        const bool compiles = std::any_of(batch.begin(), batch.begin() + long(n),
                                          [](const Variant* v) { return !v->cached; });
        if (seconds_since(t0) + (compiles ? compile_est : 0) + bench_est * double(n) <= share)
          break;
        --n;
      }
      if (n == 0) {
        sw.stopped_by_budget = true;
        break;
      }
      batch.resize(n);
    }
    const bool compiles =
        std::any_of(batch.begin(), batch.end(), [](const Variant* v) { return !v->cached; });
    progress.status(compiles ? "compiling " + std::to_string(n) + " variant(s)" : "loading",
                    sw.best() ? sw.best()->gflops : 0, left());
    const auto tc = Clock::now();
    compiler.build(batch);
    if (compiles) compile_walls += seconds_since(tc), ++compile_batches;
    for (Variant* v : batch) {
      if (v->state == Variant::State::kFailed) {
        progress.variant(*v, sw.heuristic_gflops(), sw.best() ? sw.best()->gflops : 0, left());
        continue;
      }
      if (share > 0 && benched > 0 && seconds_since(t0) + bench_walls / benched > share) {
        sw.stopped_by_budget = true;
        break;
      }
      progress.status("timing " + Progress::label(*v), sw.best() ? sw.best()->gflops : 0, left());
      const auto tb = Clock::now();
      try {
        const bench::Row r = bench::run(rt, v->spec, sw.work, bo, machine);
        v->state = r.ok ? Variant::State::kOk : Variant::State::kMismatch;
        v->gflops = r.gflops, v->ms = r.ms, v->failure = r.failure;
      } catch (const std::exception& e) {
        v->state = Variant::State::kFailed;
        v->failure = e.what();
      }
      bench_walls += seconds_since(tb), ++benched;
      progress.variant(*v, sw.heuristic_gflops(), sw.best() ? sw.best()->gflops : 0, left());
    }
    if (sw.stopped_by_budget) break;
    next += n;
  }
  // The heuristic's tiling ran first, in the coldest conditions of the process (thread pool,
  // page faults, clocks): timed again at the end, its faster run is kept, so that a speed-up is
  // never owed to the order of the sweep.
  Variant& h = vs.front();
  const bool time_left =
      share == 0 || (benched > 0 && seconds_since(t0) + bench_walls / benched <= share);
  if (h.state == Variant::State::kOk && vs.size() > 1 && time_left) {
    progress.status("timing the heuristic's tiling again", sw.best()->gflops, left());
    try {
      const bench::Row r = bench::run(rt, h.spec, sw.work, bo, machine);
      if (!r.ok) h.state = Variant::State::kMismatch, h.failure = r.failure;
      if (r.ok && r.gflops > h.gflops) h.gflops = r.gflops, h.ms = r.ms;
    } catch (const std::exception& e) {
      h.state = Variant::State::kFailed, h.failure = e.what();
    }
    progress.retimed(h);
  }
  progress.end();
  sw.seconds = seconds_since(t0);
}

// ---- Output files ------------------------------------------------------------------------------

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

// An output path's folder must exist and the path must not be a folder (checked before the sweep).
void check_output_path(const char* option, const std::string& path) {
  if (path.empty()) throw InvalidArgument(std::string(option) + " must not be empty");
  const fs::path p(path);
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw InvalidArgument(std::string(option) + " " + path + ": the folder " + dir.string() +
                          " does not exist");
  if (fs::is_directory(p, ec))
    throw InvalidArgument(std::string(option) + " " + path + " is a folder; name a file");
}

std::string general(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

const char* state_name(Variant::State s) {
  switch (s) {
    case Variant::State::kOk:
      return "ok";
    case Variant::State::kMismatch:
      return "mismatch";
    case Variant::State::kFailed:
      return "failed";
    default:
      return "not-run";
  }
}

// One row per variant that ran (RFC 4180 quoting).
std::string csv_text(const std::vector<Sweep>& sweeps) {
  std::string out =
      "problem,m,dist,rows_per_group,isa,tm,tk,tn,heuristic,state,gflops,ms,speedup,compile_s,"
      "cached,failure\n";
  for (const Sweep& sw : sweeps)
    for (const Variant& v : sw.cands.variants) {
      if (v.state == Variant::State::kNotRun) continue;
      const bool ok = v.state == Variant::State::kOk;
      const double h = sw.heuristic_gflops();
      out += csv_field(tuning::problem_text(sw.problem)) + "," + std::to_string(sw.work.m) + "," +
             csv_field(sw.work.shape) + "," + fixed(sw.rows_per_group, 2) + "," +
             std::string(to_string(v.spec.isa)) + "," + std::to_string(v.spec.tiling.tm) + "," +
             std::to_string(v.spec.tiling.tk) + "," + std::to_string(v.spec.tiling.tn) + "," +
             (v.heuristic ? "1" : "0") + "," + state_name(v.state) + "," +
             (ok ? fixed(v.gflops, 2) : "") + "," + (ok ? general(v.ms) : "") + "," +
             (ok && h > 0 ? fixed(v.gflops / h, 3) : "") + "," + fixed(v.compile_s, 2) + "," +
             (v.cached ? "1" : "0") + "," + csv_field(v.failure) + "\n";
    }
  return out;
}

std::string xml_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// Viridis at t in [0, 1], from five of its stops.
std::string colour(double t) {
  static constexpr int kStops[5][3] = {
      {68, 1, 84}, {59, 82, 139}, {33, 145, 140}, {94, 201, 98}, {253, 231, 37}};
  t = std::clamp(t, 0.0, 1.0) * 4;
  const int i = std::min(3, int(t));
  const double f = t - i;
  char buf[8];
  std::snprintf(buf, sizeof buf, "#%02x%02x%02x",
                int(std::lround(kStops[i][0] + f * (kStops[i + 1][0] - kStops[i][0]))),
                int(std::lround(kStops[i][1] + f * (kStops[i + 1][1] - kStops[i][1]))),
                int(std::lround(kStops[i][2] + f * (kStops[i + 1][2] - kStops[i][2]))));
  return buf;
}

// One row of panels per problem and ISA family, one panel per tk: a heatmap of GFLOP/s over tm
// (rows) and tn (columns) on the problem's colour scale (bar at the right), the fastest variant
// outlined and starred, the heuristic's tiling dashed, failures crossed, tilings not run blank.
std::string svg_text(const std::vector<Sweep>& sweeps) {
  constexpr int kCellW = 64, kCellH = 26, kLeft = 78, kTop = 58, kBottom = 46, kGap = 26;
  constexpr int kBar = 110;  // the colour bar and its labels
  std::ostringstream body;
  int y = 10, width = 400;
  const std::string font = "font-family=\"sans-serif\"";
  for (const Sweep& sw : sweeps) {
    const Variant* best = sw.best();
    double lo = 0, hi = 0;
    bool any = false;
    for (const Variant& v : sw.cands.variants)
      if (v.state == Variant::State::kOk) {
        lo = any ? std::min(lo, v.gflops) : v.gflops;
        hi = any ? std::max(hi, v.gflops) : v.gflops;
        any = true;
      }
    for (Isa isa : sw.isas) {
      // The grid of this family: every tm, tk and tn among its candidates.
      std::set<int64_t> tms, tks, tns;
      for (const Variant& v : sw.cands.variants)
        if (v.spec.isa == isa)
          tms.insert(v.spec.tiling.tm), tks.insert(v.spec.tiling.tk), tns.insert(v.spec.tiling.tn);
      if (tks.empty()) continue;
      const int grid_w = int(tns.size()) * kCellW, grid_h = int(tms.size()) * kCellH;
      const int panel_w = kLeft + grid_w + kGap;
      // At least the length of the rotated tm label, and room for the colour bar's labels.
      const int rows_h = std::max(grid_h, 5 * kCellH);
      body << "<text x=\"10\" y=\"" << y + 16 << "\" " << font
           << " font-size=\"13\" font-weight=\"bold\">"
           << xml_escape(tuning::problem_text(sw.problem) + "  isa=" + std::string(to_string(isa)))
           << "</text>\n";
      body << "<text x=\"10\" y=\"" << y + 32 << "\" " << font << " font-size=\"11\">"
           << xml_escape("M=" + std::to_string(sw.work.m) + ", " + sw.work.shape + ", " +
                         fixed(sw.rows_per_group, 1) + " rows/group; GFLOP/s of each tiling")
           << "</text>\n";
      int x = 0;
      for (int64_t tk : tks) {
        const int gx = x + kLeft, gy = y + kTop;
        body << "<text x=\"" << gx + grid_w / 2 << "\" y=\"" << gy - 8 << "\" " << font
             << " font-size=\"12\" text-anchor=\"middle\">tk = " << tk << "</text>\n";
        int row = 0;
        for (int64_t tm : tms) {
          const int cy = gy + row * kCellH;
          body << "<text x=\"" << gx - 6 << "\" y=\"" << cy + kCellH / 2 + 4 << "\" " << font
               << " font-size=\"11\" text-anchor=\"end\">" << tm << "</text>\n";
          int col = 0;
          for (int64_t tn : tns) {
            const int cx = gx + col * kCellW;
            const Variant* v = nullptr;
            for (const Variant& c : sw.cands.variants)
              if (c.spec.isa == isa && c.spec.tiling == Tiling{tm, tk, tn}) v = &c;
            std::string fill = "#eeeeee", text, text_colour = "#000000";
            if (v && v->state == Variant::State::kOk) {
              const double t = hi > lo ? (v->gflops - lo) / (hi - lo) : 1.0;
              fill = colour(t);
              text = fixed(v->gflops, 0);
              if (t < 0.5) text_colour = "#ffffff";
            } else if (v && v->state != Variant::State::kNotRun) {
              fill = "#f4c7c3";
              text = v->state == Variant::State::kMismatch ? "wrong" : "\u00d7";
            }
            body << "<rect x=\"" << cx << "\" y=\"" << cy << "\" width=\"" << kCellW
                 << "\" height=\"" << kCellH << "\" fill=\"" << fill
                 << "\" stroke=\"#ffffff\" stroke-width=\"1\"/>\n";
            if (v && v->heuristic)
              body << "<rect class=\"heuristic\" x=\"" << cx + 2 << "\" y=\"" << cy + 2
                   << "\" width=\"" << kCellW - 4 << "\" height=\"" << kCellH - 4
                   << "\" fill=\"none\" stroke=\"#d62728\" stroke-width=\"2\" "
                      "stroke-dasharray=\"4 2\"/>\n";
            if (v && v == best) {
              body << "<rect class=\"winner\" x=\"" << cx + 1 << "\" y=\"" << cy + 1
                   << "\" width=\"" << kCellW - 2 << "\" height=\"" << kCellH - 2
                   << "\" fill=\"none\" stroke=\"#000000\" stroke-width=\"3\"/>\n";
              text = "\u2605 " + text;
            }
            if (!text.empty())
              body << "<text x=\"" << cx + kCellW / 2 << "\" y=\"" << cy + kCellH / 2 + 4 << "\" "
                   << font << " font-size=\"11\" text-anchor=\"middle\" fill=\"" << text_colour
                   << "\">" << xml_escape(text) << "</text>\n";
            ++col;
          }
          ++row;
        }
        int col = 0;
        for (int64_t tn : tns)
          body << "<text x=\"" << gx + col++ * kCellW + kCellW / 2 << "\" y=\"" << gy + grid_h + 14
               << "\" " << font << " font-size=\"11\" text-anchor=\"middle\">" << tn << "</text>\n";
        body << "<text x=\"" << gx + grid_w / 2 << "\" y=\"" << gy + grid_h + 32 << "\" " << font
             << " font-size=\"12\" text-anchor=\"middle\">tn (columns per tile)</text>\n";
        body << "<text x=\"" << x + 16 << "\" y=\"" << gy + rows_h / 2 << "\" " << font
             << " font-size=\"12\" text-anchor=\"middle\" transform=\"rotate(-90 " << x + 16 << " "
             << gy + rows_h / 2 << ")\">tm (rows per tile)</text>\n";
        x += panel_w;
      }
      // The colour scale of this problem.
      const int bx = x + 10, by = y + kTop, bh = rows_h;
      body << "<rect class=\"scale\" x=\"" << bx << "\" y=\"" << by << "\" width=\"16\" height=\""
           << bh << "\" fill=\"url(#gflops-scale)\" stroke=\"#888888\"/>\n";
      body << "<text x=\"" << bx + 22 << "\" y=\"" << by + 10 << "\" " << font
           << " font-size=\"11\">" << (any ? fixed(hi, 1) : "-") << "</text>\n";
      body << "<text x=\"" << bx + 22 << "\" y=\"" << by + bh << "\" " << font
           << " font-size=\"11\">" << (any ? fixed(lo, 1) : "-") << "</text>\n";
      body << "<text x=\"" << bx + 22 << "\" y=\"" << by + bh / 2 + 4 << "\" " << font
           << " font-size=\"11\">GFLOP/s</text>\n";
      width = std::max({width, x + kBar, int(tuning::problem_text(sw.problem).size()) * 8 + 140});
      y += kTop + rows_h + kBottom;
    }
  }
  const std::string legend =
      "\u2605 outlined: fastest;  red dashes: the heuristic's tiling;  \u00d7: failed;  blank: "
      "not run";
  body << "<text x=\"10\" y=\"" << y + 14 << "\" " << font << " font-size=\"11\">"
       << xml_escape(legend) << "</text>\n";
  const int height = y + 30;
  std::ostringstream out;
  out << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
      << "\" viewBox=\"0 0 " << width << " " << height << "\">\n"
      << "<title>gmm-gen tune: GFLOP/s over (tm, tn) per tk</title>\n"
      << "<defs><linearGradient id=\"gflops-scale\" x1=\"0\" y1=\"1\" x2=\"0\" y2=\"0\">\n";
  for (int i = 0; i <= 4; ++i)
    out << "<stop offset=\"" << i * 25 << "%\" stop-color=\"" << colour(i / 4.0) << "\"/>\n";
  out << "</linearGradient></defs>\n"
      << "<rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n"
      << body.str() << "</svg>\n";
  return out.str();
}

// The default table: <cache>/tuning/<cpu model>.json (one file per CPU model, so a cache folder
// shared by machines keeps each one's table).
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

// The folder of the default table: created private to the user, like the cache itself.
void make_private_dir(const fs::path& dir) {
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    throw std::runtime_error("cannot create " + dir.string() + ": " + std::strerror(errno));
  struct stat st {};
  if (lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid())
    throw std::runtime_error(dir.string() + " must be a folder owned by this user");
}

// The table to merge into: none if the file does not exist; otherwise it must read as a table
// (every entry valid) of this machine.
tuning::Table existing_table(const fs::path& path, const tuning::Device& device) {
  tuning::Table t;
  std::error_code ec;
  if (!fs::exists(path, ec)) return t;
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  if (!in) throw InvalidArgument("--table " + path.string() + " cannot be read");
  try {
    t = tuning::parse_table(text.str(), path.string());
  } catch (const tuning::TableError& e) {
    throw InvalidArgument("--table " + path.string() +
                          " exists and is not a tuning table this gmm-gen can merge into (" +
                          e.what() + "); name another file or remove it");
  }
  if (t.device.cpu != device.cpu || t.device.isa != device.isa)
    throw InvalidArgument("--table " + path.string() + " was tuned on '" + t.device.cpu +
                          "' (isa=" + t.device.isa + "), this machine is '" + device.cpu +
                          "' (isa=" + device.isa +
                          "): a table holds one device; name another file");
  return t;
}

void print_top(const Sweep& sw) {
  std::vector<const Variant*> ok;
  for (const Variant& v : sw.cands.variants)
    if (v.state == Variant::State::kOk) ok.push_back(&v);
  std::stable_sort(ok.begin(), ok.end(),
                   [](const Variant* a, const Variant* b) { return a->gflops > b->gflops; });
  const double h = sw.heuristic_gflops();
  std::printf("top %zu of %zu timed (%zu candidates) in %.0f s%s:\n",
              std::min<size_t>(5, ok.size()), sw.attempted(), sw.cands.variants.size(), sw.seconds,
              sw.stopped_by_budget ? ", stopped at the budget" : "");
  std::printf("  %-4s %6s %6s %6s  %-10s %10s %9s\n", "rank", "tm", "tk", "tn", "isa", "GFLOP/s",
              "speed-up");
  for (size_t i = 0; i < ok.size() && i < 5; ++i) {
    const Variant& v = *ok[i];
    const std::string su = h > 0 ? "x" + fixed(v.gflops / h, 2) : "-";
    std::printf("  %-4zu %6lld %6lld %6lld  %-10s %10.1f %9s%s\n", i + 1,
                (long long)v.spec.tiling.tm, (long long)v.spec.tiling.tk,
                (long long)v.spec.tiling.tn, std::string(to_string(v.spec.isa)).c_str(), v.gflops,
                su.c_str(), v.heuristic ? "  (heuristic)" : "");
  }
  if (h > 0)
    std::printf("  speed-up: over the heuristic's %s (%.1f GFLOP/s)\n",
                tiling_text(sw.heuristic()->spec.tiling).c_str(), h);
  else if (sw.heuristic())
    std::printf("  the heuristic's %s did not run: %s\n",
                tiling_text(sw.heuristic()->spec.tiling).c_str(),
                Progress::outcome(*sw.heuristic(), 0).c_str());
}

int run_tune(const TuneOptions& o) {
  // Everything is checked before anything is compiled or written.
  if (o.m < 1 || o.m > INT32_MAX)
    throw InvalidArgument("--m=" + std::to_string(o.m) + " must be in [1, 2^31)");
  const auto given = [](const CLI::Option* opt) { return opt && opt->count() > 0; };
  if (given(o.jobs_given) && (o.jobs < 1 || o.jobs > 256))
    throw InvalidArgument("-j " + std::to_string(o.jobs) + " must be in [1, 256]");
  if (given(o.budget_given) && !(std::isfinite(o.budget) && o.budget > 0))
    throw InvalidArgument("--budget " + fixed(o.budget, 1) + " must be a number of seconds > 0");
  if (given(o.threads_given) && (o.threads < 1 || o.threads > 4096))
    throw InvalidArgument("--threads " + std::to_string(o.threads) + " must be in [1, 4096]");
  if (o.reps < 1 || o.reps > 1000)
    throw InvalidArgument("--reps " + std::to_string(o.reps) + " must be in [1, 1000]");
  const Space space = o.space.empty() ? Space{} : parse_space(o.space);
  const std::vector<Isa> isa_list = o.isa.empty() ? std::vector<Isa>{} : parse_isa_list(o.isa);
  if (!o.csv.empty()) check_output_path("--csv", o.csv);
  if (!o.svg.empty()) check_output_path("--svg", o.svg);
  if (!o.table.empty()) check_output_path("--table", o.table);

  std::vector<Sweep> sweeps;
  const int64_t l2 = l2_bytes();
  for (KernelSpec spec : o.filter.apply(o.specs.specs())) {
    spec.tiling = default_tiling(spec);  // the spec's own tiling is swept, not used
    const std::string text = tuning::problem_text(spec);
    if (spec.target != TargetKind::kCpp)
      throw InvalidArgument("spec " + text + ": target=" + std::string(to_string(spec.target)) +
                            ": tune times C++ kernels (target=cpp) on this machine");
    if (spec.g_local != spec.g)
      throw InvalidArgument("spec " + text + ": g_local=" + std::to_string(spec.g_local) +
                            " < g=" + std::to_string(spec.g) +
                            ": tune times unsharded problems only (g_local = g)");
    validate(spec);
    if (!host_supports(spec.isa))
      throw InvalidArgument("spec " + text + ": isa=" + std::string(to_string(spec.isa)) +
                            ": this CPU cannot run it");
    Sweep sw;
    sw.problem = spec;
    sw.isas = isa_list.empty() ? std::vector<Isa>{spec.isa} : isa_list;
    const bool repeat = std::any_of(sweeps.begin(), sweeps.end(), [&](const Sweep& s) {
      return SameProblem{}(s.problem, spec) && s.isas == sw.isas;
    });
    if (repeat) continue;
    sw.work.shape = o.dist;
    sw.work.m = o.m;
    sw.work.group_sizes = bench::group_sizes(o.dist, int32_t(spec.g), o.m, 12345);
    sw.rows_per_group = tuning::rows_per_group(sw.work.group_sizes, 0, spec.g);
    sw.cands = candidates(spec, sw.rows_per_group, space, sw.isas, l2);
    sweeps.push_back(std::move(sw));
  }

  const int jobs = o.jobs ? o.jobs : int(std::max(1u, std::thread::hardware_concurrency()));
  RuntimeOptions ro;
  ro.num_threads = o.threads, ro.jit = true, ro.log = false;
  Runtime rt(ro);
  const bench::Machine machine = bench::describe_machine(rt.num_threads(), false);
  const tuning::Device device{machine.cpu, machine.isa, machine.compiler};
  const fs::path table_path =
      o.table.empty() ? default_table_path(rt.cache_dir(), machine.cpu) : fs::path(o.table);
  tuning::Table table = existing_table(table_path, device);

  bench::Options bo;
  bo.threads = rt.num_threads(), bo.reps = o.reps, bo.baseline = bench::BaselineKind::kNone;
  std::printf(
      "cpu:       %s\nisa:       %s\ncompiler:  %s\nthreads:   %d (timing), -j %d (compiling)\n"
      "budget:    %s\ntable:     %s\n",
      machine.cpu.c_str(), machine.isa.c_str(), machine.compiler.c_str(), rt.num_threads(), jobs,
      o.budget > 0 ? (fixed(o.budget, 0) + " s").c_str() : "none", table_path.c_str());
  std::fflush(stdout);

  Compiler compiler(jobs, rt);
  Progress progress;
  const auto t0 = Clock::now();
  int mismatches = 0, unresolved = 0;
  tuning::Table tuned;
  tuned.device = device;
  for (size_t i = 0; i < sweeps.size(); ++i) {
    Sweep& sw = sweeps[i];
    std::printf("\n%s\n  M=%lld, %s: %.1f rows/group (bucket %s); %zu candidates",
                tuning::problem_text(sw.problem).c_str(), (long long)sw.work.m,
                sw.work.shape.c_str(), sw.rows_per_group,
                tuning::to_string(tuning::bucket_of(sw.rows_per_group)).c_str(),
                sw.cands.variants.size());
    if (sw.cands.pruned_scratch || sw.cands.pruned_cache)
      std::printf(" (pruned: %d over the scratch limit, %d over the L2 cache)",
                  sw.cands.pruned_scratch, sw.cands.pruned_cache);
    std::printf("\n");
    std::fflush(stdout);
    // What is left of the budget, shared equally by the problems not swept yet.
    double share = 0;
    if (o.budget > 0)
      share = std::max(0.0, o.budget - seconds_since(t0)) / double(sweeps.size() - i);
    if (o.budget > 0 && share <= 0) share = 1e-9;  // only the first batch then
    run_sweep(sw, share, compiler, rt, bo, machine, progress);
    for (const Variant& v : sw.cands.variants) mismatches += v.state == Variant::State::kMismatch;
    print_top(sw);
    const Variant* best = sw.best();
    if (!best) {
      ++unresolved;
      std::printf("  no variant ran correctly: no table entry\n");
      continue;
    }
    tuning::Entry e;
    e.spec = best->spec;
    e.rows_per_group = tuning::bucket_of(sw.rows_per_group);
    e.gflops = best->gflops;
    e.baseline_gflops = sw.heuristic_gflops();
    e.m = sw.work.m, e.dist = sw.work.shape, e.threads = rt.num_threads();
    tuned.entries.push_back(e);
  }

  std::printf("\n");
  if (!tuned.entries.empty()) {
    if (o.table.empty()) {
      (void)DiskCache(rt.cache_dir());  // the cache root, created private if missing
      make_private_dir(table_path.parent_path());
    }
    tuning::merge(table, tuned);
    write_atomically(table_path, tuning::dump_table(table),
                     o.table.empty() ? 0600 : user_file_mode());
    std::printf("table: %zu entr%s written to %s (%zu in all)\n", tuned.entries.size(),
                tuned.entries.size() == 1 ? "y" : "ies", table_path.c_str(), table.entries.size());
  }
  if (!o.csv.empty()) {
    write_atomically(o.csv, csv_text(sweeps), user_file_mode());
    std::printf("csv:   %s\n", o.csv.c_str());
  }
  if (!o.svg.empty()) {
    write_atomically(o.svg, svg_text(sweeps), user_file_mode());
    std::printf("svg:   %s\n", o.svg.c_str());
  }
  std::printf("total: %.0f s\n", seconds_since(t0));
  if (mismatches)
    std::printf("%d variant(s) computed wrong results (MISMATCH above): a bug; please report it\n",
                mismatches);
  return mismatches || unresolved ? 1 : 0;
}

}  // namespace

Command add_tune(CLI::App& app) {
  auto o = std::make_shared<TuneOptions>();
  CLI::App* cmd = app.add_subcommand(
      "tune", "Sweep tilings of a problem, keep the fastest, write a tuning table (+ CSV, SVG)");
  o->specs.add_to(*cmd);
  o->filter.add_to(*cmd);
  // --isa takes a list of families here: the spec's own --isa flag gives way to it.
  cmd->remove_option(cmd->get_option("--isa"));
  cmd->add_option("--isa", o->isa,
                  "ISA families to sweep, comma-separated (native, avx512bf16, avx512, avx2, "
                  "generic; each one this CPU runs) [the spec's isa]");
  cmd->add_option("--dist", o->dist,
                  "Group sizes: uniform | zipf | tiny | decode | sizes:a,b,... [uniform]");
  cmd->add_option("--m", o->m, "Rows M [4096]");
  cmd->add_option("--space", o->space,
                  "Tilings to sweep: \"tm=16,32,64;tk=128,256;tn=64\" (a key left out takes the "
                  "family's default values) [tm 16..512, tk 32..512, tn nr..256, powers of two, "
                  "pruned by the scratch limit and the L2 cache]");
  o->jobs_given = cmd->add_option("-j,--jobs", o->jobs, "Parallel compiles [the machine's cores]");
  o->budget_given = cmd->add_option(
      "--budget", o->budget, "Seconds for the whole sweep; it stops with what it has [no limit]");
  cmd->add_option("--table", o->table,
                  "Tuning table to write or merge into [<cache>/tuning/<cpu model>.json, which "
                  "the runtime reads]");
  cmd->add_option("--csv", o->csv, "Also write every timed variant to this CSV file");
  cmd->add_option("--svg", o->svg,
                  "Also write a heatmap of GFLOP/s over (tm, tn) per tk to this SVG file");
  o->threads_given = cmd->add_option(
      "--threads", o->threads,
      "Threads of each timed run [the runtime's default: GMMGEN_NUM_THREADS or cores]");
  cmd->add_option("--reps", o->reps, "Timed runs after warm-up; the median is kept [5]");
  cmd->footer(
      "The heuristic's tiling (the runtime's untuned choice) is timed first and again at the\n"
      "end (its faster run is the reference of the speed-ups), the space nearest it first.\n"
      "Batches of -j variants are compiled in parallel through the disk cache\n"
      "(a repeated sweep compiles nothing), then timed one at a time with the bench machinery\n"
      "(warm-up, median of --reps runs, output checked against the float64 reference; a wrong\n"
      "variant is reported, never kept). With --budget, a batch starts only if the times\n"
      "measured so far say it ends in time. The fastest variant becomes the table entry for the\n"
      "problem and the power-of-two bucket of its mean rows per group; later calls of that\n"
      "problem whose rows per group fall in the bucket use it (GMMGEN_LOG=info shows which).\n"
      "Example:\n"
      "  gmm-gen tune --spec op=gmm,lhs=f32,rhs=f32,out=f32,k=4096,n=512,g=128 --m 2048 \\\n"
      "      --dist tiny -j 2 --budget 120 --svg s3.svg --csv s3.csv");
  return {cmd, [o] { return run_tune(*o); }};
}

}  // namespace gmmgen::cli
