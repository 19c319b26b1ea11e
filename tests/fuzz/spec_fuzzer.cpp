// libFuzzer target: the parsers of user input -- spec text, spec JSON files and kernel names.
// The first byte picks the parser, the rest is its input. A parser may only accept the input
// or reject it with SpecError; any other exception, a crash, a leak or undefined behaviour is a
// finding. What is accepted must also survive the round trips of the canonical forms.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>

#include "gmmgen/naming.h"
#include "gmmgen/spec.h"

namespace {

// A broken promise of the spec forms: reported as a crash with its input.
void require(bool ok) {
  if (!ok) __builtin_trap();
}

void round_trips(const gmmgen::KernelSpec& s) {
  using namespace gmmgen;
  require(parse_text(to_text(s)) == s);
  require(from_json(to_json(s)) == s);
  require(from_json(nlohmann::ordered_json::parse(to_json(s).dump())) == s);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gmmgen;
  if (size == 0) return 0;
  const std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    switch (data[0] % 3) {
      case 0: {  // spec text, as given to --spec
        const KernelSpec s = parse_text(in);
        validate(s);
        round_trips(s);
        break;
      }
      case 1:  // a spec file (validates each spec)
        for (const KernelSpec& s : parse_spec_json(in, "fuzz")) round_trips(s);
        break;
      default:  // a kernel name, as in manifests and the cache
        parse_kernel_name(in);
        break;
    }
  } catch (const SpecError&) {
    // The documented rejection.
  }
  return 0;
}
