// Tuning tables (docs/tuning.md): the tilings `gmm-gen tune` measured fastest on one device, per
// problem and per bucket of rows per group. This file is the format: parse, write, merge, match.
// A Runtime reads them from $GMMGEN_TUNING_DIR, then cache_tuning_dir(), then the shipped ones.
//
//   {"version": 1,
//    "device": {"cpu": "...", "isa": "avx512", "compiler": "..."},
//    "entries": [{"problem": {"op": "gmm", "lhs": "f32", ..., "out_mode": "plain"},
//                 "rows_per_group": [16, 32],            // [lo, hi); hi null: no upper bound
//                 "tiling": {"tm": 64, "tk": 128, "tn": 64},
//                 "isa": "avx2",                         // optional: a family other than native
//                 "gflops": 123.4, "baseline_gflops": 100.1,   // tuned; the heuristic's tiling
//                 "m": 2048, "dist": "tiny", "threads": 2}]}   // optional: the workload
// Keys this version does not know are ignored; a table of another version is not read.
#pragma once

#include <cstdint>
#include <filesystem>
#include <limits>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "gmmgen/spec.h"

namespace gmmgen::tuning {

inline constexpr int kTableVersion = 1;
// A table larger than this is not read (a table holds a few hundred bytes per entry).
inline constexpr int64_t kMaxTableBytes = int64_t{16} << 20;

// A table that cannot be read: the message names its origin, the entry and the key.
class TableError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Device {
  std::string cpu;       // lscpu's model name
  std::string isa;       // the best ISA family of the machine (as in specs: avx512, avx2, ...)
  std::string compiler;  // the compiler's identity
  bool operator==(const Device&) const = default;
};

// Mean rows per active group, [lo, hi).
struct Bucket {
  double lo = 0;
  double hi = std::numeric_limits<double>::infinity();
  bool contains(double rows) const { return lo <= rows && rows < hi; }
  bool overlaps(const Bucket& b) const { return lo < b.hi && b.lo < hi; }
  bool operator==(const Bucket&) const = default;
};

struct Entry {
  KernelSpec spec;  // the problem, with the tuned tiling and ISA family (native unless swept)
  Bucket rows_per_group;
  double gflops = 0;           // the tuned tiling, when measured (0: not recorded)
  double baseline_gflops = 0;  // the heuristic's tiling in the same run (0: not recorded)
  // The workload it was measured on (informational; 0 / "" when not recorded).
  int64_t m = 0;
  std::string dist;
  int threads = 0;
};

struct Table {
  Device device;
  std::vector<Entry> entries;
};

// Parses a table. Structural problems (not JSON, nesting deeper than 64, a key twice in one
// object, another version, a missing or mistyped key) throw TableError naming `origin`. An entry
// that breaks its own rules (a problem or tiling that is not a valid spec, a bad bucket) throws
// too, unless `skipped` is given: it is then left out and described there.
Table parse_table(std::string_view text, const std::string& origin,
                  std::vector<std::string>* skipped = nullptr);

// The table as JSON text (two-space indent, a newline at the end); parse_table reads it back.
std::string dump_table(const Table& t);

// Adds `from`'s entries to `into`: an entry of `into` for the same problem whose bucket
// overlaps a new entry's is replaced by it. `into` takes `from`'s device.
void merge(Table& into, const Table& from);

// The first entry for `problem` (its problem fields; tiling and ISA are ignored) whose bucket
// holds rows_per_group, or nullptr.
const Entry* match(const Table& t, const KernelSpec& problem, double rows_per_group);

// The power-of-two bucket [2^i, 2^(i+1)) holding rows (rows < 1: [0, 1)).
Bucket bucket_of(double rows);

// Mean rows per active group of a call: the rows of groups [group_offset, group_offset +
// g_local) over g_local. Out-of-range offsets and negative sizes (which the kernel rejects) count
// as nothing, so this never reads past group_sizes.
double rows_per_group(std::span<const int32_t> group_sizes, int64_t group_offset, int64_t g_local);

// The problem fields of a spec (docs/tuning.md's "problem"), as text ("op=gmm,lhs=f32,...") and as
// JSON. Both parse back with the spec parsers (the tiling left to the heuristic).
std::string problem_text(const KernelSpec& s);
nlohmann::ordered_json problem_json(const KernelSpec& s);

// The folder of the tables `gmm-gen tune` writes by default under a cache root (<root>/tuning),
// which every Runtime with that cache reads.
std::filesystem::path cache_tuning_dir(const std::filesystem::path& cache_root);

// "[16, 32)" or "[16, inf)".
std::string to_string(const Bucket& b);

}  // namespace gmmgen::tuning
