// Reports of finished sweeps (gmmgen/tune/tune.h): a CSV of every variant that ran and an SVG of
// GFLOP/s heatmaps, as `gmm-gen tune --csv/--svg` writes them.
#pragma once

#include <string>
#include <vector>

#include "gmmgen/tune/tune.h"

namespace gmmgen::tune {

// One row per variant that ran (RFC 4180 quoting): problem, m, dist, rows_per_group, isa, tm, tk,
// tn, heuristic, state, gflops, ms, speedup (over the heuristic's tiling), compile_s, cached,
// failure.
std::string csv_text(const std::vector<Sweep>& sweeps);

// One row of panels per problem and ISA family, one panel per tk: a heatmap of GFLOP/s over tm
// (rows) and tn (columns) on the problem's colour scale (bar at the right), the fastest variant
// outlined and starred, the heuristic's tiling dashed, failures crossed, tilings not run blank.
std::string svg_text(const std::vector<Sweep>& sweeps);

}  // namespace gmmgen::tune
