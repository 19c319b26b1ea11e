// gmm-gen list: the kernels of an emitted folder, from its manifest.json.
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "gmmgen/errors.hpp"

namespace gmmgen::cli {

Command add_list(CLI::App& app) {
  auto dir = std::make_shared<std::string>();
  CLI::App* cmd =
      app.add_subcommand("list", "List the kernels of an emitted folder (its manifest.json)");
  cmd->add_option("dir", *dir, "Folder written by 'gmm-gen emit'")->required();
  cmd->footer("Example:\n  gmm-gen list generated/");
  return {cmd, [dir] {
            std::ifstream in(*dir + "/manifest.json");
            if (!in)
              throw InvalidArgument((std::filesystem::path(*dir) / "manifest.json").string() +
                                    " cannot be read: name a folder written by 'gmm-gen emit'");
            const auto m = nlohmann::ordered_json::parse(in);
            for (const auto& k : m["kernels"])
              std::cout << k["name"].get<std::string>() << "  " << k["spec"].get<std::string>()
                        << "\n";
            return 0;
          }};
}

}  // namespace gmmgen::cli
