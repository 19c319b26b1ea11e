// The CSV report of a sweep: one row per variant that ran.
#include <cstdio>

#include "format.h"
#include "gmmgen/tune/report.h"

namespace gmmgen::tune {
namespace {

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

}  // namespace

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

}  // namespace gmmgen::tune
