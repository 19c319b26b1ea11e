// The runtime backend of each target: one row per target.
#include "backend/backend.h"
#include "gmmgen/errors.hpp"

namespace gmmgen {

const Backend* backend_of(TargetKind target) {
  switch (target) {
    case TargetKind::kCpp:
      return &cpu_backend();
    case TargetKind::kPallas:  // modules run under JAX, not by this runtime
      return nullptr;
  }
  return nullptr;
}

const Backend& backend_for(const KernelSpec& spec) {
  if (const Backend* b = backend_of(spec.target)) return *b;
  throw InvalidArgument("target=" + std::string(to_string(spec.target)) +
                        ": the runtime builds and runs no kernels of this target (emit them with "
                        "gmm-gen emit; target=cpp kernels run here)");
}

}  // namespace gmmgen
