// The kernels the tests exercise: the bundles linked into the tests (tests/specs/CMakeLists.txt:
// the checked-in default set and the sets emitted at build time from tests/specs/, as many as
// GMMGEN_TEST_KERNELS asks for).
#pragma once

#include <functional>
#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "gmmgen/heuristics.h"
#include "gmmgen/kernel_abi.h"
#include "gmmgen/naming.h"
#include "gmmgen/platform.hpp"
#include "gmmgen/spec.h"
#include "test_bundles.h"

namespace gmmgen::testing {

struct KernelUnderTest {
  const gmmgen_kernel_entry* fns;
  KernelSpec spec;
  std::string name;
};

// The kernels of one bundle's table.
inline std::vector<KernelUnderTest> bundle_kernels(const gmmgen_kernel_entry* table,
                                                   int32_t count) {
  std::vector<KernelUnderTest> out;
  for (int32_t i = 0; i < count; ++i)
    out.push_back({&table[i], parse_text(table[i].info()->spec), table[i].info()->name});
  return out;
}

// Every kernel of every linked bundle.
inline std::vector<KernelUnderTest> all_kernels() {
  std::vector<KernelUnderTest> out;
#define GMMGEN_ADD_BUNDLE(b) \
  for (auto& k : bundle_kernels(b##_kernels, b##_kernel_count)) out.push_back(std::move(k));
  GMMGEN_TEST_BUNDLES(GMMGEN_ADD_BUNDLE)
#undef GMMGEN_ADD_BUNDLE
  return out;
}

// The first kernel under test with a property (std::logic_error if none has it).
inline const KernelUnderTest& find_kernel(const std::function<bool(const KernelSpec&)>& pred) {
  static const auto kernels = all_kernels();
  for (const auto& k : kernels)
    if (pred(k.spec)) return k;
  throw std::logic_error("no kernel under test has the property");
}

// Kernels of an ISA family this CPU lacks are compiled but not run.
#define GMMGEN_SKIP_UNLESS_RUNNABLE(k) \
  if (!host_supports((k).spec.isa))    \
  GTEST_SKIP() << "this CPU cannot run isa=" << to_string((k).spec.isa) << " (" << (k).name << ")"

inline std::string test_name(const KernelUnderTest& k) {
  return k.name;
}

// GoogleTest prints parameters with this (instead of a byte dump).
inline void PrintTo(const KernelUnderTest& k, std::ostream* os) {
  *os << k.name;
}

}  // namespace gmmgen::testing
