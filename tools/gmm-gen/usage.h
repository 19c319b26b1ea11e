// What gmm-gen says about its own command line: --version, and command-line errors with a
// "did you mean" for a misspelled command or option. Included by main.cpp only.
#pragma once

#include <CLI/CLI.hpp>
#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include "commands.h"
#include "gmmgen/kernel_abi.h"
#include "gmmgen/runtime_config.h"
#include "gmmgen/templates.h"

namespace gmmgen::cli {

// The generator version, the kernel ABI, the compiler gmm-gen was built with and the one it
// compiles kernels with at run time.
inline std::string version_text() {
#if defined(__clang__)
  const std::string built_with = "clang++ " __clang_version__;
#elif defined(__GNUC__)
  const std::string built_with = "g++ " __VERSION__;
#else
  const std::string built_with = "an unknown compiler";
#endif
  return "gmm-gen " + std::string(generator_version()) + "\nkernel ABI version " +
         std::to_string(GMMGEN_ABI_VERSION) + "\nbuilt with " + built_with + " (C++ " +
         std::to_string(__cplusplus) + ")\nkernels compiled at run time with " +
         GMMGEN_DEFAULT_CXX + " ($GMMGEN_CXX overrides)";
}

// Levenshtein distance (insertions, deletions, substitutions), plus one for a swap of two
// neighbours counted as a single edit (--qiuck is one edit from --quick).
inline size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i)
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min(
          {d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

// The candidate nearest `token`, if it is near enough to be a typo (a third of its length, at
// least 1 edit, at most 3; or `token` is a prefix of exactly one candidate); "" otherwise.
inline std::string nearest(const std::string& token, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_d = std::string::npos;
  int prefixed = 0;
  std::string prefix_of;
  for (const auto& c : candidates) {
    const size_t d = edit_distance(token, c);
    if (d < best_d) best_d = d, best = c;
    if (token.size() >= 3 && c.rfind(token, 0) == 0) ++prefixed, prefix_of = c;
  }
  const size_t limit = std::clamp<size_t>(token.size() / 3, 1, 3);
  if (best_d <= limit) return best;
  return prefixed == 1 ? prefix_of : "";
}

// Every spelling of an app's options: --long and -s.
inline std::vector<std::string> option_names(const CLI::App& app) {
  std::vector<std::string> out;
  for (const CLI::Option* o : app.get_options()) {
    for (const auto& l : o->get_lnames()) out.push_back("--" + l);
    for (const auto& s : o->get_snames()) out.push_back("-" + s);
  }
  return out;
}

// Reports a command-line parse error on stderr, with a suggestion for an unknown command or
// option; --help and --version print to stdout. Returns the exit status: 0 for --help and
// --version, kExitUsage otherwise.
inline int report_parse_error(CLI::App& app, const CLI::ParseError& e) {
  if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
  const std::vector<CLI::App*> parsed = app.get_subcommands();
  CLI::App* cmd = parsed.empty() ? nullptr : parsed.front();
  std::vector<CLI::App*> commands = app.get_subcommands({});
  std::string command_list;
  for (const CLI::App* sub : commands)
    command_list += (command_list.empty() ? "" : ", ") + sub->get_name();
  // The first token nobody took, and whose it was: gmm-gen's own (before or instead of a
  // command) or the command's.
  std::vector<std::string> extra = app.remaining(false);
  CLI::App* ctx = &app;
  if (extra.empty() && cmd) extra = cmd->remaining(false), ctx = cmd;
  const std::string who = ctx == cmd ? "gmm-gen " + cmd->get_name() : "gmm-gen";
  std::string message = e.what(), hint;
  if (!extra.empty()) {
    const std::string token = extra.front();
    if (token.size() > 1 && token[0] == '-') {
      const std::string name = token.substr(0, token.find('='));
      message = "unknown option '" + name + "'";
      if (ctx == &app)  // an option of a command, given before the command
        for (const CLI::App* sub : commands)
          for (const auto& n : option_names(*sub))
            if (n == name && hint.empty())
              hint = "it is an option of a command: gmm-gen " + sub->get_name() + " " + name;
      if (hint.empty())
        if (const std::string near = nearest(name, option_names(*ctx)); !near.empty())
          hint = "did you mean '" + near + "'?";
    } else if (ctx == &app) {
      message = "unknown command '" + token + "'";
      std::vector<std::string> names;
      for (const CLI::App* sub : commands) names.push_back(sub->get_name());
      const std::string near = nearest(token, names);
      hint = near.empty() ? "the commands are: " + command_list : "did you mean '" + near + "'?";
    } else {
      message = "unexpected argument '" + token + "'";
    }
  } else if (!cmd && dynamic_cast<const CLI::RequiredError*>(&e)) {
    message = "a command is required: " + command_list;
  }
  std::cerr << who << ": " << message << "\n";
  if (!hint.empty()) std::cerr << who << ": " << hint << "\n";
  std::cerr << "Run '" << (cmd ? "gmm-gen " + cmd->get_name() : std::string("gmm-gen"))
            << " --help' for the options.\n";
  return kExitUsage;
}

}  // namespace gmmgen::cli
