// This machine's x86-64 features (cpuid, xgetbv, the OS's AMX grant) and the ISA families of the
// C++ target it runs (gmmgen/platform.hpp).
#include "gmmgen/platform.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace gmmgen {
namespace {

struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false, avx512 = false, bf16 = false, vnni = false;
  bool amx = false;  // AMX tiles with bf16, and the OS lets this process use them
};

// Linux hands out the AMX tile state per process on request (arch_prctl ARCH_REQ_XCOMP_PERM for
// XFEATURE_XTILEDATA); without the grant a tile instruction faults. Kernels ask again themselves
// (templates/cpp/ukernel/amx.inc), so code built elsewhere needs nothing from this process.
bool amx_permitted() {
#if defined(__linux__) && defined(__x86_64__)
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
}

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
  const bool amx_tile = d & (1u << 24), amx_bf16 = d & (1u << 22), amx_int8 = d & (1u << 25);
  const bool tile_state = (xcr0_lo & 0x60000u) == 0x60000u;  // XTILECFG and XTILEDATA
  if (f.avx512 && __get_cpuid_count(7, 1, &a, &b, &c, &d)) f.bf16 = a & (1u << 5);
  f.amx = f.bf16 && f.vnni && amx_tile && amx_bf16 && amx_int8 && tile_state && amx_permitted();
#endif
  return f;
}

}  // namespace

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
    case Isa::kAvx512Vnni:
      return avx2 && c.avx512 && c.vnni;
    case Isa::kAvx512Bf16:
      return avx2 && c.avx512 && c.bf16 && c.vnni;
    case Isa::kAmx:
      return avx2 && c.avx512 && c.bf16 && c.vnni && c.amx;
  }
  return false;
}

Isa host_isa() {
  static const Isa best = [] {  // cpuid once: the runtime asks on every untuned call
    for (const auto& f : isa_families())
      if (host_supports(f.isa)) return f.isa;
    return Isa::kGeneric;
  }();
  return best;
}

Tiling heuristic_tiling(const KernelSpec& s, double rows_per_group) {
  return heuristic_tiling(s, rows_per_group, host_isa());
}

}  // namespace gmmgen
