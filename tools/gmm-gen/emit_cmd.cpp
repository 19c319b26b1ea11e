// gmm-gen emit: write the kernel sources, manifest.json and optionally a bundle.
#include <iostream>
#include <memory>

#include "commands.h"
#include "gmmgen/emit.h"

namespace gmmgen::cli {

Command add_emit(CLI::App& app) {
  struct Options {
    SpecOptions specs;
    KernelFilter filter;
    std::string out_dir, bundle;
  };
  auto o = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("emit", "Emit kernel sources and manifest.json for specs");
  o->specs.add_to(*cmd);
  o->filter.add_to(*cmd);
  cmd->add_option("--out", o->out_dir, "Output folder (created if missing)")->required();
  cmd->add_option("--bundle", o->bundle,
                  "Also write a bundle in cpp/: BUNDLE_<i>.cpp, one translation unit per spec "
                  "entry (with its aliases), BUNDLE_table.cpp (the table of entry points), "
                  "BUNDLE.h, and BUNDLE.cpp (all in one translation unit)");
  cmd->footer(
      "Writes <out>/cpp/<name>.h/.cpp per kernel, <out>/cpp/gmmgen/kernel_abi.h and\n"
      "<out>/manifest.json. Files whose content is unchanged are not rewritten; files that the\n"
      "folder's previous manifest lists and the new set lacks are removed (with --filter, the\n"
      "folder then holds the kernels that matched).\n"
      "Example:\n  gmm-gen emit -k 2048 -n 1408 -g 64 --lhs bf16 --rhs bf16 --out-dtype f32 --out "
      "kernels/\n"
      "  gmm-gen emit --spec-file generated/specs.json --out generated/ --bundle default_kernels\n"
      "  gmm-gen emit --spec-file generated/specs.json --filter 'tgmm_*' --out kernels/");
  return {cmd, [o] {
            // Everything is validated and rendered before anything is written.
            const auto files = emit_set(o->filter.apply(o->specs.entries()), o->bundle);
            const WriteReport r = write_files(o->out_dir, files);
            const std::filesystem::path dir(o->out_dir);
            for (const auto& f : files)
              if (f.path.ends_with(".cpp") || f.path.ends_with(".py") || f.path == "manifest.json")
                std::cout << (dir / f.path).lexically_normal().string() << "\n";
            std::cout << r.written.size() << " written, " << r.unchanged.size() << " unchanged, "
                      << r.removed.size() << " removed\n";
            return 0;
          }};
}

}  // namespace gmmgen::cli
