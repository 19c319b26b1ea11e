#include "gmmgen/verify/checker.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iterator>
#include <limits>
#include <memory>
#include <numeric>
#include <sstream>
#include <utility>

#include "gmmgen/codes.h"
#include "gmmgen/verify/numeric.h"
#include "gmmgen/verify/reference.h"

namespace gmmgen {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
// A NaN in both fp8 formats (e4m3fn S.1111.111, e5m2 S.11111.11).
constexpr uint8_t kFp8NaN = 0x7f;

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}
int64_t round_up(int64_t a, int64_t b) {
  return ceil_div(a, b) * b;
}
// A buffer of `count` elements of dtype d (codes for quantized dtypes, sub-byte ones packed),
// starting `misalign` bytes past a 64-byte boundary.
struct Buffer {
  DType dtype;
  std::vector<unsigned char> storage;
  size_t offset = 0;
  Buffer(DType d, int64_t count, size_t misalign = 0)
      : dtype(d), storage(bytes(d, std::max<int64_t>(1, count)) + 64 + misalign) {
    offset = (64 - reinterpret_cast<uintptr_t>(storage.data()) % 64) % 64 + misalign;
  }
  Buffer(Buffer&&) = default;  // moves keep the storage (and its alignment); copies would not
  Buffer& operator=(Buffer&&) = default;
  static size_t bytes(DType d, int64_t count) {
    return codes::is_quantized(d) ? size_t((count * bits_of(d) + 7) / 8)
                                  : size_t(count) * element_bytes(d);
  }
  void* data() { return storage.data() + offset; }
  void set(int64_t i, double v) { store_element(dtype, data(), i, v); }
  double get(int64_t i) { return load_element(dtype, data(), i); }
  void set_code(int64_t i, uint8_t code) { codes::set_code(data(), i, bits_of(dtype), code); }
  void poison(int64_t count) {
    for (int64_t i = 0; i < count; ++i) set(i, kNaN);
  }
};

// Where the elements of a logical [batch, rows, cols] operand sit in its buffer: each of the
// `batch` matrices is stored row-major, or transposed ([cols, rows]), with `ld` elements between
// stored rows, the matrices one after the other. Elements past the stored row length are padding.
// Sub-byte dtypes pack `per_byte` elements a byte along the stored row: ld is a multiple of it.
struct Layout {
  int64_t batch = 1, rows = 0, cols = 0;
  bool transposed = false;
  int64_t ld = 0;
  int64_t per_byte = 1;
  int64_t stored_rows() const { return transposed ? cols : rows; }
  int64_t row_length() const { return transposed ? rows : cols; }
  int64_t count() const { return batch * stored_rows() * ld; }
  int64_t index(int64_t b, int64_t r, int64_t c) const {
    return b * stored_rows() * ld + (transposed ? c * ld + r : r * ld + c);
  }
  int64_t logical(int64_t b, int64_t r, int64_t c) const { return (b * rows + r) * cols + c; }
  // The leading dimension as passed to the kernel: 0 ("packed": the row length rounded up to
  // whole bytes) when there is no padding beyond that.
  int64_t ld_arg() const { return ld == round_up(row_length(), per_byte) ? 0 : ld; }
};

Layout make_layout(int64_t batch, int64_t rows, int64_t cols, bool transposed, int64_t pad,
                   int64_t per_byte = 1) {
  Layout l;
  l.batch = batch, l.rows = rows, l.cols = cols, l.transposed = transposed;
  l.per_byte = per_byte;
  l.ld = round_up(l.row_length() + pad, per_byte);
  return l;
}

// Random values of float dtypes, rounded to the dtype: uniform in [-1, 1], or in exact mode
// integers in [-16, 16] (exact in every float dtype; sums of up to 2^16 products stay exact in
// f32).
struct Values {
  std::mt19937_64& rng;
  bool exact;
  double operator()(DType d) {
    return round_to(d, exact ? double(int64_t(rng() % 33) - 16) : uniform_real(rng, -1.0, 1.0));
  }
};

// Random codes of one quantized dtype (gmmgen/codes.h): integer and nf4 codes uniformly; fp8
// mostly as a quantizer leaves uniform data (the code nearest a uniform value over the pool's
// range, so large exponents dominate), and one time in eight any code of the pool (subnormals and
// tiny values included).
class CodeSource {
 public:
  // exact: only codes of integers in [-16, 16]. An fp8 operand without scales keeps to
  // |value| <= 2, as activations stored unscaled do, and draws its largest magnitudes (+-qmax)
  // now and then when `allow_max` (products of those could overflow an f16 output).
  CodeSource(DType d, bool exact, bool scaled, bool allow_max)
      : by_value_(codes::is_fp8(d) && !exact),
        extremes_now_and_then_(allow_max && codes::is_fp8(d) && !scaled && !exact) {
    const int count = 1 << bits_of(d);
    for (int c = 0; c < count; ++c) {
      const uint8_t code = uint8_t(c);
      const double v = codes::decode(d, code);
      if (codes::is_fp8(d) ? std::isnan(v) : v != 0) garbage_.push_back(code);
      if (!valid(d, code, v)) continue;
      if (v == 0 && !std::signbit(v) && zero_ < 0) zero_ = c;
      if (std::fabs(v) == codes::qmax(d)) extremes_.push_back(code);
      const bool keep = exact ? v == std::nearbyint(v) && std::fabs(v) <= 16
                              : scaled || !codes::is_fp8(d) || std::fabs(v) <= 2;
      if (keep) {
        pool_.push_back(code);
        by_value_pool_.emplace_back(v, code);
        range_ = std::max(range_, std::fabs(v));
      }
    }
    std::sort(by_value_pool_.begin(), by_value_pool_.end());
  }
  uint8_t draw(std::mt19937_64& rng) const {
    if (extremes_now_and_then_ && rng() % 128 == 0) return extremes_[rng() % extremes_.size()];
    if (!by_value_ || rng() % 8 == 0) return pool_[rng() % pool_.size()];
    const double t = uniform_real(rng, -range_, range_);
    auto it = std::lower_bound(by_value_pool_.begin(), by_value_pool_.end(),
                               std::pair<double, uint8_t>(t, 0));
    if (it == by_value_pool_.end() ||
        (it != by_value_pool_.begin() && t - std::prev(it)->first < it->first - t))
      --it;
    return it->second;
  }
  uint8_t zero() const { return uint8_t(zero_); }
  // A code a kernel must never read: fp8 NaN, else a code of a non-zero value (for i8 and i4 also
  // -128 and -8, which no quantizer produces).
  uint8_t garbage(std::mt19937_64& rng) const { return garbage_[rng() % garbage_.size()]; }

 private:
  // The codes quantizers produce (docs/quantization.md).
  static bool valid(DType d, uint8_t code, double v) {
    switch (d) {
      case DType::kI8:
        return code != 0x80;
      case DType::kI4:
        return code != 8;
      case DType::kT2:
        return code != 3;
      default:
        return std::isfinite(v);
    }
  }
  bool by_value_, extremes_now_and_then_;
  int zero_ = -1;
  double range_ = 0;
  std::vector<uint8_t> pool_, extremes_, garbage_;
  std::vector<std::pair<double, uint8_t>> by_value_pool_;  // sorted by value
};

// A random positive f32 scale. Exact mode (span >= 0): a power of two in [2^-span, 1]. Otherwise
// 2^e * [1, 2) with e in [-3, 3], divided by the power of two above qmax so that decoded values
// stay within about +-16 (as absmax scaling keeps them within +-amax).
double random_scale(DType d, std::mt19937_64& rng, int exact_span) {
  if (exact_span >= 0) return std::ldexp(1.0, -int(rng() % uint64_t(exact_span + 1)));
  const float u = float(uniform_real(rng, 1.0, 2.0));
  const int e = int(rng() % 7) - 3 - int(std::ceil(std::log2(codes::qmax(d))));
  return std::ldexp(double(u), e);  // 24 significant bits, far inside f32's range: an f32 value
}

// Where each element's scale lives (docs/quantization.md; "Scales" in kernel_abi.h).
struct ScaleMap {
  Layout layout;           // the scale array as [batch, rows, cols], stored row-major
  bool vector = false;     // tensor [1] or a 1-D array: no rows, ld passed as 0
  bool per_token = false;  // entries belong to token rows (gmm lhs) or blocks of them (tgmm)
  // Scale coordinates (batch, row, col) of logical element (b, r, c) of the operand.
  std::function<std::array<int64_t, 3>(int64_t, int64_t, int64_t)> at;
  int64_t ld_arg() const { return vector ? 0 : layout.ld_arg(); }
};

// The scale map of lhs or rhs of the spec, for m rows; `pad` pads the rows of 2-D arrays.
// Logical elements: gmm lhs (0, r, k), rhs (j, k, n); tgmm lhs (0, r, k), rhs (0, r, n).
ScaleMap scale_map(const KernelSpec& s, bool is_lhs, int64_t m, int64_t pad) {
  const Quant& q = is_lhs ? s.lhs_quant : s.rhs_quant;
  const int64_t K = s.k, N = s.n, GL = s.g_local, B = q.block_k;
  ScaleMap sm;
  auto shape = [&](int64_t batch, int64_t rows, int64_t cols, bool vector) {
    sm.layout = make_layout(batch, rows, cols, false, vector ? 0 : pad);
    sm.vector = vector;
  };
  using A = std::array<int64_t, 3>;
  const bool channel = q.kind == QuantKind::kChannel;
  if (q.kind == QuantKind::kTensor) {
    shape(1, 1, 1, true);
    sm.at = [](int64_t, int64_t, int64_t) { return A{0, 0, 0}; };
  } else if (s.op == Op::kGmm && is_lhs) {  // channel [M]; block [M, ceil(K/B)]
    sm.per_token = true;
    if (channel) {
      shape(1, 1, m, true);
      sm.at = [](int64_t, int64_t r, int64_t) { return A{0, 0, r}; };
    } else {
      shape(1, m, ceil_div(K, B), false);
      sm.at = [B](int64_t, int64_t r, int64_t k) { return A{0, r, k / B}; };
    }
  } else if (s.op == Op::kGmm) {  // channel [G_local, N]; block [G_local, K blocks, N (blocks)]
    if (channel) {
      shape(GL, 1, N, false);
      sm.at = [](int64_t j, int64_t, int64_t n) { return A{j, 0, n}; };
    } else {
      const int64_t C = q.block_n ? q.block_n : 1, kb = ceil_div(K, B), nb = ceil_div(N, C);
      if (s.transpose_rhs) {
        shape(GL, nb, kb, false);
        sm.at = [B, C](int64_t j, int64_t k, int64_t n) { return A{j, n / C, k / B}; };
      } else {
        shape(GL, kb, nb, false);
        sm.at = [B, C](int64_t j, int64_t k, int64_t n) { return A{j, k / B, n / C}; };
      }
    }
  } else {  // tgmm: channel [K] or [N]; block [ceil(M/B), K or N] ([K, ceil(M/B)] for lhs km)
    const int64_t cols = is_lhs ? K : N;
    if (channel) {
      shape(1, 1, cols, true);
      sm.at = [](int64_t, int64_t, int64_t c) { return A{0, 0, c}; };
    } else {
      sm.per_token = true;
      if (is_lhs && s.lhs_layout == LhsLayout::kKM) {
        shape(1, K, ceil_div(m, B), false);
        sm.at = [B](int64_t, int64_t r, int64_t k) { return A{0, k, r / B}; };
      } else {
        shape(1, ceil_div(m, B), cols, false);
        sm.at = [B](int64_t, int64_t r, int64_t c) { return A{0, r / B, c}; };
      }
    }
  }
  return sm;
}

// One input operand as the kernel reads it (its values or codes, and its scales) and the exact
// value of every element for the reference.
struct Operand {
  Operand(DType d, const Layout& l, size_t misalign)
      : layout(l), data(d, l.count(), misalign), values(size_t(l.batch * l.rows * l.cols), 0.0) {}
  Layout layout;
  Buffer data;
  std::vector<double> values;  // logical [batch, rows, cols]; NaN where a kernel must not read
  bool scaled = false;
  ScaleMap smap;
  Buffer scales{DType::kF32, 1};
  std::vector<double> scale_values;  // logical [batch, rows, cols] of the scale array

  // A NaN in element (b, r, c): a NaN value, or an fp8 NaN code.
  void set_nan(int64_t b, int64_t r, int64_t c) {
    if (codes::is_fp8(data.dtype))
      data.set_code(layout.index(b, r, c), kFp8NaN);
    else
      data.set(layout.index(b, r, c), kNaN);
    values[size_t(layout.logical(b, r, c))] = kNaN;
  }
  // NaN scales for every element of matrix b, whose values become NaN.
  void poison_batch(int64_t b) {
    const Layout& sl = smap.layout;
    for (int64_t r = 0; r < sl.rows; ++r)
      for (int64_t c = 0; c < sl.cols; ++c) {
        scales.set(sl.index(b, r, c), kNaN);
        scale_values[size_t(sl.logical(b, r, c))] = kNaN;
      }
    for (int64_t r = 0; r < layout.rows; ++r)
      for (int64_t c = 0; c < layout.cols; ++c) values[size_t(layout.logical(b, r, c))] = kNaN;
  }
};

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

// A float buffer laid out as `l`: NaN in the padding, element (b, r, c) = value(), which is also
// stored into `logical` ([batch, rows, cols]).
template <typename F>
Buffer make_values(DType d, const Layout& l, size_t misalign, std::vector<double>& logical,
                   F value) {
  Buffer buf(d, l.count(), misalign);
  buf.poison(l.count());
  logical.assign(size_t(l.batch * l.rows * l.cols), 0.0);
  for (int64_t b = 0; b < l.batch; ++b)
    for (int64_t r = 0; r < l.rows; ++r)
      for (int64_t c = 0; c < l.cols; ++c) {
        const double v = value();
        logical[size_t(l.logical(b, r, c))] = v;
        buf.set(l.index(b, r, c), v);
      }
  return buf;
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
        out(spec.out, l.count(), c.misalign),
        separate(spec.out, l.count(), c.misalign) {
    out.poison(l.count());
    separate.poison(l.count());
    if (existing)
      (in_place ? out : separate) =
          make_values(spec.out, l, c.misalign, existing_values, [&] { return value(spec.out); });
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

// Plans, then runs every item (last to first in uneven chunks when asked; only the first with
// first_only); "" or the error.
std::string run_kernel(const gmmgen_kernel_entry& fns, const gmmgen_args& a, bool reverse,
                       std::mt19937_64& rng, bool first_only = false) {
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
  if (first_only) {
    chunks.emplace_back(0, std::min<int64_t>(items, 1));
  } else if (reverse) {  // items must be independent
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
  // exact: the inputs keep every f32 partial sum exact. slack: the c of the error bound (see
  // check_kernel in checker.h).
  Comparator(const KernelSpec& spec, const CheckCase& c, CheckResult& res, bool exact, int slack)
      : spec_(spec), case_(c), res_(res), exact_(exact), slack_(slack) {}

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

  // An element that sums `terms` products (or scale blocks); abs_dot is the absolute sum of the
  // products and extra the absolute value of the existing_out term (0 unless accumulating).
  template <typename Where>
  void computed(double got, double want, double abs_dot, double extra, int64_t terms, Where where) {
    ++res_.elements;
    if (exact_ && !std::isnan(want)) {
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
                         double(terms + slack_) * std::ldexp(1.0, -24) * (abs_dot + extra) +
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
  bool exact_;
  int slack_;
};

bool quantized(const KernelSpec& s) {
  return codes::is_quantized(s.lhs) || codes::is_quantized(s.rhs);
}
// Both operands integer codes (i8, i4, t2): each scale block's partial product is exact (i32).
bool integer_product(const KernelSpec& s) {
  return is_integer(s.lhs) && is_integer(s.rhs);
}
// The scale block along the contraction: the smallest block_k of the block-scaled operands
// (blocks are powers of two, so they nest); 0 when neither operand has blocks.
int64_t scale_block(const KernelSpec& s) {
  int64_t b = 0;
  for (const Quant* q : {&s.lhs_quant, &s.rhs_quant})
    if (q->kind == QuantKind::kBlock) b = b ? std::min(b, q->block_k) : q->block_k;
  return b;
}

// Exact inputs of a quantized spec: the widest span of power-of-two scales [2^-span, 1] whose
// sums of T terms (K for gmm, up to M for tgmm) stay exact in f32, T * 4^span <= 2^16 (each
// product of codes is at most 256 in magnitude); -1 when the case is not exact.
int exact_span_of(const KernelSpec& s, const CheckCase& c) {
  if (!c.exact_inputs) return -1;
  if (!quantized(s)) return 0;  // no scales
  const int64_t terms = s.op == Op::kGmm ? s.k : c.m;
  for (int span = 2; span >= 0; --span)
    if (terms <= (int64_t{1} << (16 - 2 * span))) return span;
  return -1;
}

// What a check works with: the result being built and the comparator filling it, the case's
// random stream and values, and the local group of each row (-1 outside the active groups).
struct Check {
  const KernelSpec& spec;
  const CheckCase& c;
  const int exact_span;
  CheckResult res;
  Comparator cmp;
  std::mt19937_64 rng{c.seed};
  Values value;
  std::vector<int32_t> row_group =
      local_group_of_rows(c.m, c.group_sizes, c.group_offset, int32_t(spec.g_local));

  Check(const KernelSpec& s, const CheckCase& cc)
      : spec(s),
        c(cc),
        exact_span(exact_span_of(s, cc)),
        cmp(s, cc, res, exact_span >= 0, quantized(s) ? 4 : 2),
        value{rng, exact_span >= 0} {}

  // An input operand laid out as `l`, lhs or rhs of the spec. Token operands (one logical row
  // per token) can be read only in the rows of active groups: other rows hold NaN (float, fp8
  // codes) or random codes whose per-token scales are NaN (see checker.h); every element's
  // value is NaN there for the reference. Padding holds NaN or garbage codes.
  Operand input(bool is_lhs, const Layout& l, bool token) {
    const DType d = is_lhs ? spec.lhs : spec.rhs;
    const Quant& q = is_lhs ? spec.lhs_quant : spec.rhs_quant;
    Operand op(d, l, c.misalign);
    auto readable = [&](int64_t r) { return !token || row_group[size_t(r)] >= 0; };
    if (!codes::is_quantized(d)) {
      op.data.poison(l.count());
      for (int64_t b = 0; b < l.batch; ++b)
        for (int64_t r = 0; r < l.rows; ++r)
          for (int64_t cc = 0; cc < l.cols; ++cc) {
            const double v = readable(r) ? value(d) : kNaN;
            op.values[size_t(l.logical(b, r, cc))] = v;
            op.data.set(l.index(b, r, cc), v);
          }
      return op;
    }
    // Scales first (an element's value needs its scale); all-zero blocks now and then.
    op.scaled = q.kind != QuantKind::kNone;
    std::vector<int64_t> uses;
    std::vector<char> zero_block;
    if (op.scaled) {
      op.smap = scale_map(spec, is_lhs, c.m, is_lhs ? c.lhs_pad : c.rhs_pad);
      const Layout& sl = op.smap.layout;
      op.scales = Buffer(DType::kF32, sl.count(), c.misalign);
      op.scales.poison(sl.count());
      const size_t entries = size_t(sl.batch * sl.rows * sl.cols);
      op.scale_values.resize(entries);
      uses.assign(entries, 0);
      zero_block.assign(entries, 0);
      for (size_t i = 0; i < entries; ++i) {
        op.scale_values[i] = random_scale(d, rng, exact_span);
        zero_block[i] = q.kind == QuantKind::kBlock && rng() % 8 == 0;
      }
    }
    const CodeSource src(d, exact_span >= 0, op.scaled, spec.out != DType::kF16);
    for (int64_t row = 0; row < l.batch * l.stored_rows(); ++row)  // padding
      for (int64_t i = l.row_length(); i < l.ld; ++i)
        op.data.set_code(row * l.ld + i, src.garbage(rng));
    for (int64_t b = 0; b < l.batch; ++b)
      for (int64_t r = 0; r < l.rows; ++r)
        for (int64_t cc = 0; cc < l.cols; ++cc) {
          const int64_t at = l.index(b, r, cc);
          double& v = op.values[size_t(l.logical(b, r, cc))];
          if (!readable(r)) {
            op.data.set_code(at, codes::is_fp8(d) ? kFp8NaN : src.draw(rng));
            v = kNaN;
            continue;
          }
          int64_t si = -1;
          if (op.scaled) {
            const auto [sb, sr, sc] = op.smap.at(b, r, cc);
            si = op.smap.layout.logical(sb, sr, sc);
            ++uses[size_t(si)];
          }
          const uint8_t code = si >= 0 && zero_block[size_t(si)] ? src.zero() : src.draw(rng);
          op.data.set_code(at, code);
          v = double(codes::decode(d, code)) * (si >= 0 ? op.scale_values[size_t(si)] : 1.0);
        }
    if (op.scaled) {
      const Layout& sl = op.smap.layout;
      for (int64_t b = 0; b < sl.batch; ++b)
        for (int64_t r = 0; r < sl.rows; ++r)
          for (int64_t cc = 0; cc < sl.cols; ++cc) {
            double& s = op.scale_values[size_t(sl.logical(b, r, cc))];
            if (op.smap.per_token && uses[size_t(sl.logical(b, r, cc))] == 0) s = kNaN;
            op.scales.set(sl.index(b, r, cc), s);
          }
    }
    return op;
  }

  // Runs the kernel on the operands, then fills res.output_digest and checks the padding of
  // out. False (with res.failure) when plan or run_items failed.
  bool run(const gmmgen_kernel_entry& fns, Operand& lhs, Operand& rhs, Outputs& outs) {
    gmmgen_args a{};
    a.abi_version = GMMGEN_ABI_VERSION;
    a.m = c.m;
    a.lhs = lhs.data.data(), a.lhs_ld = lhs.layout.ld_arg();
    a.rhs = rhs.data.data(), a.rhs_ld = rhs.layout.ld_arg();
    a.group_sizes = c.group_sizes.data();
    a.group_offset = c.group_offset;
    if (lhs.scaled) {
      a.lhs_scale = static_cast<const float*>(lhs.scales.data());
      a.lhs_scale_ld = lhs.smap.ld_arg();
    }
    if (rhs.scaled) {
      a.rhs_scale = static_cast<const float*>(rhs.scales.data());
      a.rhs_scale_ld = rhs.smap.ld_arg();
    }
    outs.set_args(a);
    if (c.other_values_first) {
      // Rotated by a byte every value moves (codes stay codes): the kernel sees other operands
      // at the same addresses.
      const std::vector<unsigned char> l = lhs.data.storage, r = rhs.data.storage;
      const std::vector<unsigned char> o = outs.out.storage, e = outs.separate.storage;
      std::rotate(lhs.data.storage.begin(), lhs.data.storage.begin() + 1, lhs.data.storage.end());
      std::rotate(rhs.data.storage.begin(), rhs.data.storage.begin() + 1, rhs.data.storage.end());
      const std::string err = run_kernel(fns, a, false, rng, true);
      // (Copied back in place: a holds their addresses.)
      std::copy(l.begin(), l.end(), lhs.data.storage.begin());
      std::copy(r.begin(), r.end(), rhs.data.storage.begin());
      std::copy(o.begin(), o.end(), outs.out.storage.begin());
      std::copy(e.begin(), e.end(), outs.separate.storage.begin());
      if (!err.empty()) {
        cmp.fail("kernel", "on other values first: " + err);
        return false;
      }
    }
    if (const std::string err = run_kernel(fns, a, c.reverse_items, rng); !err.empty()) {
      cmp.fail("kernel", err);
      return false;
    }
    res.output_digest = outs.digest();
    if (const std::string change = outs.padding_change(); !change.empty()) cmp.fail("out", change);
    return true;
  }
};

int64_t per_byte(DType d) {
  return codes::is_quantized(d) ? codes::elements_per_byte(d) : 1;
}

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

  Operand lhs = ck.input(true, make_layout(1, M, K, false, c.lhs_pad, per_byte(spec.lhs)), true);
  // rhs [G_local, K, N], stored [G_local, N, K] with transpose_rhs.
  Operand rhs = ck.input(
      false, make_layout(GL, K, N, spec.transpose_rhs, c.rhs_pad, per_byte(spec.rhs)), false);
  if (c.nan_expert) {
    if (!codes::needs_scales(spec.rhs)) {  // a NaN value or code in local expert GL / 2
      const int64_t i = int64_t(ck.rng() % uint64_t(K * N));
      rhs.set_nan(GL / 2, i / N, i % N);
    }
    // Scales per expert: NaN for an expert whose group is empty (nothing may read them).
    if (rhs.scaled && spec.rhs_quant.kind != QuantKind::kTensor) {
      std::vector<int32_t> empty;
      for (int32_t j = 0; j < GL; ++j)
        if (c.group_sizes[size_t(c.group_offset + j)] == 0) empty.push_back(j);
      if (!empty.empty()) rhs.poison_batch(empty[ck.rng() % empty.size()]);
    }
  }
  p.lhs = lhs.values;
  p.rhs.resize(rhs.values.size());  // the reference reads rhs in its storage order
  for (int64_t j = 0; j < GL; ++j)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t n = 0; n < N; ++n)
        p.rhs[size_t(spec.transpose_rhs ? (j * N + n) * K + k : (j * K + k) * N + n)] =
            rhs.values[size_t((j * K + k) * N + n)];
  Outputs outs(spec, c, make_layout(1, M, N, false, c.out_pad), p.existing_out, ck.value);
  if (!ck.run(fns, lhs, rhs, outs)) return ck.res;

  const ReferenceResult ref = reference_gmm(p);
  const bool accumulate = spec.out_mode == OutMode::kAccumulate;
  const int64_t sb = scale_block(spec);
  const int64_t terms = integer_product(spec) ? (sb ? ceil_div(K, sb) : 1) : K;
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
                        accumulate ? std::fabs(p.existing_out[i]) : 0.0, terms, where);
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
  Operand lhs = ck.input(
      true, make_layout(1, M, K, spec.lhs_layout == LhsLayout::kKM, c.lhs_pad, per_byte(spec.lhs)),
      true);
  Operand rhs = ck.input(false, make_layout(1, M, N, false, c.rhs_pad, per_byte(spec.rhs)), true);
  if (c.nan_expert) {  // one row of one non-empty active group, in lhs or in rhs
    std::vector<int64_t> rows;
    for (int64_t r = 0; r < M; ++r)
      if (ck.row_group[r] >= 0) rows.push_back(r);
    std::vector<Operand*> holders;  // operands that can hold a NaN (integer codes cannot)
    for (Operand* o : {&lhs, &rhs})
      if (!codes::needs_scales(o->data.dtype)) holders.push_back(o);
    if (!rows.empty() && !holders.empty()) {
      const int64_t r = rows[ck.rng() % rows.size()];
      Operand& o = *holders[ck.rng() % holders.size()];
      o.set_nan(0, r, int64_t(ck.rng() % uint64_t(o.layout.cols)));
    }
  }
  p.lhs = lhs.values;
  p.rhs = rhs.values;
  // out [G_local, K, N], stored [G_local, N, K] with transpose_rhs.
  Outputs outs(spec, c, make_layout(GL, K, N, spec.transpose_rhs, c.out_pad), p.existing_out,
               ck.value);
  if (!ck.run(fns, lhs, rhs, outs)) return ck.res;

  const TgmmReferenceResult ref = reference_tgmm(p);
  const bool accumulate = spec.out_mode == OutMode::kAccumulate;
  const int64_t sb = scale_block(spec);
  for (int32_t j = 0; j < GL; ++j) {
    // Integer products: the blocks of sb global rows that the group's rows touch.
    const int64_t rows = ref.rows[j], begin = ref.row_begin[j];
    const int64_t terms = !integer_product(spec) ? rows
                          : rows == 0            ? 0
                          : sb                   ? (begin + rows - 1) / sb - begin / sb + 1
                                                 : 1;
    for (int64_t k = 0; k < K; ++k)
      for (int64_t n = 0; n < N; ++n) {
        const int64_t i = (j * K + k) * N + n;
        auto where = [&] {
          return "out[" + std::to_string(j) + "][" + std::to_string(k) + ", " + std::to_string(n) +
                 "] (group " + std::to_string(c.group_offset + j) + ", " + std::to_string(rows) +
                 " rows)";
        };
        const double got = outs.get(j, k, n);
        if (rows == 0)
          ck.cmp.exact(got, ref.out[i], "empty group", where);
        else
          ck.cmp.computed(got, ref.out[i], ref.abs_dot[i],
                          accumulate ? std::fabs(p.existing_out[i]) : 0.0, terms, where);
      }
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
        c.misalign = size_t(16 * (index / 2 % 4));
        std::ostringstream label;
        label << "M=" << m << " sum=" << rows << " " << to_string(d) << " offset=" << off
              << (c.nan_expert ? (spec.op == Op::kTgmm ? " nan-row" : " nan-expert") : "")
              << (c.lhs_pad || c.rhs_pad || c.out_pad ? " strided" : "")
              << (c.exact_inputs ? " exact" : "")
              << (c.misalign ? " " + std::to_string(c.misalign) + " bytes past a line" : "")
              << (spec.out_mode != OutMode::kPlain ? (c.in_place ? " in-place" : " separate") : "");
        c.label = label.str();
        cases.push_back(std::move(c));
        ++index;
      }
    }
  }
  // tgmm with scale blocks of global rows: group boundaries inside blocks (each group sums only
  // its own rows of a block), and whole blocks outside the active groups, whose scales are NaN:
  // before a shard (a group of 2B + 1 rows) and past sum(group_sizes) (2B + 2 rows).
  const int64_t sb = scale_block(spec);
  if (spec.op == Op::kTgmm && sb > 0 && sb <= 256) {
    for (int32_t off : offsets) {
      CheckCase c;
      c.seed = rng();
      c.group_sizes.assign(size_t(G), 0);
      if (off > 0) c.group_sizes[size_t(off - 1)] = int32_t(2 * sb + 1);
      for (int32_t j = 0; j < std::min(GL, 3); ++j)
        c.group_sizes[size_t(off + j)] = int32_t(j % 2 ? sb + sb / 2 + 1 : sb / 2 + 3);
      const int64_t sum = std::accumulate(c.group_sizes.begin(), c.group_sizes.end(), int64_t{0});
      c.m = sum + 2 * sb + 2;
      c.group_offset = off;
      c.in_place = off % 2 == 0;
      c.lhs_pad = 1;
      c.rhs_pad = 2;
      c.reverse_items = true;
      c.label = "M=" + std::to_string(c.m) + " sum=" + std::to_string(sum) +
                " offset=" + std::to_string(off) + " group boundaries inside scale blocks of " +
                std::to_string(sb) + " rows, strided";
      cases.push_back(std::move(c));
    }
  }
  return cases;
}

// Operand elements the quick cases of one kernel may generate. The checker builds every operand
// of every case afresh and rounds each element to its dtype; with a large weight tensor (the
// README's k=2048, n=1408, g=64: 184M elements) that is seconds per case.
constexpr int64_t kQuickElements = int64_t(1) << 28;

std::vector<CheckCase> quick_cases(const KernelSpec& spec, uint64_t seed) {
  const std::vector<CheckCase> all = standard_cases(spec, seed);
  const auto scale_blocks = [](const CheckCase& c) {
    return c.label.find("scale blocks") != std::string::npos;
  };
  int64_t largest = 0;
  for (const auto& c : all)
    if (!scale_blocks(c)) largest = std::max(largest, c.m);
  // (M, distribution) in priority order; labels read "M=<m> sum=<rows> <distribution> ...".
  const std::pair<int64_t, std::string> wanted[] = {{97, "random"},       {97, "skewed+empty"},
                                                    {largest, "uniform"}, {97, "many-tiny"},
                                                    {97, "uniform"},      {1, "uniform"}};
  std::vector<const CheckCase*> picked;
  for (const auto& [m, dist] : wanted)
    for (const auto& c : all)
      if (!scale_blocks(c) && c.m == m && c.label.find(" " + dist + " ") != std::string::npos &&
          std::find(picked.begin(), picked.end(), &c) == picked.end())
        picked.push_back(&c);
  for (const auto& c : all)
    if (scale_blocks(c)) picked.push_back(&c);
  const int64_t weights = spec.g_local * spec.k * spec.n;  // rhs (gmm) or out (tgmm)
  std::vector<CheckCase> out;
  int64_t elements = 0;
  for (const CheckCase* c : picked) {
    elements += weights + c->m * (spec.k + spec.n);
    if (!out.empty() && elements > kQuickElements) break;
    out.push_back(*c);
  }
  return out;
}

}  // namespace gmmgen
