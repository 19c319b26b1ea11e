// The checker on quantized specs (docs/quantization.md), without generated kernels: a plain C++
// kernel written here from the ABI's layouts ("Scales" in kernel_abi.h) must pass check_kernel for
// every kind of quantized spec, and the same kernel with one deliberate bug must fail it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "gmmgen/codes.h"
#include "gmmgen/verify/checker.h"
#include "gmmgen/verify/numeric.h"

namespace gmmgen {
namespace {

enum class Bug {
  kNone,
  kNextBlockScale,       // rhs block scales: the scale of the next block along K
  kHighNibbleFirst,      // sub-byte codes: element 2j read from the high nibble (t2: reversed)
  kLocalRowBlocks,       // tgmm: blocks counted from the group's first row, not global rows
  kWholeBlocks,          // tgmm: sums every row of a touched block, ignoring group boundaries
  kTransposedRhsScales,  // transpose_rhs: reads rhs scales in the non-transposed layout
  kChecksAllScales,      // _plan checks every scale, also those of rows and experts it skips
  kBf16Sums,             // f32 model: partial products rounded to bf16 after every term
  kOneUlpHigh,           // every computed output one unit in the last place too high
};

// The kernel the entry points below run: plain C functions cannot carry it.
struct NaiveKernel {
  KernelSpec spec;
  Bug bug = Bug::kNone;
  // false: the exact sum in double, rounded once to the output dtype. true: docs/quantization.md's
  // f32 computation (each scale block's P_b in f32, or exact i32 for integer x integer; scaled by
  // f32(s_lhs * s_rhs) and summed in f32), the worst summation order (one term after another).
  bool f32_model = false;
};
NaiveKernel g_kernel;

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// Element i of a buffer of dtype d: the decoded code, or the float value.
double element(DType d, const void* base, int64_t i) {
  if (!codes::is_quantized(d)) return load_element(d, base, i);
  const int bits = bits_of(d);
  if (bits < 8 && g_kernel.bug == Bug::kHighNibbleFirst) i ^= 8 / bits - 1;
  return codes::decode(d, codes::get_code(base, i, bits));
}

// A leading dimension as the ABI reads it: 0 is the row length rounded up to whole bytes.
int64_t resolve_ld(int64_t ld, int64_t row_length, DType d) {
  const int64_t per = codes::is_quantized(d) ? codes::elements_per_byte(d) : 1;
  return ld ? ld : ceil_div(row_length, per) * per;
}

// The smallest block_k of the block-scaled operands; 0 when none.
int64_t scale_block(const KernelSpec& s) {
  int64_t b = 0;
  for (const Quant* q : {&s.lhs_quant, &s.rhs_quant})
    if (q->kind == QuantKind::kBlock) b = b ? std::min(b, q->block_k) : q->block_k;
  return b;
}

// One call's view of the operands, written from the ABI comment (independently of the checker).
struct View {
  const gmmgen_args& a;
  const KernelSpec& s = g_kernel.spec;
  int64_t K = s.k, N = s.n, M = a.m;
  std::vector<int64_t> group_begin, group_rows;  // per local group

  explicit View(const gmmgen_args& args) : a(args) {
    int64_t start = 0;
    for (int32_t g = 0; g < int32_t(s.g); ++g) {
      const int32_t j = g - a.group_offset;
      if (j >= 0 && j < s.g_local) {
        group_begin.push_back(start);
        group_rows.push_back(a.group_sizes[g]);
      }
      start += a.group_sizes[g];
    }
  }
  bool tgmm() const { return s.op == Op::kTgmm; }
  bool km() const { return s.lhs_layout == LhsLayout::kKM; }

  // lhs (r, k): gmm [M, K]; tgmm [M, K] or [K, M].
  double lhs(int64_t r, int64_t k) const {
    if (tgmm() && km()) return element(s.lhs, a.lhs, k * resolve_ld(a.lhs_ld, M, s.lhs) + r);
    return element(s.lhs, a.lhs, r * resolve_ld(a.lhs_ld, K, s.lhs) + k);
  }
  // gmm rhs (j, k, n): [G_local, K, N] or [G_local, N, K]; tgmm rhs (r, n): [M, N].
  double rhs(int64_t j, int64_t k, int64_t n) const {
    if (s.transpose_rhs) {
      const int64_t ld = resolve_ld(a.rhs_ld, K, s.rhs);
      return element(s.rhs, a.rhs, (j * N + n) * ld + k);
    }
    const int64_t ld = resolve_ld(a.rhs_ld, N, s.rhs);
    return element(s.rhs, a.rhs, (j * K + k) * ld + n);
  }
  double tgmm_rhs(int64_t r, int64_t n) const {
    return element(s.rhs, a.rhs, r * resolve_ld(a.rhs_ld, N, s.rhs) + n);
  }

  // Scales (1 for an operand without them). `begin` is the row's group start (for the bug).
  double lhs_scale(int64_t r, int64_t k, int64_t begin = 0) const {
    const Quant& q = s.lhs_quant;
    const float* sc = a.lhs_scale;
    switch (q.kind) {
      case QuantKind::kNone:
        return 1.0;
      case QuantKind::kTensor:
        return sc[0];
      case QuantKind::kChannel:
        return tgmm() ? sc[k] : sc[r];
      case QuantKind::kBlock:
        break;
    }
    const int64_t B = q.block_k;
    if (!tgmm()) return sc[r * (a.lhs_scale_ld ? a.lhs_scale_ld : ceil_div(K, B)) + k / B];
    const int64_t rb = row_block(r, B, begin);
    if (km()) return sc[k * (a.lhs_scale_ld ? a.lhs_scale_ld : ceil_div(M, B)) + rb];
    return sc[rb * (a.lhs_scale_ld ? a.lhs_scale_ld : K) + k];
  }
  double rhs_scale(int64_t j, int64_t k, int64_t n) const {  // gmm
    const Quant& q = s.rhs_quant;
    const float* sc = a.rhs_scale;
    const int64_t ld = a.rhs_scale_ld;
    switch (q.kind) {
      case QuantKind::kNone:
        return 1.0;
      case QuantKind::kTensor:
        return sc[0];
      case QuantKind::kChannel:
        return sc[j * (ld ? ld : N) + n];
      case QuantKind::kBlock:
        break;
    }
    const int64_t B = q.block_k, C = q.block_n ? q.block_n : 1;
    int64_t kb = k / B, nb = ceil_div(N, C), kbs = ceil_div(K, B);
    if (g_kernel.bug == Bug::kNextBlockScale) kb = (kb + 1) % kbs;
    if (s.transpose_rhs && g_kernel.bug != Bug::kTransposedRhsScales)
      return sc[(j * nb + n / C) * (ld ? ld : kbs) + kb];
    return sc[(j * kbs + kb) * (ld ? ld : nb) + n / C];
  }
  double tgmm_rhs_scale(int64_t r, int64_t n, int64_t begin = 0) const {
    const Quant& q = s.rhs_quant;
    const float* sc = a.rhs_scale;
    switch (q.kind) {
      case QuantKind::kNone:
        return 1.0;
      case QuantKind::kTensor:
        return sc[0];
      case QuantKind::kChannel:
        return sc[n];
      case QuantKind::kBlock:
        break;
    }
    const int64_t B = q.block_k;
    return sc[row_block(r, B, begin) * (a.rhs_scale_ld ? a.rhs_scale_ld : N) + n];
  }
  int64_t row_block(int64_t r, int64_t B, int64_t begin) const {
    return g_kernel.bug == Bug::kLocalRowBlocks ? (r - begin) / B : r / B;
  }

  // The rows a tgmm group sums for the block of rows [lo, hi) it touches (the bug: all of them).
  std::pair<int64_t, int64_t> clip(int64_t lo, int64_t hi, int64_t begin, int64_t end) const {
    if (g_kernel.bug == Bug::kWholeBlocks) return {lo, std::min(hi, M)};
    return {std::max(lo, begin), std::min(hi, end)};
  }
};

bool bad_scale(double s) {
  return !(std::isfinite(s) && s > 0);
}

// The scales the kernel reads (with the bug: all of them) must be finite and positive.
bool scales_ok(const View& v) {
  const bool all = g_kernel.bug == Bug::kChecksAllScales;
  const KernelSpec& s = v.s;
  std::vector<int32_t> row_group(size_t(v.M), -1);
  for (size_t j = 0; j < v.group_begin.size(); ++j)
    for (int64_t r = v.group_begin[j]; r < v.group_begin[j] + v.group_rows[j]; ++r)
      row_group[size_t(r)] = int32_t(j);
  for (int64_t r = 0; r < v.M; ++r) {
    if (row_group[size_t(r)] < 0 && !all) continue;
    for (int64_t k = 0; k < v.K; ++k)
      if (s.lhs_quant.kind != QuantKind::kNone && bad_scale(v.lhs_scale(r, k))) return false;
    if (v.tgmm())
      for (int64_t n = 0; n < v.N; ++n)
        if (s.rhs_quant.kind != QuantKind::kNone && bad_scale(v.tgmm_rhs_scale(r, n))) return false;
  }
  if (!v.tgmm() && s.rhs_quant.kind != QuantKind::kNone)
    for (int64_t j = 0; j < s.g_local; ++j) {
      if (v.group_rows[size_t(j)] == 0 && !all) continue;
      for (int64_t k = 0; k < v.K; ++k)
        for (int64_t n = 0; n < v.N; ++n)
          if (bad_scale(v.rhs_scale(j, k, n))) return false;
    }
  return true;
}

const gmmgen_kernel_info* naive_info() {
  static gmmgen_kernel_info info{};
  info.abi_version = GMMGEN_ABI_VERSION;
  info.name = "naive";
  return &info;
}
int64_t naive_workspace_bytes(int64_t m) {
  return m < 0 ? -1 : GMMGEN_WORKSPACE_ALIGNMENT;
}
int naive_plan(const gmmgen_args* a, void*, int64_t, int64_t* items, char* err, size_t len) {
  const View v(*a);
  if (!scales_ok(v)) {
    std::snprintf(err, len, "a scale that is read is not finite and positive [naive]");
    return GMMGEN_ERR_INVALID_ARGUMENT;
  }
  *items = v.tgmm() ? v.s.g_local : a->m;  // gmm: one row; tgmm: one local group
  return GMMGEN_OK;
}

// Stores the computed value x at element i of out (one rounding); with the bug, the output
// dtype's next value up.
void store_out(const gmmgen_args& a, int64_t i, double x) {
  const DType d = g_kernel.spec.out;
  if (g_kernel.bug == Bug::kOneUlpHigh) {
    const DTypeInfo& f = dtype_info(d);
    x = round_to(d, x);
    x += std::ldexp(1.0, std::max(x == 0 ? f.emin : std::ilogb(x), f.emin) - f.precision + 1);
  }
  store_element(d, a.out, i, x);
}

// The sum over terms t of x(t) * y(t) * scale(t), where `scale` is constant over each block of
// terms [cuts[b], cuts[b + 1]): exact in double, or as docs/quantization.md's f32 model.
template <typename X, typename Y, typename S>
double dot(int64_t count, X x, Y y, S scale, const std::vector<int64_t>& cuts) {
  const KernelSpec& s = g_kernel.spec;
  if (!g_kernel.f32_model) {
    double sum = 0;
    for (int64_t t = 0; t < count; ++t) sum += x(t) * scale(t) * y(t);
    return sum;
  }
  const bool integer = is_integer(s.lhs) && is_integer(s.rhs);
  float acc = 0;
  for (size_t b = 0; b + 1 < cuts.size(); ++b) {
    float p = 0;
    int32_t ip = 0;
    for (int64_t t = cuts[b]; t < cuts[b + 1]; ++t) {
      if (integer)
        ip += int32_t(x(t)) * int32_t(y(t));
      else
        p = std::fma(float(x(t)), float(y(t)), p);
      if (g_kernel.bug == Bug::kBf16Sums) p = float(round_to(DType::kBF16, p));
    }
    if (integer) p = float(ip);
    if (cuts[b] < cuts[b + 1]) acc += float(scale(cuts[b])) * p;
  }
  return acc;
}

int naive_run_items(const gmmgen_args* a, void*, int64_t begin, int64_t end) {
  const View v(*a);
  const KernelSpec& s = v.s;
  const int64_t K = v.K, N = v.N, sb = scale_block(s);
  const bool accumulate = s.out_mode == OutMode::kAccumulate;
  if (!v.tgmm()) {
    const int64_t out_ld = a->out_ld ? a->out_ld : N;
    const int64_t ex_ld = a->existing_out_ld ? a->existing_out_ld : N;
    std::vector<int64_t> cuts;  // blocks along K
    for (int64_t k = 0; k < K; k += sb ? sb : K) cuts.push_back(k);
    cuts.push_back(K);
    for (int64_t r = begin; r < end; ++r) {
      int64_t j = -1;
      for (size_t g = 0; g < v.group_begin.size(); ++g)
        if (r >= v.group_begin[g] && r < v.group_begin[g] + v.group_rows[g]) j = int64_t(g);
      for (int64_t n = 0; n < N; ++n) {
        const double existing = s.out_mode == OutMode::kPlain
                                    ? 0.0
                                    : load_element(s.out, a->existing_out, r * ex_ld + n);
        if (j < 0) {  // outside the active groups: zero or existing_out, exactly
          store_element(s.out, a->out, r * out_ld + n, existing);
          continue;
        }
        double sum = dot(
            K, [&](int64_t k) { return v.lhs(r, k); }, [&](int64_t k) { return v.rhs(j, k, n); },
            [&](int64_t k) { return v.lhs_scale(r, k) * v.rhs_scale(j, k, n); }, cuts);
        if (accumulate)
          sum = g_kernel.f32_model ? double(float(sum) + float(existing)) : sum + existing;
        store_out(*a, r * out_ld + n, sum);
      }
    }
    return GMMGEN_OK;
  }
  const int64_t out_ld = a->out_ld ? a->out_ld : (s.transpose_rhs ? K : N);
  const int64_t ex_ld = a->existing_out_ld ? a->existing_out_ld : (s.transpose_rhs ? K : N);
  for (int64_t j = begin; j < end; ++j) {
    const int64_t b = v.group_begin[size_t(j)], e = b + v.group_rows[size_t(j)];
    // The rows summed, block after block of sb global rows (one block without block scales).
    std::vector<int64_t> rows, cuts{0};
    if (e > b) {
      const int64_t step = sb ? sb : v.M + 1;
      for (int64_t blk = b / step; blk <= (e - 1) / step; ++blk) {
        const auto [lo, hi] = v.clip(blk * step, (blk + 1) * step, b, e);
        for (int64_t r = lo; r < hi; ++r) rows.push_back(r);
        cuts.push_back(int64_t(rows.size()));
      }
    }
    for (int64_t k = 0; k < K; ++k)
      for (int64_t n = 0; n < N; ++n) {
        const int64_t at = s.transpose_rhs ? (j * N + n) * out_ld + k : (j * K + k) * out_ld + n;
        const int64_t ex = s.transpose_rhs ? (j * N + n) * ex_ld + k : (j * K + k) * ex_ld + n;
        double sum = dot(
            int64_t(rows.size()), [&](int64_t t) { return v.lhs(rows[size_t(t)], k); },
            [&](int64_t t) { return v.tgmm_rhs(rows[size_t(t)], n); },
            [&](int64_t t) {
              const int64_t r = rows[size_t(t)];
              return v.lhs_scale(r, k, b) * v.tgmm_rhs_scale(r, n, b);
            },
            cuts);
        if (accumulate) {
          const double existing = load_element(s.out, a->existing_out, ex);
          sum = g_kernel.f32_model ? double(float(sum) + float(existing)) : sum + existing;
        }
        if (e == b && !accumulate)
          store_element(s.out, a->out, at, 0.0);
        else if (e == b)
          store_element(s.out, a->out, at, load_element(s.out, a->existing_out, ex));
        else
          store_out(*a, at, sum);
      }
  }
  return GMMGEN_OK;
}
int naive_run(const gmmgen_args*, char*, size_t) {
  return GMMGEN_ERR_INVALID_ARGUMENT;  // the checker plans and runs items itself
}
int naive_metadata(const int32_t*, int32_t, int64_t, int32_t, int32_t, int, int32_t*, int32_t*,
                   int32_t*, int64_t*) {
  return GMMGEN_ERR_INVALID_ARGUMENT;
}
const gmmgen_kernel_entry kNaive{naive_info, naive_workspace_bytes, naive_plan, naive_run_items,
                                 naive_run,  naive_metadata};

// A spec from its text; the validator must accept it, up to "not supported yet" from a target
// that cannot build quantized kernels yet.
KernelSpec spec_of(const std::string& text) {
  KernelSpec s = parse_text(text);
  try {
    validate(s);
  } catch (const SpecError& e) {
    EXPECT_EQ(0u, std::string(e.what()).find("not supported yet")) << text << ": " << e.what();
  }
  return s;
}

// Runs every case; returns the failures ("" when every case passed).
std::string run_cases(const KernelSpec& spec, Bug bug, bool f32_model,
                      const std::vector<CheckCase>& cases, double* worst_ratio = nullptr) {
  g_kernel = {spec, bug, f32_model};
  std::string failures;
  int64_t elements = 0;
  for (const CheckCase& c : cases) {
    const CheckResult r = check_kernel(kNaive, spec, c);
    elements += r.elements;
    if (!r.ok) failures += r.failure + "\n";
    if (worst_ratio) *worst_ratio = std::max(*worst_ratio, r.worst_bound_ratio);
  }
  if (failures.empty()) {
    EXPECT_GT(elements, 0) << to_text(spec);
  }
  return failures;
}

const char* kSpecs[] = {
    // gmm: float x sub-byte weights, partial last K block, K odd (a padding nibble per row).
    "op=gmm,lhs=bf16,rhs=i4,out=f32,rhs_quant=block:32,k=71,n=20,g=4,tm=8,tk=16,tn=8,"
    "transpose_rhs=1",
    "op=gmm,lhs=f16,rhs=nf4,out=bf16,rhs_quant=block:16,k=40,n=21,g=3,tm=8,tk=16,tn=8",
    // integer x integer, channel x block, sharded.
    "op=gmm,lhs=i8,rhs=i4,out=f32,lhs_quant=channel,rhs_quant=block:16,k=45,n=21,g=5,g_local=3,"
    "tm=8,tk=16,tn=8,transpose_rhs=1",
    "op=gmm,lhs=i4,rhs=t2,out=f16,lhs_quant=block:16,rhs_quant=channel,k=50,n=13,g=4,tm=4,tk=16,"
    "tn=8,out_mode=accumulate",
    "op=gmm,lhs=i8,rhs=i8,out=bf16,lhs_quant=tensor,rhs_quant=tensor,k=33,n=9,g=2,tm=8,tk=16,tn=8",
    // fp8, with and without scales; 2-D weight blocks in both orientations.
    "op=gmm,lhs=f8e4m3,rhs=nf4,out=bf16,lhs_quant=block:16,rhs_quant=block:32x16,k=64,n=40,g=3,"
    "tm=8,tk=16,tn=8",
    "op=gmm,lhs=f8e5m2,rhs=f8e4m3,out=f16,rhs_quant=tensor,k=24,n=10,g=3,tm=8,tk=16,tn=8,"
    "out_mode=existing_out",
    "op=gmm,lhs=f32,rhs=i8,out=f32,rhs_quant=block:16x32,k=50,n=70,g=2,tm=8,tk=16,tn=8,"
    "transpose_rhs=1",
    "op=gmm,lhs=f8e4m3,rhs=i4,out=f32,lhs_quant=channel,rhs_quant=block:16x16,k=48,n=35,g=3,"
    "g_local=2,tm=8,tk=16,tn=8",
    // tgmm: row blocks of global rows, lhs [K, M], sub-byte along M, sharded, accumulate.
    "op=tgmm,lhs=i8,rhs=i8,out=f32,lhs_quant=block:16,rhs_quant=block:32,k=20,n=18,g=4,tm=8,"
    "tk=16,tn=8,lhs_layout=km",
    "op=tgmm,lhs=i4,rhs=i4,out=bf16,lhs_quant=block:16,rhs_quant=channel,k=9,n=11,g=6,g_local=3,"
    "tm=8,tk=16,tn=8,lhs_layout=km,transpose_rhs=1,out_mode=accumulate",
    "op=tgmm,lhs=f8e4m3,rhs=bf16,out=f32,lhs_quant=channel,k=24,n=16,g=3,tm=8,tk=16,tn=8",
    "op=tgmm,lhs=bf16,rhs=f8e5m2,out=bf16,rhs_quant=block:16,k=12,n=16,g=5,g_local=2,tm=8,tk=16,"
    "tn=8",
    "op=tgmm,lhs=i4,rhs=i8,out=f16,lhs_quant=tensor,rhs_quant=tensor,k=7,n=5,g=3,tm=8,tk=16,tn=8",
    "op=tgmm,lhs=f8e5m2,rhs=f8e4m3,out=f32,k=10,n=6,g=3,tm=8,tk=16,tn=8,lhs_layout=km",
};

TEST(QuantChecker, CorrectKernelPassesStandardCases) {
  for (const char* text : kSpecs) {
    const KernelSpec spec = spec_of(text);
    EXPECT_EQ("", run_cases(spec, Bug::kNone, false, standard_cases(spec, 5))) << text;
  }
}

// docs/quantization.md's f32 computation, summed in the worst order, stays within the bound (which
// the checker states in checker.h), also for long sums.
TEST(QuantChecker, F32ModelStaysWithinTheBound) {
  std::vector<std::string> specs(std::begin(kSpecs), std::end(kSpecs));
  specs.push_back(
      "op=gmm,lhs=bf16,rhs=nf4,out=f32,rhs_quant=block:64,k=1000,n=8,g=2,tm=8,tk=16,tn=8");
  specs.push_back(
      "op=gmm,lhs=i8,rhs=i8,out=f32,lhs_quant=channel,rhs_quant=channel,k=3000,n=4,g=2,tm=8,"
      "tk=16,tn=8");
  specs.push_back(
      "op=tgmm,lhs=f8e4m3,rhs=f8e5m2,out=f32,lhs_quant=block:16,rhs_quant=block:64,k=4,n=4,g=2,"
      "tm=8,tk=16,tn=8");
  for (const std::string& text : specs) {
    const KernelSpec spec = spec_of(text);
    double worst = 0;
    EXPECT_EQ("", run_cases(spec, Bug::kNone, true, standard_cases(spec, 9), &worst)) << text;
    EXPECT_LT(worst, 1.0) << text;
  }
}

// Each bug fails at least one standard case.
TEST(QuantChecker, FailsKernelsWithBugs) {
  const struct {
    Bug bug;
    const char* spec;
    bool f32_model;
  } bugs[] = {
      {Bug::kNextBlockScale, kSpecs[0], false},
      {Bug::kNextBlockScale, kSpecs[5], false},
      {Bug::kHighNibbleFirst, kSpecs[0], false},   // rhs i4 along K
      {Bug::kHighNibbleFirst, kSpecs[3], false},   // lhs i4, rhs t2
      {Bug::kHighNibbleFirst, kSpecs[10], false},  // tgmm lhs i4 along M
      {Bug::kLocalRowBlocks, kSpecs[9], false},
      {Bug::kLocalRowBlocks, kSpecs[12], true},
      {Bug::kWholeBlocks, kSpecs[9], true},
      {Bug::kWholeBlocks, kSpecs[12], false},
      {Bug::kTransposedRhsScales, kSpecs[2], false},
      {Bug::kChecksAllScales, kSpecs[2], false},  // lhs channel scales of rows it skips
      {Bug::kChecksAllScales, kSpecs[9], false},  // tgmm blocks outside the active groups
      {Bug::kBf16Sums, kSpecs[1], true},
      {Bug::kBf16Sums, kSpecs[11], true},
  };
  for (const auto& b : bugs) {
    const KernelSpec spec = spec_of(b.spec);
    EXPECT_NE("", run_cases(spec, b.bug, b.f32_model, standard_cases(spec, 5)))
        << "bug " << int(b.bug) << " passed on " << b.spec;
  }
}

// Exact inputs stay exact for quantized specs: one ulp off fails every exact case, while the
// error bound lets it pass the others.
TEST(QuantChecker, ExactInputsAreBitExact) {
  for (const char* text : {kSpecs[2], kSpecs[5], kSpecs[9], kSpecs[12]}) {
    const KernelSpec spec = spec_of(text);
    std::vector<CheckCase> exact, inexact;
    for (const CheckCase& c : standard_cases(spec, 3)) {
      int64_t active = 0;  // rows of active groups: cases without any have nothing to get wrong
      for (int64_t j = 0; j < spec.g_local; ++j)
        active += c.group_sizes[size_t(c.group_offset + j)];
      if (active > 0 && !c.nan_expert) (c.exact_inputs ? exact : inexact).push_back(c);
    }
    ASSERT_FALSE(exact.empty());
    EXPECT_EQ("", run_cases(spec, Bug::kNone, true, exact)) << text;
    g_kernel = {spec, Bug::kOneUlpHigh, false};
    for (const CheckCase& c : exact) EXPECT_FALSE(check_kernel(kNaive, spec, c).ok) << c.label;
    if (spec.out == DType::kF32) {
      EXPECT_EQ("", run_cases(spec, Bug::kOneUlpHigh, false, inexact));
    }
  }
}

// nan_expert with integer weights: NaN scales only in an expert whose group is empty. A kernel
// that does not read them passes (no NaN in the output, no error); one that checks them fails.
TEST(QuantChecker, UnreadExpertScalesAreNaN) {
  const KernelSpec spec = spec_of(kSpecs[0]);  // bf16 x i4 block:32, G = 4: no lhs scales
  CheckCase c;
  c.label = "empty expert 1";
  c.m = 26;
  c.group_sizes = {9, 0, 12, 3};
  c.nan_expert = true;
  EXPECT_EQ("", run_cases(spec, Bug::kNone, false, {c}));
  const std::string failure = run_cases(spec, Bug::kChecksAllScales, false, {c});
  EXPECT_NE(std::string::npos, failure.find("plan failed")) << failure;
  c.nan_expert = false;  // every scale finite: checking them all passes
  EXPECT_EQ("", run_cases(spec, Bug::kChecksAllScales, false, {c}));
}

// tgmm with block scales: standard_cases holds a case whose group boundaries fall inside scale
// blocks, and one with whole blocks outside the active groups.
TEST(QuantChecker, StandardCasesStraddleScaleBlocks) {
  const KernelSpec spec = spec_of(kSpecs[12]);  // rhs block:16, g=5, g_local=2
  bool straddles = false, outside = false, named = false;
  for (const CheckCase& c : standard_cases(spec, 1)) {
    named |= c.label.find("group boundaries inside scale blocks") != std::string::npos;
    std::vector<bool> active(size_t(c.m), false);
    int64_t start = 0;
    for (int32_t g = 0; g < int32_t(c.group_sizes.size()); ++g) {
      const int64_t end = start + c.group_sizes[size_t(g)];
      const bool is_active = g >= c.group_offset && g < c.group_offset + spec.g_local;
      for (int64_t r = start; r < end && is_active; ++r) active[size_t(r)] = true;
      if (is_active && end > start && end % 16 != 0 && end < c.m) straddles = true;
      start = end;
    }
    for (int64_t b = 0; (b + 1) * 16 <= c.m; ++b)
      if (std::none_of(active.begin() + b * 16, active.begin() + (b + 1) * 16,
                       [](bool x) { return x; }))
        outside = true;
  }
  EXPECT_TRUE(named);
  EXPECT_TRUE(straddles);
  EXPECT_TRUE(outside);
}

}  // namespace
}  // namespace gmmgen
