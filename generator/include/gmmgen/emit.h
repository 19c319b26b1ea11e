// Emitters: fill the templates for a set of specs and write the kernel sources, the ABI header
// and manifest.json. Everything is rendered in memory and validated before any file is written.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gmmgen/spec.h"

namespace gmmgen {

struct EmittedFile {
  std::string path;  // relative to the output folder
  std::string content;
};

struct EmittedKernel {
  KernelSpec spec;
  std::string name;
  std::string hash;
  std::vector<EmittedFile> files;  // <name>.h, <name>.cpp
  nlohmann::ordered_json manifest_entry;
};

// Validates the spec (throws SpecError) and renders its files.
EmittedKernel emit_kernel(const KernelSpec& spec);

// Every file of a kernel set: each kernel's sources, gmmgen/kernel_abi.h and manifest.json, and
// with a bundle name B also B.h/B.cpp (all kernels in one translation unit plus a table of their
// entry points; the kernels of a bundle must share one isa). Validates every spec first; a
// SpecError names the spec's position. Duplicate specs are emitted once.
std::vector<EmittedFile> emit_set(const std::vector<KernelSpec>& specs,
                                  const std::string& bundle = "");

// The disk-cache wrapper of a kernel (entry.cpp): the kernel's source plus gmmgen_cache_key()
// returning `key`, which the runtime checks after loading.
EmittedFile emit_cache_entry(const std::string& kernel_name, const std::string& key);

// Writes files under dir (created if missing), each through a temporary file and a rename.
void write_files(const std::filesystem::path& dir, const std::vector<EmittedFile>& files);

// Reads a JSON spec file: an array of specs, or {"kernels": [...]}; each spec is a JSON object
// or a spec text string. Throws SpecError naming the file and the entry.
std::vector<KernelSpec> load_spec_file(const std::filesystem::path& path);

// Compiler flags and guard macro of a target ISA (empty for native/generic guards).
struct IsaInfo {
  std::string macro;               // predefined macro the emitted source checks, or ""
  std::vector<std::string> flags;  // flags that select the ISA
};
IsaInfo isa_info(Isa isa);

}  // namespace gmmgen
