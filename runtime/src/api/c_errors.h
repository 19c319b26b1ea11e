// The C API's error convention, shared by c_api.cpp and c_quant.cpp: a call runs inside
// `guarded`, which turns the runtime's exceptions into GMMGEN_ERR_* codes and copies the message
// (truncated, always terminated) into the caller's buffer; success clears the buffer.
#pragma once

#include <cstring>
#include <new>
#include <stdexcept>

#include "gmmgen/runtime.hpp"
#include "gmmgen/runtime_c.h"

namespace gmmgen::c_api {

inline int report(char* err, size_t err_len, int code, const char* msg) {
  if (err && err_len) {
    std::strncpy(err, msg, err_len - 1);
    err[err_len - 1] = '\0';
  }
  return code;
}

template <typename F>
int guarded(char* err, size_t err_len, F&& fn) {
  try {
    fn();
    if (err && err_len) err[0] = '\0';
    return GMMGEN_OK;
  } catch (const InvalidArgument& e) {
    return report(err, err_len, GMMGEN_ERR_INVALID_ARGUMENT, e.what());
  } catch (const SpecError& e) {
    return report(err, err_len, GMMGEN_ERR_INVALID_ARGUMENT, e.what());
  } catch (const CompileError& e) {
    return report(err, err_len, GMMGEN_ERR_COMPILE, e.what());
  } catch (const CacheError& e) {
    return report(err, err_len, GMMGEN_ERR_CACHE, e.what());
  } catch (const JitDisabledError& e) {
    return report(err, err_len, GMMGEN_ERR_JIT_DISABLED, e.what());
  } catch (const std::invalid_argument& e) {  // any other invalid argument (std::stoi, ...)
    return report(err, err_len, GMMGEN_ERR_INVALID_ARGUMENT, e.what());
  } catch (const std::bad_alloc&) {
    return report(err, err_len, GMMGEN_ERR_OUT_OF_MEMORY, "out of memory");
  } catch (const std::exception& e) {
    return report(err, err_len, GMMGEN_ERR_INTERNAL, e.what());
  }
}

}  // namespace gmmgen::c_api
