// gmm-gen cache: show, list or clear the disk cache of compiled kernels.
#include <iostream>
#include <memory>

#include "commands.h"
#include "jit/disk_cache.h"

namespace gmmgen::cli {

Command add_cache(CLI::App& app) {
  auto action = std::make_shared<std::string>();
  CLI::App* cmd =
      app.add_subcommand("cache", "Show, list or clear the disk cache of compiled kernels");
  cmd->add_option("action", *action, "path | ls | clear")
      ->required()
      ->check(CLI::IsMember({"path", "ls", "clear"}));
  cmd->footer(
      "The cache lives in $GMMGEN_CACHE_DIR, else $XDG_CACHE_HOME/gmm-gen, else ~/.cache/gmm-gen.\n"
      "Example:\n  gmm-gen cache ls");
  return {cmd, [action] {
            if (*action == "path") {
              std::cout << DiskCache::default_root().string() << "\n";
              return 0;
            }
            DiskCache cache(DiskCache::default_root());
            if (*action == "clear") {
              std::cout << "removed " << cache.clear() << " entries from " << cache.root().string()
                        << "\n";
              return 0;
            }
            uintmax_t total = 0;
            size_t count = 0;
            for (const auto& e : cache.list()) {
              if (!e.note.empty()) {  // a link or a stray file: named, never followed
                std::cout << e.key << "  (" << e.note << ")\n";
                continue;
              }
              ++count;
              total += e.bytes;
              const auto name = e.entry.is_object() ? e.entry.find("name") : e.entry.end();
              std::cout << e.key << "  " << e.bytes << " B  "
                        << (name != e.entry.end() && name->is_string() ? name->get<std::string>()
                                                                       : "(unreadable entry)")
                        << "\n";
            }
            std::cout << count << " entries, " << total << " bytes in " << cache.root().string()
                      << "\n";
            return 0;
          }};
}

}  // namespace gmmgen::cli
