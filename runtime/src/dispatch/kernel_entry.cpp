#include "dispatch/kernel_entry.h"

#include "gmmgen/errors.hpp"

namespace gmmgen {

gmmgen_kernel_entry bind_entry_points(const SharedObject& so, const std::string& name) {
  gmmgen_kernel_entry e{};
  auto sym = [&](const std::string& s) {
    void* p = so.find(s);
    if (!p) throw CacheError(so.path().string() + " has no symbol " + s);
    return p;
  };
#define GMMGEN_BIND_(arg, ret, field, suffix, params) \
  e.field = reinterpret_cast<decltype(e.field)>(sym(name + #suffix));
  GMMGEN_ENTRY_POINTS(GMMGEN_BIND_, ~)
#undef GMMGEN_BIND_
  if (e.info()->abi_version != GMMGEN_ABI_VERSION)
    throw CacheError(so.path().string() + ": kernel ABI version " +
                     std::to_string(e.info()->abi_version) + ", expected " +
                     std::to_string(GMMGEN_ABI_VERSION));
  return e;
}

}  // namespace gmmgen
