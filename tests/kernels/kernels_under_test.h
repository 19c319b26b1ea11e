// The kernels the tests exercise: the checked-in default set (generated/), and the edge-case
// set and the dtype matrix emitted at build time from tests/specs/, all linked into the tests.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "default_kernels.h"
#include "dtype_matrix.h"
#include "gmmgen/heuristics.h"
#include "gmmgen/kernel_abi.h"
#include "gmmgen/naming.h"
#include "gmmgen/spec.h"
#include "quant_matrix.h"
#include "test_kernels.h"
#include "test_kernels_amx.h"
#include "test_kernels_avx2.h"
#include "test_kernels_avx512.h"
#include "test_kernels_avx512bf16.h"
#include "test_kernels_generic.h"

namespace gmmgen::testing {

struct KernelUnderTest {
  const gmmgen_kernel_entry* fns;
  KernelSpec spec;
  std::string name;
};

inline std::vector<KernelUnderTest> all_kernels() {
  std::vector<KernelUnderTest> out;
  auto add = [&](const gmmgen_kernel_entry* table, int32_t count) {
    for (int32_t i = 0; i < count; ++i)
      out.push_back({&table[i], parse_text(table[i].info()->spec), table[i].info()->name});
  };
  add(default_kernels_kernels, default_kernels_kernel_count);
  add(test_kernels_kernels, test_kernels_kernel_count);
  add(dtype_matrix_kernels, dtype_matrix_kernel_count);
  add(quant_matrix_kernels, quant_matrix_kernel_count);
  add(test_kernels_amx_kernels, test_kernels_amx_kernel_count);
  add(test_kernels_avx512bf16_kernels, test_kernels_avx512bf16_kernel_count);
  add(test_kernels_avx512_kernels, test_kernels_avx512_kernel_count);
  add(test_kernels_avx2_kernels, test_kernels_avx2_kernel_count);
  add(test_kernels_generic_kernels, test_kernels_generic_kernel_count);
  return out;
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
