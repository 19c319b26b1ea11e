// Test helpers around the runtime: programs on $PATH, the JIT cache the tests share, and a
// fixture with a Runtime on that cache.
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "gmmgen/runtime.hpp"
#include "scratch.h"

namespace gmmgen::testing {

// A program's path on $PATH, or empty.
inline std::string on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  const std::string dirs = path ? path : "";
  for (size_t at = 0; at <= dirs.size();) {
    const size_t end = std::min(dirs.find(':', at), dirs.size());
    const std::filesystem::path f = std::filesystem::path(dirs.substr(at, end - at)) / name;
    if (end > at && access(f.c_str(), X_OK) == 0) return f.string();
    at = end + 1;
  }
  return {};
}

// The disk cache for the kernels that tests compile when what they check is not the compiling
// itself: $GMMGEN_TEST_CACHE_DIR (.ci/test points all its builds at one folder; the cache key
// covers compiler and flags, so each build finds what an earlier one compiled alike), else
// <build>/test-cache.
inline std::filesystem::path shared_test_cache() {
  const char* shared = std::getenv("GMMGEN_TEST_CACHE_DIR");
  return shared && *shared ? std::filesystem::path(shared)
                           : std::filesystem::path(GMMGEN_BINARY_DIR) / "test-cache";
}

// Options for a Runtime on the shared test cache, with 2 threads.
inline RuntimeOptions shared_cache_options() {
  RuntimeOptions o;
  o.cache_dir = shared_test_cache();
  o.num_threads = 2;
  return o;
}

// A test fixture: a Runtime (2 threads) on the shared test cache.
class SharedCacheRuntimeTest : public ::testing::Test {
 protected:
  void SetUp() override { rt_ = std::make_unique<Runtime>(shared_cache_options()); }
  void TearDown() override { rt_.reset(); }
  std::unique_ptr<Runtime> rt_;
};

}  // namespace gmmgen::testing
