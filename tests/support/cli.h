// Test helper: runs the gmm-gen command line built with the tests (GMMGEN_CLI), without a shell.
#pragma once
#include <string>
#include <vector>

#include "jit/toolchain.h"

namespace gmmgen::testing {

// gmm-gen ARGS..., with `env` (NAME=value pairs) added to its environment.
inline ProcessResult cli(const std::vector<std::string>& env,
                         const std::vector<std::string>& args) {
  std::vector<std::string> argv{"env"};
  argv.insert(argv.end(), env.begin(), env.end());
  argv.push_back(GMMGEN_CLI);
  argv.insert(argv.end(), args.begin(), args.end());
  return run_process(argv);
}
inline ProcessResult cli(const std::vector<std::string>& args) {
  return cli({}, args);
}

}  // namespace gmmgen::testing
