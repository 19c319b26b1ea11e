#include "dispatch/select.h"

#include "gmmgen/heuristics.h"
#include "gmmgen/platform.hpp"

namespace gmmgen {

TilingChoice select_tiling(const KernelSpec& problem, const std::optional<Tiling>& override,
                           const TuningSource* tables, double rows_per_group) {
  if (override) return {*override, TilingSource::kOverride, "", std::nullopt};
  if (tables)
    if (auto tuned = tables->lookup(problem, rows_per_group)) return *tuned;
  return {heuristic_tiling(problem, rows_per_group), TilingSource::kHeuristic, "", std::nullopt};
}

std::string to_string(const TilingChoice& c) {
  switch (c.source) {
    case TilingSource::kOverride:
      return "override";
    case TilingSource::kTable:
      return "table " + std::string(c.entry);
    case TilingSource::kHeuristic:
      break;
  }
  return "heuristic";
}

void apply_choice(KernelSpec& spec, const TilingChoice& choice) {
  spec.tiling = choice.tiling;
  if (choice.isa) spec.isa = *choice.isa;
}

}  // namespace gmmgen
