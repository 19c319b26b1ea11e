// The command line's conventions (issue 13, point 4): --version, "did you mean", --help marking
// what is not supported yet, exit statuses (0 ok, 1 a check failed, 2 invalid input or usage),
// --filter on emit, verify, bench and tune, verify -j through the disk cache with one flushed line
// per kernel, clean paths from emit, cache ls/prune, and the runtime's GMMGEN_LOG levels with
// the statistics line.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "cli.h"
#include "gmmgen/kernel_abi.h"
#include "gmmgen/naming.h"
#include "gmmgen/runtime.hpp"
#include "gmmgen/runtime_config.h"
#include "jit/disk_cache.h"
#include "jit/toolchain.h"
#include "runtime_fixtures.h"
#include "scratch.h"

namespace gmmgen {
namespace {

namespace fs = std::filesystem;

using testing::cli;
using testing::read_file;
using testing::Scratch;

// A shell command line, stdout only (stderr to /dev/null) or stderr only.
ProcessResult stdout_of(const std::string& sh) {
  return run_process({"sh", "-c", sh + " 2>/dev/null"});
}
ProcessResult stderr_of(const std::string& sh) {
  return run_process({"sh", "-c", sh + " 2>&1 >/dev/null"});
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

bool has(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

// Tiny specs: each compiles in about a second. kB has the heuristic's tiling, the one bench and
// tune use.
const std::string kA = "op=gmm,lhs=f32,rhs=f32,out=f32,k=24,n=20,g=4,tm=8,tk=16,tn=8";
const std::string kB = "op=gmm,lhs=f32,rhs=f32,out=f32,k=40,n=24,g=5";
const std::string kC = "op=tgmm,lhs=f32,rhs=f32,out=f32,k=16,n=8,g=2,tm=8,tk=16,tn=8";

// One disk cache holding kA, kB and kC, for the tests that need them compiled but not the
// compiles: shared by every test process of the build (the leg's test cache folder with
// "-cli-ux" appended when GMMGEN_TEST_CACHE_DIR is set, else <build>/test-cli-ux-cache), filled by
// `verify --quick` on first use in each process (the cache's locks make concurrent processes
// compile each kernel once; after that, all three are found on disk). Tests only read it, or
// copy it.
const fs::path& shared_cache_root() {
  static const fs::path root = [] {
    const char* shared = std::getenv("GMMGEN_TEST_CACHE_DIR");
    const fs::path dir = shared && *shared ? fs::path(std::string(shared) + "-cli-ux")
                                           : fs::path(GMMGEN_BINARY_DIR) / "test-cli-ux-cache";
    const ProcessResult r =
        cli({"GMMGEN_CACHE_DIR=" + dir.string()},
            {"verify", "--quick", "-j", "2", "--spec", kA, "--spec", kB, "--spec", kC});
    if (r.status != 0) throw std::runtime_error("filling " + dir.string() + ":\n" + r.output);
    return dir;
  }();
  return root;
}
std::string shared_env() {
  return "GMMGEN_CACHE_DIR=" + shared_cache_root().string();
}
// A private cache at `to` holding copies of the shared cache's entries of kA, kB and kC (other
// tests may have added entries of their own there).
void copy_shared_cache(const fs::path& to) {
  fs::create_directories(to);
  fs::permissions(to, fs::perms::owner_all);
  for (const auto& s : {kA, kB, kC}) {
    const std::string key = cache_key(parse_text(s));
    fs::copy(shared_cache_root() / key, to / key, fs::copy_options::recursive);
  }
}

// ---- --version, did you mean, --help ------------------------------------------------------------

TEST(CliUx, VersionNamesGeneratorAbiAndCompilers) {
  const ProcessResult r = stdout_of(std::string(GMMGEN_CLI) + " --version");
  EXPECT_EQ(0, r.status) << r.output;
  EXPECT_EQ(0u, r.output.rfind("gmm-gen ", 0)) << r.output;
  EXPECT_TRUE(has(r.output, "kernel ABI version " + std::to_string(GMMGEN_ABI_VERSION)))
      << r.output;
  EXPECT_TRUE(has(r.output, "built with g++ ") || has(r.output, "built with clang++ ")) << r.output;
  EXPECT_TRUE(has(r.output, "kernels compiled at run time with ")) << r.output;
}

TEST(CliUx, DidYouMeanOnStderrExit2) {
  const std::string g = GMMGEN_CLI;
  struct Case {
    std::string args, says, hint;
  };
  const Case cases[] = {
      {"verfy --quick", "gmm-gen: unknown command 'verfy'", "did you mean 'verify'?"},
      {"emitt --out x", "unknown command 'emitt'", "did you mean 'emit'?"},
      {"verify --qiuck --spec k=8,n=8,g=2", "gmm-gen verify: unknown option '--qiuck'",
       "did you mean '--quick'?"},
      {"emit --fitler=gmm --out x -k 8 -n 8 -g 2", "unknown option '--fitler'",
       "did you mean '--filter'?"},
      {"bench --shapse all", "unknown option '--shapse'", "did you mean '--shapes'?"},
      {"tune --budjet 3", "unknown option '--budjet'", "did you mean '--budget'?"},
      {"cache lss", "'lss' is not one of path, ls, prune, clear", "did you mean 'ls'?"},
      {"--quick verify", "unknown option '--quick'", "it is an option of a command"},
      {"frobnicate", "unknown command 'frobnicate'", "the commands are: emit, describe"},
  };
  for (const Case& c : cases) {
    const ProcessResult err = stderr_of(g + " " + c.args);
    EXPECT_EQ(2, err.status) << c.args << "\n" << err.output;
    EXPECT_TRUE(has(err.output, c.says)) << c.args << "\n" << err.output;
    EXPECT_TRUE(has(err.output, c.hint)) << c.args << "\n" << err.output;
    EXPECT_EQ("", stdout_of(g + " " + c.args).output) << c.args;  // all of it on stderr
  }
}

TEST(CliUx, HelpMarksWhatIsNotSupportedYet) {
  const ProcessResult r = cli({"emit", "--help"});
  ASSERT_EQ(0, r.status) << r.output;
  // The Pallas modules take no f16 (the target's own check says so).
  EXPECT_TRUE(has(r.output, "not supported yet: f16 with target=pallas")) << r.output;
  for (const char* cmd : {"emit", "verify", "bench", "tune"})
    EXPECT_TRUE(has(cli({cmd, "--help"}).output, "--filter")) << cmd;
}

// ---- Exit statuses ------------------------------------------------------------------------------

TEST(CliUx, ExitStatusesZeroOneTwo) {
  const Scratch dir;
  const std::string cache = "GMMGEN_CACHE_DIR=" + (dir.path / "cache").string();
  // 2: usage (CLI11's own errors used to exit 105, 106, 109) and invalid input.
  const std::vector<std::vector<std::string>> usage = {
      {},                                                            // no command
      {"emit", "-k", "8", "-n", "8", "-g", "2"},                     // --out is required
      {"verify", "-j", "many", "--spec", "k=8,n=8,g=2"},             // not a number
      {"verify", "--spec-file", (dir.path / "none.json").string()},  // no such file
      {"verify", "--spec", "k=8,n=8,g=2", "surplus"},                // an extra argument
      {"emit", "--spec", "k=1000,n=64,g=4,tm=0", "--out", (dir.path / "o").string()},
      {"verify", "-j", "0", "--spec", "k=8,n=8,g=2"},
      {"list", (dir.path / "nothing-here").string()},
      {"cache", "prune"},
      {"cache", "ls", "--older-than", "1d"},
      {"bench", "--threads", "0", "--spec", "k=8,n=8,g=2"},
  };
  for (const auto& args : usage) {
    const ProcessResult r = cli({cache}, args);
    std::string shown;
    for (const auto& a : args) shown += a + " ";
    EXPECT_EQ(2, r.status) << shown << "\n" << r.output;
  }
  EXPECT_FALSE(fs::exists(dir.path / "o"));
  const ProcessResult bad_env =
      cli({cache, "GMMGEN_ASSUME_ISA=sse9"}, {"verify", "--spec", "k=8,n=8,g=2,isa=avx2"});
  EXPECT_EQ(2, bad_env.status) << bad_env.output;

  // 0: help, version, a passing check.
  EXPECT_EQ(0, cli({"--help"}).status);
  EXPECT_EQ(0, cli({"verify", "--help"}).status);
  const ProcessResult ok = cli({shared_env()}, {"verify", "--quick", "--spec", kA});
  EXPECT_EQ(0, ok.status) << ok.output;

  // 1: a check failed. The flag turns the avx2 micro-kernel's main loop into `if (0) for ...`
  // (GMMGEN_NO_UNROLL is the hook before it): the kernel compiles and computes wrong results.
  if (!__builtin_cpu_supports("avx2")) GTEST_SKIP() << "the wrong kernel is an avx2 one";
  const ProcessResult wrong = cli({cache, "GMMGEN_CXXFLAGS=-DGMMGEN_NO_UNROLL=if(0)"},
                                  {"verify", "--quick", "--spec", kA + ",isa=avx2"});
  EXPECT_EQ(1, wrong.status) << wrong.output;
  EXPECT_TRUE(has(wrong.output, "MISMATCH")) << wrong.output;
  EXPECT_TRUE(has(wrong.output, "first mismatch: ")) << wrong.output;
  // A compiler that cannot be run: the work cannot be done, 1 as well.
  const ProcessResult no_cxx =
      cli({cache, "GMMGEN_CXX=/nonexistent/c++"}, {"verify", "--spec", kB});
  EXPECT_EQ(1, no_cxx.status) << no_cxx.output;
  EXPECT_TRUE(has(no_cxx.output, "/nonexistent/c++")) << no_cxx.output;
}

// ---- --filter -----------------------------------------------------------------------------------

// The .cpp kernels an emit into `out` wrote.
std::set<std::string> emitted(const fs::path& out) {
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(out / "cpp"))
    if (e.path().extension() == ".cpp") names.insert(e.path().stem().string());
  return names;
}

TEST(CliUx, FilterSelectsKernelsByNameOnEmit) {
  const Scratch dir;
  const std::string a = kernel_name(parse_text(kA)), b = kernel_name(parse_text(kB)),
                    c = kernel_name(parse_text(kC));
  ASSERT_EQ(0u, a.rfind("gmm_f32xf32_f32_k24_n20_g4_", 0)) << a;
  const std::vector<std::pair<std::string, std::set<std::string>>> cases = {
      {"k24", {a}},                           // no wildcard: anywhere in the name
      {"gmm_*", {a, b}},                      // wildcards: the whole name
      {"*_g?_*", {a, b, c}},                  // ? is one character
      {"tgmm_*,*_n20_*", {a, c}},             // alternatives
      {"gmm_f32xf32_f32_k40_n24_g5_*", {b}},  // one kernel
      {"*" + c.substr(c.size() - 8), {c}},    // by hash
  };
  int i = 0;
  for (const auto& [pattern, want] : cases) {
    const fs::path out = dir.path / ("out" + std::to_string(i++));
    const ProcessResult r =
        cli({"emit", "--spec", kA, "--spec", kB, "--spec", kC, "--filter", pattern, "--out", out});
    ASSERT_EQ(0, r.status) << pattern << "\n" << r.output;
    EXPECT_EQ(want, emitted(out)) << pattern;
  }
  // Matching nothing is an error naming the pattern; nothing is written.
  const fs::path none = dir.path / "none";
  for (const std::string pattern : {"moe_*", "gmm_bf16", "gmm_?"}) {
    const ProcessResult r =
        cli({"emit", "--spec", kA, "--spec", kC, "--filter", pattern, "--out", none});
    EXPECT_EQ(2, r.status) << pattern << "\n" << r.output;
    EXPECT_TRUE(has(r.output, "--filter '" + pattern + "' matches none of the 2 kernels"))
        << r.output;
    EXPECT_FALSE(fs::exists(none));
  }
  EXPECT_EQ(2, cli({"emit", "--spec", kA, "--filter", "a,,b", "--out", none}).status);
  EXPECT_EQ(2, cli({"emit", "--spec", kA, "--filter", "", "--out", none}).status);
}

TEST(CliUx, FilterOnVerifyBenchAndTune) {
  const Scratch dir;
  const std::string cache = shared_env();  // every kernel below is in it
  const std::string b = kernel_name(parse_text(kB));
  // verify: only the kernel that matches is compiled and checked.
  ProcessResult r =
      cli({cache}, {"verify", "--quick", "--spec", kA, "--spec", kB, "--filter", "*_k40_*"});
  ASSERT_EQ(0, r.status) << r.output;
  EXPECT_TRUE(has(r.output, b)) << r.output;
  EXPECT_FALSE(has(r.output, kernel_name(parse_text(kA)))) << r.output;
  EXPECT_TRUE(has(r.output, "1 kernels verified, 0 mismatched")) << r.output;
  r = cli({cache}, {"verify", "--spec", kA, "--filter", "tgmm"});
  EXPECT_EQ(2, r.status) << r.output;
  EXPECT_TRUE(has(r.output, "--filter 'tgmm' matches none of the 1 kernels")) << r.output;

  // bench: the standard shapes' rows by kernel name (checked before anything is timed), and
  // --spec runs.
  r = cli({cache}, {"bench", "--shapes", "all", "--filter", "gmm_f8*"});
  EXPECT_EQ(2, r.status) << r.output;
  EXPECT_TRUE(has(r.output, "--filter 'gmm_f8*' matches none of the 16 kernels")) << r.output;
  r = cli({cache}, {"bench", "--spec", kA, "--spec", kB, "--filter", "k40", "--m", "64", "--reps",
                    "1", "--baseline", "none"});
  ASSERT_EQ(0, r.status) << r.output;
  EXPECT_EQ(1u, count(r.output, "  ok\n")) << r.output;

  // tune: the problems to sweep.
  r = cli({cache},
          {"tune", "--spec", kA, "--filter", "nothing", "--table", (dir.path / "t.json").string()});
  EXPECT_EQ(2, r.status) << r.output;
  EXPECT_TRUE(has(r.output, "--filter 'nothing' matches none of the 1 kernels")) << r.output;
  const Tiling t = parse_text(kB).tiling;  // the heuristic's, which tune times first
  r = cli(
      {cache},
      {"tune", "--spec", kA, "--spec", kB, "--filter", "*_k40_*", "--space",
       "tm=" + std::to_string(t.tm) + ";tk=" + std::to_string(t.tk) + ";tn=" + std::to_string(t.tn),
       "--reps", "1", "-j", "1", "--m", "64", "--table", (dir.path / "t.json").string()});
  ASSERT_EQ(0, r.status) << r.output;
  EXPECT_TRUE(has(r.output, "k=40")) << r.output;
  EXPECT_FALSE(has(r.output, "k=24")) << r.output;
}

// ---- verify -j, one line per kernel, the disk cache
// ------------------------------------------------

// Lines of `sh -c cmd | reader`, each with the time it came out of the pipe.
std::vector<std::pair<double, std::string>> timed_lines(const std::string& cmd) {
  const std::string stamp = "while IFS= read -r l; do echo \"$(date +%s.%N) $l\"; done";
  const ProcessResult r = run_process({"sh", "-c", cmd + " | " + stamp});
  std::vector<std::pair<double, std::string>> out;
  std::istringstream in(r.output);
  for (std::string line; std::getline(in, line);) {
    const size_t sp = line.find(' ');
    out.emplace_back(std::atof(line.substr(0, sp).c_str()), line.substr(sp + 1));
  }
  return out;
}

TEST(CliUx, VerifyPrintsOneFlushedLinePerKernelIntoAPipe) {
  const Scratch dir;
  // A compiler that takes 1.5 s more per kernel: were the lines held back until exit, they
  // would come out together.
  const fs::path slow = dir.path / "slow-c++";
  std::ofstream(slow) << "#!/bin/sh\ncase \" $* \" in *\" -o \"*) sleep 1.5;; esac\nexec "
                      << GMMGEN_DEFAULT_CXX << " \"$@\"\n";
  fs::permissions(slow, fs::perms::owner_all);
  const std::string cmd = "GMMGEN_CACHE_DIR=" + (dir.path / "cache").string() + " GMMGEN_PCH=off" +
                          " GMMGEN_CXX=" + slow.string() + " " + GMMGEN_CLI +
                          " verify --quick -j 1 --spec " + kA + " --spec " + kC;
  const auto lines = timed_lines(cmd);
  std::vector<double> kernel_lines;
  double summary = 0;
  for (const auto& [t, l] : lines) {
    if (l.rfind("gmm_", 0) == 0 || l.rfind("tgmm_", 0) == 0) {
      kernel_lines.push_back(t);
      EXPECT_TRUE(has(l, " ok")) << l;
    }
    if (has(l, "kernels verified")) summary = t;
  }
  ASSERT_EQ(2u, kernel_lines.size()) << cmd;
  ASSERT_GT(summary, 0);
  EXPECT_GE(kernel_lines[0] - lines.front().first, 1.0);  // the header came out at once
  EXPECT_GE(kernel_lines[1] - kernel_lines[0], 1.0);
  EXPECT_GE(summary - lines.front().first, 2.0);
}

TEST(CliUx, VerifyJobsCompileInParallelIntoTheDiskCache) {
  const Scratch dir;
  const fs::path root = dir.path / "cache";
  const std::vector<std::string> env{"GMMGEN_CACHE_DIR=" + root.string(), "GMMGEN_LOG=info"};
  const std::vector<std::string> args{"verify", "--quick", "-j", "2",      "--spec",
                                      kA,       "--spec",  kB,   "--spec", kC};
  const ProcessResult r = cli(env, args);
  ASSERT_EQ(0, r.status) << r.output;
  EXPECT_TRUE(has(r.output, "3 C++ kernels, -j 2, disk cache " + root.string())) << r.output;
  EXPECT_TRUE(has(r.output, "3 kernels verified, 0 mismatched")) << r.output;
  EXPECT_EQ(0u, count(r.output, "cached")) << r.output;
  EXPECT_EQ(1u, count(r.output, "statistics: ")) << r.output;  // the workers' sum
  EXPECT_TRUE(has(r.output, "compiled 3), 3 compiles")) << r.output;
  size_t entries = 0;
  for (const auto& e : DiskCache(root).list()) entries += e.note.empty();
  EXPECT_EQ(3u, entries);
  // Again: nothing compiles.
  const ProcessResult again = cli(env, args);
  ASSERT_EQ(0, again.status) << again.output;
  EXPECT_EQ(3u, count(again.output, "  cached ")) << again.output;
  EXPECT_TRUE(has(again.output, "disk 3, compiled 0)")) << again.output;
}

// verify --quick on the README's shape does the work that keeps it quick: one lookup, served by
// the disk cache or by one compile, and one bounded case (its speed is bench's to measure).
TEST(CliUx, VerifyQuickOnTheReadmeShapeChecksOneCase) {
  const Scratch dir;
  const char* shared = std::getenv("GMMGEN_TEST_CACHE_DIR");
  const std::string cache = shared && *shared ? std::string(shared) : (dir.path / "cache").string();
  const ProcessResult r =
      cli({"GMMGEN_CACHE_DIR=" + cache, "GMMGEN_LOG=info"},
          {"verify", "--quick", "--spec", "op=gmm,lhs=bf16,rhs=bf16,out=f32,k=2048,n=1408,g=64"});
  ASSERT_EQ(0, r.status) << r.output;
  EXPECT_TRUE(has(r.output, "1 kernels verified, 0 mismatched")) << r.output;
  EXPECT_TRUE(has(r.output, "statistics: 1 lookups")) << r.output;
  EXPECT_TRUE(has(r.output, "disk 1, compiled 0)") || has(r.output, "disk 0, compiled 1)"))
      << r.output;
  // The kernel's row: its name, then the number of cases.
  std::istringstream lines(r.output);
  std::string row;
  for (std::string line; std::getline(lines, line);)
    if (line.rfind("gmm_bf16xbf16_f32_k2048_n1408_g64_", 0) == 0) row = line;
  std::istringstream fields(row);
  std::string name, cases;
  fields >> name >> cases;
  EXPECT_EQ("1", cases) << r.output;
}

// ---- emit's paths -------------------------------------------------------------------------------

TEST(CliUx, EmitPrintsCleanPaths) {
  const Scratch dir;
  const std::string messy = dir.path.string() + "//a/./b//";
  const ProcessResult r = cli({"emit", "--spec", kA, "--out", messy});
  ASSERT_EQ(0, r.status) << r.output;
  EXPECT_FALSE(has(r.output, "//")) << r.output;
  EXPECT_FALSE(has(r.output, "/./")) << r.output;
  EXPECT_TRUE(has(r.output, (dir.path / "a/b/manifest.json").string() + "\n")) << r.output;
  EXPECT_TRUE(
      has(r.output, (dir.path / "a/b/cpp" / kernel_name(parse_text(kA))).string() + ".cpp\n"))
      << r.output;
}

// ---- cache ls, prune ----------------------------------------------------------------------------

TEST(CliUx, CacheLsCreatesNothing) {
  const Scratch dir;
  const fs::path root = dir.path / "not-yet" / "cache";
  const std::string env = "GMMGEN_CACHE_DIR=" + root.string();
  ProcessResult r = cli({env}, {"cache", "ls"});
  EXPECT_EQ(0, r.status) << r.output;
  EXPECT_TRUE(has(r.output, "0 entries, 0 bytes in " + root.string())) << r.output;
  r = cli({env}, {"cache", "prune", "--max-size", "0"});
  EXPECT_EQ(0, r.status) << r.output;
  r = cli({env}, {"cache", "clear"});
  EXPECT_EQ(0, r.status) << r.output;
  EXPECT_FALSE(fs::exists(dir.path / "not-yet"));
  // An existing root: ls leaves it as it was (no lock or temporary folders made).
  fs::create_directories(root);
  fs::permissions(root, fs::perms::owner_all);
  r = cli({env}, {"cache", "ls"});
  EXPECT_EQ(0, r.status) << r.output;
  EXPECT_TRUE(fs::is_empty(root));
}

void set_mtime(const fs::path& p, int64_t when) {
  const timespec t[2] = {{time_t(when), 0}, {time_t(when), 0}};
  ASSERT_EQ(0, utimensat(AT_FDCWD, p.c_str(), t, AT_SYMLINK_NOFOLLOW)) << p;
}

TEST(CliUx, CachePruneByAgeThenSizeLeastRecentlyUsedFirst) {
  const Scratch dir;
  const fs::path root = dir.path / "cache";
  const std::string env = "GMMGEN_CACHE_DIR=" + root.string();
  copy_shared_cache(root);
  std::map<std::string, std::string> key;  // spec -> cache key
  for (const auto& s : {kA, kB, kC}) {
    key[s] = cache_key(parse_text(s));
    EXPECT_TRUE(fs::exists(root / key[s] / "last-use")) << "the loader marks its use";
  }
  // Ages by hand: A last used 10 days ago, B 2 days ago, C an hour ago; all built 20 days ago.
  const int64_t now = int64_t(std::time(nullptr)), day = 86400;
  const std::map<std::string, int64_t> used{
      {kA, now - 10 * day}, {kB, now - 2 * day}, {kC, now - 3600}};
  for (const auto& [s, t] : used) {
    set_mtime(root / key[s] / "entry.json", now - 20 * day);
    set_mtime(root / key[s] / "last-use", t);
  }
  // What prune must never touch: a link to a folder outside (old), a stray file, tuning/.
  const fs::path outside = dir.path / "outside";
  fs::create_directories(outside);
  std::ofstream(outside / "sentinel") << "keep";
  fs::create_directory_symlink(outside, root / "old-link");
  std::ofstream(root / "stray") << "x";
  fs::create_directories(root / "tuning");
  std::ofstream(root / "tuning" / "host.json") << "{}";
  set_mtime(root / "stray", now - 100 * day);

  ProcessResult r = cli({env}, {"cache", "ls"});
  ASSERT_EQ(0, r.status) << r.output;
  for (const auto& [s, t] : used) {
    const std::string name = kernel_name(parse_text(s));
    std::istringstream in(r.output);
    std::string row;
    for (std::string line; std::getline(in, line);)
      if (line.rfind(key[s], 0) == 0) row = line;
    ASSERT_FALSE(row.empty()) << r.output;
    EXPECT_TRUE(has(row, " 20d ")) << row;  // age
    EXPECT_TRUE(has(row, s == kA ? " 10d ago " : s == kB ? " 2d ago " : " 1h ago ")) << row;
    EXPECT_TRUE(has(row, name + "  " + to_text(parse_text(s)))) << row;  // kernel and spec
    EXPECT_TRUE(has(row, "iB ")) << row;                                 // size
  }
  EXPECT_TRUE(has(r.output, "old-link  (not a cache entry: a symbolic link)")) << r.output;
  EXPECT_TRUE(has(r.output, "3 entries, ")) << r.output;

  // Bad values name the option and the form; nothing is removed.
  for (const std::vector<std::string>& bad : {std::vector<std::string>{"--older-than", "7"},
                                              {"--older-than", "7y"},
                                              {"--older-than", "-1d"},
                                              {"--max-size", "2X"},
                                              {"--max-size", "lots"}}) {
    r = cli({env}, {"cache", "prune", bad[0] + "=" + bad[1]});
    EXPECT_EQ(2, r.status) << bad[1] << "\n" << r.output;
    EXPECT_TRUE(has(r.output, bad[0] + " " + bad[1] + ": ")) << r.output;
  }

  // By age: only A.
  r = cli({env}, {"cache", "prune", "--older-than", "7d"});
  ASSERT_EQ(0, r.status) << r.output;
  EXPECT_TRUE(has(r.output, "removed " + key[kA])) << r.output;
  EXPECT_TRUE(has(r.output, "pruned 1 entries")) << r.output;
  EXPECT_FALSE(fs::exists(root / key[kA]));
  EXPECT_TRUE(fs::exists(root / key[kB]));
  EXPECT_TRUE(fs::exists(root / key[kC]));

  // By size: B (less recently used than C) goes so that C fits.
  uintmax_t c_bytes = 0;
  for (const auto& e : DiskCache(root).list())
    if (e.key == key[kC]) c_bytes = e.bytes;
  ASSERT_GT(c_bytes, 0u);
  r = cli({env}, {"cache", "prune", "--max-size", std::to_string(c_bytes)});
  ASSERT_EQ(0, r.status) << r.output;
  EXPECT_TRUE(has(r.output, "removed " + key[kB])) << r.output;
  EXPECT_FALSE(fs::exists(root / key[kB]));
  EXPECT_TRUE(fs::exists(root / key[kC]));
  // Both together, with a size no entry fits in: C goes too.
  r = cli({env}, {"cache", "prune", "--older-than", "1000d", "--max-size", "1K"});
  ASSERT_EQ(0, r.status) << r.output;
  EXPECT_FALSE(fs::exists(root / key[kC]));
  EXPECT_TRUE(has(r.output, "0 entries (0 B) left")) << r.output;

  EXPECT_EQ("keep", read_file(outside / "sentinel"));
  EXPECT_TRUE(fs::is_symlink(root / "old-link"));
  EXPECT_TRUE(fs::exists(root / "stray"));
  EXPECT_EQ("{}", read_file(root / "tuning" / "host.json"));
}

// A process that loads an entry from the disk marks its use, and prune then keeps it.
TEST(CliUx, LoadingAnEntryMarksItsUse) {
  const Scratch dir;
  const fs::path root = dir.path / "cache";
  const std::string env = "GMMGEN_CACHE_DIR=" + root.string();
  const std::string key = cache_key(parse_text(kA));
  copy_shared_cache(root);
  const int64_t long_ago = int64_t(std::time(nullptr)) - 30 * 86400;
  set_mtime(root / key / "last-use", long_ago);
  const ProcessResult r = cli({env}, {"verify", "--quick", "--spec", kA});  // from the disk
  ASSERT_EQ(0, r.status) << r.output;
  EXPECT_TRUE(has(r.output, "cached")) << r.output;
  struct stat st;
  ASSERT_EQ(0, lstat((root / key / "last-use").c_str(), &st));
  EXPECT_GT(int64_t(st.st_mtim.tv_sec), long_ago + 29 * 86400);
  ASSERT_EQ(0, cli({env}, {"cache", "prune", "--older-than", "1d"}).status);
  EXPECT_TRUE(fs::exists(root / key));
}

// ---- GMMGEN_LOG ---------------------------------------------------------------------------------

// runtime_probe (a program using the Runtime) with GMMGEN_LOG=level: its stderr, its status.
ProcessResult probe_log(const fs::path& root, const std::string& level) {
  std::string env = "GMMGEN_CACHE_DIR='" + root.string() + "'";
  if (level != "unset") env += " GMMGEN_LOG=" + level;
  return stderr_of(env + " " + GMMGEN_PROBE + " 1 " + kA);
}

TEST(CliUx, LogLevelsAndTheStatisticsLine) {
  const Scratch dir;
  const fs::path root = dir.path / "cache";
  const std::string key = cache_key(parse_text(kA));
  // debug: the compile as a command to copy and paste, with its time, then the statistics.
  ProcessResult r = probe_log(root, "debug");
  ASSERT_EQ(0, r.status) << r.output;
  const std::string marker = "gmm-gen: compiled " + key + " in ";
  const size_t at = r.output.find(marker);
  ASSERT_NE(std::string::npos, at) << r.output;
  const std::string line = r.output.substr(at, r.output.find('\n', at) - at);
  EXPECT_TRUE(has(line, " s: ")) << line;
  const std::string command = line.substr(line.find(" s: ") + 4);
  EXPECT_TRUE(has(command, "-I " + (root / key).string())) << command;
  EXPECT_TRUE(has(r.output, "gmm-gen: compiling " + key)) << r.output;
  EXPECT_EQ(1u, count(r.output, "gmm-gen: statistics: ")) << r.output;
  EXPECT_TRUE(has(r.output,
                  "gmm-gen: statistics: 1 lookups (registry 0, memory 0, disk 0, "
                  "compiled 1), 1 compiles in "))
      << r.output;
  // The command runs as printed, from any folder, and builds the same object.
  const fs::path elsewhere = dir.path / "by-hand";
  fs::create_directories(elsewhere);
  const ProcessResult by_hand =
      run_process({"sh", "-c", "cd '" + elsewhere.string() + "' && " + command});
  ASSERT_EQ(0, by_hand.status) << command << "\n" << by_hand.output;
  EXPECT_TRUE(fs::exists(elsewhere / "kernel.so"));

  // info (and 1): hits and the statistics line, no compile commands. The entry is on disk now.
  for (const std::string level : {"info", "1", "INFO"}) {
    r = probe_log(root, level);
    ASSERT_EQ(0, r.status) << r.output;
    EXPECT_TRUE(has(r.output, "gmm-gen: disk cache hit " + key)) << level << r.output;
    EXPECT_TRUE(has(r.output,
                    "gmm-gen: statistics: 1 lookups (registry 0, memory 0, disk 1, "
                    "compiled 0), 0 compiles"))
        << level << r.output;
    EXPECT_EQ(1u, count(r.output, "statistics")) << level << r.output;
    EXPECT_FALSE(has(r.output, "gmm-gen: loaded ")) << level << r.output;  // a debug line
  }
  // warn (the default, also 0) and error: nothing on a good day.
  for (const std::string level : {"unset", "0", "warn", "error"}) {
    r = probe_log(root, level);
    ASSERT_EQ(0, r.status) << r.output;
    EXPECT_EQ("", r.output) << level;
  }
  // warn: a corrupt entry, rebuilt.
  std::ofstream(root / key / "entry.json") << "{";
  r = probe_log(root, "warn");
  ASSERT_EQ(0, r.status) << r.output;
  EXPECT_TRUE(has(r.output, "gmm-gen: warning: cache entry " + key + " is bad")) << r.output;
  // error: a kernel that cannot be built, said as it fails.
  const std::string no_cxx = "GMMGEN_CXX=/nonexistent/c++ GMMGEN_CACHE_DIR='" +
                             (dir.path / "other").string() + "' GMMGEN_LOG=error ";
  r = stderr_of(no_cxx + GMMGEN_PROBE + " 1 " + kA);
  EXPECT_NE(0, r.status);
  EXPECT_TRUE(has(r.output, "gmm-gen: error: kernel " + kernel_name(parse_text(kA)) + ": "))
      << r.output;
  // A value that is none of them names the variable and the accepted ones.
  r = probe_log(root, "verbose");
  EXPECT_NE(0, r.status);
  const ProcessResult out =
      cli({"GMMGEN_LOG=verbose", "GMMGEN_CACHE_DIR=" + root.string()}, {"verify", "--spec", kA});
  EXPECT_EQ(2, out.status) << out.output;
  EXPECT_TRUE(has(out.output, "GMMGEN_LOG=verbose is not one of: error, warn, info, debug"))
      << out.output;
}

// A Runtime still alive at exit (a global, a handle never freed) prints its line then, once;
// one destroyed before prints it then and not again.
TEST(CliUx, StatisticsLineAtProcessExit) {
  const Scratch dir;
  for (const bool destroy : {false, true}) {
    std::fflush(nullptr);  // the child's exit flushes what it inherited
    int fds[2];
    ASSERT_EQ(0, pipe(fds));
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      dup2(fds[1], 2);
      close(fds[0]);
      RuntimeOptions o;
      o.cache_dir = dir.path / "cache", o.num_threads = 1, o.log_level = LogLevel::kInfo;
      // Held by a static, as a global runtime is (so LeakSanitizer does not call it a leak).
      static Runtime* rt = nullptr;
      rt = new Runtime(o);
      if (destroy) delete rt;
      std::exit(0);
    }
    close(fds[1]);
    std::string err;
    char buf[4096];
    for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) err.append(buf, size_t(n));
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << err;
    EXPECT_EQ(1u, count(err, "gmm-gen: statistics: 0 lookups")) << destroy << "\n" << err;
  }
}

}  // namespace
}  // namespace gmmgen
