#include "gmmgen/kernel_library.h"

#include <dlfcn.h>

#include <stdexcept>

namespace gmmgen {

KernelLibrary KernelLibrary::open(const std::filesystem::path& so) {
  void* h = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) throw std::runtime_error("cannot load " + so.string() + ": " + dlerror());
  KernelLibrary lib;
  lib.handle_ = std::shared_ptr<void>(h, [](void* p) { dlclose(p); });
  lib.path_ = so;
  return lib;
}

KernelLibrary KernelLibrary::open(const std::filesystem::path& so, const std::string& name) {
  KernelLibrary lib = open(so);
  lib.bind(name);
  return lib;
}

void KernelLibrary::bind(const std::string& name) {
  auto sym = [&](const std::string& s) -> void* {
    void* p = dlsym(handle_.get(), s.c_str());
    if (!p) throw std::runtime_error(path_.string() + " has no symbol " + s);
    return p;
  };
  fns_.info = reinterpret_cast<decltype(fns_.info)>(sym(name + "_info"));
  fns_.workspace_bytes =
      reinterpret_cast<decltype(fns_.workspace_bytes)>(sym(name + "_workspace_bytes"));
  fns_.plan = reinterpret_cast<decltype(fns_.plan)>(sym(name + "_plan"));
  fns_.run_items = reinterpret_cast<decltype(fns_.run_items)>(sym(name + "_run_items"));
  fns_.run = reinterpret_cast<decltype(fns_.run)>(sym(name));
  fns_.make_group_metadata =
      reinterpret_cast<decltype(fns_.make_group_metadata)>(sym(name + "_make_group_metadata"));
  if (info().abi_version != GMMGEN_ABI_VERSION)
    throw std::runtime_error(path_.string() + ": kernel ABI version " +
                             std::to_string(info().abi_version) + ", expected " +
                             std::to_string(GMMGEN_ABI_VERSION));
}

void* KernelLibrary::find(const std::string& symbol) const {
  return handle_ ? dlsym(handle_.get(), symbol.c_str()) : nullptr;
}

}  // namespace gmmgen
