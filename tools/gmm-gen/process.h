// What the commands need of the operating system: private temporary folders and child processes.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace gmmgen::cli {

// A private temporary folder (mkdtemp: a fresh name that did not exist, mode 0700) under $TMPDIR,
// named gmm-gen-<command>- and six random characters, removed on scope exit. Refuses
// (std::runtime_error naming the command) a parent that another user could change: they could
// rename the folder away and put their own in its place, and the command would compile and load
// their code.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& command);
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

// Runs argv (argv[0] looked up in PATH) with this process's stdout and stderr, or with both sent
// to /dev/null, and returns its exit status (128 + signal; -1 if it could not be started).
int run_child(const std::vector<std::string>& argv, bool quiet);

}  // namespace gmmgen::cli
