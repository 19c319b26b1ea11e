// The candidate space of a sweep: parsing a space and a family list, and the variants to try.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <set>
#include <tuple>

#include "gmmgen/errors.hpp"
#include "gmmgen/heuristics.h"
#include "gmmgen/platform.hpp"
#include "gmmgen/target.h"
#include "gmmgen/tune/tune.h"

namespace gmmgen::tune {
namespace {

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

}  // namespace

Space parse_space(const std::string& text, const std::string& option) {
  Space s;
  s.given = true;
  const std::string rule = "KEY=V1,V2,... items separated by ';', KEY one of tm, tk, tn";
  for (const std::string& item : split(text, ';')) {
    const size_t eq = item.find('=');
    if (eq == std::string::npos)
      throw InvalidArgument(option + " '" + text + "': '" + item + "' is not " + rule);
    const std::string key = item.substr(0, eq);
    std::vector<int64_t>* dim = key == "tm"   ? &s.tm
                                : key == "tk" ? &s.tk
                                : key == "tn" ? &s.tn
                                              : nullptr;
    if (!dim)
      throw InvalidArgument(option + " '" + text + "': key '" + key + "' is not one of tm, tk, tn");
    if (!dim->empty())
      throw InvalidArgument(option + " '" + text + "': " + key + " is given twice");
    for (const std::string& v : split(item.substr(eq + 1), ',')) {
      char* end = nullptr;
      errno = 0;
      const long long x = v.empty() ? 0 : std::strtoll(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || errno != 0 || x < 1 || x > kMaxTile)
        throw InvalidArgument(option + " '" + text + "': " + key + " value '" + v +
                              "' is not an integer in [1, " + std::to_string(kMaxTile) + "]");
      if (std::find(dim->begin(), dim->end(), x) == dim->end()) dim->push_back(x);
    }
  }
  return s;
}

namespace {

// The default values of a tile dimension for a family: powers of two around the heuristic's
// choices; tn in whole register tiles (multiples of the family's nr columns).
std::vector<int64_t> default_values(char dim, const IsaFamily& f) {
  if (dim == 'm') return {16, 32, 64, 128, 256, 512};
  if (dim == 'k') return {32, 64, 128, 256, 512};
  std::vector<int64_t> out;
  for (int64_t v = f.nr; v <= 256; v *= 2) out.push_back(v);
  return out;
}

}  // namespace

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

std::vector<Isa> parse_isa_list(const std::string& text, const std::string& option) {
  std::vector<Isa> out;
  for (const std::string& item : split(text, ',')) {
    Isa isa;
    try {
      isa = parse_isa(item, option);
    } catch (const SpecError& e) {
      throw InvalidArgument(e.what());
    }
    if (!host_supports(isa)) {
      std::string runs;
      for (const IsaFamily& f : isa_families())
        if (host_supports(f.isa)) runs += ", " + std::string(f.name);
      throw InvalidArgument(option + " " + item + ": this CPU cannot run it (it runs native" +
                            runs + ")");
    }
    if (std::find(out.begin(), out.end(), isa) == out.end()) out.push_back(isa);
  }
  return out;
}

std::string tiling_text(const Tiling& t) {
  return "tm=" + std::to_string(t.tm) + ",tk=" + std::to_string(t.tk) +
         ",tn=" + std::to_string(t.tn);
}

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

Sweep plan_sweep(const KernelSpec& spec_in, const bench::Workload& work, const Space& space,
                 const std::vector<Isa>& isas, int64_t l2) {
  KernelSpec spec = spec_in;
  spec.tiling = default_tiling(spec);  // the spec's own tiling is swept, not used
  const std::string text = tuning::problem_text(spec);
  if (!target_of(spec.target).caps().runtime_runs)
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
  if (int64_t(work.group_sizes.size()) != spec.g)
    throw InvalidArgument("spec " + text + ": " + std::to_string(work.group_sizes.size()) +
                          " group sizes for g=" + std::to_string(spec.g));
  Sweep sw;
  sw.problem = spec;
  sw.isas = isas.empty() ? std::vector<Isa>{spec.isa} : isas;
  sw.work = work;
  sw.rows_per_group = tuning::rows_per_group(work.group_sizes, 0, spec.g);
  sw.cands = candidates(spec, sw.rows_per_group, space, sw.isas, l2);
  return sw;
}

}  // namespace gmmgen::tune
