// A kernel's identity: its hash and its readable name, which parses back to the spec.
#pragma once

#include <string>
#include <string_view>

#include "gmmgen/spec.h"

namespace gmmgen {

// 128-bit XXH3 of the canonical text, the generator version, the path and contents of every
// template (and header) the kernel is rendered from, and the rendered files (with a placeholder
// name and hash: what the heuristics render into them counts), as 32 lowercase hex digits. Names
// the kernel in files, symbols and cache entries. Validates the spec first (throws SpecError).
std::string spec_hash(const KernelSpec& s);

// The readable part of the name, derived from the field table (SpecField::name_*): mandatory
// tokens in table order, then the optional ones that differ from their defaults, e.g.
//   gmm_bf16xbf16_f32_k2048_n1408_g64l8_t128x128x128_qr-block-128_tr_acc_avx2
std::string name_stem(const KernelSpec& s);

// name_stem + "_" + the first 8 digits of spec_hash, e.g.
//   gmm_bf16xbf16_f32_k2048_n1408_g64_t128x128x128_1f3a9c2e
std::string kernel_name(const KernelSpec& s);

// Recovers the spec (and the 8-digit hash suffix) from a kernel name.
struct ParsedName {
  KernelSpec spec;
  std::string hash8;
};
ParsedName parse_kernel_name(std::string_view name);

}  // namespace gmmgen
