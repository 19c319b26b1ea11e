#include "gmmgen/kernel_library.h"

#include <dlfcn.h>

#include <stdexcept>

namespace gmmgen {

KernelLibrary KernelLibrary::open(const std::filesystem::path& so, const std::string& name) {
  void* h = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) throw std::runtime_error("cannot load " + so.string() + ": " + dlerror());
  KernelLibrary lib;
  lib.handle_ = std::shared_ptr<void>(h, [](void* p) { dlclose(p); });
  auto sym = [&](const std::string& s) -> void* {
    void* p = dlsym(h, s.c_str());
    if (!p) throw std::runtime_error(so.string() + " has no symbol " + s);
    return p;
  };
  lib.fns_.info = reinterpret_cast<decltype(lib.fns_.info)>(sym(name + "_info"));
  lib.fns_.workspace_bytes =
      reinterpret_cast<decltype(lib.fns_.workspace_bytes)>(sym(name + "_workspace_bytes"));
  lib.fns_.plan = reinterpret_cast<decltype(lib.fns_.plan)>(sym(name + "_plan"));
  lib.fns_.run_items = reinterpret_cast<decltype(lib.fns_.run_items)>(sym(name + "_run_items"));
  lib.fns_.run = reinterpret_cast<decltype(lib.fns_.run)>(sym(name));
  lib.fns_.make_group_metadata =
      reinterpret_cast<decltype(lib.fns_.make_group_metadata)>(sym(name + "_make_group_metadata"));
  if (lib.info().abi_version != GMMGEN_ABI_VERSION)
    throw std::runtime_error(so.string() + ": kernel ABI version " +
                             std::to_string(lib.info().abi_version) + ", expected " +
                             std::to_string(GMMGEN_ABI_VERSION));
  return lib;
}

}  // namespace gmmgen
