// The gmm-gen subcommands: each file adds one to the app and returns how to run it.
#pragma once

#include <CLI/CLI.hpp>
#include <chrono>
#include <functional>
#include <string>
#include <string_view>
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
  // The selected specs (unvalidated), with the aliases spec files give them. Throws SpecError.
  std::vector<SpecEntry> entries() const;
  std::vector<KernelSpec> specs() const;
};

// Exit statuses of every command: a check failed is a kernel that computed wrong results
// (verify, bench, tune); invalid input or usage covers command-line parse errors, invalid specs
// and option values, and a --filter that matches nothing.
inline constexpr int kExitOk = 0, kExitCheckFailed = 1, kExitUsage = 2;

// --filter PATTERN (emit, verify, bench, tune): kernel names to keep, as CUTLASS's kernel filter.
// Comma-separated alternatives; `*` matches any run of characters and `?` one character, against
// the whole name; an alternative without wildcards matches anywhere in the name (bf16 is *bf16*).
struct KernelFilter {
  std::string pattern;
  void add_to(CLI::App& app);
  bool given() const { return !pattern.empty(); }
  // Whether kernel_name(spec), or the alias, matches (always, when no filter is given).
  bool matches(const KernelSpec& spec, const std::string& alias = "") const;
  // The specs that match, in order; InvalidArgument naming the pattern if none does.
  std::vector<KernelSpec> apply(const std::vector<KernelSpec>& specs) const;
  std::vector<SpecEntry> apply(const std::vector<SpecEntry>& entries) const;
  // InvalidArgument naming the pattern; for a caller that filtered by itself and kept nothing.
  [[noreturn]] void no_match(size_t candidates) const;
};

// Wall seconds since t0.
inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Whether `name` matches the glob `pattern` (`*`, `?`; no escapes), as a whole.
bool glob_match(std::string_view pattern, std::string_view name);

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
