// gmm-gen describe: name, hash, canonical forms, cost and footprint of specs; or the spec keys.
#include <iostream>
#include <memory>
#include <set>

#include "commands.h"
#include "gmmgen/emit.h"
#include "gmmgen/templates.h"

namespace gmmgen::cli {

Command add_describe(CLI::App& app) {
  struct Options {
    SpecOptions specs;
    bool json = false, fields = false;
  };
  auto o = std::make_shared<Options>();
  CLI::App* cmd =
      app.add_subcommand("describe", "Print name, hash, canonical forms, cost and footprint");
  o->specs.add_to(*cmd);
  cmd->add_flag("--json", o->json, "Print the manifest entries as JSON");
  cmd->add_flag("--fields", o->fields, "Print the table of spec keys (markdown) and exit");
  cmd->footer(
      "Example:\n  gmm-gen describe --spec op=gmm,lhs=bf16,rhs=bf16,out=f32,k=2048,n=1408,g=64\n"
      "  gmm-gen describe --fields");
  return {cmd, [o] {
            if (o->fields) {
              std::cout << spec_fields_markdown();
              return 0;
            }
            nlohmann::ordered_json all = nlohmann::ordered_json::array();
            std::set<std::string> seen;  // a spec given twice is described once
            for (const auto& s : o->specs.specs()) {
              if (!seen.insert(to_text(s)).second) continue;
              const EmittedKernel k = emit_kernel(s);
              if (o->json) {
                all.push_back(k.manifest_entry);
                continue;
              }
              const auto& m = k.manifest_entry;
              std::cout << "name:       " << k.name << "\n"
                        << "hash:       " << k.hash << "\n"
                        << "spec:       " << to_text(s) << "\n"
                        << "json:       " << to_json(s).dump() << "\n"
                        << "flops(M):   " << m["cost"]["flops"]["per_m"] << " * M + "
                        << m["cost"]["flops"]["fixed"] << "\n"
                        << "bytes(M):   " << m["cost"]["bytes"]["per_m"] << " * M + "
                        << m["cost"]["bytes"]["fixed"] << "\n"
                        << "scratch:    " << m["footprint"]["scratch_bytes_per_thread"]
                        << " bytes per thread\n"
                        << "generator:  " << generator_version() << "\n\n";
            }
            if (o->json) std::cout << all.dump(2) << "\n";
            return 0;
          }};
}

}  // namespace gmmgen::cli
