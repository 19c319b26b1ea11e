// The embedded template files (templates/ and the kernel ABI header), compiled into the generator
// so that a spec's hash and its emitted bytes depend only on the binary, not on the install path.
#pragma once

#include <span>
#include <string>
#include <string_view>

namespace gmmgen {

struct EmbeddedFile {
  std::string_view path;     // relative to templates/, e.g. "cpp/kernel.cpp.mustache"
  std::string_view content;  // exact file bytes
};

// All embedded files, sorted by path.
std::span<const EmbeddedFile> embedded_files();

// Content of one embedded file; throws std::out_of_range for an unknown path.
std::string_view embedded_file(std::string_view path);

// XXH3-128 (hex) over every embedded file's path and content.
const std::string& templates_digest();

// The generator's version (project version from CMake).
std::string_view generator_version();

}  // namespace gmmgen
