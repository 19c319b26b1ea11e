// The machine the runtime runs on: which ISA families of the C++ target its CPU (and OS) can run,
// probed once (cpuid, xgetbv, Linux's AMX grant). The generator knows the families
// (gmmgen/heuristics.h) but never the host: it may run elsewhere, at build time.
#pragma once

#include "gmmgen/heuristics.h"
#include "gmmgen/spec.h"

namespace gmmgen {

// Whether this machine runs kernels of a family (native and generic: always).
bool host_supports(Isa isa);
// The best family this machine runs (the first of isa_families() it supports): what isa=native
// compiles to here.
Isa host_isa();

// The heuristic's tiling on this machine: heuristic_tiling(s, rows_per_group, host_isa()).
Tiling heuristic_tiling(const KernelSpec& s, double rows_per_group);

}  // namespace gmmgen
