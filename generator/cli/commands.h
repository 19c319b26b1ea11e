// The gmm-gen subcommands: each file adds one to the app and returns how to run it.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

#include "gmmgen/spec.h"

namespace gmmgen::cli {

// Spec selection shared by emit, describe and verify: --spec TEXT, --spec-file FILE, or one
// flag per spec key (from the field table), which together form one more spec.
struct SpecOptions {
  std::vector<std::string> texts;
  std::vector<std::string> files;
  std::vector<std::pair<std::string, std::string>> flags;  // key=value pairs from flags
  void add_to(CLI::App& app);
  // The selected specs (unvalidated). Throws SpecError.
  std::vector<KernelSpec> specs() const;
};

// A subcommand: its parsed app and what runs it (returns the exit status).
struct Command {
  CLI::App* app;
  std::function<int()> run;
};

Command add_emit(CLI::App& app);
Command add_describe(CLI::App& app);
Command add_list(CLI::App& app);
Command add_verify(CLI::App& app);
Command add_cache(CLI::App& app);
Command add_bench(CLI::App& app);
Command add_tune(CLI::App& app);

}  // namespace gmmgen::cli
