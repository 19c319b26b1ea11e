// Test helpers for files: a private scratch folder, and whole-file reads and writes.
#pragma once
#include <stdlib.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>

namespace gmmgen::testing {

// A fresh folder of our own (mkdtemp under $TMPDIR, else /tmp: never a predictable path), or
// empty if it cannot be made; the caller removes it.
inline std::filesystem::path make_private_dir(const std::string& prefix) {
  const char* tmp = std::getenv("TMPDIR");
  std::string templ = std::string(tmp && *tmp ? tmp : "/tmp") + "/" + prefix + "_XXXXXX";
  if (!mkdtemp(templ.data())) return {};
  return templ;
}

// A make_private_dir folder, removed with everything in it at scope exit.
struct Scratch {
  std::filesystem::path path;
  explicit Scratch(const std::string& prefix = "gmmgen_test") : path(make_private_dir(prefix)) {
    if (path.empty()) throw std::runtime_error("mkdtemp failed for a folder " + prefix + "_*");
  }
  ~Scratch() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
};

// The whole file (empty if it cannot be read).
inline std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Replaces the file's content.
inline void write_file(const std::filesystem::path& p, const std::string& content) {
  std::ofstream(p, std::ios::binary | std::ios::trunc) << content;
}

}  // namespace gmmgen::testing
