// The runtime's error types; each maps to one C API code (gmmgen/runtime_c.h).
#pragma once

#include <stdexcept>

namespace gmmgen {

// Bad arguments to a runtime call; the message names the argument and the rule.
// C API: GMMGEN_ERR_INVALID_ARGUMENT.
class InvalidArgument : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// The compiler failed, could not be run, ran past GMMGEN_COMPILE_TIMEOUT, wrote no object, or
// wrote one that does not load (also after one rebuild); the message has its command line and
// output. C API: GMMGEN_ERR_COMPILE.
class CompileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The disk cache is unusable or unsafe: ownership, permissions, I/O (a full disk, a read-only
// folder), with the system's reason. C API: GMMGEN_ERR_CACHE.
class CacheError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A kernel would have to be compiled but GMMGEN_DISABLE_JIT=1 (or RuntimeOptions::jit=false).
// C API: GMMGEN_ERR_JIT_DISABLED.
class JitDisabledError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace gmmgen
