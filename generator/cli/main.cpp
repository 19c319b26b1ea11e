// gmm-gen: emits, describes, lists, verifies grouped-matmul kernels and manages their cache.
// This file only dispatches; each subcommand lives in <name>_cmd.cpp.
#include <iostream>

#include "commands.h"
#include "gmmgen/templates.h"

int main(int argc, char** argv) {
  using namespace gmmgen::cli;
  CLI::App app{"gmm-gen " + std::string(gmmgen::generator_version()) +
               ": generates grouped-matmul (MoE) kernels"};
  app.require_subcommand(1);
  app.footer("Run 'gmm-gen <command> --help' for a command's options and an example.");
  const Command commands[] = {add_emit(app),  add_describe(app), add_list(app), add_verify(app),
                              add_bench(app), add_tune(app),     add_cache(app)};
  try {
    app.parse(argc, argv);
    for (const Command& c : commands)
      if (c.app->parsed()) return c.run();
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const gmmgen::SpecError& e) {
    std::cerr << "gmm-gen: invalid spec: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "gmm-gen: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
