#include "dispatch/registry.h"

#include <algorithm>
#include <mutex>
#include <tuple>

#include "gmmgen/errors.hpp"
#include "gmmgen/heuristics.h"
#include "gmmgen/platform.hpp"

namespace gmmgen {

void Registry::add(const gmmgen_kernel_entry* table, int32_t count,
                   std::vector<std::string>* skipped) {
  if (!table && count > 0) throw InvalidArgument("register_kernels: table is NULL");
  if (count < 0) throw InvalidArgument("register_kernels: count=" + std::to_string(count) + " < 0");
  std::vector<Entry> added;
  for (int32_t i = 0; i < count; ++i) {
    const std::string at = "register_kernels: table[" + std::to_string(i) + "]";
    if (!table[i].info) throw InvalidArgument(at + ".info is NULL");
#define GMMGEN_CHECK_(arg, ret, field, suffix, params) \
  if (!table[i].field) throw InvalidArgument(at + "." #field " is NULL");
    GMMGEN_ENTRY_POINTS(GMMGEN_CHECK_, ~)
#undef GMMGEN_CHECK_
    const gmmgen_kernel_info* info = table[i].info();
    if (!info) throw InvalidArgument(at + ".info() returned NULL");
    if (info->abi_version != GMMGEN_ABI_VERSION)
      throw InvalidArgument(at + " has ABI version " + std::to_string(info->abi_version) +
                            ", expected " + std::to_string(GMMGEN_ABI_VERSION));
    // The strings are used later (messages, near misses): a NULL one is refused here.
    for (const auto& [field, value] :
         {std::pair{"name", info->name}, {"spec", info->spec}, {"hash", info->hash}})
      if (!value) throw InvalidArgument(at + ".info()->" + field + " is NULL");
    KernelSpec spec;
    try {
      spec = parse_text(info->spec);
    } catch (const SpecError& e) {
      throw InvalidArgument(at + ": its spec does not parse: " + e.what());
    }
    if (!host_supports(spec.isa)) {
      if (skipped) skipped->push_back(info->name);
      continue;
    }
    added.push_back({spec, table[i]});
  }
  std::unique_lock<std::shared_mutex> lock(mutex_);
  for (auto& e : added) {
    by_problem_.emplace(e.spec, entries_.size());
    entries_.push_back(std::move(e));
  }
}

const gmmgen_kernel_entry* Registry::exact(const KernelSpec& spec) const {
  std::shared_lock<std::shared_mutex> lock(mutex_);
  auto [lo, hi] = by_problem_.equal_range(spec);
  for (auto it = lo; it != hi; ++it)
    if (entries_[it->second].spec == spec) return &entries_[it->second].fns;
  return nullptr;
}

namespace {
// Rank of an ISA family, best first (native: the host's best, which it was compiled for).
size_t family_rank(Isa isa) {
  const Isa resolved = isa == Isa::kNative ? host_isa() : isa;
  const auto families = isa_families();
  for (size_t i = 0; i < families.size(); ++i)
    if (families[i].isa == resolved) return i;
  return families.size();
}
}  // namespace

// Among the kernels of a problem: the best ISA family this CPU runs (a bundle may carry several
// families of one spec), then the requested tiling, then the first registered.
const gmmgen_kernel_entry* Registry::for_problem(const KernelSpec& spec) const {
  std::shared_lock<std::shared_mutex> lock(mutex_);
  auto [lo, hi] = by_problem_.equal_range(spec);
  const Entry* best = nullptr;
  auto key = [&](const Entry& e, size_t index) {
    return std::tuple(family_rank(e.spec.isa), e.spec.tiling == spec.tiling ? 0 : 1, index);
  };
  size_t best_index = 0;
  for (auto it = lo; it != hi; ++it) {
    const Entry& e = entries_[it->second];
    if (!best || key(e, it->second) < key(*best, best_index)) best = &e, best_index = it->second;
  }
  return best ? &best->fns : nullptr;
}

std::vector<std::string> Registry::near_misses(const KernelSpec& spec, size_t max) const {
  std::shared_lock<std::shared_mutex> lock(mutex_);
  std::vector<std::pair<size_t, std::string>> scored;
  for (const Entry& e : entries_) {
    std::string differs;
    size_t count = 0;
    for (const SpecField& f : spec_fields()) {
      if (f.role != FieldRole::kProblem || field_text(f, e.spec) == field_text(f, spec)) continue;
      differs += (count++ ? ", " : "") + std::string(f.key) + "=" + field_text(f, e.spec);
    }
    scored.emplace_back(count, std::string(e.fns.info()->name) + " (differs in " + differs + ")");
  }
  std::stable_sort(scored.begin(), scored.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::string> out;
  for (size_t i = 0; i < scored.size() && i < max; ++i) out.push_back(scored[i].second);
  return out;
}

}  // namespace gmmgen
