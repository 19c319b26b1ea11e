// Quantized kernels (docs/quantization.md) reject bad scales and code layouts with a message naming
// the argument and the rule, and leave the output untouched; scales a call does not read are never
// looked at (a NaN there neither fails the call nor leaks into other groups).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "gmmgen/codes.h"
#include "gmmgen/platform.hpp"
#include "gmmgen/quantize.hpp"
#include "kernels_under_test.h"

namespace gmmgen::testing {
namespace {

const KernelUnderTest& find_quant(const std::string& spec_prefix) {
  static const auto kernels = all_kernels();
  for (const auto& k : kernels)
    if (std::string(k.fns->info()->spec).rfind(spec_prefix, 0) == 0 && k.spec.isa == Isa::kNative)
      return k;
  throw std::logic_error("no kernel under test has spec " + spec_prefix);
}

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Valid arguments for a quantized gmm or tgmm kernel with m rows, split between the first two
// local groups: random codes (bytes), every scale 0.5, f32 output poisoned before the call.
struct QuantFixture {
  const KernelUnderTest& k;
  int64_t m;
  std::vector<uint8_t> lhs, rhs;
  std::vector<float> lhs_scale, rhs_scale, out;
  std::vector<int32_t> sizes;
  gmmgen_args a{};

  QuantFixture(const KernelUnderTest& kernel, int64_t rows) : k(kernel), m(rows) {
    const KernelSpec& s = k.spec;
    const bool tgmm = s.op == Op::kTgmm;
    // Generous buffers: every operand and scale array fits in these sizes whatever its layout.
    const int64_t big = (m + 1) * (s.k + 1) + s.g_local * (s.k + 1) * (s.n + 1);
    lhs.assign(size_t(big), 0);
    rhs.assign(size_t(big), 0);
    uint32_t x = 12345;
    for (auto* v : {&lhs, &rhs})
      for (auto& b : *v) b = uint8_t((x = x * 1103515245u + 12345u) >> 24) & 0x33;  // small codes
    lhs_scale.assign(size_t(big), 0.5f);
    rhs_scale.assign(size_t(big), 0.5f);
    out.assign(size_t(tgmm ? s.g_local * s.k * s.n : m * s.n), kNaN);
    sizes.assign(size_t(s.g), 0);
    sizes[0] = int32_t(m / 2);
    if (s.g_local > 1) sizes[1] = int32_t(m - m / 2);
    a.abi_version = GMMGEN_ABI_VERSION;
    a.m = m;
    a.lhs = lhs.data(), a.rhs = rhs.data();
    a.group_sizes = sizes.data();
    a.out = out.data();
    if (s.lhs_quant.kind != QuantKind::kNone) a.lhs_scale = lhs_scale.data();
    if (s.rhs_quant.kind != QuantKind::kNone) a.rhs_scale = rhs_scale.data();
  }

  int run(std::string* message = nullptr) {
    char err[512] = {0};
    const int rc = k.fns->run(&a, err, sizeof err);
    if (message) *message = err;
    return rc;
  }

  void expect_rejected(const std::string& needle) {
    const std::vector<float> before = out;
    std::string err;
    EXPECT_EQ(GMMGEN_ERR_INVALID_ARGUMENT, run(&err)) << err;
    EXPECT_NE(err.find(needle), std::string::npos)
        << "message '" << err << "' does not mention '" << needle << "'";
    EXPECT_EQ(0, std::memcmp(before.data(), out.data(), out.size() * sizeof(float)))
        << "output was written";
  }

  // Every output element is finite (nothing poisoned leaked, every element written).
  void expect_all_finite() {
    for (size_t i = 0; i < out.size(); ++i)
      ASSERT_TRUE(std::isfinite(out[i])) << k.name << ": out[" << i << "] = " << out[i];
  }
};

// i8 x i8, channel x channel: lhs_scale [M], rhs_scale [G_local, N].
const char* kI8Channel = "op=gmm,lhs=i8,rhs=i8,out=f32,lhs_quant=channel,rhs_quant=channel,k=200";

TEST(QuantBadInput, ValidCallRunsAndWritesEveryElement) {
  QuantFixture f(find_quant(kI8Channel), 20);
  std::string err;
  ASSERT_EQ(GMMGEN_OK, f.run(&err)) << err;
  f.expect_all_finite();
}

TEST(QuantBadInput, MissingMisalignedOrShortScalesAreRejected) {
  const auto& k = find_quant(kI8Channel);
  {
    QuantFixture f(k, 20);
    f.a.lhs_scale = nullptr;
    f.expect_rejected("lhs_scale is NULL: this kernel's operand is quantized");
  }
  {
    QuantFixture f(k, 20);
    f.a.rhs_scale =
        reinterpret_cast<const float*>(reinterpret_cast<const char*>(f.a.rhs_scale) + 2);
    f.expect_rejected("rhs_scale is not 4-byte aligned");
  }
  {
    QuantFixture f(k, 20);
    f.a.rhs_scale_ld = 10;  // rows of N = 66 scales
    f.expect_rejected("rhs_scale_ld=10 is below the row length 66");
  }
}

TEST(QuantBadInput, ScaleThatIsReadMustBeFiniteAndPositive) {
  const auto& k = find_quant(kI8Channel);
  for (float bad : {kNaN, std::numeric_limits<float>::infinity(), 0.0f, -0.5f}) {
    {
      QuantFixture f(k, 20);
      f.lhs_scale[3] = bad;  // row 3 is in group 0
      f.expect_rejected("lhs_scale[3]=");
      f.expect_rejected("a scale must be finite and > 0");
    }
    {
      QuantFixture f(k, 20);
      f.rhs_scale[1 * 66 + 5] = bad;  // expert 1, column 5: expert 1 has rows
      f.expect_rejected("rhs_scale[71]=");
    }
  }
}

TEST(QuantBadInput, ScalesThatAreNotReadNeitherFailNorLeak) {
  const auto& k = find_quant(kI8Channel);
  QuantFixture f(k, 24);
  f.sizes[1] = 0;   // expert 1 has no rows: its scales are not read
  f.sizes[0] = 20;  // rows 20..23 belong to no group: their lhs scales are not read
  for (int64_t n = 0; n < 66; ++n) f.rhs_scale[1 * 66 + n] = kNaN;
  for (int64_t r = 20; r < 24; ++r) f.lhs_scale[r] = kNaN;
  std::string err;
  ASSERT_EQ(GMMGEN_OK, f.run(&err)) << err;
  f.expect_all_finite();
}

// Every scale a call reads is checked wherever it sits in its row (the check scans whole rows
// at a time and must still name the first bad one), and the padding of rows `ld` apart is not
// read: each gmm kernel with block scales (on either operand) and an f32 output.
TEST(QuantBadInput, EveryScaleThatIsReadIsCheckedAndNoOtherIs) {
  int kernels = 0;
  for (const auto& k : all_kernels()) {
    const KernelSpec& s = k.spec;
    // (The fixture's output is f32, plain.)
    if (s.op != Op::kGmm || !host_supports(s.isa) || s.out != DType::kF32 ||
        s.out_mode != OutMode::kPlain ||
        (s.lhs_quant.kind != QuantKind::kBlock && s.rhs_quant.kind != QuantKind::kBlock))
      continue;
    ++kernels;
    SCOPED_TRACE(k.name);
    const int64_t m = 24, active = s.g_local > 1 ? m : m / 2;  // groups 0 and 1 hold the rows
    // The scales read, laid out as the quantizers store them (gmmgen/quantize.hpp): lhs [active,
    // K] along its columns; per local group with rows, rhs [K, N] along its rows or [N, K] along
    // its columns (one tensor scale serves every group). Block rows are `pad` scales apart.
    const ScaleShape lr = scale_shape(s.lhs_quant, QuantAxis::kCols, active, s.k);
    const ScaleShape rr = s.transpose_rhs ? scale_shape(s.rhs_quant, QuantAxis::kCols, s.n, s.k)
                                          : scale_shape(s.rhs_quant, QuantAxis::kRows, s.k, s.n);
    const int64_t rhs_groups =
        s.rhs_quant.kind == QuantKind::kTensor ? 1 : std::min<int64_t>(2, s.g_local);
    const int64_t pad = 3;
    const int64_t lld = lr.cols + (s.lhs_quant.kind == QuantKind::kBlock ? pad : 0);
    const int64_t rld = rr.cols + (s.rhs_quant.kind == QuantKind::kBlock ? pad : 0);
    QuantFixture f(k, m);
    // Every scale NaN, then the ones that are read 0.5: a call that runs read only those.
    std::fill(f.lhs_scale.begin(), f.lhs_scale.end(), kNaN);
    std::fill(f.rhs_scale.begin(), f.rhs_scale.end(), kNaN);
    if (s.lhs_quant.kind == QuantKind::kBlock) f.a.lhs_scale_ld = lld;
    if (s.rhs_quant.kind == QuantKind::kBlock) f.a.rhs_scale_ld = rld;
    std::vector<int64_t> lhs_at, rhs_at;
    for (int64_t r = 0; r < lr.rows; ++r)
      for (int64_t c = 0; c < lr.cols; ++c) lhs_at.push_back(r * lld + c);
    for (int64_t j = 0; j < rhs_groups; ++j)
      for (int64_t r = 0; r < rr.rows; ++r)
        for (int64_t c = 0; c < rr.cols; ++c) rhs_at.push_back((j * rr.rows + r) * rld + c);
    for (int64_t i : lhs_at) f.lhs_scale[size_t(i)] = 0.5f;
    for (int64_t i : rhs_at) f.rhs_scale[size_t(i)] = 0.5f;
    std::string err;
    ASSERT_EQ(GMMGEN_OK, f.run(&err)) << err;
    f.expect_all_finite();
    std::fill(f.out.begin(), f.out.end(), kNaN);
    for (auto [name, scales, at] : {std::tuple{"lhs_scale[", &f.lhs_scale, &lhs_at},
                                    std::tuple{"rhs_scale[", &f.rhs_scale, &rhs_at}}) {
      for (int64_t i : *at) {
        (*scales)[size_t(i)] = i % 2 ? -0.0f : std::numeric_limits<float>::infinity();
        f.expect_rejected(name + std::to_string(i) + "]=");
        (*scales)[size_t(i)] = 0.5f;
      }
    }
  }
  // smoke_quant.json holds two (lhs and rhs blocks; rhs blocks alone), the ci kernel set more.
  EXPECT_GE(kernels, 2) << "gmm kernels with block scales and a plain f32 output";
}

TEST(QuantBadInput, ScalesOnAnUnscaledOperandAreRejected) {
  // f8e4m3 x f8e5m2 with no scales: the fp8 values stand alone.
  QuantFixture f(find_quant("op=gmm,lhs=f8e4m3,rhs=f8e5m2,out=f32,lhs_quant=none,rhs_quant=none"),
                 8);
  f.a.rhs_scale = f.rhs_scale.data();
  f.expect_rejected("rhs_scale must be NULL: this kernel's operand has no scales");
}

TEST(QuantBadInput, SubByteRowsMustStartOnAByte) {
  // i4 x i4, rhs [G_local, N, K] (transposed): two codes per byte along K.
  QuantFixture f(find_quant("op=gmm,lhs=i4,rhs=i4,out=f16"), 8);
  f.a.lhs_ld = 203;
  f.expect_rejected("lhs_ld=203 must be a multiple of 2 (codes per byte)");
  f.a.lhs_ld = 0;
  f.a.rhs_ld = 205;
  f.expect_rejected("rhs_ld=205 must be a multiple of 2 (codes per byte)");
  // t2: four per byte.
  QuantFixture t(find_quant("op=gmm,lhs=f32,rhs=t2"), 8);
  t.a.rhs_ld = 70;  // a multiple of 2, not of 4
  t.expect_rejected("rhs_ld=70 must be a multiple of 4 (codes per byte)");
}

TEST(QuantBadInput, OutputMustNotOverlapTheScales) {
  QuantFixture f(find_quant(kI8Channel), 20);
  f.a.rhs_scale = f.out.data() + 8;
  f.rhs_scale.clear();
  std::fill(f.out.begin(), f.out.end(), 0.5f);  // valid scales, inside out
  f.expect_rejected("out overlaps rhs_scale");
}

TEST(QuantBadInput, TgmmChecksOnlyTheRowBlocksOfActiveGroups) {
  // i8 x i8 tgmm, block:32 on both operands: scales [ceil(M/32), K] and [ceil(M/32), N].
  const auto& k = find_quant("op=tgmm,lhs=i8,rhs=i8,out=f32,lhs_quant=block:32,rhs_quant=block:32");
  {
    QuantFixture f(k, 100);
    f.sizes.assign(size_t(k.spec.g), 0);
    f.sizes[0] = 40;  // rows 0..39: blocks 0 and 1; rows 40..99 belong to no group
    for (int64_t i = 2 * k.spec.k; i < 4 * k.spec.k; ++i) f.lhs_scale[size_t(i)] = kNaN;
    std::string err;
    ASSERT_EQ(GMMGEN_OK, f.run(&err)) << err;
    f.expect_all_finite();
  }
  {
    QuantFixture f(k, 100);
    f.sizes.assign(size_t(k.spec.g), 0);
    f.sizes[0] = 40;
    f.rhs_scale[size_t(1 * k.spec.n + 3)] = -1.0f;  // block 1 holds rows 32..39 of group 0
    f.expect_rejected("rhs_scale[" + std::to_string(k.spec.n + 3) + "]=-1");
  }
}

}  // namespace
}  // namespace gmmgen::testing
