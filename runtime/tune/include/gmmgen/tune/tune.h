// The autotuner as a library (docs/tuning.md): the tilings (and ISA families) to try for a
// problem, a sweep that compiles them in parallel through a Runtime and times each with the bench
// machinery within a budget, reporting progress to callbacks that may stop it, and the tuning
// table entry of the fastest. `gmm-gen tune` and Python's gmmgen.tune are front ends of it; the
// table format is gmmgen/tuning/table.h, the CSV and SVG reports gmmgen/tune/report.h.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "gmmgen/bench/bench.h"
#include "gmmgen/runtime.hpp"
#include "gmmgen/spec.h"
#include "gmmgen/tuning/table.h"

namespace gmmgen::tune {

// ---- What to try -------------------------------------------------------------------------------

// Values per tile dimension; an empty list takes the family's defaults (powers of two around the
// heuristic's choices; tn in whole register tiles).
struct Space {
  std::vector<int64_t> tm, tk, tn;
  bool given = false;  // named by the caller: its candidates are not pruned by the L2 cache
};

// "tm=16,32,64;tk=128;tn=64,128": each key at most once, values integers in [1, kMaxTile].
// Throws InvalidArgument naming `option` (the caller's name for the text) and the rule.
Space parse_space(const std::string& text, const std::string& option = "--space");

// "avx2,avx512": ISA families this CPU runs, in the order given, without repeats. Throws
// InvalidArgument naming `option` for an unknown family or one this CPU cannot run.
std::vector<Isa> parse_isa_list(const std::string& text, const std::string& option = "--isa");

// This machine's per-core L2 cache in bytes (0: unknown): the default space leaves out tilings
// whose working set is larger.
int64_t l2_bytes();

// "tm=64,tk=128,tn=64".
std::string tiling_text(const Tiling& t);

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
const char* state_name(Variant::State s);  // ok, mismatch, failed, not-run

struct Candidates {
  std::vector<Variant> variants;  // the heuristic's first, then nearest first
  int pruned_scratch = 0, pruned_cache = 0;
};

// Every tiling of the space for each family, clamped to the problem (tk <= K, tn <= N: larger
// tiles run as these), without repeats, pruned by the kernels' scratch limit (validate) and, for
// the default space, by the L2 cache (l2 bytes; 0: no pruning); the heuristic's tiling on the
// native family first, then nearest it first.
Candidates candidates(const KernelSpec& problem, double rows_per_group, const Space& space,
                      const std::vector<Isa>& isas, int64_t l2);

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
  bool stopped_by_caller = false;  // Progress::stop said so
  const Variant* heuristic() const;
  double heuristic_gflops() const;  // 0 unless the heuristic's tiling ran correctly
  const Variant* best() const;      // the fastest correct variant, or nullptr
  size_t attempted() const;
};

// The sweep of `spec`'s problem (its tiling is ignored) on `work`, over `space` for each of
// `isas` (empty: the spec's family). Throws InvalidArgument naming the rule for a problem tune
// cannot time here: target=pallas, sharded (g_local < g), a family this CPU cannot run, or an
// invalid spec.
Sweep plan_sweep(const KernelSpec& spec, const bench::Workload& work, const Space& space,
                 const std::vector<Isa>& isas, int64_t l2);

// What a sweep tells its caller as it goes (each may be empty). `best` is the fastest GFLOP/s so
// far (0: none), `left` the seconds left of the budget (-1: no budget).
struct Progress {
  std::function<void(const std::string& what, double best, double left)> status;
  // A variant is done (timed, or failed to build).
  std::function<void(const Variant& v, double heuristic_gflops, double best, double left)> variant;
  std::function<void(const Variant& heuristic)> retimed;  // the heuristic's tiling timed again
  // Asked before each batch and each timing: true stops the sweep (stopped_by_caller), keeping
  // what it measured; e.g. a Ctrl-C seen by Python.
  std::function<bool()> stop;
};

struct SweepOptions {
  int jobs = 1;           // kernels compiled at once
  double budget = 0;      // seconds for this sweep (0: no limit)
  bench::Options timing;  // threads, reps (the baseline is not run)
  bench::Machine machine;
};

// Runs a sweep: batches of up to `jobs` variants compiled in parallel by `rt`, then timed one by
// one (never while compiling). A batch starts only if the times measured so far say it ends
// within the budget, and a variant is timed only if its timing would; the first batch is always
// compiled and the heuristic's tiling (first, the reference) always timed. The heuristic's tiling
// is timed again at the end when time is left, its faster run kept, so that no speed-up is owed to
// the order of the sweep. Every variant's output is checked against the float64 reference; a
// wrong one is kMismatch, never the best.
void run_sweep(Runtime& rt, Sweep& sw, const SweepOptions& o, const Progress& progress = {});

// The table entry of a finished sweep: its best variant for the problem and the bucket of its
// rows per group, with the heuristic's GFLOP/s and the workload; nullopt if nothing ran correctly.
std::optional<tuning::Entry> table_entry(const Sweep& sw, int threads);

// ---- A whole tuning run -------------------------------------------------------------------------

// What to tune: each spec's problem on m rows split by `dist` (bench::group_sizes, seed 12345),
// over `space` and `isas`, then the table (and reports) written.
struct Request {
  std::vector<KernelSpec> specs;  // repeats (same problem and families) are swept once
  int64_t m = 4096;
  std::string dist = "uniform";
  Space space;
  std::vector<Isa> isas;           // empty: each spec's family
  int jobs = 0;                    // kernels compiled at once (0: the machine's cores)
  double budget = 0;               // seconds for the whole run, shared by the problems (0: none)
  int reps = 5;                    // timed runs per variant after warm-up (the median is kept)
  std::filesystem::path table;     // table to merge into (empty: default_table_path)
  std::filesystem::path csv, svg;  // reports to write (empty: none)
};

struct Result {
  std::vector<Sweep> sweeps;
  bench::Machine machine;
  std::filesystem::path table_path;  // where the table is (written only if `tuned` has entries)
  tuning::Table tuned;               // this run's entries
  size_t table_entries = 0;          // entries of the table written, in all
  int jobs = 0, mismatches = 0, unresolved = 0;  // unresolved: problems nothing ran for
  bool interrupted = false;  // Progress::stop stopped it: no table or report was written
  double seconds = 0;
};

// What a run tells its caller beyond each sweep's Progress: the machine and the table before any
// sweep (`started`: result holds machine, table_path, jobs), and each sweep before and after it.
struct Hooks {
  Progress progress;
  std::function<void(const Result& r)> started;
  std::function<void(const Sweep&sw)> sweep_started, sweep_done;
};

// Plans every sweep (plan_sweep's rules), checks the output paths and reads the table to merge
// into (existing_table) before anything is compiled; then sweeps on `rt` (its threads time the
// variants; it compiles even where its JIT is off), and writes the merged table and the reports.
// Throws InvalidArgument for a bad request (nothing compiled or written then).
Result run(Runtime& rt, const Request& request, const Hooks& hooks = {});

// ---- Table files -------------------------------------------------------------------------------

// The default table of a machine: <cache>/tuning/<cpu model, slugged>.json, which every Runtime
// on that cache reads (one file per CPU model, so a cache shared by machines keeps each's).
std::filesystem::path default_table_path(const std::filesystem::path& cache_root,
                                         const std::string& cpu);

// The table to merge into: empty if the file does not exist; otherwise it must read as a table of
// this device. Throws InvalidArgument naming `option` and why otherwise.
tuning::Table existing_table(const std::filesystem::path& path, const tuning::Device& device,
                             const std::string& option = "--table");

// An output file's folder must exist and the path must not be a folder: InvalidArgument naming
// `option` otherwise. For checking before a sweep.
void check_output_path(const std::string& option, const std::string& path);

// Writes `content` to `path` in one rename from a fresh temporary file beside it (mkstemp), so a
// reader sees the old file or the new one; `private_file`: mode 0600, else 0666 less the umask.
void write_file(const std::filesystem::path& path, const std::string& content, bool private_file);

// Merges `tuned` into `table` and writes it to `path`; at the default path the folder is created
// private to the user (0700, like the cache) and the file 0600.
void write_table(const std::filesystem::path& path, tuning::Table& table,
                 const tuning::Table& tuned, bool default_path);

}  // namespace gmmgen::tune
