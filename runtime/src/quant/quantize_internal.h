// The quantizer for the runtime's own calls that quantize an operand (GmmOptions::quantize_lhs):
// its checks apart from its work, so that the call checks everything before its scratch grows,
// and the work on the call's pool.
#pragma once

#include <cstdint>

#include "exec/thread_pool.h"
#include "gmmgen/quantize.hpp"

namespace gmmgen {

// Whether x [rows, cols] (rows ld apart) holds an inf or NaN; if so, the first one's row and
// column (row-major order). Rows split over `pool`.
bool first_not_finite(const float* x, int64_t rows, int64_t cols, int64_t ld, ThreadPool& pool,
                      int64_t& row, int64_t& col);

// What quantize() checks of the options and of x, x's values included (split over `pool`);
// nothing of the outputs.
void check_quantize_input(const float* x, int64_t rows, int64_t cols, int64_t x_ld,
                          const QuantizeOptions& o, ThreadPool& pool);

// quantize() after check_quantize_input, into packed outputs the caller made for it (codes
// [rows, packed_codes_ld(dtype, cols)], scales of scale_shape(), packed), split over `pool`.
void quantize_checked(const float* x, int64_t rows, int64_t cols, int64_t x_ld,
                      const QuantizeOptions& o, void* codes, float* scales, ThreadPool& pool);

}  // namespace gmmgen
