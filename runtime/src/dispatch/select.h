// Choosing a call's tiling: the caller's override, else the tuning table that covers the
// problem, else the heuristic (docs/runtime.md).
#pragma once

#include <optional>

#include "gmmgen/runtime.hpp"
#include "gmmgen/spec.h"

namespace gmmgen {

// Where tuned tilings come from (tuning tables; docs/tuning.md).
class TuningSource {
 public:
  virtual ~TuningSource() = default;
  // A tiling for `problem` (a spec whose tiling is ignored) at this many rows per active group.
  virtual std::optional<TilingChoice> lookup(const KernelSpec& problem,
                                             double rows_per_group) const = 0;
};

TilingChoice select_tiling(const KernelSpec& problem, const std::optional<Tiling>& override,
                           const TuningSource* tables, double rows_per_group);

// Puts a choice into the call's spec: its tiling, and a table entry's ISA family if it has one.
void apply_choice(KernelSpec& spec, const TilingChoice& choice);

}  // namespace gmmgen
