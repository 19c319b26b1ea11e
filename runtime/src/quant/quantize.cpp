// The quantizers: validation first (arguments, then x's values), then one pass over x per
// panel of whole scale blocks, small enough to stay in cache between its amax and its encoding;
// panels split over the process pool, their inner loops in vector code (quant/vector_runs.h).
#include "gmmgen/quantize.hpp"

#include <algorithm>
#include <atomic>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstring>
#include <exception>
#include <functional>
#include <initializer_list>
#include <limits>
#include <mutex>
#include <type_traits>
#include <vector>

#include "exec/thread_pool.h"
#include "gmmgen/codes.h"
#include "gmmgen/heuristics.h"
#include "quant/quantize_internal.h"
#include "quant/vector_runs.h"

namespace gmmgen {
namespace {

// Columns of one panel of several rows where it takes its own maxima and encodes from them: 256
// f32 per row keeps a 128-row panel in L2. Where its scales are known before (taken by an
// earlier pass over x, or fixed), or where it only takes maxima, a panel's rows are read once
// each, and wider: 4096 f32 (16 KiB) per row, a run the prefetchers follow (at 256, 1 KiB
// runs 16 KiB apart, each row's first lines were demand misses). A panel of one row (1xB blocks)
// takes 4096 either way: 16 KiB stay in L1 from the maxima to the codes, and the maxima of 16
// blocks are taken at once.
constexpr int64_t kPanelCols = 256, kWidePanelCols = 4096, kRowPanelCols = 4096;

[[noreturn]] void fail(const std::string& msg) {
  throw InvalidArgument(msg);
}

std::string num(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// ---- Encoding: the inverse of codes::decode. -------------------------------------------------

// What encoding a dtype needs, computed once per call.
struct Codec {
  DType dtype;
  double qmax = 0.0;
  // fp8: the host format of the dtype table (significand bits with the implicit one, smallest
  // normal exponent, largest value) and half its smallest subnormal (at most that rounds to 0).
  int precision = 0, emin = 0;
  double max = 0.0, half_min_subnormal = 0.0;
  // nf4 and t2: the code is a count of thresholds below v, mapped (quant_runs::LevelRun).
  quant_runs::LevelRun levels;
  explicit Codec(DType d) : dtype(d), qmax(codes::qmax(d)) {
    if (codes::is_fp8(d)) {
      const DTypeInfo& i = dtype_info(d);
      precision = i.precision, emin = i.emin, max = i.max_finite;
      half_min_subnormal = std::ldexp(1.0, emin - precision);
    }
    // A threshold that v must reach (a tie that goes up) is the f64 value just below it.
    constexpr double kLow = -std::numeric_limits<double>::infinity();
    if (d == DType::kNF4) {  // the nearest level; a tie goes to the level nearer zero
      const float* l = codes::kNf4Levels;
      levels.bits = 4, levels.count = 15;
      for (int i = 0; i < 15; ++i) {
        const double mid = (double(l[i]) + double(l[i + 1])) / 2;  // exact in f64
        const bool tie_up = std::fabs(l[i + 1]) < std::fabs(l[i]);
        levels.thresholds[i] = tie_up ? std::nextafter(mid, kLow) : mid;
      }
      for (int i = 0; i < 16; ++i) levels.map[i] = i;
    } else if (d == DType::kT2) {  // -1 below -0.5, 0 up to +0.5 (ties go to even 0), else +1
      levels.bits = 2, levels.count = 2;
      levels.thresholds[0] = std::nextafter(-0.5, kLow), levels.thresholds[1] = 0.5;
      levels.map[0] = 2, levels.map[1] = 0, levels.map[2] = 1;
    }
  }
};

// Round to nearest, ties to even, of |v| <= 2^51, in integer-free arithmetic: adding 1.5 * 2^52
// leaves no fraction bits (the default rounding mode does the rounding); no libm call.
inline double round_even(double v) {
  constexpr double kShift = 0x1.8p52;
  return (v + kShift) - kShift;
}

// The saturating RNE cast, on the bits of the f64 value: the significand is shifted right to
// the fp8 precision at exponent e (below emin, the subnormal step) and rounded on the dropped
// bits.
uint8_t encode_fp8(const Codec& k, double v) {
  const uint8_t sign = std::signbit(v) ? 0x80 : 0;
  const double a = std::min(std::fabs(v), k.max);  // saturate: max is a value of the format
  if (!(a > k.half_min_subnormal)) return sign;    // rounds to zero (a tie goes to even 0)
  uint64_t u;
  std::memcpy(&u, &a, 8);
  const int exp = int(u >> 52) - 1023;  // a is a normal f64 here
  const uint64_t sig = (u & ((uint64_t(1) << 52) - 1)) | (uint64_t(1) << 52);
  const int frac = k.precision - 1;  // stored significand bits
  int e = std::max(exp, k.emin);
  const int shift = 52 - frac + (e - exp);  // in [52 - frac, 53]
  uint64_t m = sig >> shift;
  const uint64_t rest = sig & ((uint64_t(1) << shift) - 1), half = uint64_t(1) << (shift - 1);
  m += uint64_t(rest > half) | (uint64_t(rest == half) & m & 1);  // ties to even, branch-free
  if (m == (uint64_t(1) << k.precision)) m >>= 1, ++e;            // rounded up into the next binade
  if (m < (uint64_t(1) << frac)) return uint8_t(sign | m);        // subnormal: exponent field 0
  return uint8_t(sign | ((e - k.emin + 1) << frac) | (m - (uint64_t(1) << frac)));
}

// nf4 and t2: the count of thresholds below v (branch-free), mapped to the code.
uint8_t encode_level(const quant_runs::LevelRun& r, double v) {
  int below = 0;
  for (int i = 0; i < r.count; ++i) below += v > r.thresholds[i];
  return uint8_t(r.map[below]);
}

template <DType D>
uint8_t encode(const Codec& k, double v) {
  if constexpr (D == DType::kI8 || D == DType::kI4) {
    // Clamping to the integer bounds first gives the same result as rounding first.
    const int q = int(round_even(std::clamp(v, -k.qmax, k.qmax)));
    return D == DType::kI8 ? uint8_t(int8_t(q)) : uint8_t(q & 15);
  } else if constexpr (D == DType::kT2 || D == DType::kNF4) {
    return encode_level(k.levels, v);
  } else {
    static_assert(D == DType::kF8E4M3 || D == DType::kF8E5M2);
    return encode_fp8(k, v);
  }
}

// Calls f(std::integral_constant<DType, D>) for the quantized dtype d.
template <typename F>
decltype(auto) with_dtype(DType d, F&& f) {
  switch (d) {
    case DType::kF8E4M3:
      return f(std::integral_constant<DType, DType::kF8E4M3>{});
    case DType::kF8E5M2:
      return f(std::integral_constant<DType, DType::kF8E5M2>{});
    case DType::kI8:
      return f(std::integral_constant<DType, DType::kI8>{});
    case DType::kI4:
      return f(std::integral_constant<DType, DType::kI4>{});
    case DType::kNF4:
      return f(std::integral_constant<DType, DType::kNF4>{});
    case DType::kT2:
      return f(std::integral_constant<DType, DType::kT2>{});
    default:
      fail("dtype=" + std::string(to_string(d)) + " is not a quantized dtype");
  }
}

// ---- Scales ------------------------------------------------------------------------------------

// Kernels require scales > 0: a block of values so small that amax / qmax underflows f32 gets
// the smallest positive f32 (its codes then saturate).
float positive_scale(double s) {
  const float f = float(s);
  return f > 0 ? f : std::numeric_limits<float>::denorm_min();
}

float absmax_scale(float amax, double qmax) {
  return amax == 0.0f ? 1.0f : positive_scale(double(amax) / qmax);
}

double fixed_bound(const Calibration& c) {
  return std::max(std::fabs(c.lo), std::fabs(c.hi));
}

// Where the scales of a [rows, cols] matrix live: block (i, j) covers rows [i*br, (i+1)*br) and
// cols [j*bc, (j+1)*bc).
struct Layout {
  int64_t br = 1, bc = 1;
  int64_t grid_rows = 0, grid_cols = 0;
  bool vector_of_rows = false;  // channel along cols: one scale per row, stored as a vector
  bool vector = false;          // tensor and channel scales are vectors ([1], [rows], [cols])
  ScaleShape shape;
  int64_t ld = 0;  // scales_ld, resolved
  int64_t index(int64_t i, int64_t j) const { return vector_of_rows ? i : i * ld + j; }
  // The scale's name in messages: scales[i] for vectors, scales[i, j] otherwise.
  std::string name(int64_t i, int64_t j) const {
    if (vector) return "[" + std::to_string(index(i, j)) + "]";
    return "[" + std::to_string(i) + ", " + std::to_string(j) + "]";
  }
};

Layout layout_of(const Quant& q, QuantAxis axis, int64_t rows, int64_t cols) {
  Layout l;
  const bool along_cols = axis == QuantAxis::kCols;
  const int64_t full_r = std::max<int64_t>(rows, 1), full_c = std::max<int64_t>(cols, 1);
  switch (q.kind) {
    case QuantKind::kNone:  // no scales; one "block" per row keeps the loops uniform
      l.bc = full_c;
      break;
    case QuantKind::kTensor:
      l.br = full_r, l.bc = full_c;
      break;
    case QuantKind::kChannel:
      if (along_cols)
        l.bc = full_c, l.vector_of_rows = true;
      else
        l.br = full_r;
      break;
    case QuantKind::kBlock: {
      const int64_t other = q.block_n ? q.block_n : 1;
      if (along_cols)
        l.br = other, l.bc = q.block_k;
      else
        l.br = q.block_k, l.bc = other;
      break;
    }
  }
  l.vector = q.kind == QuantKind::kTensor || q.kind == QuantKind::kChannel;
  l.grid_rows = ceil_div(rows, l.br);
  l.grid_cols = ceil_div(cols, l.bc);
  if (q.kind == QuantKind::kNone)
    l.shape = {0, 0};
  else if (q.kind == QuantKind::kTensor)
    l.shape = {1, 1};
  else if (l.vector_of_rows)
    l.shape = {1, rows};
  else
    l.shape = {l.grid_rows, l.grid_cols};
  return l;
}

// ---- Validation --------------------------------------------------------------------------------

void check_dtype(DType d) {
  const int32_t v = int32_t(d);
  if (v < 0 || v >= kNumDTypes) fail("dtype=" + std::to_string(v) + " is not a dtype code");
  if (!codes::is_quantized(d))
    fail("dtype=" + std::string(to_string(d)) +
         " is not a quantized dtype (one of f8e4m3, f8e5m2, i8, i4, nf4, t2)");
}

void check_axis(QuantAxis a) {
  if (a != QuantAxis::kRows && a != QuantAxis::kCols)
    fail("axis=" + std::to_string(int32_t(a)) + " is not 0 (rows) or 1 (cols)");
}

void check_value_check(ValueCheck v) {
  if (v != ValueCheck::kBeforeWrites && v != ValueCheck::kWhileWriting)
    fail("check=" + std::to_string(int32_t(v)) + " is not 0 (kBeforeWrites) or 1 (kWhileWriting)");
}

void check_calibration(const Calibration& c, DType d) {
  if (c.kind == Calibration::Kind::kAbsmax) return;
  if (c.kind != Calibration::Kind::kFixed)
    fail("calibration: kind " + std::to_string(int(c.kind)) + " is not absmax or fixed");
  const std::string what = "calibration=" + to_string(c);
  if (!std::isfinite(c.lo) || !std::isfinite(c.hi)) fail(what + ": lo and hi must be finite");
  if (!(c.lo < c.hi)) fail(what + ": lo < hi required");
  if (fixed_bound(c) / codes::qmax(d) > std::numeric_limits<float>::max())
    fail(what + ": the scale max(|lo|, |hi|) / qmax overflows f32");
}

void check_block_size(const Quant& q, int64_t b, const std::string& param) {
  if (b < 16 || b > kMaxTile || (b & (b - 1)) != 0)
    fail(param + "=" + to_string(q) + ": block size " + std::to_string(b) +
         " must be a power of two in [16, " + std::to_string(kMaxTile) + "]");
}

void check_scheme(const Quant& q, DType d, const Calibration& c, const std::string& param) {
  const std::string what = param + "=" + to_string(q);
  switch (q.kind) {
    case QuantKind::kNone:
      if (!codes::is_fp8(d))
        fail(what + ": dtype=" + std::string(to_string(d)) +
             " needs scales (its codes are not values); use tensor, channel or block:B");
      if (c.kind != Calibration::Kind::kAbsmax)
        fail(what + ": fixed calibration sets a scale, and scheme none has none");
      return;
    case QuantKind::kTensor:
    case QuantKind::kChannel:
      if (q.block_k != 0 || q.block_n != 0)
        fail(what + ": block sizes (block_k=" + std::to_string(q.block_k) +
             ", block_n=" + std::to_string(q.block_n) + ") apply to block:B only");
      return;
    case QuantKind::kBlock:
      check_block_size(q, q.block_k, param);
      if (q.block_n != 0) check_block_size(q, q.block_n, param);
      return;
  }
  fail(param + ": kind " + std::to_string(int(q.kind)) +
       " is not one of: none, tensor, channel, block");
}

// Sizes up to 2^62 keep every index computation below in int64.
void check_size(int64_t v, const char* name) {
  if (v < 0 || v > (int64_t(1) << 62))
    fail(std::string(name) + "=" + std::to_string(v) +
         (v < 0 ? " must be >= 0" : " must be <= 2^62"));
}

// A leading dimension: 0 (packed: `len`) or at least `len`, which `len_doc` names.
int64_t resolve_ld(int64_t ld, int64_t len, const std::string& name, const std::string& len_doc) {
  if (ld < 0) fail(name + "=" + std::to_string(ld) + " must be >= 0 (0 means packed)");
  if (ld == 0) return len;
  if (ld < len)
    fail(name + "=" + std::to_string(ld) + " is less than " + len_doc + " (0 means packed)");
  return ld;
}

int64_t resolve_codes_ld(int64_t ld, int64_t cols, DType d, const std::string& name) {
  const int per = codes::elements_per_byte(d);
  if (ld == 0) return packed_codes_ld(d, cols);
  resolve_ld(ld, cols, name, "cols=" + std::to_string(cols));
  if (ld % per != 0)
    fail(name + "=" + std::to_string(ld) + " is not a multiple of " + std::to_string(per) + ": " +
         std::string(to_string(d)) + " packs " + std::to_string(per) + " codes per byte");
  return ld;
}

// Bytes spanned by `rows` rows of `row_bytes` bytes, `stride` bytes apart.
int64_t span_bytes(int64_t rows, __int128 row_bytes, __int128 stride, const std::string& what) {
  if (rows == 0 || row_bytes == 0) return 0;
  constexpr __int128 kLimit = __int128(1) << 62;
  const __int128 bytes = (rows - 1) * stride + row_bytes;
  if (bytes > kLimit) fail(what + " spans more than 2^62 bytes");
  return int64_t(bytes);
}

struct Region {
  const void* p;
  int64_t bytes;
  const char* name;
};

void check_pointer(const void* p, size_t align, const char* name) {
  if (!p) fail(std::string(name) + " is null");
  if (reinterpret_cast<uintptr_t>(p) % align != 0)
    fail(std::string(name) + " is not " + std::to_string(align) + "-byte aligned");
}

void check_disjoint(std::initializer_list<Region> regions) {
  for (auto a = regions.begin(); a != regions.end(); ++a)
    for (auto b = a + 1; b != regions.end(); ++b) {
      if (!a->bytes || !b->bytes) continue;
      const auto pa = reinterpret_cast<uintptr_t>(a->p), pb = reinterpret_cast<uintptr_t>(b->p);
      if (pa < pb + uint64_t(b->bytes) && pb < pa + uint64_t(a->bytes))
        fail(std::string(b->name) + " overlaps " + a->name);
    }
}

// One operand's output: codes and (unless scheme none) scales, with their validated layout.
struct Output {
  uint8_t* codes = nullptr;
  int64_t code_stride = 0;  // bytes between code rows
  float* scales = nullptr;
  Layout layout;
};

// Checks one output of a [rows, cols] matrix (names prefixed by `prefix`: "" or "row_"/"col_")
// and returns it resolved; its regions are appended for the overlap check.
Output check_output(const std::string& prefix, DType d, const Quant& q, QuantAxis axis,
                    int64_t rows, int64_t cols, void* codes, int64_t codes_ld, float* scales,
                    int64_t scales_ld, Region& codes_region, Region& scales_region) {
  const std::string codes_name = prefix + "codes", scales_name = prefix + "scales";
  Output o;
  o.layout = layout_of(q, axis, rows, cols);
  const int64_t cld = resolve_codes_ld(codes_ld, cols, d, codes_name + "_ld");
  const int per = codes::elements_per_byte(d);
  o.code_stride = cld / per;
  const bool scaled = q.kind != QuantKind::kNone;
  if (scaled)
    o.layout.ld =
        resolve_ld(scales_ld, o.layout.shape.cols, scales_name + "_ld",
                   "the " + std::to_string(o.layout.shape.cols) + " scales per row of " +
                       to_string(q) + (axis == QuantAxis::kCols ? " along cols" : " along rows") +
                       " for [" + std::to_string(rows) + ", " + std::to_string(cols) + "]");
  const bool empty = rows == 0 || cols == 0;
  codes_region = {codes, 0, nullptr};
  scales_region = {scales, 0, nullptr};
  if (empty) return o;
  codes_region.bytes = span_bytes(rows, ceil_div(cols, per), o.code_stride, codes_name);
  check_pointer(codes, 1, codes_name.c_str());
  o.codes = static_cast<uint8_t*>(codes);
  if (scaled) {
    scales_region.bytes = span_bytes(o.layout.shape.rows, __int128(o.layout.shape.cols) * 4,
                                     __int128(o.layout.ld) * 4, scales_name);
    check_pointer(scales, alignof(float), scales_name.c_str());
    o.scales = scales;
  }
  return o;
}

// x [rows, cols] of f32 (size 4) or bf16 (size 2) elements, rows x_ld apart.
int64_t check_input(const void* x, int64_t rows, int64_t cols, int64_t x_ld, Region& region,
                    int64_t size = 4) {
  check_size(rows, "rows");
  check_size(cols, "cols");
  const int64_t ld = resolve_ld(x_ld, cols, "x_ld", "cols=" + std::to_string(cols));
  region = {x, 0, "x"};
  if (rows == 0 || cols == 0) return ld;
  region.bytes = span_bytes(rows, __int128(cols) * size, __int128(ld) * size, "x");
  check_pointer(x, size_t(size), "x");
  return ld;
}

// ---- Quantization ------------------------------------------------------------------------------

struct Source {
  const float* x = nullptr;        // f32 values, or null when bf16 holds them
  const uint16_t* bf16 = nullptr;  // bf16 bit patterns (each exactly an f32 value)
  int64_t rows = 0, cols = 0, ld = 0;
  Calibration cal;
  float fixed_scale = 1.0f;    // fixed calibration: every block's scale
  ThreadPool* pool = nullptr;  // where the work is split
  // Values not checked before: a panel (or the single block) whose maxima are not finite sets
  // *bad and writes nothing (the maxima see every value under absmax calibration).
  std::atomic<bool>* bad = nullptr;
  // Every block's scale, taken before any write (block_scales: [grid_rows, grid_cols]), or null:
  // the panels then take their own maxima.
  const float* scales = nullptr;
  // Whether each row run is checked for values that are not finite just before it is encoded
  // (while writing, where no maxima see every value): a bad one sets *bad and writes nothing more
  // of its panel.
  bool check_runs = false;
  bool bad_run(const float* row, int64_t c0, int64_t c1) const {
    if (!check_runs || !quant_runs::any_not_finite(row + c0, c1 - c0)) return false;
    bad->store(true);
    return true;
  }
  // Row r's values as f32, valid at columns [c0, c1): x's own row, or the bf16 row widened into
  // buf (a row_buffer()) there. The arithmetic after this never sees the input's dtype.
  const float* row(int64_t r, int64_t c0, int64_t c1, float* buf) const {
    if (x) return x + r * ld;
    quant_runs::widen_bf16(bf16 + r * ld + c0, c1 - c0, buf + c0);
    return buf;
  }
  std::vector<float> row_buffer() const { return std::vector<float>(bf16 ? size_t(cols) : 0); }
  float at(int64_t r, int64_t c) const {
    return x ? x[r * ld + c] : std::bit_cast<float>(uint32_t(bf16[r * ld + c]) << 16);
  }
  // The value encoded for element x: clipped first under fixed calibration.
  double value(float v) const {
    return cal.kind == Calibration::Kind::kFixed ? std::clamp(double(v), cal.lo, cal.hi)
                                                 : double(v);
  }
};

// Bits per code of a quantized dtype, at compile time (bits_of is a table lookup).
template <DType D>
constexpr int code_bits() {
  return D == DType::kI4 || D == DType::kNF4 ? 4 : D == DType::kT2 ? 2 : 8;
}

// The codes of row[c0, c1): encode<D>(value(row[c]) / s), s = scales[(c - c0) / every], every
// being 1 (a scale per column), a block length (a power of two >= 16) or kOneScale; i8 and i4 in
// vector code; fp8 too (f32 quotients under absmax calibration, f64 ones under fixed calibration
// where the CPU has AVX-512).
constexpr int64_t kOneScale = quant_runs::kOneScale;

template <DType D>
void encode_run(const Codec& k, const Source& src, const float* row, int64_t c0, int64_t c1,
                const float* scales, int64_t every, uint8_t* crow) {
  constexpr int kBits = code_bits<D>();
  int64_t c = c0;
  // An i4 run starting mid-byte (never: blocks and panels are even) is scalar.
  if constexpr (D == DType::kI8 || D == DType::kI4) {
    if (D == DType::kI8 || c0 % 2 == 0) {
      quant_runs::IntRun r;
      r.bits = kBits, r.qmax = k.qmax;
      r.fixed = src.cal.kind == Calibration::Kind::kFixed, r.lo = src.cal.lo, r.hi = src.cal.hi;
      c += quant_runs::encode_int(r, row + c0, scales, every, c1 - c0, crow + c0 * kBits / 8);
    }
  }
  if constexpr (D == DType::kNF4 || D == DType::kT2) {
    if (c0 % (8 / kBits) == 0) {
      const quant_runs::Clip clip{src.cal.kind == Calibration::Kind::kFixed, src.cal.lo,
                                  src.cal.hi};
      c += quant_runs::encode_levels(k.levels, clip, row + c0, scales, every, c1 - c0,
                                     crow + c0 * kBits / 8);
    }
  }
  if constexpr (D == DType::kF8E4M3 || D == DType::kF8E5M2) {
    const quant_runs::Fp8Format f{k.precision, k.emin, float(k.max), float(k.half_min_subnormal)};
    if (quant_runs::has_fp8_runs() && src.cal.kind == Calibration::Kind::kAbsmax) {
      // Sixteen (AVX-512) or eight at a time; the last few below.
      c += quant_runs::encode_fp8(f, row + c0, scales, every, c1 - c0, crow + c0);
    } else if (quant_runs::has_fp8_exact()) {  // fixed calibration, AVX-512: eight at a time in f64
      const quant_runs::Clip clip{src.cal.kind == Calibration::Kind::kFixed, src.cal.lo,
                                  src.cal.hi};
      if (every == 1 || every >= c1 - c0) {
        c +=
            quant_runs::encode_fp8_exact(f, clip, row + c0, scales, every == 1, c1 - c0, crow + c0);
      } else {  // blocks: each but the last is whole
        for (int64_t b = 0; b * every < c1 - c0; ++b) {
          const int64_t cb = c0 + b * every, n = std::min(every, c1 - cb);
          const int64_t done =
              quant_runs::encode_fp8_exact(f, clip, row + cb, &scales[b], false, n, crow + cb);
          for (int64_t i = cb + done; i < cb + n; ++i)
            crow[i] = encode<D>(k, src.value(row[i]) / double(scales[b]));
        }
        return;
      }
    }
  }
  for (; c < c1; ++c) {
    const double s = scales[(c - c0) / every];
    codes::set_code(crow, c, kBits, encode<D>(k, src.value(row[c]) / s));
  }
}

// The run length of a panel's scales: 1 per column, else its blocks' length rounded up to a power
// of two (a block length already is one, >= 16; a longer "block" is the whole row).
int64_t scale_run(int64_t bc) {
  int64_t run = 1;
  while (run < bc) run *= 2;
  return bc == 1 ? 1 : std::max<int64_t>(run, 16);
}

// Inputs of fewer elements are quantized on the calling thread: waking the pool costs more.
constexpr int64_t kParallelElements = int64_t(1) << 15;

// fn(begin, end) over [0, count) items of `elements` elements in all: on the process pool when
// that pays, else here. Every item writes codes and scales of its own only, so the split never
// changes a bit of the result. An exception (only std::bad_alloc can reach here) is rethrown on
// the calling thread.
void for_items(ThreadPool& pool, int64_t count, int64_t elements,
               const std::function<void(int64_t, int64_t)>& fn) {
  if (elements < kParallelElements) return fn(0, count);
  std::exception_ptr failed;
  std::mutex mutex;
  pool.parallel_for(count, [&](int64_t begin, int64_t end) {
    try {
      fn(begin, end);
    } catch (...) {
      const std::lock_guard<std::mutex> lock(mutex);
      if (!failed) failed = std::current_exception();
    }
  });
  if (failed) std::rethrow_exception(failed);
}

// The work items of a layout: panels of one block row (or of a slab of its rows) and `chunk`
// block columns, `chunks` per block row (panels of kRowPanelCols columns for 1xB blocks, else
// kPanelCols, or kWidePanelCols where each row is read once).
struct Panels {
  int64_t chunk = 1, chunks = 1;
  int64_t slabs = 1, slab_rows = 1;  // row slabs per block row, and rows per slab
  // Panel `item`: block row bi, slab sl of it, rows [r0, r1) (empty past the last row), block
  // columns [bj0, bj0 + nb), columns [c0, c1).
  struct At {
    int64_t bi, sl, r0, r1, bj0, nb, c0, c1;
  };
  int64_t count(const Layout& l) const { return l.grid_rows * slabs * chunks; }
  At at(const Layout& l, int64_t rows, int64_t cols, int64_t item) const {
    const int64_t cj = item % chunks, bi = item / chunks / slabs, sl = item / chunks % slabs;
    const int64_t bj0 = cj * chunk, nb = std::min(chunk, l.grid_cols - bj0);
    const int64_t r0 = std::min(rows, bi * l.br + sl * slab_rows);
    const int64_t r1 = std::min({rows, bi * l.br + l.br, r0 + slab_rows});
    return {bi, sl, r0, r1, bj0, nb, bj0 * l.bc, std::min(cols, (bj0 + nb) * l.bc)};
  }
};

// Panels read once are whole rows up to kWidePanelCols; where there are fewer block rows than
// the pool has threads, each block row is cut into slabs of rows (whose maxima block_scales
// merges) rather than its rows into narrower runs: 2 threads on one block row's halves of each
// row ran no faster than 1 on whole rows.
Panels panels_of(const Layout& l, const Source& src, bool read_once) {
  Panels p;
  int64_t cols = l.br == 1 ? kRowPanelCols : kPanelCols;
  p.slab_rows = l.br;
  if (l.br > 1 && read_once) {
    cols = kWidePanelCols;
    const int64_t threads = src.pool->size();
    if (l.grid_rows < threads) {
      p.slab_rows = ceil_div(l.br, std::min<int64_t>(l.br, ceil_div(threads, l.grid_rows)));
      p.slabs = ceil_div(l.br, p.slab_rows);
    }
  }
  p.chunk = std::min(l.grid_cols, std::max<int64_t>(1, cols / l.bc));
  p.chunks = ceil_div(l.grid_cols, p.chunk);
  return p;
}

// The absmax maxima of panel p's blocks (over its rows) into m; returns the panel's row when it
// has one row (its bf16 values widened, kept for the encoding).
const float* panel_maxima(const Source& src, const Layout& l, const Panels::At& p, float* m,
                          float* buf) {
  const float* widened = nullptr;
  std::fill(m, m + p.nb, 0.0f);
  for (int64_t r = p.r0; r < p.r1; ++r) {
    const float* row = src.row(r, p.c0, p.c1, buf);
    if (p.r1 - p.r0 == 1) widened = row;
    if (l.bc == 1)  // one scale per column (Bx1 blocks, channel along rows)
      quant_runs::amax_columns(m, row + p.c0, p.c1 - p.c0);
    else
      quant_runs::amax_blocks(row + p.c0, p.c1 - p.c0, l.bc, m);
  }
  return widened;
}

// The maxima m[0, n) turned into absmax scales in place; whether every one was finite (a value
// that is not makes its block's maximum so).
bool scales_of_maxima(const Codec& k, float* m, int64_t n) {
  bool finite = true;
  const int64_t done = quant_runs::absmax_scales(m, n, k.qmax, finite);
  for (int64_t b = done; b < n; ++b) {
    finite = finite && std::isfinite(m[b]);
    m[b] = absmax_scale(m[b], k.qmax);
  }
  return finite;
}

// Panel p of the output; s is the caller's scratch of `chunk` floats. The first slab of a block
// row writes its scales.
template <DType D>
void quantize_panel(const Source& src, const Codec& k, const Output& out, const Panels::At& p,
                    float* s, float* buf) {
  const Layout& l = out.layout;
  const bool scaled = out.scales != nullptr;
  const int64_t bi = p.bi, r0 = p.r0, r1 = p.r1, bj0 = p.bj0, nb = p.nb, c0 = p.c0, c1 = p.c1;
  // A panel of one row keeps the row the maxima read (bf16 widened once for both passes).
  const float* widened = nullptr;
  if (!scaled) {
    std::fill(s, s + nb, 1.0f);
  } else if (src.cal.kind == Calibration::Kind::kFixed) {
    std::fill(s, s + nb, src.fixed_scale);
  } else if (src.scales) {
    std::copy_n(src.scales + bi * l.grid_cols + bj0, nb, s);
  } else {
    widened = panel_maxima(src, l, p, s, buf);
    if (!scales_of_maxima(k, s, nb) && src.bad) return src.bad->store(true);
  }
  if (scaled && p.sl == 0)
    for (int64_t b = 0; b < nb; ++b) out.scales[l.index(bi, bj0 + b)] = s[b];
  for (int64_t r = r0; r < r1; ++r) {
    const float* row = widened ? widened : src.row(r, c0, c1, buf);
    if (src.bad_run(row, c0, c1)) return;
    encode_run<D>(k, src, row, c0, c1, s, scale_run(l.bc), out.codes + r * out.code_stride);
  }
}

// One block covering every row and column (tensor scales): its amax over row ranges, then its rows
// encoded, both split over the pool.
template <DType D>
void quantize_one_block(const Source& src, const Codec& k, const Output& out) {
  float scale = src.fixed_scale;
  const int64_t elements = src.rows * src.cols;
  if (src.cal.kind == Calibration::Kind::kAbsmax) {
    std::mutex mutex;
    float amax = 0.0f;
    for_items(*src.pool, src.rows, elements, [&](int64_t r0, int64_t r1) {
      std::vector<float> buf = src.row_buffer();
      float a = 0.0f;
      for (int64_t r = r0; r < r1; ++r)
        a = quant_runs::amax(src.row(r, 0, src.cols, buf.data()), src.cols, a);
      const std::lock_guard<std::mutex> lock(mutex);
      amax = quant_runs::max_magnitude(amax, a);  // keeps a NaN, as the maxima do
    });
    if (src.bad && !std::isfinite(amax)) return src.bad->store(true);
    scale = absmax_scale(amax, k.qmax);
  }
  out.scales[out.layout.index(0, 0)] = scale;
  for_items(*src.pool, src.rows, elements, [&](int64_t r0, int64_t r1) {
    std::vector<float> buf = src.row_buffer();
    for (int64_t r = r0; r < r1; ++r) {
      const float* row = src.row(r, 0, src.cols, buf.data());
      if (src.bad_run(row, 0, src.cols)) return;
      encode_run<D>(k, src, row, 0, src.cols, &scale, kOneScale, out.codes + r * out.code_stride);
    }
  });
}

template <DType D>
void quantize_panels(const Source& src, const Codec& k, const Output& out) {
  const Layout& l = out.layout;
  if (out.scales && l.grid_rows == 1 && l.grid_cols == 1) return quantize_one_block<D>(src, k, out);
  // A panel takes its own maxima (reading its rows twice) unless its scales are known already.
  const bool own_maxima = out.scales && src.cal.kind == Calibration::Kind::kAbsmax && !src.scales;
  const Panels panels = panels_of(l, src, !own_maxima);
  for_items(*src.pool, panels.count(l), src.rows * src.cols, [&](int64_t i0, int64_t i1) {
    std::vector<float> s(static_cast<size_t>(panels.chunk)), buf = src.row_buffer();
    for (int64_t i = i0; i < i1; ++i)
      quantize_panel<D>(src, k, out, panels.at(l, src.rows, src.cols, i), s.data(), buf.data());
  });
}

// Every block's absmax scale into scales ([grid_rows, grid_cols]), over wide panels split over
// the pool (slabs of a block row take maxima of their own, merged here); a block whose maximum
// is not finite sets *src.bad.
void block_scales(const Source& src, const Codec& k, const Layout& l, float* scales) {
  const Panels panels = panels_of(l, src, true);
  const int64_t slabs = panels.slabs;
  std::vector<float> maxima(slabs > 1 ? size_t(l.grid_rows * slabs * l.grid_cols) : 0);
  for_items(*src.pool, panels.count(l), src.rows * src.cols, [&](int64_t i0, int64_t i1) {
    std::vector<float> buf = src.row_buffer();
    for (int64_t i = i0; i < i1; ++i) {
      const Panels::At p = panels.at(l, src.rows, src.cols, i);
      float* const m = slabs > 1 ? maxima.data() + (p.bi * slabs + p.sl) * l.grid_cols + p.bj0
                                 : scales + p.bi * l.grid_cols + p.bj0;
      panel_maxima(src, l, p, m, buf.data());
      if (slabs == 1 && !scales_of_maxima(k, m, p.nb)) src.bad->store(true);
    }
  });
  if (slabs == 1) return;
  for (int64_t bi = 0; bi < l.grid_rows; ++bi) {
    float* const row = scales + bi * l.grid_cols;
    std::copy_n(maxima.data() + bi * slabs * l.grid_cols, l.grid_cols, row);
    for (int64_t sl = 1; sl < slabs; ++sl)
      for (int64_t j = 0; j < l.grid_cols; ++j)  // keeps a NaN, as the maxima do
        row[j] =
            quant_runs::max_magnitude(row[j], maxima[size_t((bi * slabs + sl) * l.grid_cols + j)]);
    if (!scales_of_maxima(k, row, l.grid_cols)) src.bad->store(true);
  }
}

// Both quantizations of x, `block` rows (a panel) at a time: first each row's 1xB block maxima
// and each panel's Bx1 column maxima, every row read whole and in order (a maximum that is not
// finite marks a value that is not: nothing is written then, and false returned); then, with
// every scale known, each row encoded twice, row-wise by its blocks and column-wise by its
// panel's column scales, codes written in order. Read and written a BxB tile at a time, rows B
// apart, neither stream was one the prefetchers follow. The arithmetic is quantize_panels' (same
// amax, scale and code functions); panels are split over the pool.
template <DType D>
bool quantize_dual_panels(const Source& src, const Codec& k, int64_t block, const Output& rows_out,
                          const Output& cols_out) {
  const int64_t rows = src.rows, cols = src.cols;
  const int64_t nbr = ceil_div(rows, block), nbc = ceil_div(cols, block);
  const bool fixed = src.cal.kind == Calibration::Kind::kFixed;
  // Row-wise scales [rows, nbc] and column-wise ones [nbr, cols]: the fixed scale, or maxima
  // turned into scales.
  std::vector<float> rs(size_t(rows * nbc), fixed ? src.fixed_scale : 0.0f),
      cs(size_t(nbr * cols), fixed ? src.fixed_scale : 0.0f);
  if (!fixed) {
    std::atomic<bool> finite{true};
    for_items(*src.pool, nbr, rows * cols, [&](int64_t bi0, int64_t bi1) {
      std::vector<float> buf = src.row_buffer();
      for (int64_t bi = bi0; bi < bi1; ++bi) {
        const int64_t r0 = bi * block, r1 = std::min(rows, r0 + block);
        float* const c = cs.data() + bi * cols;
        for (int64_t r = r0; r < r1; ++r) {
          const float* row = src.row(r, 0, cols, buf.data());
          quant_runs::amax_blocks(row, cols, block, rs.data() + r * nbc);
          quant_runs::amax_columns(c, row, cols);
        }
        // Every value is in some column's maximum: the columns' finiteness is x's.
        if (!scales_of_maxima(k, c, cols)) finite.store(false);
        scales_of_maxima(k, rs.data() + r0 * nbc, (r1 - r0) * nbc);
      }
    });
    if (!finite) return false;
  }
  for_items(*src.pool, nbr, rows * cols, [&](int64_t bi0, int64_t bi1) {
    std::vector<float> buf = src.row_buffer();
    for (int64_t bi = bi0; bi < bi1; ++bi) {
      const int64_t r0 = bi * block, r1 = std::min(rows, r0 + block);
      const float* const c = cs.data() + bi * cols;
      for (int64_t j = 0; j < cols; ++j) cols_out.scales[cols_out.layout.index(bi, j)] = c[j];
      for (int64_t r = r0; r < r1; ++r) {
        const float* const s = rs.data() + r * nbc;
        for (int64_t bj = 0; bj < nbc; ++bj) rows_out.scales[rows_out.layout.index(r, bj)] = s[bj];
        // Blocks are powers of two >= 16: a whole row is one run of a scale per block.
        const float* row = src.row(r, 0, cols, buf.data());
        encode_run<D>(k, src, row, 0, cols, s, block, rows_out.codes + r * rows_out.code_stride);
        encode_run<D>(k, src, row, 0, cols, c, 1, cols_out.codes + r * cols_out.code_stride);
      }
    }
  });
  return true;
}

// x holds f32 values, or bf16 bit patterns when x_dtype is bf16.
Source make_source(const void* x, DType x_dtype, int64_t rows, int64_t cols, int64_t ld,
                   const Calibration& c, const Codec& k, ThreadPool& pool) {
  Source s;
  if (x_dtype == DType::kBF16)
    s.bf16 = static_cast<const uint16_t*>(x);
  else
    s.x = static_cast<const float*>(x);
  s.rows = rows, s.cols = cols, s.ld = ld, s.cal = c, s.pool = &pool;
  if (c.kind == Calibration::Kind::kFixed) s.fixed_scale = positive_scale(fixed_bound(c) / k.qmax);
  return s;
}

// The first of src's values that is not finite, in row-major order: rows scanned in vector code,
// split over the pool; rows past a bad one found are skipped.
bool first_not_finite(const Source& src, int64_t& row, int64_t& col) {
  std::atomic<int64_t> first_bad{src.rows};
  for_items(*src.pool, src.rows, src.rows * src.cols, [&](int64_t r0, int64_t r1) {
    std::vector<float> buf = src.row_buffer();
    for (int64_t r = r0; r < r1 && r < first_bad.load(std::memory_order_relaxed); ++r)
      if (quant_runs::any_not_finite(src.row(r, 0, src.cols, buf.data()), src.cols)) {
        for (int64_t seen = first_bad.load();
             r < seen && !first_bad.compare_exchange_weak(seen, r);) {
        }
        return;
      }
  });
  row = first_bad.load();
  if (row == src.rows) return false;
  for (col = 0; col < src.cols && std::isfinite(src.at(row, col));) ++col;
  return true;
}

void check_finite(const Source& src) {
  int64_t r, c;
  if (first_not_finite(src, r, c))
    fail("x[" + std::to_string(r) + ", " + std::to_string(c) + "]=" + num(src.at(r, c)) +
         " is not finite (quantize takes finite values)");
}

}  // namespace

// ---- Public API --------------------------------------------------------------------------------

Calibration parse_calibration(std::string_view text) {
  Calibration c;
  if (text == "absmax") return c;
  constexpr std::string_view kFixed = "fixed:";
  auto bad = [&](const std::string& why) -> Calibration {
    fail("calibration=" + quote_value(text) + why);
  };
  if (text.substr(0, kFixed.size()) != kFixed)
    return bad(" is not one of: absmax, fixed:LO:HI (e.g. fixed:-1.5:2)");
  const std::string_view rest = text.substr(kFixed.size());
  // LO may be negative but has no ':'; the first ':' separates LO from HI.
  const size_t colon = rest.find(':');
  if (colon == std::string_view::npos) return bad(" is not fixed:LO:HI (e.g. fixed:-1.5:2)");
  auto number = [&](std::string_view t, const char* which) {
    double v = 0;
    const auto [ptr, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (t.empty() || ec != std::errc() || ptr != t.data() + t.size())
      bad(std::string(": ") + which + "=" + quote_value(t) + " is not a number");
    return v;
  };
  c.kind = Calibration::Kind::kFixed;
  c.lo = number(rest.substr(0, colon), "lo");
  c.hi = number(rest.substr(colon + 1), "hi");
  return c;
}

std::string to_string(const Calibration& c) {
  if (c.kind == Calibration::Kind::kAbsmax) return "absmax";
  return "fixed:" + num(c.lo) + ":" + num(c.hi);
}

Quant parse_quant_scheme(std::string_view text) {
  // The spec's own parser (the rhs_quant field accepts every scheme), under this call's name.
  KernelSpec s;
  const SpecField& f = spec_field("rhs_quant");
  try {
    set_field(f, s, text);
  } catch (const SpecError& e) {
    // "rhs_quant=<text> ..." or, about a part of it, "rhs_quant=<part> ...".
    std::string msg = e.what();
    if (msg.rfind(f.key, 0) != 0) fail("scheme=" + quote_value(text) + ": " + msg);
    msg.erase(0, f.key.size() + 1);
    const std::string whole = quote_value(text);
    if (msg.rfind(whole + " ", 0) == 0) fail("scheme=" + msg);
    fail("scheme=" + whole + ": " + msg);
  }
  return s.rhs_quant;
}

ScaleShape scale_shape(const Quant& scheme, QuantAxis axis, int64_t rows, int64_t cols) {
  return layout_of(scheme, axis, rows, cols).shape;
}

int64_t packed_codes_ld(DType dtype, int64_t cols) {
  const int per = codes::elements_per_byte(dtype);
  return ceil_div(cols, per) * per;
}

uint8_t encode_code(DType dtype, double v) {
  check_dtype(dtype);
  if (std::isnan(v)) fail("v=nan has no code");
  const Codec k(dtype);
  return with_dtype(dtype, [&](auto d) { return encode<decltype(d)::value>(k, v); });
}

namespace {

void check_options(const QuantizeOptions& o) {
  check_dtype(o.dtype);
  check_axis(o.axis);
  check_calibration(o.calibration, o.dtype);
  check_scheme(o.scheme, o.dtype, o.calibration, "scheme");
  check_value_check(o.check);
}

// x's values are checked (ValueCheck) by the maxima under absmax calibration: every value passes
// through a block maximum, which is not finite if one of its values is not. kBeforeWrites takes
// them before any write (every block's scale into a scratch, block_scales; one block of tensor
// scales in its own two passes) or, without maxima (fixed calibration, no scales), scans x
// first; either way x is read twice. kWhileWriting lets each panel take its maxima as it is
// written, or check each row run just before encoding it (Source::check_runs), so x is read once
// from memory. A bad value found either way is named by check_finite, which rescans x.
void run_quantize(ThreadPool& pool, const void* x, DType x_dtype, int64_t rows, int64_t cols,
                  int64_t ld, const QuantizeOptions& o, const Output& out) {
  const Codec k(o.dtype);
  Source src = make_source(x, x_dtype, rows, cols, ld, o.calibration, k, pool);
  const bool maxima = out.scales && o.calibration.kind == Calibration::Kind::kAbsmax;
  const bool one_block = out.layout.grid_rows == 1 && out.layout.grid_cols == 1;
  const bool before = o.check == ValueCheck::kBeforeWrites;
  if (!maxima && before) check_finite(src);
  std::atomic<bool> bad{false};
  src.bad = &bad;
  src.check_runs = !maxima && !before;
  std::vector<float> scales;
  if (maxima && before && !one_block) {
    scales.resize(static_cast<size_t>(out.layout.grid_rows * out.layout.grid_cols));
    block_scales(src, k, out.layout, scales.data());
    if (bad) check_finite(src);  // throws, naming the first value that is not finite
    src.scales = scales.data();
  }
  with_dtype(o.dtype, [&](auto d) { quantize_panels<decltype(d)::value>(src, k, out); });
  if (bad) check_finite(src);
}

}  // namespace

void quantize(const float* x, int64_t rows, int64_t cols, int64_t x_ld, const QuantizeOptions& o,
              void* codes, int64_t codes_ld, float* scales, int64_t scales_ld) {
  check_options(o);
  Region xr, cr, sr;
  const int64_t ld = check_input(x, rows, cols, x_ld, xr);
  const Output out = check_output("", o.dtype, o.scheme, o.axis, rows, cols, codes, codes_ld,
                                  scales, scales_ld, cr, sr);
  cr.name = "codes", sr.name = "scales";
  check_disjoint({xr, cr, sr});
  if (rows == 0 || cols == 0) return;
  run_quantize(process_pool(), x, DType::kF32, rows, cols, ld, o, out);
}

bool first_not_finite(const float* x, int64_t rows, int64_t cols, int64_t ld, ThreadPool& pool,
                      int64_t& row, int64_t& col) {
  Source src;
  src.x = x, src.rows = rows, src.cols = cols, src.ld = ld, src.pool = &pool;
  return first_not_finite(src, row, col);
}

void check_quantize_args(const void* x, DType x_dtype, int64_t rows, int64_t cols, int64_t x_ld,
                         const QuantizeOptions& o) {
  if (x_dtype != DType::kF32 && x_dtype != DType::kBF16)
    fail("x: dtype " + std::string(to_string(x_dtype)) + " is not f32 or bf16");
  check_options(o);
  Region xr;
  check_input(x, rows, cols, x_ld, xr, x_dtype == DType::kBF16 ? 2 : 4);
}

void quantize_into_scratch(const void* x, DType x_dtype, int64_t rows, int64_t cols, int64_t x_ld,
                           const QuantizeOptions& o, void* codes, float* scales, ThreadPool& pool) {
  if (rows == 0 || cols == 0) return;
  Output out;
  out.layout = layout_of(o.scheme, o.axis, rows, cols);
  out.layout.ld = out.layout.shape.cols;
  out.code_stride = packed_codes_ld(o.dtype, cols) / codes::elements_per_byte(o.dtype);
  out.codes = static_cast<uint8_t*>(codes);
  out.scales = o.scheme.kind == QuantKind::kNone ? nullptr : scales;
  QuantizeOptions once = o;
  once.check = ValueCheck::kWhileWriting;
  run_quantize(pool, x, x_dtype, rows, cols, x_ld ? x_ld : cols, once, out);
}

void quantize_dual(const float* x, int64_t rows, int64_t cols, int64_t x_ld,
                   const DualQuantizeOptions& o, void* row_codes, int64_t row_codes_ld,
                   float* row_scales, int64_t row_scales_ld, void* col_codes, int64_t col_codes_ld,
                   float* col_scales, int64_t col_scales_ld) {
  check_dtype(o.dtype);
  check_calibration(o.calibration, o.dtype);
  const std::string what = "scheme=" + to_string(o.scheme);
  if (o.scheme.kind != QuantKind::kBlock || o.scheme.block_n != 0)
    fail(what + ": dual quantization takes block:B (1xB blocks row-wise, Bx1 column-wise)");
  check_scheme(o.scheme, o.dtype, o.calibration, "scheme");
  Region xr, rcr, rsr, ccr, csr;
  const int64_t ld = check_input(x, rows, cols, x_ld, xr);
  const Output rows_out =
      check_output("row_", o.dtype, o.scheme, QuantAxis::kCols, rows, cols, row_codes, row_codes_ld,
                   row_scales, row_scales_ld, rcr, rsr);
  const Output cols_out =
      check_output("col_", o.dtype, o.scheme, QuantAxis::kRows, rows, cols, col_codes, col_codes_ld,
                   col_scales, col_scales_ld, ccr, csr);
  rcr.name = "row_codes", rsr.name = "row_scales", ccr.name = "col_codes", csr.name = "col_scales";
  check_disjoint({xr, rcr, rsr, ccr, csr});
  if (rows == 0 || cols == 0) return;
  const Codec k(o.dtype);
  const Source src = make_source(x, DType::kF32, rows, cols, ld, o.calibration, k, process_pool());
  // Under absmax calibration the maxima see every value first; fixed scales need the check.
  if (o.calibration.kind == Calibration::Kind::kFixed) check_finite(src);
  with_dtype(o.dtype, [&](auto d) {
    if (!quantize_dual_panels<decltype(d)::value>(src, k, o.scheme.block_k, rows_out, cols_out))
      check_finite(src);  // names the first value that is not finite
  });
}

void dequantize(const void* codes, int64_t codes_ld, const float* scales, int64_t scales_ld,
                int64_t rows, int64_t cols, const QuantizeOptions& o, float* x, int64_t x_ld) {
  check_dtype(o.dtype);
  check_axis(o.axis);
  check_scheme(o.scheme, o.dtype, Calibration{}, "scheme");
  Region xr, cr, sr;
  // The output x is checked like quantize's input; codes and scales like its outputs.
  const int64_t ld = check_input(x, rows, cols, x_ld, xr);
  const Output in =
      check_output("", o.dtype, o.scheme, o.axis, rows, cols, const_cast<void*>(codes), codes_ld,
                   const_cast<float*>(scales), scales_ld, cr, sr);
  cr.name = "codes", sr.name = "scales";
  check_disjoint({cr, sr, xr});
  if (rows == 0 || cols == 0) return;
  const Layout& l = in.layout;
  if (in.scales)
    for (int64_t i = 0; i < l.grid_rows; ++i)
      for (int64_t j = 0; j < l.grid_cols; ++j) {
        const float s = in.scales[l.index(i, j)];
        if (!(std::isfinite(s) && s > 0))
          fail("scales" + l.name(i, j) + "=" + num(s) + " must be finite and > 0");
      }

  float table[256];
  for (int c = 0; c < 256; ++c) table[c] = codes::decode(o.dtype, uint8_t(c));
  const int bits = bits_of(o.dtype);
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* crow = in.codes + r * in.code_stride;
    float* xrow = x + r * ld;
    for (int64_t j = 0; j < l.grid_cols; ++j) {
      const float s = in.scales ? in.scales[l.index(r / l.br, j)] : 1.0f;
      for (int64_t c = j * l.bc, ce = std::min(c + l.bc, cols); c < ce; ++c)
        xrow[c] = table[codes::get_code(crow, c, bits)] * s;
    }
  }
}

}  // namespace gmmgen
