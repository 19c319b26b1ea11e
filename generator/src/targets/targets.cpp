// The registry of targets: one row per TargetKind, in its order.
#include <array>

#include "gmmgen/target.h"

namespace gmmgen {

const Target& cpp_target();
const Target& pallas_target();

std::span<const Target* const> targets() {
  static const std::array<const Target*, 2> all{&cpp_target(), &pallas_target()};
  return all;
}

const Target& target_of(TargetKind kind) {
  for (const Target* t : targets())
    if (t->kind() == kind) return *t;
  throw SpecError("target code " + std::to_string(int(kind)) + " is not a known target");
}

}  // namespace gmmgen
