// Building sources into shared objects with the system C++ compiler, invoked directly
// (fork and exec, no shell). Knows nothing of GMM: flags come from the caller.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "gmmgen/errors.hpp"

namespace gmmgen {

struct CompilerConfig {
  std::string cxx;                 // compiler executable (path or name looked up in PATH)
  std::vector<std::string> flags;  // every flag
};

// The compiler: $GMMGEN_CXX, else the one CMake found at configure time. Flags: -std=c++17
// -O3 -fPIC -shared, then `target_flags` (e.g. an ISA family's), then $GMMGEN_CXXFLAGS (split
// on whitespace, no shell quoting), which come last and so win.
CompilerConfig default_compiler(const std::vector<std::string>& target_flags);

// The compiler's identity: its version banner and target triple, never its install path
// (cached per executable). Throws CompileError if it cannot be run.
std::string compiler_identity(const std::string& cxx);

// The time limit of a compile or compiler probe: $GMMGEN_COMPILE_TIMEOUT seconds, default 300.
// Throws InvalidArgument unless it is a whole number in [1, 86400].
inline constexpr int kDefaultCompileTimeout = 300, kMaxCompileTimeout = 86400;
int compile_timeout_seconds();

// Runs argv (argv[0] looked up in PATH) in its own process group and returns its exit status
// and combined stdout+stderr. Returns when argv[0] exits (whatever its children do with the
// pipe), then kills what is left of the group. Past compile_timeout_seconds() it kills the
// whole group and throws CompileError naming the command and the limit. argv[0] dies with the
// caller (PR_SET_PDEATHSIG), even when the caller is killed by SIGKILL.
struct ProcessResult {
  int status = -1;  // exit code, or 128+signal; -1 if it could not be started
  std::string output;
};
ProcessResult run_process(const std::vector<std::string>& argv);

// Kills the process group of every run_process running now (SIGKILL). Async-signal-safe: for a
// SIGINT or SIGTERM handler that then ends the process (gmm-gen's), since the compilers run in
// process groups of their own, which a terminal's Ctrl-C does not reach.
void kill_running_compiles();

// The command that compiles `source` into the shared object `output`, with `include_dir` on the
// include path and `prelude` (a header, jit/prelude.h) included before it unless empty.
std::vector<std::string> compile_command(const CompilerConfig& cc,
                                         const std::filesystem::path& source,
                                         const std::filesystem::path& include_dir,
                                         const std::filesystem::path& output,
                                         const std::filesystem::path& prelude = {});

// Runs a build command (run_process) that turns `source` into `output`. Throws CompileError with
// the command line and the tool's message when it fails or writes no regular file `output`.
void run_build(const std::vector<std::string>& argv, const std::filesystem::path& source,
               const std::filesystem::path& output);

// run_build(compile_command(...)).
void compile_shared_object(const CompilerConfig& cc, const std::filesystem::path& source,
                           const std::filesystem::path& include_dir,
                           const std::filesystem::path& output);

// Command line as one printable string (arguments quoted where needed), for logs and errors.
std::string format_command(const std::vector<std::string>& argv);

// The key of an artifact in the disk cache: a hash of the artifact's own hash (opaque here),
// the compiler's identity, the flags, and -- when a flag targets the host (-march=native) --
// the host CPU's model and feature flags.
std::string cache_key(const std::string& artifact_hash, const CompilerConfig& cc);

}  // namespace gmmgen
