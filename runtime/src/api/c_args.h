// Plain C arguments of the C API read into the runtime's types, with messages that name the
// argument (or options field) they came from. Shared by c_api.cpp and c_quant.cpp.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include "gmmgen/errors.hpp"
#include "gmmgen/quantize.hpp"
#include "gmmgen/runtime_c.h"

namespace gmmgen::c_api {

// A GMMGEN_DTYPE_* code; `prefix` names where it came from ("" or e.g. "quant.").
inline DType dtype_arg(int32_t code, const std::string& prefix) {
  if (code < 0 || code >= GMMGEN_DTYPE_COUNT_)
    throw InvalidArgument(prefix + "dtype=" + std::to_string(code) +
                          " is not a GMMGEN_DTYPE_* code");
  return DType(code);
}

// A scheme text ("tensor", "channel", "block:B", ...); its parse error ("scheme=... <rule>") is
// prefixed with `prefix`.
inline Quant scheme_arg(const char* text, const std::string& prefix) {
  try {
    return parse_quant_scheme(text);
  } catch (const std::invalid_argument& e) {
    throw InvalidArgument(prefix + e.what());
  }
}

// A calibration text, NULL for absmax; its parse error ("calibration=... <rule>") is prefixed
// with `prefix`.
inline Calibration calibration_arg(const char* text, const std::string& prefix) {
  if (!text) return Calibration{};
  try {
    return parse_calibration(text);
  } catch (const std::invalid_argument& e) {
    throw InvalidArgument(prefix + e.what());
  }
}

}  // namespace gmmgen::c_api
