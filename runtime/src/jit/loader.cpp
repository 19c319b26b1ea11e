#include "jit/loader.h"

#include <dlfcn.h>

#include "gmmgen/errors.hpp"

namespace gmmgen {

SharedObject SharedObject::open(const std::filesystem::path& so) {
  void* h = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) throw CacheError("cannot load " + so.string() + ": " + dlerror());
  SharedObject lib;
  lib.handle_ = std::shared_ptr<void>(h, [](void* p) { dlclose(p); });
  lib.path_ = so;
  return lib;
}

void* SharedObject::find(const std::string& symbol) const {
  return handle_ ? dlsym(handle_.get(), symbol.c_str()) : nullptr;
}

}  // namespace gmmgen
