// Shared pieces of the gmm-gen subcommands.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "gmmgen/spec.h"

namespace gmmgen::cli {

// Spec selection shared by emit, describe and verify: --spec TEXT, --spec-file FILE, or flags.
struct SpecOptions {
  std::vector<std::string> texts;
  std::vector<std::string> files;
  std::vector<std::pair<std::string, std::string>> flags;  // key=value pairs from flags
  void add_to(CLI::App& app);
  // The selected specs (unvalidated). Throws SpecError.
  std::vector<KernelSpec> specs() const;
};

int run_verify(const std::vector<KernelSpec>& specs, uint64_t seed, bool quick);

}  // namespace gmmgen::cli
