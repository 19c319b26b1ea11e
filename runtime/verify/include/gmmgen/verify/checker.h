// Checks a compiled kernel (gmm or tgmm) against the float64 reference on random ragged inputs.
// Used by `gmm-gen verify` and by the test suites.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gmmgen/kernel_abi.h"
#include "gmmgen/spec.h"
#include "gmmgen/verify/distributions.h"

namespace gmmgen {

// One run of a kernel. Operands are stored exactly as the spec lays them out (tgmm: lhs [K, M]
// with lhs_layout=km, out [G_local, N, K] with transpose_rhs); padding past each stored row
// holds NaN. Rows of lhs (and of tgmm's rhs) outside the active groups hold NaN: a kernel that
// reads them poisons its result. Outputs are NaN before the run.
struct CheckCase {
  std::string label;
  int64_t m = 0;
  std::vector<int32_t> group_sizes;  // [G]; sum may be below m
  int32_t group_offset = 0;
  // One NaN inside an active group; the reference says where it must (and must not) appear.
  // gmm: in one local expert's weights (rhs); tgmm: in one row of one non-empty active group,
  // in lhs or in rhs.
  bool nan_expert = false;
  bool in_place = true;        // existing modes: existing_out == out (else a separate buffer)
  int64_t lhs_pad = 0;         // lhs_ld = row length + lhs_pad (0 pad: passed as 0, "packed")
  int64_t rhs_pad = 0;         // rhs_ld = row length + rhs_pad (likewise)
  int64_t out_pad = 0;         // out_ld = row length + out_pad (padding must stay untouched)
  bool reverse_items = false;  // run work items last to first, in uneven chunks
  // Small-integer inputs: every f32 partial sum is exact, so each output must equal the
  // reference rounded once to the output dtype (nearest even), bit for bit.
  bool exact_inputs = false;
  uint64_t seed = 1;
};

struct CheckResult {
  bool ok = true;
  double worst_rel_error = 0.0;    // max |got - ref| / max(|ref|, sum|lhs*rhs|), active elements
  double worst_bound_ratio = 0.0;  // max |got - ref| / error bound; <= 1 to pass
  int64_t elements = 0;            // output elements compared
  uint64_t output_digest = 0;      // FNV-1a of the output buffer's bytes (padding included)
  std::string failure;             // first failure, empty when ok
};

// Runs the kernel on the case and compares every output element (and the padding) with the
// reference. Elements that take no product (gmm: rows outside the active groups; tgmm: empty
// groups) must equal the reference exactly. Error bound of the others: one rounding to the
// output dtype plus f32 summation of `terms` products, u_out*|ref| + (terms+2)*2^-24*sum|a*b|
// (+|existing_out| with accumulate), where terms is K for gmm and the group's row count for tgmm.
CheckResult check_kernel(const gmmgen_kernel_entry& fns, const KernelSpec& spec,
                         const CheckCase& c);

// A spread of cases for one spec: several M (0, 1, below/above a tile), every distribution,
// sum(group_sizes) < M, sharded offsets, strided views, NaNs, exact inputs, both item orders.
std::vector<CheckCase> standard_cases(const KernelSpec& spec, uint64_t seed);

}  // namespace gmmgen
