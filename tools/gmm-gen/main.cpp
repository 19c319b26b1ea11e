// gmm-gen: emits, describes, lists, verifies grouped-matmul kernels and manages their cache.
// This file only dispatches; each subcommand lives in <name>_cmd.cpp, and what gmm-gen says about
// its own command line (--version, usage errors) in usage.h.
#include <signal.h>

#include <iostream>

#include "commands.h"
#include "gmmgen/runtime.hpp"
#include "usage.h"

namespace {

// Ctrl-C, a hang-up or a kill: the compilers gmm-gen started run in process groups of their own,
// which the terminal's signal does not reach, so they are killed first; then gmm-gen dies of the
// signal as it would have. (Build folders they leave are reclaimed by the next run.)
extern "C" void stop_on_signal(int sig) {
  gmmgen::kill_running_compiles();
  signal(sig, SIG_DFL);
  raise(sig);
}

void stop_compiles_on_signals() {
  struct sigaction sa {};
  sa.sa_handler = stop_on_signal;
  sigemptyset(&sa.sa_mask);
  for (const int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) {
    struct sigaction old {};
    // A signal the caller set to be ignored (nohup) stays ignored.
    if (sigaction(sig, nullptr, &old) == 0 && old.sa_handler != SIG_IGN)
      sigaction(sig, &sa, nullptr);
  }
}

}  // namespace

int main(int argc, char** argv) {
  using namespace gmmgen::cli;
  stop_compiles_on_signals();
  CLI::App app{"gmm-gen " + std::string(gmmgen::generator_version()) +
               ": generates grouped-matmul (MoE) kernels"};
  app.require_subcommand(1);
  app.set_version_flag("--version", version_text(), "Print the version, kernel ABI and compilers");
  app.footer(
      "Run 'gmm-gen <command> --help' for a command's options and an example.\n"
      "Exit status: 0 ok, 1 a check failed (a kernel computed wrong results) or the work could "
      "not\n"
      "be done (a compiler or file error), 2 invalid input or usage; verify: 77 nothing could "
      "run.");
  const Command commands[] = {add_emit(app),  add_describe(app), add_list(app), add_verify(app),
                              add_bench(app), add_tune(app),     add_cache(app)};
  try {
    app.parse(argc, argv);
    for (const Command& c : commands)
      if (c.app->parsed()) return c.run();
  } catch (const CLI::ParseError& e) {
    return report_parse_error(app, e);
  } catch (const gmmgen::SpecError& e) {
    std::cerr << "gmm-gen: invalid spec: " << e.what() << "\n";
    return kExitUsage;
  } catch (const std::invalid_argument& e) {  // InvalidArgument: an option's value, --filter
    std::cerr << "gmm-gen: " << e.what() << "\n";
    return kExitUsage;
  } catch (const std::exception& e) {
    std::cerr << "gmm-gen: " << e.what() << "\n";
    return kExitCheckFailed;
  }
  return kExitOk;
}
