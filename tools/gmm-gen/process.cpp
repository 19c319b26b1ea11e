#include "process.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>

extern char** environ;

namespace gmmgen::cli {
namespace {

namespace fs = std::filesystem;

// Refuses a parent any folder of whose path may be written by someone else (not owned by root or
// us, or writable by group/others without the sticky bit).
void check_private_parent(const fs::path& parent, const std::string& command) {
  const fs::path full = fs::canonical(parent);
  fs::path p;
  for (const auto& part : full) {
    p /= part;
    struct stat st;
    if (lstat(p.c_str(), &st) != 0)
      throw std::runtime_error(command + ": cannot inspect " + p.string());
    const bool trusted_owner = st.st_uid == 0 || st.st_uid == geteuid();
    const bool others_write = (st.st_mode & (S_IWGRP | S_IWOTH)) && !(st.st_mode & S_ISVTX);
    if (!S_ISDIR(st.st_mode) || !trusted_owner || others_write)
      throw std::runtime_error(
          command + ": the temporary folder " + full.string() + " is not private: " + p.string() +
          " may be changed by another user (owner uid " + std::to_string(st.st_uid) +
          "); set TMPDIR to a folder only you and root can write");
  }
}

}  // namespace

TempDir::TempDir(const std::string& command) {
  const fs::path parent = fs::temp_directory_path();
  check_private_parent(parent, command);
  std::string templ = (parent / ("gmm-gen-" + command + "-XXXXXX")).string();
  if (!mkdtemp(templ.data()))
    throw std::runtime_error(command + ": cannot create a temporary folder in " + parent.string() +
                             ": " + std::strerror(errno));
  path = templ;
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path, ec);
}

int run_child(const std::vector<std::string>& argv, bool quiet) {
  std::fflush(stdout);
  std::fflush(stderr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (quiet) {
    posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
  }
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid;
  const int rc = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return -1;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace gmmgen::cli
