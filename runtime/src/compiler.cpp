#include "gmmgen/compiler.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "gmmgen/emit.h"
#include "gmmgen/runtime_config.h"

extern char** environ;

namespace gmmgen {

CompilerConfig default_compiler(Isa isa) {
  CompilerConfig cc;
  const char* env_cxx = std::getenv("GMMGEN_CXX");
  cc.cxx = (env_cxx && *env_cxx) ? env_cxx : GMMGEN_DEFAULT_CXX;
  cc.flags = {"-std=c++17", "-O3", "-fPIC", "-shared", "-fno-math-errno", "-fno-plt"};
  for (auto& f : isa_info(isa).flags) cc.flags.push_back(f);
  if (const char* extra = std::getenv("GMMGEN_CXXFLAGS")) {
    std::istringstream in(extra);
    for (std::string f; in >> f;) cc.flags.push_back(f);
  }
  return cc;
}

std::string format_command(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv) {
    if (!out.empty()) out += ' ';
    if (a.find_first_of(" \t'\"\\$") == std::string::npos && !a.empty()) {
      out += a;
    } else {
      out += '\'';
      for (char c : a) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
      out += '\'';
    }
  }
  return out;
}

ProcessResult run_process(const std::vector<std::string>& argv) {
  ProcessResult result;
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    result.output = std::string("pipe: ") + std::strerror(errno);
    return result;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDERR_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    result.output = "cannot start '" + argv[0] + "': " + std::strerror(rc);
    return result;
  }
  char buf[4096];
  for (ssize_t got; (got = read(fds[0], buf, sizeof buf)) != 0;) {
    if (got < 0) {
      if (errno == EINTR) continue;
      break;
    }
    result.output.append(buf, size_t(got));
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  result.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

void compile_shared_object(const CompilerConfig& cc, const std::filesystem::path& source,
                           const std::filesystem::path& include_dir,
                           const std::filesystem::path& output) {
  std::vector<std::string> argv{cc.cxx};
  argv.insert(argv.end(), cc.flags.begin(), cc.flags.end());
  argv.insert(argv.end(), {"-I", include_dir.string(), "-o", output.string(), source.string()});
  const ProcessResult r = run_process(argv);
  if (r.status != 0)
    throw CompileError("compiling " + source.filename().string() + " failed (exit " +
                       std::to_string(r.status) + ")\ncommand: " + format_command(argv) + "\n" +
                       r.output);
}

}  // namespace gmmgen
