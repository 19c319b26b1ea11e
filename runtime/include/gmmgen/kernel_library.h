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
  // Loads the object (throws std::runtime_error with dlopen's message).
  static KernelLibrary open(const std::filesystem::path& so);
  // Resolves the entry points of kernel `name`; throws naming a missing symbol.
  void bind(const std::string& name);
  // open + bind.
  static KernelLibrary open(const std::filesystem::path& so, const std::string& name);
  const KernelFns& fns() const { return fns_; }
  const gmmgen_kernel_info& info() const { return *fns_.info(); }
  // Address of another symbol of the object, or nullptr.
  void* find(const std::string& symbol) const;

 private:
  std::shared_ptr<void> handle_;
  std::filesystem::path path_;
  KernelFns fns_;
};

}  // namespace gmmgen
