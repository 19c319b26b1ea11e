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
//
// Quantized operands (docs/quantization.md) hold random valid codes (i8 [-127, 127], i4 [-7, 7], t2
// {-1, 0, +1}, nf4 0..15; fp8 finite codes, mostly the nearest to uniform values, sometimes any
// code, the largest magnitudes included), sub-byte ones packed along the stored row, and f32
// scales laid out as kernel_abi.h's "Scales" says: random positive, 2^e * [1, 2) /
// 2^ceil(log2 qmax) with e in [-3, 3], so that decoded values stay within about +-16; a block of
// codes is now and then all zero. The reference gets x̂ = decode(code) * scale, exact in double.
// Padding of code rows holds non-zero garbage codes (fp8: NaN codes), padding of scale rows NaN.
// Rows outside the active groups cannot be read unnoticed: fp8 rows hold NaN codes, and the
// scales that only such rows use (gmm lhs channel and block scales; tgmm block scales whose
// block of global rows holds no active row) are NaN.
struct CheckCase {
  std::string label;
  int64_t m = 0;
  std::vector<int32_t> group_sizes;  // [G]; sum may be below m
  int32_t group_offset = 0;
  // One NaN inside an active group; the reference says where it must (and must not) appear.
  // gmm: in one local expert's weights (rhs: a NaN value or fp8 NaN code). When rhs has scales
  // per expert (channel, block), also NaN scales for a local expert whose group is empty, if one
  // is: a scale the call does not read must neither fail the call nor reach the output.
  // tgmm: in one row of one non-empty active group, in lhs or in rhs (an operand that can hold a
  // NaN: float or fp8; none when both are integer).
  bool nan_expert = false;
  bool in_place = true;  // existing modes: existing_out == out (else a separate buffer)
  // Leading dimensions: row length + pad, rounded up to whole bytes for sub-byte dtypes; passed
  // as 0 ("packed") when that is the packed length. The pads also pad the rows of 2-D scale
  // arrays (lhs_pad for lhs scales, rhs_pad for rhs scales).
  int64_t lhs_pad = 0;
  int64_t rhs_pad = 0;
  int64_t out_pad = 0;         // out_ld = row length + out_pad (padding must stay untouched)
  bool reverse_items = false;  // run work items last to first, in uneven chunks
  // Before the checked run, run the first work item on other values in the same buffers (lhs and
  // rhs each rotated by one byte; the outputs restored after): nothing a kernel keeps from one run
  // of items may reach the next.
  bool other_values_first = false;
  // Bytes past a 64-byte boundary where every operand, scale array and output starts (0, 16, 32
  // or 48; numpy's and malloc's large arrays start 16 past one).
  size_t misalign = 0;
  // Small-integer inputs: every f32 partial sum is exact, so each output must equal the
  // reference rounded once to the output dtype (nearest even), bit for bit. Quantized specs stay
  // exact: codes decode to integers in [-16, 16] and scales are powers of two in [1/4, 1], with
  // a narrower range when sums are long (T * 4^span <= 2^16 for T terms), so every partial sum
  // is a multiple of the smallest scale product below 2^24 of them; with T > 2^16 terms the case
  // is checked against the error bound instead.
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
// groups) must equal the reference exactly. Error bound of the others, with u = 2^-24 and
// S = sum|lhs*rhs| over the decoded, scaled values:
//   u_out*|ref| + (terms + c) * u * (S + |existing_out| when accumulating).
// Float operands: c = 2, terms = K (gmm) or the group's rows (tgmm): one rounding to the output
// dtype plus f32 summation of `terms` products.
// Quantized operands (docs/quantization.md): c = 4. The kernel sums each scale block's partial
// product P_b (L terms: L roundings) in f32 on the decoded codes, which are exact in f32, rounds
// s_lhs*s_rhs (1), and adds its product with P_b to the blocks before in one fused multiply-add
// (1 per block): at most L + blocks + 1 roundings, each of at most u*S. Blocks nest (powers of
// two), so L * blocks covers the terms: L + blocks <= terms + 1 for gmm, terms + 2 for tgmm (a
// group's rows may touch one block more than they fill), leaving at least one u*S for
// second-order terms.
// Integer x integer (i8, i4, t2 on both sides): P_b is exact (i32), so terms = the number of
// scale blocks along the contraction: P_b to f32, s_lhs*s_rhs and the scaling (1 each) and the
// outer sum (blocks - 1) make blocks + 2 roundings, "one scaling and one rounding" per block:
// gmm: ceil(K / SB), SB the smallest block_k of the block-scaled operands, 1 with tensor/channel
// scales only; tgmm: the blocks of SB global rows the group's rows touch, 1 without blocks.
CheckResult check_kernel(const gmmgen_kernel_entry& fns, const KernelSpec& spec,
                         const CheckCase& c);

// A spread of cases for one spec: several M (0, 1, below/above a tile), every distribution,
// sum(group_sizes) < M, sharded offsets, strided views, NaNs, exact inputs, both item orders;
// for tgmm with block scales, group boundaries inside scale blocks and blocks wholly outside the
// active groups.
std::vector<CheckCase> standard_cases(const KernelSpec& spec, uint64_t seed);

// The quick subset of standard_cases (verify --quick, the sanitizer build's kernel tests): most
// telling first, as many as fit in 2^28 generated operand elements (at least one): M=97 with
// random group sizes (partial tiles, rows past sum(group_sizes), strided lhs); M=97 skewed with
// empty groups (exact inputs); the largest M (several m-tiles), uniform; M=97 with many tiny and
// with uniform group sizes; M=1 -- each at every shard offset of a sharded kernel -- and, for
// tgmm with block scales, the scale-block cases. It drops M=0, M=tm-1, and the other
// distributions at M=1 and the largest M.
std::vector<CheckCase> quick_cases(const KernelSpec& spec, uint64_t seed);

}  // namespace gmmgen
