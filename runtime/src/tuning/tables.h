// The tuning tables a runtime reads (docs/tuning.md), in order, first match wins:
//   1. $GMMGEN_TUNING_DIR/*.json
//   2. <cache folder>/tuning/*.json   (where `gmm-gen tune` writes by default)
//   3. the tables shipped in runtime/tuning/ (compiled into the library)
// Files of a folder are read in name order. A table is read once, at the first call that needs
// a tiling, and indexed by problem, so a call costs a hash lookup and no file I/O. A table that
// cannot be read (not JSON, another version, ...) or an entry that breaks its rules is skipped
// with a warning on stderr; a table for an ISA family this CPU cannot run is skipped silently
// (logged with GMMGEN_LOG). Nothing in a table can change a result: an entry only picks a valid
// tiling (and ISA family) for a problem it names exactly.
#pragma once

#include <filesystem>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "dispatch/select.h"
#include "gmmgen/tuning/table.h"

namespace gmmgen::tuning {

// Where a table comes from: a folder of *.json files, or one table's text (a shipped table).
struct TableSource {
  std::string origin;  // for messages: the folder, or "shipped:<name>"
  std::filesystem::path dir;
  std::string_view text;  // used when dir is empty
};

// A table compiled into the library from runtime/tuning/<name>.json.
struct ShippedTable {
  std::string_view name;
  std::string_view text;
};
std::span<const ShippedTable> shipped_tables();

// The sources above for a runtime whose disk cache is at cache_root ($GMMGEN_TUNING_DIR is
// read now).
std::vector<TableSource> default_sources(const std::filesystem::path& cache_root);

class Tables final : public TuningSource {
 public:
  using Log = std::function<void(const std::string&)>;
  // `info` receives what GMMGEN_LOG reports (when `log` is set): tables read, and once per
  // problem and bucket the entry a call used or that none matched. `warn` receives unreadable
  // tables and entries (default: "gmm-gen: warning: ..." on stderr).
  Tables(std::vector<TableSource> sources, bool log, Log info, Log warn = {});

  std::optional<TilingChoice> lookup(const KernelSpec& problem,
                                     double rows_per_group) const override;

  // Entries read (reads the tables if not done yet).
  size_t size() const;

 private:
  struct Indexed {
    Tiling tiling;
    std::optional<Isa> isa;
    Bucket bucket;
    std::string where;  // "<file> entry <i> (...)", for the log
  };
  void load() const;
  void read_table(std::string_view text, const std::string& origin) const;
  void once(const std::string& key, const std::string& message) const;

  std::vector<TableSource> sources_;
  bool log_;
  Log info_, warn_;
  mutable std::once_flag loaded_;
  mutable size_t count_ = 0;
  // Keyed by problem_key(): KernelSpec's own == on specs whose tiling and ISA family are reset
  // compares exactly the problem (and the target), in a few nanoseconds, where SameProblem's walk
  // of the field table costs ~70 ns a call. A field that is neither problem nor reset here can
  // only make a lookup miss (the heuristic then), never match another problem.
  struct KeyHash {
    size_t operator()(const KernelSpec& s) const;
  };
  static KernelSpec problem_key(KernelSpec s);
  mutable std::unordered_map<KernelSpec, std::vector<Indexed>, KeyHash> index_;
  mutable std::mutex log_mutex_;
  mutable std::unordered_set<std::string> logged_;
};

}  // namespace gmmgen::tuning
