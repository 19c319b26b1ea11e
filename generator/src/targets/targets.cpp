// The table of targets: one implementation per TargetKind.
#include "gmmgen/target.h"

namespace gmmgen {

const Target& cpp_target();
const Target& pallas_target();

const Target& target_of(TargetKind kind) {
  switch (kind) {
    case TargetKind::kCpp:
      return cpp_target();
    case TargetKind::kPallas:
      return pallas_target();
  }
  throw SpecError("target code " + std::to_string(int(kind)) + " is not a known target");
}

}  // namespace gmmgen
