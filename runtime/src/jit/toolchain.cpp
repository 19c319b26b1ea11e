#include "jit/toolchain.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

#include "gmmgen/hash.h"
#include "gmmgen/runtime_config.h"

extern char** environ;

namespace gmmgen {

CompilerConfig default_compiler(const std::vector<std::string>& target_flags) {
  CompilerConfig cc;
  const char* env_cxx = std::getenv("GMMGEN_CXX");
  cc.cxx = (env_cxx && *env_cxx) ? env_cxx : GMMGEN_DEFAULT_CXX;
  cc.flags = {"-std=c++17", "-O3", "-fPIC", "-shared", "-fno-math-errno", "-fno-plt"};
  cc.flags.insert(cc.flags.end(), target_flags.begin(), target_flags.end());
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

namespace gmmgen {
namespace {

// What -march=native means on this host: the CPU model and its feature flags.
const std::string& host_cpu_signature() {
  static const std::string sig = [] {
    std::ifstream in("/proc/cpuinfo");
    std::string line, model, flags;
    while (std::getline(in, line) && (model.empty() || flags.empty())) {
      if (model.empty() && line.rfind("model name", 0) == 0) model = line;
      if (flags.empty() && line.rfind("flags", 0) == 0) flags = line;
    }
    return hash128_hex({model, flags});
  }();
  return sig;
}

}  // namespace

std::string compiler_identity(const std::string& cxx) {
  static std::mutex mutex;
  static std::map<std::string, std::string> known;
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = known.find(cxx); it != known.end()) return it->second;
  const ProcessResult version = run_process({cxx, "--version"});
  const ProcessResult machine = run_process({cxx, "-dumpmachine"});
  if (version.status != 0 || machine.status != 0)
    throw CompileError("compiler '" + cxx +
                       "' cannot be run (set GMMGEN_CXX to a C++17 compiler): " +
                       (version.status != 0 ? version.output : machine.output));
  const std::string banner = version.output.substr(0, version.output.find('\n'));
  const std::string triple = machine.output.substr(0, machine.output.find('\n'));
  return known[cxx] = banner + " / " + triple;
}

std::string cache_key(const std::string& artifact_hash, const CompilerConfig& cc) {
  std::string host;
  for (const auto& f : cc.flags)
    if (f.find("=native") != std::string::npos) host = "host:" + host_cpu_signature();
  return hash128_hex({artifact_hash, compiler_identity(cc.cxx), format_command(cc.flags), host});
}

}  // namespace gmmgen
