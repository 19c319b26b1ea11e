// libFuzzer target: the parsers of untrusted input -- spec text, spec JSON files, kernel names,
// scale schemes and calibrations, tuning tables and disk cache entries (entry.json). The first
// byte picks the parser (and, for schemes, which of the two), the rest is its input. A parser may
// only accept the input or reject it the documented way (SpecError, InvalidArgument, TableError, a
// non-empty verdict); any other exception, a crash, a leak or undefined behaviour is a finding.
// What is accepted must also survive its round trip. At exit, the executions of each parser are
// printed.
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string_view>

#include "gmmgen/errors.hpp"
#include "gmmgen/naming.h"
#include "gmmgen/quantize.hpp"
#include "gmmgen/spec.h"
#include "gmmgen/tuning/table.h"
#include "jit/cache_entry.h"

namespace {

constexpr std::array<const char*, 6> kParsers = {"spec text",    "spec json",
                                                 "kernel name",  "scale scheme/calibration",
                                                 "tuning table", "cache entry"};

// Executions per parser, printed when the fuzzer exits.
struct Counts {
  std::array<uint64_t, kParsers.size()> runs{};
  ~Counts() {
    for (size_t i = 0; i < runs.size(); ++i)
      std::fprintf(stderr, "fuzz: %s: %llu executions\n", kParsers[i],
                   static_cast<unsigned long long>(runs[i]));
  }
} counts;

// A broken promise of a parser: reported as a crash with its input.
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
  const size_t parser = data[0] % kParsers.size();
  ++counts.runs[parser];
  try {
    switch (parser) {
      case 0: {  // spec text, as given to --spec
        const KernelSpec s = parse_text(in);
        validate(s);
        round_trips(s);
        break;
      }
      case 1:  // a spec file (validates each spec)
        for (const KernelSpec& s : parse_spec_json(in, "fuzz")) round_trips(s);
        break;
      case 2:  // a kernel name, as in manifests and the cache
        parse_kernel_name(in);
        break;
      case 3: {  // quantize's scheme and calibration strings (the C API and Python take them)
        if ((data[0] / kParsers.size()) & 1) {
          const Quant q = parse_quant_scheme(in);
          require(parse_quant_scheme(to_string(q)) == q);
        } else {
          const Calibration c = parse_calibration(in);
          require(parse_calibration(to_string(c)) == c);
        }
        break;
      }
      case 4: {  // a tuning table (any file in a tuning folder), entries skipped or not
        std::vector<std::string> skipped;
        const tuning::Table t = tuning::parse_table(in, "fuzz", &skipped);
        const tuning::Table back = tuning::parse_table(tuning::dump_table(t), "fuzz");
        require(back.entries.size() == t.entries.size());
        break;
      }
      default: {  // a cache entry's entry.json
        const std::string why = entry_mismatch(in, "0123456789abcdef0123456789abcdef", 4096,
                                               [] { return std::string(32, 'a'); });
        require(why.empty() || why.find("entry.json") != std::string::npos ||
                why.find("kernel.so") != std::string::npos);
        break;
      }
    }
  } catch (const SpecError&) {
    // The documented rejections.
  } catch (const InvalidArgument&) {
  } catch (const tuning::TableError&) {
  }
  return 0;
}
