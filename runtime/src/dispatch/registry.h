// Kernels compiled into the program (bundles), keyed by problem: a compiled-in kernel serves
// any call whose problem it fits, whatever its tiling (unless the caller names a tiling).
#pragma once

#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "gmmgen/kernel_abi.h"
#include "gmmgen/spec.h"

namespace gmmgen {

class Registry {
 public:
  // Adds a bundle's table. Kernels whose ISA family this CPU cannot run are skipped (returned
  // in `skipped`). Throws InvalidArgument naming the entry for a NULL table, a NULL entry point,
  // an info() that returns NULL or NULL strings, a kernel of another ABI version, or one whose
  // spec does not parse; nothing is added then.
  void add(const gmmgen_kernel_entry* table, int32_t count, std::vector<std::string>* skipped);

  // The compiled-in kernel of exactly this spec (every field), or nullptr.
  const gmmgen_kernel_entry* exact(const KernelSpec& spec) const;
  // A compiled-in kernel for spec's problem: the one with spec's tiling if there is one, else
  // the first registered; nullptr if none.
  const gmmgen_kernel_entry* for_problem(const KernelSpec& spec) const;
  // Up to `max` compiled-in kernels closest to spec's problem, each as "name (differs in: ...)".
  std::vector<std::string> near_misses(const KernelSpec& spec, size_t max = 3) const;

 private:
  struct Entry {
    KernelSpec spec;
    gmmgen_kernel_entry fns;
  };
  mutable std::shared_mutex mutex_;
  std::vector<Entry> entries_;
  std::unordered_multimap<KernelSpec, size_t, ProblemHash, SameProblem> by_problem_;
};

}  // namespace gmmgen
