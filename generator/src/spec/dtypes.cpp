// The dtype table: the one place that describes each element type. A C++ type is the storage
// the C++ target reads and writes (with its template partial cpp/dtypes/<name>); a jnp name is
// what the Pallas target uses; the host format is what the float64 reference rounds to.
#include <array>
#include <limits>

#include "gmmgen/spec.h"

namespace gmmgen {
namespace {

using K = DTypeKind;
constexpr unsigned kAll = kUseLhs | kUseRhs | kUseOut;
constexpr unsigned kOperand = kUseLhs | kUseRhs;

// id, name, bits, kind, uses, C++ storage, traits, jnp (the Pallas target's storage: sub-byte
// codes as packed uint8), precision, emin, max finite
constexpr std::array<DTypeInfo, kNumDTypes> kDTypes{{
    {DType::kF32, "f32", 32, K::kFloat, kAll, "float", "F32", "jnp.float32", 24, -126,
     double(std::numeric_limits<float>::max())},
    {DType::kBF16, "bf16", 16, K::kFloat, kAll, "uint16_t", "BF16", "jnp.bfloat16", 8, -126,
     0x1.fep127},
    {DType::kF16, "f16", 16, K::kFloat, kAll, "uint16_t", "F16", "", 11, -14, 65504.0},
    {DType::kF8E4M3, "f8e4m3", 8, K::kFloat, kOperand, "uint8_t", "F8E4M3", "jnp.float8_e4m3fn", 4,
     -6, 448.0},
    {DType::kF8E5M2, "f8e5m2", 8, K::kFloat, kOperand, "uint8_t", "F8E5M2", "jnp.float8_e5m2", 3,
     -14, 57344.0},
    {DType::kI8, "i8", 8, K::kInteger, kOperand, "uint8_t", "I8", "jnp.int8", 0, 0, 127.0},
    {DType::kI4, "i4", 4, K::kInteger, kOperand, "uint8_t", "I4", "jnp.uint8", 0, 0, 7.0},
    {DType::kNF4, "nf4", 4, K::kCodebook, kUseRhs, "uint8_t", "NF4", "jnp.uint8", 0, 0, 1.0},
    {DType::kT2, "t2", 2, K::kInteger, kUseRhs, "uint8_t", "T2", "jnp.uint8", 0, 0, 1.0},
}};

constexpr bool in_code_order() {
  for (int i = 0; i < kNumDTypes; ++i)
    if (int(kDTypes[size_t(i)].id) != i) return false;
  return true;
}
static_assert(in_code_order(), "rows in the order of their GMMGEN_DTYPES codes");

}  // namespace

std::span<const DTypeInfo> dtype_table() {
  return kDTypes;
}

const DTypeInfo& dtype_info(DType d) {
  const int i = int(d);
  if (i < 0 || i >= kNumDTypes)
    throw SpecError("dtype code " + std::to_string(i) + " is not a known element type");
  return kDTypes[size_t(i)];
}

}  // namespace gmmgen
