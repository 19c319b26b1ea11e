// The quantizer for the runtime's own calls that quantize an operand (GmmOptions::quantize_lhs):
// its argument checks apart from its work, so that the call checks its arguments before its
// scratch grows; the work on the call's pool, into that scratch, checking x's values as it reads
// them (one pass over x, as quantize() with ValueCheck::kWhileWriting).
#pragma once

#include <cstdint>

#include "exec/thread_pool.h"
#include "gmmgen/quantize.hpp"

namespace gmmgen {

// Whether x [rows, cols] (rows ld apart) holds an inf or NaN; if so, the first one's row and
// column (row-major order). Rows split over `pool`.
bool first_not_finite(const float* x, int64_t rows, int64_t cols, int64_t ld, ThreadPool& pool,
                      int64_t& row, int64_t& col);

// x of these calls holds f32 values (x_dtype f32) or bf16 bit patterns (x_dtype bf16, uint16
// elements, x_ld in elements): bf16 values are quantized as the f32 values they are exactly, so
// the codes and scales are quantize()'s of x widened to f32.

// What quantize() checks of the options and of x's shape and stride; nothing of x's values or of
// the outputs.
void check_quantize_args(const void* x, DType x_dtype, int64_t rows, int64_t cols, int64_t x_ld,
                         const QuantizeOptions& o);

// quantize() after check_quantize_args, into packed outputs of the caller's own (codes
// [rows, packed_codes_ld(dtype, cols)], scales of scale_shape(), packed), split over `pool`.
// x's values are checked as they are read (ValueCheck::kWhileWriting, whatever o.check says): a
// value that is not finite throws quantize()'s InvalidArgument, after some of the outputs may
// have been written.
void quantize_into_scratch(const void* x, DType x_dtype, int64_t rows, int64_t cols, int64_t x_ld,
                           const QuantizeOptions& o, void* codes, float* scales, ThreadPool& pool);

}  // namespace gmmgen
