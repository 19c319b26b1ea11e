#include "gmmgen/verify/checker.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <sstream>

#include "gmmgen/verify/numeric.h"
#include "gmmgen/verify/reference.h"

namespace gmmgen {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// A buffer of `count` elements of dtype d, 64-byte aligned.
struct Buffer {
  DType dtype;
  std::vector<unsigned char> storage;
  size_t offset = 0;
  Buffer(DType d, int64_t count) : dtype(d), storage(size_t(count) * element_bytes(d) + 64) {
    offset = (64 - reinterpret_cast<uintptr_t>(storage.data()) % 64) % 64;
  }
  Buffer(Buffer&&) = default;  // moves keep the storage (and its alignment); copies would not
  Buffer& operator=(Buffer&&) = default;
  void* data() { return storage.data() + offset; }
  void set(int64_t i, double v) { store_element(dtype, data(), i, v); }
  double get(int64_t i) { return load_element(dtype, data(), i); }
  void poison(int64_t count) {
    for (int64_t i = 0; i < count; ++i) set(i, kNaN);
  }
};

// Where the elements of a logical [batch, rows, cols] operand sit in its buffer: each of the
// `batch` matrices is stored row-major, or transposed ([cols, rows]), with `ld` elements between
// stored rows, the matrices one after the other. Elements past the stored row length are padding.
struct Layout {
  int64_t batch = 1, rows = 0, cols = 0;
  bool transposed = false;
  int64_t ld = 0;
  int64_t stored_rows() const { return transposed ? cols : rows; }
  int64_t row_length() const { return transposed ? rows : cols; }
  int64_t count() const { return batch * stored_rows() * ld; }
  int64_t index(int64_t b, int64_t r, int64_t c) const {
    return b * stored_rows() * ld + (transposed ? c * ld + r : r * ld + c);
  }
  // The leading dimension as passed to the kernel: 0 ("packed") when there is no padding.
  int64_t ld_arg() const { return ld == row_length() ? 0 : ld; }
};

Layout make_layout(int64_t batch, int64_t rows, int64_t cols, bool transposed, int64_t pad) {
  Layout l;
  l.batch = batch, l.rows = rows, l.cols = cols, l.transposed = transposed;
  l.ld = l.row_length() + pad;
  return l;
}

// Random operand values rounded to the operand's dtype: uniform in [-1, 1], or in exact mode
// integers in [-16, 16] (exact in every float dtype; sums of up to 2^16 products stay exact in
// f32).
struct Values {
  std::mt19937_64& rng;
  bool exact;
  std::uniform_real_distribution<double> real{-1.0, 1.0};
  double operator()(DType d) {
    return round_to(d, exact ? double(int64_t(rng() % 33) - 16) : real(rng));
  }
};

// A buffer laid out as `l`: NaN in the padding, element (b, r, c) = value(b, r, c), which is
// also stored into `logical` ([batch, rows, cols]).
template <typename F>
Buffer make_operand(DType d, const Layout& l, std::vector<double>& logical, F value) {
  Buffer buf(d, std::max<int64_t>(1, l.count()));
  buf.poison(l.count());
  logical.assign(size_t(l.batch * l.rows * l.cols), 0.0);
  for (int64_t b = 0; b < l.batch; ++b)
    for (int64_t r = 0; r < l.rows; ++r)
      for (int64_t c = 0; c < l.cols; ++c) {
        const double v = value(b, r, c);
        logical[(b * l.rows + r) * l.cols + c] = v;
        buf.set(l.index(b, r, c), v);
      }
  return buf;
}

// Local group of each of the m rows, -1 for rows outside the active groups.
std::vector<int32_t> local_group_of_rows(int64_t m, const std::vector<int32_t>& sizes,
                                         int32_t offset, int32_t g_local) {
  std::vector<int32_t> row_group(size_t(m), -1);
  int64_t start = 0;
  for (int32_t g = 0; g < int32_t(sizes.size()); ++g) {
    const int32_t local = g - offset;
    for (int64_t r = start; r < start + sizes[g] && r < m; ++r)
      if (local >= 0 && local < g_local) row_group[r] = local;
    start += sizes[g];
  }
  return row_group;
}

// The output (poisoned with NaN before the run) and, in the existing modes, existing_out with
// random values: in the output buffer itself when in place, else in a buffer of its own laid
// out the same way. Keeps the output's bytes from before the run to check the padding.
struct Outputs {
  Layout layout;
  bool existing, in_place;
  Buffer out, separate;
  std::vector<unsigned char> before;

  Outputs(const KernelSpec& spec, const CheckCase& c, const Layout& l,
          std::vector<double>& existing_values, Values& value)
      : layout(l),
        existing(spec.out_mode != OutMode::kPlain),
        in_place(c.in_place),
        out(spec.out, std::max<int64_t>(1, l.count())),
        separate(spec.out, std::max<int64_t>(1, l.count())) {
    out.poison(l.count());
    separate.poison(l.count());
    if (existing)
      (in_place ? out : separate) = make_operand(
          spec.out, l, existing_values, [&](int64_t, int64_t, int64_t) { return value(spec.out); });
    before = out.storage;
  }
  void set_args(gmmgen_args& a) {
    a.out = out.data(), a.out_ld = layout.ld_arg();
    if (existing) {
      a.existing_out = in_place ? out.data() : separate.data();
      a.existing_out_ld = layout.ld_arg();
    }
  }
  // Element (b, r, c) of the logical output.
  double get(int64_t b, int64_t r, int64_t c) { return out.get(layout.index(b, r, c)); }
  // "" if no padding element changed its bits, else where the first one is.
  std::string padding_change() const {
    const size_t bytes = element_bytes(out.dtype);
    for (int64_t s = 0; s < layout.batch * layout.stored_rows(); ++s)
      for (int64_t i = layout.row_length(); i < layout.ld; ++i) {
        const size_t at = out.offset + size_t(s * layout.ld + i) * bytes;
        if (std::memcmp(&out.storage[at], &before[at], bytes) != 0)
          return "padding of out (stored row " + std::to_string(s) + ", column " +
                 std::to_string(i) + ") was written";
      }
    return "";
  }
  uint64_t digest() const {
    uint64_t h = 1469598103934665603ull;  // FNV-1a
    const size_t end = out.offset + size_t(layout.count()) * element_bytes(out.dtype);
    for (size_t i = out.offset; i < end; ++i) h = (h ^ out.storage[i]) * 1099511628211ull;
    return h;
  }
};

// Plans, then runs every item (last to first in uneven chunks when asked); "" or the error.
std::string run_kernel(const gmmgen_kernel_entry& fns, const gmmgen_args& a, bool reverse,
                       std::mt19937_64& rng) {
  const int64_t ws_bytes = fns.workspace_bytes(a.m);
  std::unique_ptr<void, decltype(&std::free)> ws(
      std::aligned_alloc(GMMGEN_WORKSPACE_ALIGNMENT,
                         size_t((ws_bytes + GMMGEN_WORKSPACE_ALIGNMENT - 1) /
                                GMMGEN_WORKSPACE_ALIGNMENT * GMMGEN_WORKSPACE_ALIGNMENT)),
      &std::free);
  char err[512] = {0};
  int64_t items = 0;
  if (int rc = fns.plan(&a, ws.get(), ws_bytes, &items, err, sizeof err); rc != GMMGEN_OK)
    return "plan failed (" + std::to_string(rc) + "): " + err;
  std::vector<std::pair<int64_t, int64_t>> chunks;
  if (reverse) {  // items must be independent
    for (int64_t end = items; end > 0;) {
      const int64_t begin = std::max<int64_t>(0, end - 1 - int64_t(rng() % 5));
      chunks.emplace_back(begin, end);
      end = begin;
    }
  } else {
    chunks.emplace_back(0, items);
  }
  for (auto [begin, end] : chunks)
    if (int rc = fns.run_items(&a, ws.get(), begin, end); rc != GMMGEN_OK)
      return "run_items(" + std::to_string(begin) + ", " + std::to_string(end) + ") failed (" +
             std::to_string(rc) + ")";
  return "";
}

double floor_of(DType d) {
  return d == DType::kF16 ? std::ldexp(1.0, -25) : 1e-38;
}

// Compares output elements with the reference; keeps the first failure and the statistics.
class Comparator {
 public:
  Comparator(const KernelSpec& spec, const CheckCase& c, CheckResult& res)
      : spec_(spec), case_(c), res_(res) {}

  void fail(const std::string& where, const std::string& why) {
    if (!res_.ok) return;
    res_.ok = false;
    res_.failure = case_.label + ": " + where + ": " + why;
  }

  // An element that takes no product (what: why it does not): must equal `want` exactly, sign
  // of zero included.
  template <typename Where>
  void exact(double got, double want, const char* what, Where where) {
    ++res_.elements;
    if (got == want && std::signbit(got) == std::signbit(want)) return;
    std::ostringstream os;
    os.precision(17);
    os << what << ": got " << got << ", expected exactly " << want;
    fail(where(), os.str());
  }

  // An element that sums `terms` products; abs_dot is their absolute sum and extra the absolute
  // value of the existing_out term (0 unless accumulating).
  template <typename Where>
  void computed(double got, double want, double abs_dot, double extra, int64_t terms, Where where) {
    ++res_.elements;
    if (case_.exact_inputs && !std::isnan(want)) {
      const double rounded = round_to(spec_.out, want);
      if (got != rounded) {
        std::ostringstream os;
        os.precision(17);
        os << "exact inputs: got " << got << ", reference " << want << " rounds to " << rounded;
        fail(where(), os.str());
      }
      return;
    }
    if (std::isnan(want)) {
      if (!std::isnan(got))
        fail(where(), "expected NaN (a NaN input feeds this element), got " + std::to_string(got));
      return;
    }
    const double bound = unit_roundoff(spec_.out) * std::fabs(want) +
                         double(terms + 2) * std::ldexp(1.0, -24) * (abs_dot + extra) +
                         floor_of(spec_.out);
    const double diff = std::fabs(got - want);
    if (!(diff <= bound)) {
      std::ostringstream os;
      os.precision(9);
      os << "got " << got << ", reference " << want << ", |diff| " << diff << " > bound " << bound;
      fail(where(), os.str());
    }
    if (std::isfinite(diff)) {
      res_.worst_bound_ratio = std::max(res_.worst_bound_ratio, diff / bound);
      const double scale = std::max(std::fabs(want), abs_dot + extra);
      if (scale > 0) res_.worst_rel_error = std::max(res_.worst_rel_error, diff / scale);
    }
  }

 private:
  const KernelSpec& spec_;
  const CheckCase& case_;
  CheckResult& res_;
};

// What a check works with: the result being built and the comparator filling it, the case's
// random stream and values, and the local group of each row (-1 outside the active groups).
struct Check {
  const KernelSpec& spec;
  const CheckCase& c;
  CheckResult res;
  Comparator cmp{spec, c, res};
  std::mt19937_64 rng{c.seed};
  Values value{rng, c.exact_inputs};
  std::vector<int32_t> row_group =
      local_group_of_rows(c.m, c.group_sizes, c.group_offset, int32_t(spec.g_local));

  Check(const KernelSpec& s, const CheckCase& cc) : spec(s), c(cc) {}

  // An operand with one row per token (logical [M, cols]): random values in the rows of active
  // groups, NaN in every other row (a kernel must never read them).
  Buffer token_operand(DType d, const Layout& l, std::vector<double>& logical) {
    return make_operand(d, l, logical, [&](int64_t, int64_t r, int64_t) {
      return row_group[r] < 0 ? kNaN : value(d);
    });
  }

  // Runs the kernel on the operands, then fills res.output_digest and checks the padding of
  // out. False (with res.failure) when plan or run_items failed.
  bool run(const gmmgen_kernel_entry& fns, Buffer& lhs, const Layout& lhs_l, Buffer& rhs,
           const Layout& rhs_l, Outputs& outs) {
    gmmgen_args a{};
    a.abi_version = GMMGEN_ABI_VERSION;
    a.m = c.m;
    a.lhs = lhs.data(), a.lhs_ld = lhs_l.ld_arg();
    a.rhs = rhs.data(), a.rhs_ld = rhs_l.ld_arg();
    a.group_sizes = c.group_sizes.data();
    a.group_offset = c.group_offset;
    outs.set_args(a);
    if (const std::string err = run_kernel(fns, a, c.reverse_items, rng); !err.empty()) {
      cmp.fail("kernel", err);
      return false;
    }
    res.output_digest = outs.digest();
    if (const std::string change = outs.padding_change(); !change.empty()) cmp.fail("out", change);
    return true;
  }
};

CheckResult check_gmm(const gmmgen_kernel_entry& fns, const KernelSpec& spec, const CheckCase& c) {
  Check ck(spec, c);
  const int64_t K = spec.k, N = spec.n, M = c.m;
  const int32_t GL = int32_t(spec.g_local);
  GmmProblem p;
  p.m = M, p.k = K, p.n = N;
  p.num_groups = int32_t(spec.g), p.num_local_groups = GL;
  p.group_offset = c.group_offset, p.transpose_rhs = spec.transpose_rhs;
  p.out_mode = spec.out_mode;
  p.group_sizes = c.group_sizes;

  const Layout lhs_l = make_layout(1, M, K, false, c.lhs_pad);
  Buffer lhs = ck.token_operand(spec.lhs, lhs_l, p.lhs);
  // rhs as stored, [G_local * rows, row length]; the reference reads it in the same order.
  const int64_t row_len = spec.transpose_rhs ? K : N;
  const Layout rhs_l = make_layout(1, GL * (spec.transpose_rhs ? N : K), row_len, false, c.rhs_pad);
  Buffer rhs = make_operand(spec.rhs, rhs_l, p.rhs,
                            [&](int64_t, int64_t, int64_t) { return ck.value(spec.rhs); });
  if (c.nan_expert) {
    const int64_t j = GL / 2, i = j * K * N + int64_t(ck.rng() % uint64_t(K * N));
    p.rhs[i] = kNaN;
    rhs.set(rhs_l.index(0, i / row_len, i % row_len), kNaN);
  }
  Outputs outs(spec, c, make_layout(1, M, N, false, c.out_pad), p.existing_out, ck.value);
  if (!ck.run(fns, lhs, lhs_l, rhs, rhs_l, outs)) return ck.res;

  const ReferenceResult ref = reference_gmm(p);
  const bool accumulate = spec.out_mode == OutMode::kAccumulate;
  for (int64_t r = 0; r < M; ++r)
    for (int64_t n = 0; n < N; ++n) {
      const int64_t i = r * N + n;
      auto where = [&] {
        return "out[" + std::to_string(r) + ", " + std::to_string(n) + "] (row group " +
               std::to_string(ref.row_group[r]) + ")";
      };
      const double got = outs.get(0, r, n);
      if (ref.row_group[r] < 0)
        ck.cmp.exact(got, ref.out[i], "row outside the active groups", where);
      else
        ck.cmp.computed(got, ref.out[i], ref.abs_dot[i],
                        accumulate ? std::fabs(p.existing_out[i]) : 0.0, K, where);
    }
  return ck.res;
}

CheckResult check_tgmm(const gmmgen_kernel_entry& fns, const KernelSpec& spec, const CheckCase& c) {
  Check ck(spec, c);
  const int64_t K = spec.k, N = spec.n, M = c.m;
  const int32_t GL = int32_t(spec.g_local);
  TgmmProblem p;
  p.m = M, p.k = K, p.n = N;
  p.num_groups = int32_t(spec.g), p.num_local_groups = GL;
  p.group_offset = c.group_offset;
  p.out_mode = spec.out_mode;
  p.group_sizes = c.group_sizes;

  // lhs [M, K] (stored [K, M] with lhs_layout=km) and rhs [M, N].
  const Layout lhs_l = make_layout(1, M, K, spec.lhs_layout == LhsLayout::kKM, c.lhs_pad);
  Buffer lhs = ck.token_operand(spec.lhs, lhs_l, p.lhs);
  const Layout rhs_l = make_layout(1, M, N, false, c.rhs_pad);
  Buffer rhs = ck.token_operand(spec.rhs, rhs_l, p.rhs);
  if (c.nan_expert) {  // one row of one non-empty active group, in lhs or in rhs
    std::vector<int64_t> rows;
    for (int64_t r = 0; r < M; ++r)
      if (ck.row_group[r] >= 0) rows.push_back(r);
    if (!rows.empty()) {
      const int64_t r = rows[ck.rng() % rows.size()];
      const bool in_lhs = ck.rng() % 2;
      const Layout& l = in_lhs ? lhs_l : rhs_l;
      const int64_t col = int64_t(ck.rng() % uint64_t(l.cols));
      (in_lhs ? p.lhs : p.rhs)[r * l.cols + col] = kNaN;
      (in_lhs ? lhs : rhs).set(l.index(0, r, col), kNaN);
    }
  }
  // out [G_local, K, N], stored [G_local, N, K] with transpose_rhs.
  Outputs outs(spec, c, make_layout(GL, K, N, spec.transpose_rhs, c.out_pad), p.existing_out,
               ck.value);
  if (!ck.run(fns, lhs, lhs_l, rhs, rhs_l, outs)) return ck.res;

  const TgmmReferenceResult ref = reference_tgmm(p);
  const bool accumulate = spec.out_mode == OutMode::kAccumulate;
  for (int32_t j = 0; j < GL; ++j)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t n = 0; n < N; ++n) {
        const int64_t i = (j * K + k) * N + n;
        auto where = [&] {
          return "out[" + std::to_string(j) + "][" + std::to_string(k) + ", " + std::to_string(n) +
                 "] (group " + std::to_string(c.group_offset + j) + ", " +
                 std::to_string(ref.rows[j]) + " rows)";
        };
        const double got = outs.get(j, k, n);
        if (ref.rows[j] == 0)
          ck.cmp.exact(got, ref.out[i], "empty group", where);
        else
          ck.cmp.computed(got, ref.out[i], ref.abs_dot[i],
                          accumulate ? std::fabs(p.existing_out[i]) : 0.0, ref.rows[j], where);
      }
  return ck.res;
}

}  // namespace

CheckResult check_kernel(const gmmgen_kernel_entry& fns, const KernelSpec& spec,
                         const CheckCase& c) {
  return spec.op == Op::kTgmm ? check_tgmm(fns, spec, c) : check_gmm(fns, spec, c);
}

std::vector<CheckCase> standard_cases(const KernelSpec& spec, uint64_t seed) {
  std::vector<CheckCase> cases;
  std::mt19937_64 rng(seed);
  const int32_t G = int32_t(spec.g), GL = int32_t(spec.g_local);
  const int64_t tm = spec.tiling.tm;
  // Offsets: unsharded, or first/middle/last shard position.
  std::vector<int32_t> offsets{0};
  if (GL < G) offsets = {0, (G - GL) / 2, G - GL};
  const int64_t ms[] = {0, 1, std::max<int64_t>(2, tm - 1), std::min<int64_t>(3 * tm + 5, 300), 97};
  const Distribution dists[] = {Distribution::kUniform, Distribution::kSkewedEmpty,
                                Distribution::kManyTiny, Distribution::kRandom};
  int index = 0;
  for (int64_t m : ms) {
    for (Distribution d : dists) {
      for (int32_t off : offsets) {
        CheckCase c;
        c.m = m;
        c.seed = rng();
        // Every other case leaves rows past sum(group_sizes).
        const int64_t rows = (index % 2 && m > 2) ? m - 1 - int64_t(rng() % 3) : m;
        c.group_sizes = make_group_sizes(d, G, rows, rng);
        c.group_offset = off;
        c.nan_expert = index % 5 == 3;
        c.in_place = index % 2 == 0;
        c.lhs_pad = index % 3 == 1 ? 3 : 0;
        c.rhs_pad = index % 3 == 2 ? 2 : 0;
        c.out_pad = index % 4 == 2 ? 5 : 0;
        c.reverse_items = index % 2 == 1;
        c.exact_inputs = index % 4 == 1;
        std::ostringstream label;
        label << "M=" << m << " sum=" << rows << " " << to_string(d) << " offset=" << off
              << (c.nan_expert ? (spec.op == Op::kTgmm ? " nan-row" : " nan-expert") : "")
              << (c.lhs_pad || c.rhs_pad || c.out_pad ? " strided" : "")
              << (c.exact_inputs ? " exact" : "")
              << (spec.out_mode != OutMode::kPlain ? (c.in_place ? " in-place" : " separate") : "");
        c.label = label.str();
        cases.push_back(std::move(c));
        ++index;
      }
    }
  }
  return cases;
}

}  // namespace gmmgen
