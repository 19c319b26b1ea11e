// The C++ target on x86-64: its ISA families (flags, guards, micro-kernel register tiles), host
// CPU detection, default tilings and scratch footprints.
#include <algorithm>
#include <array>

#include "gmmgen/heuristics.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace gmmgen {
namespace {

constexpr std::string_view kAvx512Bf16Flags[] = {"-mavx512f",  "-mavx512bw",   "-mavx512dq",
                                                 "-mavx512vl", "-mavx512bf16", "-mavx512vnni",
                                                 "-mavx2",     "-mfma",        "-mf16c"};
constexpr std::string_view kAvx512Flags[] = {"-mavx512f", "-mavx512bw", "-mavx512dq", "-mavx512vl",
                                             "-mavx2",    "-mfma",      "-mf16c"};
constexpr std::string_view kAvx2Flags[] = {"-mavx2", "-mfma", "-mf16c"};

constexpr std::string_view kAvx512Guard =
    "defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && "
    "defined(__AVX512VL__) && defined(__FMA__) && defined(__F16C__)";

// Best first: native resolves to the first family whose guard holds.
const std::array<IsaFamily, 4> kFamilies{{
    {Isa::kAvx512Bf16, "avx512bf16", kAvx512Bf16Flags,
     "defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && "
     "defined(__AVX512VL__) && defined(__AVX512BF16__) && defined(__AVX512VNNI__) && "
     "defined(__FMA__) && defined(__F16C__)",
     "cpp/ukernel/avx512bf16.inc", 4, 32},
    {Isa::kAvx512, "avx512", kAvx512Flags, kAvx512Guard, "cpp/ukernel/avx512.inc", 4, 32},
    {Isa::kAvx2, "avx2", kAvx2Flags, "defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)",
     "cpp/ukernel/avx2.inc", 4, 16},
    {Isa::kGeneric, "generic", {}, "1", "cpp/ukernel/generic.inc", 4, 16},
}};

struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false, avx512 = false, bf16 = false, vnni = false;
};

CpuFeatures detect() {
  CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool osxsave = c & (1u << 27), avx = c & (1u << 28);
  f.fma = c & (1u << 12);
  f.f16c = c & (1u << 29);
  if (!osxsave || !avx) return f;
  unsigned xcr0_lo, xcr0_hi;
  __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  const bool ymm_state = (xcr0_lo & 0x6u) == 0x6u;    // SSE and AVX state saved by the OS
  const bool zmm_state = (xcr0_lo & 0xe6u) == 0xe6u;  // plus opmask and both ZMM halves
  if (!ymm_state || !__get_cpuid_count(7, 0, &a, &b, &c, &d)) return f;
  f.avx2 = b & (1u << 5);
  const bool avx512f = b & (1u << 16), dq = b & (1u << 17), bw = b & (1u << 30),
             vl = b & (1u << 31);
  f.avx512 = zmm_state && avx512f && dq && bw && vl;
  f.vnni = f.avx512 && (c & (1u << 11));
  if (f.avx512 && __get_cpuid_count(7, 1, &a, &b, &c, &d)) f.bf16 = a & (1u << 5);
#endif
  return f;
}

}  // namespace

std::span<const IsaFamily> isa_families() {
  return kFamilies;
}

const IsaFamily& isa_family(Isa isa) {
  for (const auto& f : kFamilies)
    if (f.isa == isa) return f;
  throw SpecError("isa=" + std::string(to_string(isa)) +
                  " is resolved where the kernel is compiled; it has no family of its own");
}

std::vector<std::string> isa_flags(Isa isa) {
  if (isa == Isa::kNative) return {"-march=native"};
  const IsaFamily& f = isa_family(isa);
  return {f.flags.begin(), f.flags.end()};
}

bool host_supports(Isa isa) {
  static const CpuFeatures c = detect();
  const bool avx2 = c.avx2 && c.fma && c.f16c;
  switch (isa) {
    case Isa::kNative:
    case Isa::kGeneric:
      return true;
    case Isa::kAvx2:
      return avx2;
    case Isa::kAvx512:
      return avx2 && c.avx512;
    case Isa::kAvx512Bf16:
      return avx2 && c.avx512 && c.bf16 && c.vnni;
  }
  return false;
}

Isa host_isa() {
  for (const auto& f : kFamilies)
    if (host_supports(f.isa)) return f.isa;
  return Isa::kGeneric;
}

// C++ target, gmm: tm=64 rows share each packed rhs tile, tn=64 f32 accumulators per row stay
// within a few vector registers per row, tk=256 keeps the packed rhs tile (tk x tn x 4 B =
// 64 KiB) within L2 next to the accumulators (16 KiB). tgmm: tm=64 rows per chunk, tk=128,
// tn=64: the accumulator [tk][tn] is 32 KiB, the converted chunk 32 KiB of lhs and 16 KiB of
// rhs; the rhs chunk stays in L1 while each accumulator row (tn floats) sweeps it.
Tiling default_tiling(const KernelSpec& s) {
  Tiling t;
  t.tm = 64;
  t.tk = std::clamp<int64_t>(s.k, 1, s.op == Op::kTgmm ? 128 : 256);
  t.tn = std::clamp<int64_t>(s.n, 1, 64);
  return t;
}

// The kernel's scratch struct is 64-byte aligned, so its size is a multiple of 64.
int64_t scratch_bytes(const KernelSpec& s) {
  const int64_t tm = s.tiling.tm, tk = s.tiling.tk, tn = packed_cols(s.tiling.tn);
  const int64_t floats = s.op == Op::kTgmm
                             // lhs chunk [tk][tm], rhs chunk [tm][tn] in f32, accumulator [tk][tn]
                             ? tk * tm + tm * tn + tk * tn
                             // accumulator [tm][tn], the rhs tile [tk][tn] converted to f32
                             : tm * tn + tk * tn;
  return (floats * 4 + 63) / 64 * 64;
}

}  // namespace gmmgen
