// A compiled kernel's entry points, resolved from a shared object (dlopen) or from function
// pointers linked into the program.
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "gmmgen/kernel_abi.h"

namespace gmmgen {

// The entry points of one kernel (see gmmgen/kernel_abi.h).
using KernelFns = gmmgen_kernel_entry;

// An open shared object and the entry points of the kernel `name` in it. Closing happens when
// the last copy of the handle goes away.
class KernelLibrary {
 public:
  // Throws std::runtime_error naming the file and the missing symbol or dlopen's message.
  static KernelLibrary open(const std::filesystem::path& so, const std::string& name);
  const KernelFns& fns() const { return fns_; }
  const gmmgen_kernel_info& info() const { return *fns_.info(); }

 private:
  std::shared_ptr<void> handle_;
  KernelFns fns_;
};

}  // namespace gmmgen
