#include "jit/toolchain.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
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

int compile_timeout_seconds() {
  const char* v = std::getenv("GMMGEN_COMPILE_TIMEOUT");
  if (!v || !*v) return kDefaultCompileTimeout;
  char* end = nullptr;
  errno = 0;
  const long s = std::strtol(v, &end, 10);
  if (*end != '\0' || errno != 0 || s < 1 || s > kMaxCompileTimeout)
    throw InvalidArgument(std::string("GMMGEN_COMPILE_TIMEOUT=") + std::string(v).substr(0, 100) +
                          " must be a whole number of seconds in [1, " +
                          std::to_string(kMaxCompileTimeout) + "]");
  return int(s);
}

namespace {

// The process groups of the compiles running now, for kill_running_compiles (a signal handler):
// fixed slots of atomics, so reading them is async-signal-safe. A group is listed from before
// it can run until just before its leader is reaped (so its id cannot have been reused).
constexpr int kSlots = 256;
std::atomic<pid_t> g_running[kSlots];

int list_running(pid_t pgid) {
  for (int i = 0; i < kSlots; ++i) {
    pid_t empty = 0;
    if (g_running[i].compare_exchange_strong(empty, pgid)) return i;
  }
  return -1;  // more compiles at once than slots: they still die with this process (PDEATHSIG)
}

// argv[0] as execve needs it: a path, looked up in PATH when it has no '/' ("" if not found).
std::string executable_path(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  const char* path = std::getenv("PATH");
  std::string dirs = path && *path ? path : "/usr/local/bin:/usr/bin:/bin";
  for (size_t start = 0; start <= dirs.size();) {
    const size_t end = std::min(dirs.find(':', start), dirs.size());
    const std::string dir = end > start ? dirs.substr(start, end - start) : ".";
    const std::string candidate = dir + "/" + name;
    struct stat st;
    if (stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
        access(candidate.c_str(), X_OK) == 0)
      return candidate;
    start = end + 1;
  }
  return "";
}

}  // namespace

void kill_running_compiles() {
  for (int i = 0; i < kSlots; ++i)
    if (const pid_t g = g_running[i].load(); g > 0) kill(-g, SIGKILL);
}

ProcessResult run_process(const std::vector<std::string>& argv) {
  using Clock = std::chrono::steady_clock;
  const int limit_s = compile_timeout_seconds();
  ProcessResult result;
  // Everything the child needs is made before fork: between fork and exec it only makes
  // async-signal-safe calls (another thread may hold the allocator's lock).
  const std::string exe = executable_path(argv[0]);
  if (exe.empty()) {
    result.output = "cannot start '" + argv[0] + "': " + std::strerror(ENOENT);
    return result;
  }
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  // fds: the output pipe; err: where the child reports an exec failure (closed by exec).
  int fds[2], err[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    result.output = std::string("pipe: ") + std::strerror(errno);
    return result;
  }
  if (pipe2(err, O_CLOEXEC) != 0) {
    result.output = std::string("pipe: ") + std::strerror(errno);
    close(fds[0]), close(fds[1]);
    return result;
  }
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid == 0) {
    // Its own process group, so that a timeout kills everything it started; and it dies with
    // the caller, should the caller be killed (even by SIGKILL) before it is done.
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);  // the caller died before prctl
    const int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (null < 0 || dup2(null, STDIN_FILENO) < 0 || dup2(fds[1], STDOUT_FILENO) < 0 ||
        dup2(fds[1], STDERR_FILENO) < 0) {
      const int e = errno;
      (void)!write(err[1], &e, sizeof e);
      _exit(127);
    }
    execve(exe.c_str(), args.data(), environ);
    const int e = errno;
    (void)!write(err[1], &e, sizeof e);
    _exit(127);
  }
  const int fork_errno = errno;
  close(fds[1]);
  close(err[1]);
  if (pid < 0) {
    close(fds[0]), close(err[0]);
    result.output = "cannot start '" + argv[0] + "': " + std::strerror(fork_errno);
    return result;
  }
  setpgid(pid, pid);  // also here: the group exists before either side goes on
  const int slot = list_running(pid);
  int exec_errno = 0;
  ssize_t got = 0;
  while ((got = read(err[0], &exec_errno, sizeof exec_errno)) < 0 && errno == EINTR) {
  }
  close(err[0]);
  if (got == sizeof exec_errno) {  // exec failed: the child exits at once
    close(fds[0]);
    if (slot >= 0) g_running[slot].store(0);
    while (waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    result.output = "cannot start '" + argv[0] + "': " + std::strerror(exec_errno);
    return result;
  }
  // Only our end is non-blocking: the child writes as usual.
  fcntl(fds[0], F_SETFL, fcntl(fds[0], F_GETFL) | O_NONBLOCK);
  auto drain = [&] {  // returns false at end of file
    char buf[4096];
    for (;;) {
      const ssize_t got = read(fds[0], buf, sizeof buf);
      if (got > 0) {
        result.output.append(buf, size_t(got));
      } else if (got == 0) {
        return false;
      } else if (errno != EINTR) {
        return errno == EAGAIN;
      }
    }
  };
  // Wait for the child itself, not for the end of its output: a grandchild may keep the pipe
  // open long after the compiler exited. WNOWAIT leaves the child a zombie, so its pid (and so
  // its process group id) cannot be reused before the group is killed below.
  const auto deadline = Clock::now() + std::chrono::seconds(limit_s);
  bool open = true, timed_out = false;
  for (;;) {
    siginfo_t info{};
    if (waitid(P_PID, id_t(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == pid)
      break;
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      timed_out = true;
      break;
    }
    const int slice = int(std::min<int64_t>(left, 20));
    if (open) {
      pollfd p{fds[0], POLLIN, 0};
      if (poll(&p, 1, slice) > 0) open = drain();
    } else {
      usleep(useconds_t(std::min(slice, 2)) * 1000);
    }
  }
  if (open) drain();
  close(fds[0]);
  kill(-pid, SIGKILL);  // the whole group: on a timeout, and any straggler holding the pipe
  if (slot >= 0) g_running[slot].store(0);  // before the reap frees the id
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out)
    throw CompileError("'" + format_command(argv) + "' did not finish within " +
                       std::to_string(limit_s) +
                       " s (GMMGEN_COMPILE_TIMEOUT); it and its children were killed\n" +
                       result.output.substr(0, 4000));
  result.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

std::vector<std::string> compile_command(const CompilerConfig& cc,
                                         const std::filesystem::path& source,
                                         const std::filesystem::path& include_dir,
                                         const std::filesystem::path& output,
                                         const std::filesystem::path& prelude) {
  std::vector<std::string> argv{cc.cxx};
  argv.insert(argv.end(), cc.flags.begin(), cc.flags.end());
  if (!prelude.empty()) argv.insert(argv.end(), {"-include", prelude.string()});
  argv.insert(argv.end(), {"-I", include_dir.string(), "-o", output.string(), source.string()});
  return argv;
}

void compile_shared_object(const CompilerConfig& cc, const std::filesystem::path& source,
                           const std::filesystem::path& include_dir,
                           const std::filesystem::path& output) {
  run_build(compile_command(cc, source, include_dir, output), source, output);
}

void run_build(const std::vector<std::string>& argv, const std::filesystem::path& source,
               const std::filesystem::path& output) {
  const ProcessResult r = run_process(argv);
  if (r.status != 0)
    throw CompileError("compiling " + source.filename().string() + " failed (exit " +
                       std::to_string(r.status) + ")\ncommand: " + format_command(argv) + "\n" +
                       r.output);
  struct stat st;
  if (lstat(output.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
    throw CompileError("compiling " + source.filename().string() + " exited 0 but wrote no " +
                       output.filename().string() + "\ncommand: " + format_command(argv) + "\n" +
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
