// The quantizers (docs/quantization.md): f32 matrices to codes + f32 scales and back, with absmax
// or fixed calibration, per tensor, channel or block, and the dual (row-wise and column-wise)
// quantization of an activation. C API: gmmgen_quantize, gmmgen_quantize_dual,
// gmmgen_dequantize (gmmgen/runtime_c.h).
//
// Matrices are row-major [rows, cols]; every leading dimension is in elements, 0 meaning packed.
// Codes are stored like the matrix, sub-byte codes packed along the row (codes::set_code); a
// packed codes row is cols rounded up to whole bytes, and a given codes_ld must be a multiple of
// the elements per byte. Only the bits of the [rows, cols] codes are written: padding bits and
// bytes between rows keep their contents.
//
// Scales are f32, row-major [scale_rows, scale_cols] with scales_ld between rows (a vector is
// one row, so any scales_ld >= its length is accepted there). The contraction axis decides the
// layout, as the kernels read them (gmmgen/kernel_abi.h, "Scales"):
//   axis = cols (gmm lhs [M, K], transposed weights [N, K]):
//     tensor [1]; channel [rows]; block:B [rows, ceil(cols/B)];
//     block:BxC [ceil(rows/C), ceil(cols/B)].
//   axis = rows (weights [K, N], tgmm operands [M, K] / [M, N]):
//     tensor [1]; channel [cols]; block:B [ceil(rows/B), cols];
//     block:BxC [ceil(rows/B), ceil(cols/C)].
// Last blocks may be partial. An empty matrix (rows or cols 0) writes nothing.
//
// Calibration:
//   absmax: s = amax(block) / qmax(dtype) rounded to f32; s = 1 for an all-zero block; s is at
//     least the smallest positive f32 (a block of tiny values never gets s = 0).
//   fixed:lo:hi: x is clipped to [lo, hi] first; s = max(|lo|, |hi|) / qmax for every block.
// Codes of v = x / s (computed in f64, s being the stored f32 scale):
//   i8, i4: round to nearest, ties to even, clamped to [-qmax, qmax];
//   t2: v rounded to nearest even in {-1, 0, +1} (|v| <= 0.5 gives 0);
//   nf4: the nearest of the 16 levels; a tie goes to the level nearer zero;
//   f8e4m3, f8e5m2: round to nearest even, saturating at +-max (never inf or NaN); the sign of
//     zero is kept.
// The decoded value is x̂ = codes::decode(dtype, code) * s (dequantize, in f32).
//
// The quantizers run on a pool of their own ($GMMGEN_NUM_THREADS threads, else one per core),
// except on inputs of fewer than 32768 elements or when called from a Runtime's own threads; the
// split never changes a bit of the result.
//
// Every function validates all of its arguments, x's values included (non-finite values are an
// error naming the first bad index), before it writes anything, and throws InvalidArgument
// (gmmgen/errors.hpp) naming the parameter and the rule. The one exception is asked for:
// quantize with ValueCheck::kWhileWriting checks x's values as it encodes them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "gmmgen/errors.hpp"
#include "gmmgen/spec.h"

namespace gmmgen {

// The contraction axis of a [rows, cols] matrix: the axis blocks run along (numpy's axis
// numbering; the C API's GMMGEN_QUANT_AXIS_* codes).
enum class QuantAxis : int32_t { kRows = 0, kCols = 1 };

struct Calibration {
  enum class Kind { kAbsmax, kFixed };
  Kind kind = Kind::kAbsmax;
  double lo = 0.0, hi = 0.0;  // fixed: the clipping range, lo < hi, both finite
  bool operator==(const Calibration&) const = default;
};

// "absmax" or "fixed:LO:HI" (e.g. "fixed:-1.5:2"); the rules are checked by the quantizers.
Calibration parse_calibration(std::string_view text);
std::string to_string(const Calibration& c);
// A scheme as in specs: "none", "tensor", "channel", "block:B", "block:BxC".
Quant parse_quant_scheme(std::string_view text);

// When quantize checks that x's values are finite. kBeforeWrites: all of x before anything is
// written, which reads x twice (its maxima or a scan, then the codes). kWhileWriting: each panel
// of x as it is encoded, which reads x once from memory (the second look hits the cache): a value
// that is not finite is the same error, naming the first in row-major order, but codes and
// scales may by then be partly written. Tensor scales under absmax read x twice either way (the
// scale needs every value before the first code).
enum class ValueCheck : int32_t { kBeforeWrites = 0, kWhileWriting = 1 };

struct QuantizeOptions {
  DType dtype = DType::kI8;
  // tensor, channel, block:B or block:BxC (B, C powers of two in [16, 8192], as in specs);
  // none only for fp8 with absmax calibration: a plain saturating cast, no scales.
  Quant scheme{QuantKind::kTensor, 0, 0};
  QuantAxis axis = QuantAxis::kCols;
  Calibration calibration;                       // quantize only; dequantize ignores it
  ValueCheck check = ValueCheck::kBeforeWrites;  // quantize only
};

// The storage shape of the scales of a [rows, cols] matrix (see the layouts above); {0, 0}
// for scheme none.
struct ScaleShape {
  int64_t rows = 0, cols = 0;
};
ScaleShape scale_shape(const Quant& scheme, QuantAxis axis, int64_t rows, int64_t cols);

// Elements of a packed codes row of `cols` elements (cols rounded up to whole bytes).
int64_t packed_codes_ld(DType dtype, int64_t cols);

// The code of v (a value already divided by its scale) by the rules above: the inverse of
// codes::decode on the dtype's values, saturating outside them. v must not be NaN.
uint8_t encode_code(DType dtype, double v);

// x [rows, cols] (rows x_ld apart) -> codes [rows, cols] and scales.
void quantize(const float* x, int64_t rows, int64_t cols, int64_t x_ld, const QuantizeOptions& o,
              void* codes, int64_t codes_ld, float* scales, int64_t scales_ld);

// codes + scales -> x̂ [rows, cols] = decode(code) * scale, rounded once to f32. Every scale
// read must be finite and > 0.
void dequantize(const void* codes, int64_t codes_ld, const float* scales, int64_t scales_ld,
                int64_t rows, int64_t cols, const QuantizeOptions& o, float* x, int64_t x_ld);

struct DualQuantizeOptions {
  DType dtype = DType::kF8E4M3;
  Quant scheme{QuantKind::kBlock, 128, 0};  // block:B only
  Calibration calibration;
};

// An activation x [M, K] quantized row-wise (1xB blocks along K, as quantize with axis = cols:
// row_codes [M, K], row_scales [M, ceil(K/B)]) and column-wise (Bx1 blocks along M, as quantize
// with axis = rows: col_codes [M, K], col_scales [ceil(M/B), K]) in one call that reads x twice,
// B rows at a time: the maxima of both (every value checked before anything is written), then
// each row encoded both ways. Bit for bit the results of the two quantize calls.
void quantize_dual(const float* x, int64_t rows, int64_t cols, int64_t x_ld,
                   const DualQuantizeOptions& o, void* row_codes, int64_t row_codes_ld,
                   float* row_scales, int64_t row_scales_ld, void* col_codes, int64_t col_codes_ld,
                   float* col_scales, int64_t col_scales_ld);

}  // namespace gmmgen
