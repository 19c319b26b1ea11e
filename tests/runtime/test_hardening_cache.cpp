// Hardening tests (issue 9): a disk cache that heals itself, time limits on the compiler, typed
// errors, register/dtype validation, a cache command that never follows links.
#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "gmmgen/runtime.hpp"
#include "gmmgen/runtime_c.h"
#include "jit/disk_cache.h"
#include "jit/toolchain.h"
#include "runtime_fixtures.h"
#include "scratch.h"
#include "smoke_kernels.h"

namespace gmmgen {
namespace {

namespace fs = std::filesystem;

constexpr const char* kSpec = "op=gmm,lhs=f32,rhs=f32,out=f32,k=24,n=20,g=4,tm=8,tk=16,tn=8";

using testing::read_file;
using testing::write_file;

// A private folder, removed by the fixture.
fs::path make_temp_dir(const std::string& what) {
  const fs::path d = testing::make_private_dir("gmmgen_" + what);
  if (d.empty()) throw std::runtime_error("mkdtemp failed");
  return d;
}

// A private cache folder (mkdtemp) per test, and a folder for fake compilers next to it.
class HardeningCache : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = make_temp_dir("cache");
    tools_ = make_temp_dir("tools");
    setenv("GMMGEN_CACHE_DIR", dir_.c_str(), 1);
    for (const char* v : {"GMMGEN_CXX", "GMMGEN_CXXFLAGS", "GMMGEN_DISABLE_JIT",
                          "GMMGEN_COMPILE_TIMEOUT", "GMMGEN_PCH"})
      unsetenv(v);
    real_cxx_ = default_compiler({}).cxx;
  }
  void TearDown() override {
    for (const char* v : {"GMMGEN_CXX", "GMMGEN_COMPILE_TIMEOUT", "GMMGEN_PCH"}) unsetenv(v);
    std::error_code ec;
    fs::permissions(dir_, fs::perms::owner_all, ec);
    fs::remove_all(dir_, ec);
    fs::remove_all(tools_, ec);
  }
  RuntimeOptions options() const {
    RuntimeOptions o;
    o.cache_dir = dir_;
    o.num_threads = 1;
    return o;
  }
  // A compiler script: answers --version and -dumpmachine as the real compiler does (so the
  // cache key is the real compiler's), and runs `body` for a compile with $out the -o argument
  // and $REAL the real compiler.
  // The test then compiles without precompiled preludes (GMMGEN_PCH=off): they are not what
  // these tests check, and each fake compiler (a new path each test) would build its own.
  std::string fake_compiler(const std::string& name, const std::string& body) {
    setenv("GMMGEN_PCH", "off", 1);
    const fs::path p = tools_ / name;
    write_file(p, "#!/bin/sh\nREAL='" + real_cxx_ +
                      "'\ncase \" $* \" in *\" --version \"*|*\" -dumpmachine \"*) exec \"$REAL\" "
                      "\"$@\";; esac\nout=; prev=\nfor a in \"$@\"; do [ \"$prev\" = -o ] && "
                      "out=\"$a\"; prev=\"$a\"; done\n" +
                      body + "\n");
    fs::permissions(p, fs::perms::owner_all);
    return p.string();
  }
  std::string key() const { return cache_key(parse_text(kSpec)); }
  fs::path entry() const { return dir_ / key(); }
  void warmup() {
    Runtime rt(options());
    rt.warmup({parse_text(kSpec)});
  }
  // The entry an earlier build left, for a test of what happens to it later: compiled (once per
  // test run) into the shared test cache with this fixture's compiler and flags, whose key is
  // the same, and copied into the private cache.
  void seed_entry() {
    RuntimeOptions o = options();
    o.cache_dir = testing::shared_test_cache();
    Runtime(o).warmup({parse_text(kSpec)});
    fs::copy(o.cache_dir / key(), entry(), fs::copy_options::recursive);
    ASSERT_EQ(DiskCache::State::kValid, DiskCache(dir_).check(key()));
  }
  // Rewrites entry.json so that its size and hash match whatever kernel.so now holds.
  void rehash_entry() {
    nlohmann::json j = nlohmann::json::parse(read_file(entry() / "entry.json"));
    j["so_bytes"] = fs::file_size(entry() / "kernel.so");
    j["so_hash"] = file_hash(entry() / "kernel.so");
    write_file(entry() / "entry.json", j.dump());
  }
  // A fresh runtime loads the spec: the entry must be rebuilt exactly once.
  void expect_rebuilt_once() {
    Runtime rt(options());
    rt.warmup({parse_text(kSpec)});
    EXPECT_EQ(1, rt.stats().rebuilds);
    EXPECT_EQ(1, rt.stats().compiles);
    EXPECT_EQ(DiskCache::State::kValid, DiskCache(dir_).check(key()));
  }

  fs::path dir_, tools_;
  std::string real_cxx_;
};

// --- Item 2: nothing is installed that does not load; bad entries heal. ---

TEST_F(HardeningCache, TuningTablesAreNeitherListedNorClearedWithKernels) {
  fs::create_directories(dir_ / "tuning");
  std::ofstream(dir_ / "tuning" / "cpu.json") << "{}";
  DiskCache cache(dir_);
  for (const auto& l : cache.list()) EXPECT_NE("tuning", l.key);
  cache.clear();
  EXPECT_TRUE(fs::exists(dir_ / "tuning" / "cpu.json"));
}

TEST_F(HardeningCache, TruncatedObjectFromCompilerIsNeverInstalledAndHeals) {
  setenv("GMMGEN_CXX",
         fake_compiler("truncating-cxx",
                       "\"$REAL\" \"$@\" || exit 1\n"
                       "truncate -s $(( $(stat -c %s \"$out\") / 2 )) \"$out\""
                       "\nexit 0")
             .c_str(),
         1);
  try {
    warmup();
    ADD_FAILURE() << "a truncated object was accepted";
  } catch (const CompileError& e) {
    EXPECT_NE(std::string(e.what()).find("unusable"), std::string::npos) << e.what();
  }
  EXPECT_EQ(DiskCache::State::kMissing, DiskCache(dir_).check(key())) << "nothing installed";
  unsetenv("GMMGEN_CXX");
  Runtime rt(options());
  rt.warmup({parse_text(kSpec)});
  EXPECT_EQ(1, rt.stats().compiles);
}

TEST_F(HardeningCache, GarbageObjectFromCompilerIsACompileErrorThenHeals) {
  setenv("GMMGEN_CXX", fake_compiler("garbage-cxx", "echo garbage > \"$out\"").c_str(), 1);
  {
    Runtime rt(options());
    gmmgen_runtime* c = nullptr;
    char err[512];
    ASSERT_EQ(GMMGEN_OK, gmmgen_runtime_create(&c, err, sizeof err));
    EXPECT_EQ(GMMGEN_ERR_COMPILE, gmmgen_runtime_warmup(c, kSpec, err, sizeof err)) << err;
    EXPECT_NE(std::string(err).find("ELF"), std::string::npos) << err;
    gmmgen_runtime_destroy(c);
  }
  unsetenv("GMMGEN_CXX");
  warmup();
  EXPECT_EQ(DiskCache::State::kValid, DiskCache(dir_).check(key()));
}

TEST_F(HardeningCache, CorruptElfWithMatchingHashIsRebuilt) {
  seed_entry();
  std::string so = read_file(entry() / "kernel.so");
  std::memset(so.data() + 16, 0xA5, 48);  // keeps the ELF magic, scrambles the header
  write_file(entry() / "kernel.so", so);
  rehash_entry();
  ASSERT_EQ(DiskCache::State::kValid, DiskCache(dir_).check(key()));
  expect_rebuilt_once();
}

TEST_F(HardeningCache, GarbageObjectWithMatchingHashIsRebuilt) {
  seed_entry();
  write_file(entry() / "kernel.so", "not an object at all");
  rehash_entry();
  expect_rebuilt_once();
}

TEST_F(HardeningCache, MalformedEntryJsonIsCorruptNeverAnException) {
  seed_entry();
  const nlohmann::json good = nlohmann::json::parse(read_file(entry() / "entry.json"));
  auto with = [&](const char* field, const nlohmann::json& v) {
    nlohmann::json j = good;
    j[field] = v;
    return j.dump();
  };
  nlohmann::json missing = good;
  missing.erase("so_hash");
  for (const std::string& text :
       {with("so_bytes", "1"), with("key", 5), with("so_hash", nullptr),
        with("so_bytes", nlohmann::json::array()), with("so_bytes", -1), with("so_bytes", 1.5),
        missing.dump(), std::string("null"), std::string("[]"), std::string("5"),
        std::string("\"text\""), std::string("{not json")}) {
    write_file(entry() / "entry.json", text);
    std::string why;
    DiskCache::State state = DiskCache::State::kValid;
    EXPECT_NO_THROW(state = DiskCache(dir_).check(key(), &why)) << text;
    EXPECT_EQ(DiskCache::State::kCorrupt, state) << text;
    EXPECT_FALSE(why.empty()) << text;
  }
  // Through the C API the entry is repaired, not reported as an internal error.
  write_file(entry() / "entry.json", with("so_bytes", "1"));
  gmmgen_runtime* c = nullptr;
  char err[512];
  ASSERT_EQ(GMMGEN_OK, gmmgen_runtime_create(&c, err, sizeof err));
  EXPECT_EQ(GMMGEN_OK, gmmgen_runtime_warmup(c, kSpec, err, sizeof err)) << err;
  gmmgen_runtime_stats s;
  gmmgen_runtime_get_stats(c, &s);
  EXPECT_EQ(1, s.rebuilds);
  gmmgen_runtime_destroy(c);
  EXPECT_EQ(DiskCache::State::kValid, DiskCache(dir_).check(key()));
}

TEST_F(HardeningCache, SecondBadBuildIsACompileError) {
  seed_entry();
  write_file(entry() / "kernel.so", "garbage");
  rehash_entry();
  setenv("GMMGEN_CXX", fake_compiler("garbage-cxx", "echo garbage > \"$out\"").c_str(), 1);
  Runtime rt(options());
  EXPECT_THROW(rt.warmup({parse_text(kSpec)}), CompileError);
  EXPECT_EQ(1, rt.stats().rebuilds);
}

// --- Item 7: a foreign object's code never runs before its key is checked. ---

TEST_F(HardeningCache, ForeignObjectIsRejectedBeforeItsConstructorsRun) {
  seed_entry();
  const fs::path marker = tools_ / "constructor-ran";
  const fs::path src = tools_ / "foreign.cpp";
  // It even reports the right key through gmmgen_cache_key(): only reading the key from the
  // file before loading can keep its constructor from running.
  write_file(src,
             "#include <cstdio>\n__attribute__((constructor)) static void run() {\n"
             "  if (FILE* f = std::fopen(\"" +
                 marker.string() +
                 "\", \"w\")) std::fclose(f);\n}\n"
                 "extern \"C\" const char* gmmgen_cache_key() { return \"" +
                 key() + "\"; }\n");
  const ProcessResult r = run_process(
      {real_cxx_, "-shared", "-fPIC", "-o", (tools_ / "foreign.so").string(), src.string()});
  ASSERT_EQ(0, r.status) << r.output;
  fs::copy_file(tools_ / "foreign.so", entry() / "kernel.so", fs::copy_options::overwrite_existing);
  rehash_entry();
  expect_rebuilt_once();
  EXPECT_FALSE(fs::exists(marker)) << "the foreign object's constructor ran";
}

// --- Item 3: time limits on the compiler. ---

bool process_gone(pid_t pid) {
  // A zombie (no reaper in a container) counts as gone: it runs nothing.
  const std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  const size_t close = stat.rfind(')');
  return stat.empty() || (close != std::string::npos && stat.substr(close + 2, 1) == "Z");
}

TEST_F(HardeningCache, HangingCompilerIsKilledAtTheTimeLimitAndFreesTheLock) {
  const fs::path pid_file = tools_ / "grandchild.pid";
  setenv("GMMGEN_CXX",
         fake_compiler("hanging-cxx", "sleep 1000 &\necho $! > '" + pid_file.string() + "'\nwait")
             .c_str(),
         1);
  setenv("GMMGEN_COMPILE_TIMEOUT", "1", 1);
  const std::string k = key();  // the probe is quick: it is the real compiler's
  // (Were the limit not applied, the call would outlast the test's own time limit.)
  try {
    warmup();
    ADD_FAILURE() << "a hanging compiler finished";
  } catch (const CompileError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("hanging-cxx"), std::string::npos) << msg;
    EXPECT_NE(msg.find("within 1 s"), std::string::npos) << msg;
    EXPECT_NE(msg.find("GMMGEN_COMPILE_TIMEOUT"), std::string::npos) << msg;
  }
  // The whole process group is gone, and another process can take the key's lock.
  const pid_t grandchild = std::stoi(read_file(pid_file));
  for (int i = 0; i < 100 && !process_gone(grandchild); ++i) usleep(10000);
  EXPECT_TRUE(process_gone(grandchild)) << "the compiler's child still runs";
  const int fd = open((dir_ / ".locks" / (k + ".lock")).c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(0, flock(fd, LOCK_EX | LOCK_NB)) << "the key's lock is still held";
  close(fd);
}

TEST_F(HardeningCache, HangingVersionProbeIsKilledAtTheTimeLimit) {
  const fs::path p = tools_ / "silent-cxx";
  write_file(p, "#!/bin/sh\nexec sleep 1000\n");
  fs::permissions(p, fs::perms::owner_all);
  setenv("GMMGEN_CXX", p.c_str(), 1);
  setenv("GMMGEN_COMPILE_TIMEOUT", "1", 1);
  // (Were the limit not applied, the call would outlast the test's own time limit.)
  try {
    warmup();
    ADD_FAILURE() << "a hanging probe finished";
  } catch (const CompileError& e) {
    EXPECT_NE(std::string(e.what()).find("--version"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("within 1 s"), std::string::npos) << e.what();
  }
}

TEST_F(HardeningCache, ChildHoldingStdoutDoesNotStallTheBuild) {
  // The compiler leaves a child behind that would keep the output pipe open for a day: the build
  // ends when the compiler does (were it to wait for the pipe, it would outlast the test's time
  // limit), and the child, in the compiler's process group, is killed with it.
  const fs::path pid_file = tools_ / "straggler.pid";
  setenv("GMMGEN_CXX",
         fake_compiler("leaky-cxx", "sleep 86400 &\necho $! > '" + pid_file.string() +
                                        "'\nexec \"$REAL\" \"$@\"")
             .c_str(),
         1);
  warmup();
  const pid_t straggler = std::stoi(read_file(pid_file));
  for (int i = 0; i < 100 && !process_gone(straggler); ++i) usleep(10000);
  EXPECT_TRUE(process_gone(straggler)) << "the compiler's child still runs";
  unsetenv("GMMGEN_CXX");
  EXPECT_EQ(DiskCache::State::kValid, DiskCache(dir_).check(key()));
}

TEST_F(HardeningCache, CompileTimeoutIsValidated) {
  for (const char* bad : {"0", "-1", "abc", "1.5", "", "99999999999999999999", "86401"}) {
    if (!*bad) continue;  // empty means unset: the default
    setenv("GMMGEN_COMPILE_TIMEOUT", bad, 1);
    try {
      run_process({"true"});
      ADD_FAILURE() << "accepted GMMGEN_COMPILE_TIMEOUT=" << bad;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("GMMGEN_COMPILE_TIMEOUT"), std::string::npos);
    }
  }
  setenv("GMMGEN_COMPILE_TIMEOUT", "86400", 1);
  EXPECT_EQ(0, run_process({"true"}).status);
}

// --- Round 2: compilers never outlive their caller; stale build folders are reclaimed. ---

// A compiler that records its pid and hangs (exec keeps the pid: the process the runtime
// started is the one that hangs).
std::string hanging_compiler_body(const fs::path& pid_file) {
  return "echo $$ > '" + pid_file.string() + ".tmp' && mv '" + pid_file.string() + ".tmp' '" +
         pid_file.string() + "'\nexec sleep 1000";
}

// Starts `argv` (a child of this process, so that SIGINT is not ignored as in a shell's
// background job), waits for the hanging compiler to record its pid, sends the caller `sig` and
// reaps it. Returns the compiler's pid (0 if it never started) and the caller's wait status.
struct Interrupted {
  pid_t compiler = 0;
  int status = 0;
};
Interrupted interrupt_mid_compile(const std::vector<std::string>& argv, const fs::path& pid_file,
                                  int sig) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  Interrupted out;
  const pid_t caller = fork();
  if (caller == 0) {
    execv(args[0], args.data());
    _exit(127);
  }
  for (int i = 0; i < 1200 && read_file(pid_file).empty(); ++i) usleep(50000);
  const std::string pid = read_file(pid_file);
  if (!pid.empty()) out.compiler = std::stoi(pid);
  kill(caller, sig);
  waitpid(caller, &out.status, 0);
  return out;
}

TEST_F(HardeningCache, ACallerKilledMidCompileTakesTheCompilerWithItAndItsFolderIsReclaimed) {
  const fs::path pid_file = tools_ / "compiler.pid";
  const std::string cxx = fake_compiler("hanging-cxx", hanging_compiler_body(pid_file));
  const Interrupted r = interrupt_mid_compile({"/usr/bin/env", "GMMGEN_CACHE_DIR=" + dir_.string(),
                                               "GMMGEN_CXX=" + cxx, GMMGEN_PROBE, "1", kSpec},
                                              pid_file, SIGKILL);
  ASSERT_GT(r.compiler, 0) << "the compiler never started";
  EXPECT_TRUE(WIFSIGNALED(r.status) && WTERMSIG(r.status) == SIGKILL);
  for (int i = 0; i < 200 && !process_gone(r.compiler); ++i) usleep(10000);
  EXPECT_TRUE(process_gone(r.compiler)) << "the compiler outlived its SIGKILLed caller";
  // The killed build's folder is left; the next process to open the cache (a runtime's first
  // look into it) removes it.
  auto stale = [&] {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir_ / ".tmp"))
      if (e.path().filename().string().rfind(key() + "-", 0) == 0) out.push_back(e.path());
    return out;
  };
  EXPECT_EQ(1u, stale().size());
  { DiskCache reopened(dir_); }
  EXPECT_TRUE(stale().empty());
}

TEST_F(HardeningCache, CtrlCOfGmmGenStopsItsCompilerAtOnce) {
  const fs::path pid_file = tools_ / "compiler.pid";
  const std::string cxx = fake_compiler("hanging-cxx", hanging_compiler_body(pid_file));
  const Interrupted r =
      interrupt_mid_compile({"/usr/bin/env", "GMMGEN_CACHE_DIR=" + dir_.string(),
                             "GMMGEN_CXX=" + cxx, GMMGEN_CLI, "verify", "--quick", "--spec", kSpec},
                            pid_file, SIGINT);
  ASSERT_GT(r.compiler, 0) << "the compiler never started";
  EXPECT_TRUE(WIFSIGNALED(r.status) && WTERMSIG(r.status) == SIGINT)
      << "gmm-gen's wait status " << r.status;
  for (int i = 0; i < 200 && !process_gone(r.compiler); ++i) usleep(10000);
  EXPECT_TRUE(process_gone(r.compiler)) << "Ctrl-C left the compiler running";
}

// A process that holds a key's lock and is stopped (SIGSTOP) blocks a build of that key only
// for three times the compile time limit and more (here 1 s: 5 s); the error names its pid.
TEST_F(HardeningCache, AStoppedLockHolderIsNamedAndWaitedForOnlyBoundedly) {
  { DiskCache made(dir_); }
  setenv("GMMGEN_COMPILE_TIMEOUT", "1", 1);
  const std::string lock = (dir_ / ".locks" / (key() + ".lock")).string();
  const pid_t holder = fork();
  if (holder == 0) {  // only async-signal-safe calls: the test process has threads
    const int fd = open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0 || flock(fd, LOCK_EX) != 0) _exit(1);
    char pid[16];
    const int n = snprintf(pid, sizeof pid, "%d\n", int(getpid()));
    if (write(fd, pid, size_t(n)) != n) _exit(1);
    raise(SIGSTOP);
    _exit(0);
  }
  ASSERT_GT(holder, 0);
  int status = 0;
  ASSERT_EQ(holder, waitpid(holder, &status, WUNTRACED));
  ASSERT_TRUE(WIFSTOPPED(status)) << "the holder could not take the lock";
  try {
    warmup();
    ADD_FAILURE() << "built while another process held the key's lock";
  } catch (const CacheError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("gave up after 5 s waiting for " + lock + ", held by pid " +
                       std::to_string(holder)),
              std::string::npos)
        << msg;
  }
  kill(holder, SIGKILL);
  waitpid(holder, &status, 0);
  unsetenv("GMMGEN_COMPILE_TIMEOUT");
  warmup();  // the lock is free again
  EXPECT_EQ(DiskCache::State::kValid, DiskCache(dir_).check(key()));
}

// A build folder is stale when no process holds its key's lock; one whose key is locked (a
// build in progress) stays, as do names that are not build folders.
TEST_F(HardeningCache, StaleBuildFoldersAreReclaimedUnlessTheirKeyIsLocked) {
  { DiskCache made(dir_); }
  const std::string dead(32, 'a'), live(32, 'b');
  for (const std::string& name :
       {dead + "-AbC123", live + "-XyZ789", std::string("notes-123456")}) {
    fs::create_directories(dir_ / ".tmp" / name);
    write_file(dir_ / ".tmp" / name / "kernel.so", "half a kernel");
  }
  const int fd =
      open((dir_ / ".locks" / (live + ".lock")).c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(0, flock(fd, LOCK_EX));
  { DiskCache reopened(dir_); }
  close(fd);
  EXPECT_FALSE(fs::exists(dir_ / ".tmp" / (dead + "-AbC123")));
  EXPECT_TRUE(fs::exists(dir_ / ".tmp" / (live + "-XyZ789" + "/kernel.so")));
  EXPECT_TRUE(fs::exists(dir_ / ".tmp" / "notes-123456" / "kernel.so"));
}

// --- Item 6: typed errors for file system and compiler faults. ---

TEST_F(HardeningCache, CompilerWritingNoObjectIsACompileError) {
  setenv("GMMGEN_CXX", fake_compiler("lazy-cxx", "exit 0").c_str(), 1);
  try {
    warmup();
    ADD_FAILURE() << "no object, no error";
  } catch (const CompileError& e) {
    EXPECT_NE(std::string(e.what()).find("wrote no kernel.so"), std::string::npos) << e.what();
  }
  gmmgen_runtime* c = nullptr;
  char err[512];
  ASSERT_EQ(GMMGEN_OK, gmmgen_runtime_create(&c, err, sizeof err));
  EXPECT_EQ(GMMGEN_ERR_COMPILE, gmmgen_runtime_warmup(c, kSpec, err, sizeof err)) << err;
  gmmgen_runtime_destroy(c);
}

// Runs fn in a forked child: "CacheError: <message>" if it threw CacheError, else what it did.
template <typename Fn>
std::string error_in_child(Fn&& fn) {
  int fds[2];
  if (pipe(fds) != 0) return "pipe failed";
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    std::string what = "no error";
    try {
      fn();
    } catch (const CacheError& e) {
      what = std::string("CacheError: ") + e.what();
    } catch (const std::exception& e) {
      what = std::string("other error: ") + e.what();
    }
    (void)!write(fds[1], what.data(), what.size());
    std::_Exit(0);
  }
  close(fds[1]);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) out.append(buf, size_t(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return out;
}

TEST_F(HardeningCache, ReadOnlyCacheRootIsACacheError) {
  // Root ignores modes, so as root the child runs as an unprivileged uid owning the cache.
  const bool root = geteuid() == 0;
  const fs::path ro = dir_ / "ro";
  ASSERT_EQ(0, mkdir(ro.c_str(), 0700));
  if (root) {
    ASSERT_EQ(0, chown(ro.c_str(), 65534, 65534));
    ASSERT_EQ(0, chmod(dir_.c_str(), 0711));
  }
  const std::string what = error_in_child([&] {
    if (root && (setgroups(0, nullptr) != 0 || setresgid(65534, 65534, 65534) != 0 ||
                 setresuid(65534, 65534, 65534) != 0))
      throw std::runtime_error("cannot drop to uid 65534");
    DiskCache{ro};  // a complete cache, then made read-only
    if (chmod(ro.c_str(), 0500) != 0) throw std::runtime_error("chmod");
    RuntimeOptions o = options();
    o.cache_dir = ro;
    Runtime(o).warmup({parse_text(kSpec)});
  });
  EXPECT_EQ(0u, what.rfind("CacheError: ", 0)) << what;
  EXPECT_NE(what.find(ro.string()), std::string::npos) << what;
}

TEST_F(HardeningCache, FullDiskIsACacheError) {
  // A file size limit fails writes with EFBIG as a full disk fails them with ENOSPC (a small
  // file system would need mount rights); the cache reports either the same way.
  const std::string what = error_in_child([&] {
    signal(SIGXFSZ, SIG_IGN);
    const rlimit limit{100, 100};
    setrlimit(RLIMIT_FSIZE, &limit);
    Runtime(options()).warmup({parse_text(kSpec)});
  });
  EXPECT_EQ(0u, what.rfind("CacheError: ", 0)) << what;
  EXPECT_NE(what.find("File too large"), std::string::npos) << what;
}

// --- Item 7: register, dtype, links in the cache. ---

const gmmgen_kernel_info* null_info() {
  return nullptr;
}
const gmmgen_kernel_info* nameless_info() {
  static gmmgen_kernel_info info = *smoke_kernels_kernels[0].info();
  info.name = nullptr;
  return &info;
}
const gmmgen_kernel_info* old_info() {
  static gmmgen_kernel_info info{};
  info.abi_version = GMMGEN_ABI_VERSION + 1;
  return &info;
}

TEST_F(HardeningCache, RegisterValidatesEveryEntry) {
  gmmgen_runtime* c = nullptr;
  char err[512];
  ASSERT_EQ(GMMGEN_OK, gmmgen_runtime_create(&c, err, sizeof err));
  const gmmgen_kernel_entry zero{};
  EXPECT_EQ(GMMGEN_ERR_INVALID_ARGUMENT, gmmgen_runtime_register(c, &zero, 1, err, sizeof err));
  EXPECT_NE(std::string(err).find("table[0]"), std::string::npos) << err;
  // One good entry, then a bad one: nothing at all is registered.
  gmmgen_kernel_entry table[2] = {smoke_kernels_kernels[0], smoke_kernels_kernels[0]};
  table[1].run_items = nullptr;
  EXPECT_EQ(GMMGEN_ERR_INVALID_ARGUMENT, gmmgen_runtime_register(c, table, 2, err, sizeof err));
  EXPECT_NE(std::string(err).find("table[1].run_items"), std::string::npos) << err;
  table[1] = smoke_kernels_kernels[0];
  table[1].info = null_info;
  EXPECT_EQ(GMMGEN_ERR_INVALID_ARGUMENT, gmmgen_runtime_register(c, table, 2, err, sizeof err));
  EXPECT_NE(std::string(err).find("table[1].info() returned NULL"), std::string::npos) << err;
  table[1].info = nameless_info;
  EXPECT_EQ(GMMGEN_ERR_INVALID_ARGUMENT, gmmgen_runtime_register(c, table, 2, err, sizeof err));
  EXPECT_NE(std::string(err).find("table[1].info()->name is NULL"), std::string::npos) << err;
  table[1].info = old_info;
  EXPECT_EQ(GMMGEN_ERR_INVALID_ARGUMENT, gmmgen_runtime_register(c, table, 2, err, sizeof err));
  EXPECT_NE(std::string(err).find("ABI version"), std::string::npos) << err;
  EXPECT_EQ(GMMGEN_ERR_INVALID_ARGUMENT, gmmgen_runtime_register(c, nullptr, 1, err, sizeof err));
  EXPECT_EQ(GMMGEN_ERR_INVALID_ARGUMENT, gmmgen_runtime_register(c, table, -1, err, sizeof err));
  gmmgen_runtime_stats s;
  gmmgen_runtime_get_stats(c, &s);
  EXPECT_EQ(0, s.lookups);
  gmmgen_runtime_destroy(c);
}

TEST_F(HardeningCache, InvalidDTypeIsInvalidArgumentNamingTheParameter) {
  std::vector<float> lhs(8 * 24), rhs(4 * 24 * 20), out(8 * 20, -7.0f);
  const std::vector<int32_t> sizes{2, 2, 2, 2};
  RuntimeOptions o = options();
  o.jit = false;
  Runtime rt(o);
  const auto bad = static_cast<DType>(99);
  try {
    rt.gmm(TensorView::matrix(lhs.data(), bad, 8, 24),
           TensorView::batch(rhs.data(), DType::kF32, 4, 24, 20), sizes,
           TensorView::matrix(out.data(), DType::kF32, 8, 20));
    ADD_FAILURE() << "dtype 99 accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("lhs"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("99"), std::string::npos) << e.what();
  }
  try {
    rt.tgmm(TensorView::matrix(lhs.data(), DType::kF32, 8, 24),
            TensorView::matrix(lhs.data(), DType::kF32, 8, 20), sizes,
            TensorView::batch(rhs.data(), bad, 4, 24, 20));
    ADD_FAILURE() << "dtype 99 accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("out"), std::string::npos) << e.what();
  }
  gmmgen_runtime* c = nullptr;
  char err[512];
  ASSERT_EQ(GMMGEN_OK, gmmgen_runtime_create(&c, err, sizeof err));
  gmmgen_tensor l{lhs.data(), 99, 2, {8, 24, 0}, 0};
  gmmgen_tensor r{rhs.data(), GMMGEN_DTYPE_F32, 3, {4, 24, 20}, 0};
  gmmgen_tensor t{out.data(), GMMGEN_DTYPE_F32, 2, {8, 20, 0}, 0};
  EXPECT_EQ(GMMGEN_ERR_INVALID_ARGUMENT,
            gmmgen_runtime_gmm(c, &l, &r, sizes.data(), 4, &t, nullptr, err, sizeof err));
  EXPECT_NE(std::string(err).find("lhs.dtype"), std::string::npos) << err;
  gmmgen_runtime_destroy(c);
  EXPECT_EQ(-7.0f, out[0]);
}

TEST_F(HardeningCache, CacheCommandNeverFollowsLinks) {
  const fs::path target = tools_ / "precious";
  fs::create_directories(target);
  write_file(target / "sentinel", "keep me");
  DiskCache cache(dir_);
  fs::create_directory_symlink(target, dir_ / "link-to-folder");
  fs::create_directory_symlink("/", dir_ / "link-to-root");
  write_file(dir_ / "stray-file", "x");
  fs::create_directory(dir_ / "0123456789abcdef0123456789abcdef");  // an (empty) entry folder
  const std::string env = "GMMGEN_CACHE_DIR=" + dir_.string();
  ProcessResult r = run_process({"env", env, GMMGEN_CLI, "cache", "ls"});
  EXPECT_EQ(0, r.status) << r.output;
  EXPECT_NE(r.output.find("link-to-root  (not a cache entry: a symbolic link)"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("link-to-folder  (not a cache entry"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("1 entries, 0 bytes"), std::string::npos) << r.output;
  r = run_process({"env", env, GMMGEN_CLI, "cache", "clear"});
  EXPECT_EQ(0, r.status) << r.output;
  EXPECT_NE(r.output.find("removed 1 entries"), std::string::npos) << r.output;
  EXPECT_EQ("keep me", read_file(target / "sentinel")) << "clear followed the link";
  EXPECT_FALSE(fs::exists(fs::symlink_status(dir_ / "link-to-folder")));
  EXPECT_FALSE(fs::exists(fs::symlink_status(dir_ / "link-to-root")));
  EXPECT_TRUE(fs::exists("/etc"));
  EXPECT_TRUE(cache.list().empty());
}

// The loader marks an entry's use (for `cache prune`) by the mtime of <key>/last-use, never
// through a link planted at that name, and the mark is no part of what makes an entry valid.
TEST_F(HardeningCache, LastUseMarkNeverFollowsALink) {
  seed_entry();
  const fs::path mark = entry() / "last-use";
  ASSERT_TRUE(fs::is_regular_file(fs::symlink_status(mark)));
  const fs::path victim = tools_ / "victim";
  write_file(victim, "precious");
  const timespec old[2] = {{1000000000, 0}, {1000000000, 0}};
  ASSERT_EQ(0, utimensat(AT_FDCWD, victim.c_str(), old, 0));
  fs::remove(mark);
  fs::create_symlink(victim, mark);
  // A new process loads the entry from the disk: no rebuild, the link and its target untouched.
  const ProcessResult r =
      run_process({"env", "GMMGEN_CACHE_DIR=" + dir_.string(), GMMGEN_PROBE, "1", kSpec});
  ASSERT_EQ(0, r.status) << r.output;
  EXPECT_NE(r.output.find("\"disk_hits\":1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("\"rebuilds\":0"), std::string::npos) << r.output;
  struct stat st;
  ASSERT_EQ(0, stat(victim.c_str(), &st));
  EXPECT_EQ(1000000000, st.st_mtim.tv_sec);
  EXPECT_EQ("precious", read_file(victim));
  EXPECT_TRUE(fs::is_symlink(mark));
  // Without a mark (an entry of an older gmm-gen), the entry is valid and gets one on load.
  fs::remove(mark);
  EXPECT_EQ(DiskCache::State::kValid, DiskCache(dir_).check(key()));
  const ProcessResult again =
      run_process({"env", "GMMGEN_CACHE_DIR=" + dir_.string(), GMMGEN_PROBE, "1", kSpec});
  ASSERT_EQ(0, again.status) << again.output;
  EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(mark)));
}

}  // namespace
}  // namespace gmmgen
