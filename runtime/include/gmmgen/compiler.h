// Building emitted kernels into shared objects with the system C++ compiler, invoked directly
// (posix_spawn, no shell).
#pragma once

#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "gmmgen/spec.h"

namespace gmmgen {

class CompileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct CompilerConfig {
  std::string cxx;                 // compiler executable (path or name looked up in PATH)
  std::vector<std::string> flags;  // every flag, ISA flags included
};

// The compiler: $GMMGEN_CXX, else the one CMake found at configure time. Flags: -std=c++17
// -O3 -fPIC -shared plus the ISA's flags, then $GMMGEN_CXXFLAGS (split
// on whitespace, no shell quoting), which come last and so win.
CompilerConfig default_compiler(Isa isa);

// Runs argv (argv[0] looked up in PATH) and returns its exit status and combined stdout+stderr.
struct ProcessResult {
  int status = -1;  // exit code, or 128+signal; -1 if it could not be started
  std::string output;
};
ProcessResult run_process(const std::vector<std::string>& argv);

// Compiles `source` (C++17) into the shared object `output`, with `include_dir` on the include
// path. Throws CompileError with the command line and the compiler's message on failure.
void compile_shared_object(const CompilerConfig& cc, const std::filesystem::path& source,
                           const std::filesystem::path& include_dir,
                           const std::filesystem::path& output);

// Command line as one printable string (arguments quoted where needed), for logs and errors.
std::string format_command(const std::vector<std::string>& argv);

}  // namespace gmmgen
