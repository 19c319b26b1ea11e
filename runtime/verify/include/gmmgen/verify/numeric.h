// Host-side element formats: exact round-to-nearest-even of a double to each dtype's value set,
// and encoding/decoding of the storage bits. Written for clarity; used by the reference and the
// checker. The formats come from the dtype table (gmmgen/spec.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include "gmmgen/spec.h"

namespace gmmgen {

// Bytes per stored element (sub-byte dtypes are not supported by these helpers).
size_t element_bytes(DType d);

// x rounded to the nearest value of dtype d (ties to even); overflow gives +-inf; NaN stays NaN.
double round_to(DType d, double x);

// Unit roundoff of d (half the distance from 1 to the next value): 2^-24 for f32, 2^-8 bf16...
double unit_roundoff(DType d);

// Rounds x to d and stores it as element i of a buffer of dtype d.
void store_element(DType d, void* base, int64_t i, double x);
// Reads element i of a buffer of dtype d.
double load_element(DType d, const void* base, int64_t i);

}  // namespace gmmgen
