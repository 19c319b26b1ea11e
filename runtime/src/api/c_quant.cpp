// The quantizers' C API: plain C arguments to the C++ quantizers, exceptions to error codes and
// messages (the convention of c_api.cpp).
#include <cstring>
#include <new>
#include <string>

#include "api/c_args.h"
#include "api/c_errors.h"
#include "gmmgen/quantize.hpp"
#include "gmmgen/runtime_c.h"

namespace {

using gmmgen::c_api::guarded;

gmmgen::DType dtype_of(int32_t code) {
  return gmmgen::c_api::dtype_arg(code, "");
}

gmmgen::Quant scheme_of(const char* scheme) {
  if (!scheme) throw gmmgen::InvalidArgument("scheme is NULL");
  return gmmgen::c_api::scheme_arg(scheme, "");
}

gmmgen::Calibration calibration_of(const char* calibration) {
  return gmmgen::c_api::calibration_arg(calibration, "");
}

gmmgen::QuantAxis axis_of(int32_t axis) {
  if (axis != GMMGEN_QUANT_AXIS_ROWS && axis != GMMGEN_QUANT_AXIS_COLS)
    throw gmmgen::InvalidArgument(
        "axis=" + std::to_string(axis) +
        " is not GMMGEN_QUANT_AXIS_ROWS (0) or GMMGEN_QUANT_AXIS_COLS (1)");
  return gmmgen::QuantAxis(axis);
}

}  // namespace

extern "C" {

namespace {

int quantize_c(const float* x, int64_t rows, int64_t cols, int64_t x_ld, int32_t dtype,
               const char* scheme, int32_t axis, const char* calibration, void* codes,
               int64_t codes_ld, float* scales, int64_t scales_ld, gmmgen::ValueCheck check,
               char* err, size_t err_len) {
  return guarded(err, err_len, [&] {
    gmmgen::QuantizeOptions o;
    o.dtype = dtype_of(dtype);
    o.scheme = scheme_of(scheme);
    o.axis = axis_of(axis);
    o.calibration = calibration_of(calibration);
    o.check = check;
    gmmgen::quantize(x, rows, cols, x_ld, o, codes, codes_ld, scales, scales_ld);
  });
}

}  // namespace

int gmmgen_quantize(const float* x, int64_t rows, int64_t cols, int64_t x_ld, int32_t dtype,
                    const char* scheme, int32_t axis, const char* calibration, void* codes,
                    int64_t codes_ld, float* scales, int64_t scales_ld, char* err, size_t err_len) {
  return quantize_c(x, rows, cols, x_ld, dtype, scheme, axis, calibration, codes, codes_ld, scales,
                    scales_ld, gmmgen::ValueCheck::kBeforeWrites, err, err_len);
}

int gmmgen_quantize_one_pass(const float* x, int64_t rows, int64_t cols, int64_t x_ld,
                             int32_t dtype, const char* scheme, int32_t axis,
                             const char* calibration, void* codes, int64_t codes_ld, float* scales,
                             int64_t scales_ld, char* err, size_t err_len) {
  return quantize_c(x, rows, cols, x_ld, dtype, scheme, axis, calibration, codes, codes_ld, scales,
                    scales_ld, gmmgen::ValueCheck::kWhileWriting, err, err_len);
}

int gmmgen_quantize_dual(const float* x, int64_t rows, int64_t cols, int64_t x_ld, int32_t dtype,
                         const char* scheme, const char* calibration, void* row_codes,
                         int64_t row_codes_ld, float* row_scales, int64_t row_scales_ld,
                         void* col_codes, int64_t col_codes_ld, float* col_scales,
                         int64_t col_scales_ld, char* err, size_t err_len) {
  return guarded(err, err_len, [&] {
    gmmgen::DualQuantizeOptions o;
    o.dtype = dtype_of(dtype);
    o.scheme = scheme_of(scheme);
    o.calibration = calibration_of(calibration);
    gmmgen::quantize_dual(x, rows, cols, x_ld, o, row_codes, row_codes_ld, row_scales,
                          row_scales_ld, col_codes, col_codes_ld, col_scales, col_scales_ld);
  });
}

int gmmgen_dequantize(const void* codes, int64_t codes_ld, const float* scales, int64_t scales_ld,
                      int64_t rows, int64_t cols, int32_t dtype, const char* scheme, int32_t axis,
                      float* x, int64_t x_ld, char* err, size_t err_len) {
  return guarded(err, err_len, [&] {
    gmmgen::QuantizeOptions o;
    o.dtype = dtype_of(dtype);
    o.scheme = scheme_of(scheme);
    o.axis = axis_of(axis);
    gmmgen::dequantize(codes, codes_ld, scales, scales_ld, rows, cols, o, x, x_ld);
  });
}

}  // extern "C"
