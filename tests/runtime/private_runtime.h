// A test fixture: a Runtime (2 threads) whose disk cache is a private folder made by mkdtemp under
// $TMPDIR (else /tmp), removed at the end of the test.
#pragma once
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "gmmgen/runtime.hpp"

namespace gmmgen::testing {

inline std::filesystem::path make_private_dir(const std::string& prefix) {
  const char* tmp = std::getenv("TMPDIR");
  std::string templ = std::string(tmp && *tmp ? tmp : "/tmp") + "/" + prefix + "_XXXXXX";
  if (!mkdtemp(templ.data())) return {};
  return templ;
}

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

class PrivateRuntimeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = make_private_dir("gmmgen_test_rt");
    ASSERT_FALSE(dir_.empty()) << "mkdtemp failed";
    RuntimeOptions o;
    o.cache_dir = dir_;
    o.num_threads = 2;
    rt_ = std::make_unique<Runtime>(o);
  }
  void TearDown() override {
    rt_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::filesystem::path dir_;
  std::unique_ptr<Runtime> rt_;
};

}  // namespace gmmgen::testing
