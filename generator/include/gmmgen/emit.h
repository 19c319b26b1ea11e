// Emission: fills the templates of each spec's target and writes the kernel sources, the files
// each target's sets carry, and manifest.json. Everything is rendered in memory and validated
// before any file is written; a file whose content is unchanged is not rewritten.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "gmmgen/naming.h"
#include "gmmgen/spec.h"
#include "gmmgen/target.h"

namespace gmmgen {

struct EmittedKernel {
  KernelSpec spec;
  std::string name;
  std::string hash;
  std::vector<EmittedFile> files;  // relative to the target's folder: <name>.h, <name>.cpp
  nlohmann::ordered_json manifest_entry;
};

// Validates the spec (throws SpecError) and renders its files.
EmittedKernel emit_kernel(const KernelSpec& spec);

// Every file of a kernel set, paths relative to the output folder: each kernel's files under
// its target's folder (cpp/<name>.cpp), the files each target's sets carry
// (cpp/gmmgen/kernel_abi.h), with a bundle name B also (C++ kernels; families may mix):
//   cpp/B_<i>.cpp  one translation unit per entry i (0-based, every entry of the list, so a
//                  build system knows the file names from the entry count alone): the kernel's
//                  source and its aliases; a comment only for another target's entry or a
//                  kernel an earlier entry has;
//   cpp/B_table.cpp the table B_kernels[B_kernel_count] of every kernel's entry points;
//   cpp/B.h        declares the kernels, their aliases and the table;
//   cpp/B.cpp      all of the above in one translation unit;
// and manifest.json last. Validates every spec first; a SpecError names the entry's position.
// Duplicate specs are emitted once. An entry's alias needs a bundle.
std::vector<EmittedFile> emit_set(const std::vector<SpecEntry>& entries,
                                  const std::string& bundle = "");
std::vector<EmittedFile> emit_set(const std::vector<KernelSpec>& specs,
                                  const std::string& bundle = "");

// The disk-cache wrapper of a C++ kernel (entry.cpp): the kernel's source plus
// gmmgen_cache_key() returning `key`, which the runtime checks after loading.
EmittedFile emit_cache_entry(const std::string& kernel_name, const std::string& key);

// An emitted set could not be written (I/O: a full disk, permissions, something in the way);
// the message names the path. The output folder is left as it was.
class WriteError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Writes files under dir (created if missing): every changed file first to a temporary file
// of a random name beside it (O_EXCL, never through a symlink), then all renamed into place,
// each previous file kept (hard link) until the whole set is in, so a failure at any step
// puts every file back, removes every temporary and throws WriteError. Files whose content is
// unchanged are left alone (their mtime stays). Files listed in the folder's previous manifest.json
// that the new set does not contain are removed; nothing else is.
struct WriteReport {
  std::vector<std::string> written, unchanged, removed;  // relative paths
};
WriteReport write_files(const std::filesystem::path& dir, const std::vector<EmittedFile>& files);

}  // namespace gmmgen
