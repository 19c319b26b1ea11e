// Binding a loaded object's entry points (GMMGEN_ENTRY_POINTS) into a gmmgen_kernel_entry.
#pragma once

#include <string>

#include "gmmgen/kernel_abi.h"
#include "jit/loader.h"

namespace gmmgen {

// Resolves every entry point of kernel `name`; throws CacheError naming a missing symbol or an
// ABI version mismatch.
gmmgen_kernel_entry bind_entry_points(const SharedObject& so, const std::string& name);

}  // namespace gmmgen
