// Hardening tests (issue 9): the command line against an attacker and a bad day -- temporary
// paths another user can predict or plant, strict spec JSON, all-or-nothing emission, and
// kernels of an ISA family the host cannot run.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli.h"
#include "gmmgen/naming.h"
#include "jit/toolchain.h"
#include "scratch.h"

namespace gmmgen {
namespace {

namespace fs = std::filesystem;

using testing::cli;
using testing::read_file;
using testing::Scratch;
using testing::write_file;

// Single-quoted for sh.
std::string sh_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// Everything under dir: each path with its kind and, for regular files, its content.
std::map<std::string, std::string> snapshot(const fs::path& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    const std::string rel = fs::relative(e.path(), dir).string();
    if (e.is_symlink())
      out[rel] = "symlink -> " + fs::read_symlink(e.path()).string();
    else if (e.is_directory())
      out[rel] = "directory";
    else
      out[rel] = "file: " + read_file(e.path());
  }
  return out;
}

bool is_root() {
  return geteuid() == 0;
}

constexpr const char* kNobody = "65534";

// ---- Spec JSON (item 5) -------------------------------------------------------------------

// Runs `gmm-gen describe --spec-file` on a file holding `json`.
struct SpecFileRun {
  ProcessResult r;
  std::string file;
};
SpecFileRun describe_json(const Scratch& dir, const std::string& json) {
  const fs::path f = dir.path / "specs.json";
  write_file(f, json);
  return {cli({"describe", "--spec-file", f.string()}), f.string()};
}

TEST(HardeningCli, SpecJsonDeepNestingIsACleanError) {
  const Scratch dir;
  for (const auto& [open, close] : {std::pair<std::string, std::string>{"[", "]"},
                                    std::pair<std::string, std::string>{"{\"a\":", "}"}}) {
    std::string json;
    for (int i = 0; i < 100000; ++i) json += open;
    json += "1";
    for (int i = 0; i < 100000; ++i) json += close;
    const SpecFileRun run = describe_json(dir, json);
    EXPECT_EQ(2, run.r.status) << run.r.output.substr(0, 2000);
    EXPECT_NE(run.r.output.find(run.file), std::string::npos) << run.r.output.substr(0, 2000);
    EXPECT_NE(run.r.output.find("nested deeper than 64 levels"), std::string::npos)
        << run.r.output.substr(0, 2000);
  }
  // 64 levels are fine for the parser (the content is then the wrong shape).
  std::string json = "[";
  for (int i = 1; i < 64; ++i) json += "[";
  for (int i = 0; i < 64; ++i) json += "]";
  const SpecFileRun run = describe_json(dir, json);
  EXPECT_EQ(2, run.r.status) << run.r.output;
  EXPECT_EQ(run.r.output.find("nested deeper"), std::string::npos) << run.r.output;
}

TEST(HardeningCli, SpecJsonDuplicateKeysAreRejected) {
  const Scratch dir;
  for (const char* json :
       {R"([{"k": 64, "n": 8, "g": 2, "k": 32}])", R"([{"k": 64, "n": 8, "g": 2, "lhs": "f32",
          "lhs": "bf16"}])",
        R"({"kernels": [], "kernels": [{"k": 64, "n": 8, "g": 2}]})"}) {
    const SpecFileRun run = describe_json(dir, json);
    EXPECT_EQ(2, run.r.status) << json << "\n" << run.r.output;
    EXPECT_NE(run.r.output.find(run.file), std::string::npos) << run.r.output;
    EXPECT_NE(run.r.output.find("' is given twice in one object"), std::string::npos)
        << run.r.output;
  }
  // The same key in different objects is fine.
  const SpecFileRun ok = describe_json(dir, R"([{"k": 64, "n": 8, "g": 2}, {"k": 8, "n": 8,
      "g": 2}])");
  EXPECT_EQ(0, ok.r.status) << ok.r.output;
}

TEST(HardeningCli, SpecJsonIntegersMustBeIntegersInRange) {
  const Scratch dir;
  struct Case {
    std::string value, message;
  };
  const Case cases[] = {
      {"true", "spec key 'k' must be a JSON integer, got true"},
      {"\"64\"", "spec key 'k' must be a JSON integer, got the string \"64\""},
      {"1e400",
       "in the value of key 'k': [json.exception.out_of_range.406] number overflow "
       "parsing '1e400'"},
      {"1.5", "spec key 'k' must be a JSON integer, got the non-integer number 1.5"},
      {"64.0", "spec key 'k' must be a JSON integer"},
      {"null", "spec key 'k' must be a JSON integer, got null"},
      {"[64]", "spec key 'k' must be a JSON integer, got an array"},
      {"18446744073709551615", "spec key 'k': 18446744073709551615 is out of range"},
      {"9223372036854775808", "spec key 'k': 9223372036854775808 is out of range"},
      {"-1", "k=-1 must be in [1, "},
      {"-9223372036854775808", "k=-9223372036854775808 must be in [1, "},
      {"4294967296", "k=4294967296 must be in [1, "},
  };
  for (const Case& c : cases) {
    const SpecFileRun run = describe_json(dir, R"([{"n": 8, "g": 2, "k": )" + c.value + "}]");
    EXPECT_EQ(2, run.r.status) << c.value << "\n" << run.r.output;
    // A number the parser cannot hold is an error of the file, before its specs are read.
    EXPECT_NE(run.r.output.find(run.file + (c.value == "1e400" ? ": " : ", spec #1: ")),
              std::string::npos)
        << run.r.output;
    EXPECT_NE(run.r.output.find(c.message), std::string::npos) << c.value << "\n" << run.r.output;
  }
  // Other fields: the JSON type is the field's.
  const Case others[] = {
      {R"("g_local": -3)", "g_local=-3 must be in [1, g=2]"},
      {R"("tm": 0)", "tm=0 must be in"},
      {R"("lhs": 16)", "spec key 'lhs' must be a JSON string, got the integer 16"},
      {R"("transpose_rhs": "true")", "spec key 'transpose_rhs' must be true or false"},
      {R"("transpose_rhs": 2)", "spec key 'transpose_rhs' must be true or false"},
      {R"("rhs_quant": {"block": 64})",
       "spec key 'rhs_quant' must be a JSON string, got an object"},
  };
  for (const Case& c : others) {
    const SpecFileRun run = describe_json(dir, R"([{"k": 64, "n": 8, "g": 2, )" + c.value + "}]");
    EXPECT_EQ(2, run.r.status) << c.value << "\n" << run.r.output;
    EXPECT_NE(run.r.output.find(run.file + ", spec #1: "), std::string::npos) << run.r.output;
    EXPECT_NE(run.r.output.find(c.message), std::string::npos) << c.value << "\n" << run.r.output;
  }
  // What stays valid: integers, booleans (or 0/1) for flags, strings for enums.
  const SpecFileRun ok = describe_json(
      dir, R"([{"k": 64, "n": 8, "g": 2, "transpose_rhs": true, "lhs": "f32", "tm": 16},
             {"k": 64, "n": 8, "g": 2, "transpose_rhs": 0}, "k=8,n=8,g=2"])");
  EXPECT_EQ(0, ok.r.status) << ok.r.output;
}

TEST(HardeningCli, SpecMessagesQuoteAtMost100Characters) {
  const Scratch dir;
  const std::string huge(10 << 20, 'x');
  for (const std::string& json :
       {R"([{"k": 64, "n": 8, "g": 2, "lhs": ")" + huge + "\"}]",
        R"([{"k": 64, "n": 8, "g": 2, ")" + huge + "\": 1}]", R"([")" + huge + "\"]",
        R"(["k=64,n=8,g=2,lhs_quant=)" + huge + "\"]", R"([{"k": ")" + huge + "\"}]",
        "[" + huge + "]", R"([{"k": 64, "n": 8, "g": 2, "lhs": ")" + huge + "\x01\"}]"}) {
    const SpecFileRun run = describe_json(dir, json);
    EXPECT_EQ(2, run.r.status) << run.r.output.substr(0, 1000);
    EXPECT_NE(run.r.output.find(run.file), std::string::npos) << run.r.output.substr(0, 1000);
    EXPECT_LT(run.r.output.size(), 700u) << run.r.output.substr(0, 1000);
  }
  // The text form too (within a command line's limit of one argument).
  const ProcessResult r = cli({"describe", "--spec", "k=64,n=8,g=2,lhs=" + huge.substr(0, 100000)});
  EXPECT_EQ(2, r.status) << r.output.substr(0, 1000);
  EXPECT_NE(r.output.find("lhs=xxxxxxxx"), std::string::npos) << r.output.substr(0, 1000);
  EXPECT_NE(r.output.find("(100000 characters)"), std::string::npos) << r.output.substr(0, 1000);
  EXPECT_LT(r.output.size(), 700u) << r.output.substr(0, 1000);
}

// A spec file that repeats one spec 100,000 times: describe describes it once, emit renders and
// writes it once. (Rendering each copy took minutes.)
TEST(HardeningCli, ASpecGivenManyTimesIsRenderedOnce) {
  const Scratch dir;
  std::string json = "[";
  for (int i = 0; i < 100000; ++i) json += std::string(i ? "," : "") + "\"k=16,n=16,g=2\"";
  json += "]";
  write_file(dir.path / "many.json", json);
  const std::string file = (dir.path / "many.json").string();
  ProcessResult r = cli({"describe", "--spec-file", file});
  ASSERT_EQ(0, r.status) << r.output.substr(0, 1000);
  size_t names = 0;
  for (size_t at = r.output.find("name:"); at != std::string::npos;
       at = r.output.find("name:", at + 1))
    ++names;
  EXPECT_EQ(1u, names) << r.output.substr(0, 1000);
  r = cli({"emit", "--spec-file", file, "--out", (dir.path / "out").string()});
  ASSERT_EQ(0, r.status) << r.output.substr(0, 1000);
  const std::string manifest = read_file(dir.path / "out" / "manifest.json");
  EXPECT_EQ(1, nlohmann::json::parse(manifest)["kernels"].size()) << manifest.substr(0, 2000);
}

// ---- Temporary paths (item 1) ------------------------------------------------------------------

// emit writes each file through a random mkstemp name: a symlink planted at any name another
// user could guess (the old `.<file>.tmp<pid>`, with the pid of the very process that emits)
// or at a final name is never followed; the link's target stays as it was.
TEST(HardeningCli, EmitNeverFollowsPlantedSymlinks) {
  const Scratch dir;
  const fs::path out = dir.path / "out", victim = dir.path / "victim";
  write_file(victim, "precious\n");
  const std::string spec = "k=64,n=48,g=4,lhs=f32,rhs=f32,out=f32,tm=16";
  const std::string name = kernel_name(parse_text(spec));
  std::string plant;
  const std::vector<std::string> finals{"manifest.json", "cpp/gmmgen/kernel_abi.h",
                                        "cpp/" + name + ".cpp", "cpp/" + name + ".h"};
  for (const std::string& f : finals) {
    const fs::path p = out / f;
    const std::string d = sh_quote(p.parent_path().string()), b = p.filename().string();
    plant += "mkdir -p " + d + " && ";
    const std::vector<std::string> guesses{"." + b + ".tmp$$",  "." + b + ".tmp",
                                           b + ".tmp",          b + ".tmp$$",
                                           "." + b + ".XXXXXX", "." + b + ".tmp$(($$+1))"};
    for (const std::string& tmp : guesses)
      plant += "ln -s " + sh_quote(victim.string()) + " " + d + "/" + tmp + " && ";
  }
  // The final name of the manifest is a symlink too: emit replaces the link, not its target.
  plant += "ln -s " + sh_quote(victim.string()) + " " + sh_quote((out / "manifest.json").string());
  const std::string emit = std::string(" && exec ") + GMMGEN_CLI + " emit --spec " + spec +
                           " --out " + sh_quote(out.string());
  for (int round = 0; round < 2; ++round) {  // into a new folder, then over the first emission
    const ProcessResult r = run_process({"sh", "-c", (round ? "true" : plant) + emit});
    ASSERT_EQ(0, r.status) << r.output;
    EXPECT_EQ("precious\n", read_file(victim));
    struct stat st;
    ASSERT_EQ(0, lstat((out / "manifest.json").c_str(), &st));
    EXPECT_TRUE(S_ISREG(st.st_mode));
    EXPECT_NE(read_file(out / "manifest.json").find(name), std::string::npos);
    size_t links = 0;
    for (const auto& e : fs::recursive_directory_iterator(out)) {
      if (!e.is_symlink()) continue;
      ++links;
      EXPECT_EQ(victim, fs::read_symlink(e.path())) << e.path();
    }
    EXPECT_EQ(4u * 6u, links);  // every planted temporary name is still a link, left alone
  }
}

// A shared output folder (mode 0777) where another user planted a symlinked subfolder and a
// manifest naming a file behind it: emit removes nothing outside the folder; a symlink at the
// cpp/ subfolder stops emit with an error naming it, and nothing lands behind it.
TEST(HardeningCli, EmitIntoASharedFolderNeverReachesThroughASymlinkedSubfolder) {
  if (!is_root()) GTEST_SKIP() << "needs root to act as a second user (setpriv)";
  const Scratch dir;
  ASSERT_EQ(0, chmod(dir.path.c_str(), 0755));
  const fs::path out = dir.path / "shared", victim = dir.path / "victim";
  fs::create_directory(out);
  ASSERT_EQ(0, chmod(out.c_str(), 0777));
  fs::create_directory(victim);
  write_file(victim / "precious", "keep me\n");
  const std::string as_nobody =
      std::string("setpriv --reuid=") + kNobody + " --regid=" + kNobody + " --clear-groups ";
  const std::string o = sh_quote(out.string()), v = sh_quote(victim.string());
  const std::string emit = std::string(" && exec ") + GMMGEN_CLI +
                           " emit --spec k=16,n=16,g=2,lhs=f32,rhs=f32 --out " + o;
  ProcessResult r =
      run_process({"sh", "-c",
                   as_nobody + "ln -s " + v + " " + o + "/evil && " + as_nobody + "sh -c \"echo " +
                       sh_quote(R"({"kernels":[{"files":["evil/precious"]}]})") + " > " + o +
                       "/manifest.json\"" + emit});
  ASSERT_EQ(0, r.status) << r.output;
  EXPECT_EQ("keep me\n", read_file(victim / "precious"));
  EXPECT_TRUE(fs::exists(out / "cpp"));

  fs::remove_all(out / "cpp");
  r = run_process({"sh", "-c", as_nobody + "ln -s " + v + " " + o + "/cpp" + emit});
  EXPECT_EQ(1, r.status) << r.output;
  EXPECT_NE(r.output.find((out / "cpp").string() + " is not a folder"), std::string::npos)
      << r.output;
  EXPECT_EQ(1, std::distance(fs::directory_iterator(victim), fs::directory_iterator()))
      << "emit wrote behind the planted cpp/ symlink";
}

// What verify writes outside the disk cache (the kernels of a family this CPU cannot run, which
// it compiles but never loads; Pallas modules) goes only into a fresh mkdtemp folder: a folder
// another user made at a name verify once used (`gmm-gen-verify-<pid>`, with the very pid of the
// verifying process) is never used, and a TMPDIR another user can change is refused.
// GMMGEN_ASSUME_ISA=generic makes the avx2 kernel one this CPU "cannot run".
TEST(HardeningCli, VerifyIgnoresFoldersPlantedByAnotherUser) {
  if (!is_root()) GTEST_SKIP() << "needs root to act as a second user (setpriv)";
  const Scratch dir;
  const fs::path tmp = dir.path / "tmp";  // a shared /tmp: root's, sticky, writable by all
  fs::create_directory(tmp);
  ASSERT_EQ(0, chmod(tmp.c_str(), 01777));
  ASSERT_EQ(0, chmod(dir.path.c_str(), 0755));
  const std::string as_nobody =
      std::string("setpriv --reuid=") + kNobody + " --regid=" + kNobody + " --clear-groups ";
  const std::string t = sh_quote(tmp.string());
  // The attacker's folder, at the name of the pid that then runs verify: world-writable, with
  // a cpp/ folder where the sources would go.
  const std::string plant = "for p in $$ $(($$+1)) $(($$+2)); do " + as_nobody + "mkdir -m 0777 " +
                            t + "/gmm-gen-verify-$p " + t + "/gmm-gen-verify-$p/cpp || exit 9; " +
                            as_nobody + "chmod 0777 " + t + "/gmm-gen-verify-$p/cpp; done";
  const std::string cache = sh_quote((dir.path / "cache").string());
  const ProcessResult r =
      run_process({"sh", "-c",
                   plant + " && TMPDIR=" + t + " GMMGEN_CACHE_DIR=" + cache +
                       " GMMGEN_ASSUME_ISA=generic exec " + GMMGEN_CLI +
                       " verify --quick --spec k=8,n=8,g=2,lhs=f32,rhs=f32,isa=generic"
                       " --spec k=8,n=8,g=2,lhs=f32,rhs=f32,isa=avx2"});
  ASSERT_EQ(0, r.status) << r.output;
  EXPECT_NE(r.output.find("1 kernels verified, 0 mismatched, 1 compiled but not run"),
            std::string::npos)
      << r.output;
  size_t planted = 0;
  for (const auto& e : fs::directory_iterator(tmp)) {
    ++planted;  // verify removed its own folder; only the attacker's stay, untouched
    EXPECT_EQ(0, e.path().filename().string().rfind("gmm-gen-verify-", 0)) << e.path();
    EXPECT_TRUE(fs::is_empty(e.path() / "cpp")) << e.path();
    EXPECT_EQ(1, std::distance(fs::directory_iterator(e.path()), fs::directory_iterator()))
        << e.path();
  }
  EXPECT_EQ(3u, planted);

  // A TMPDIR another user owns (they could rename verify's folder and put theirs in its place)
  // or may write without the sticky bit: refused before anything is written.
  const fs::path theirs = dir.path / "theirs", open = dir.path / "open";
  fs::create_directory(theirs);
  ASSERT_EQ(0, chown(theirs.c_str(), 65534, 65534));
  fs::create_directory(open);
  ASSERT_EQ(0, chmod(open.c_str(), 0777));
  for (const fs::path& bad : {theirs, open}) {
    const ProcessResult refused = run_process({"env", "TMPDIR=" + bad.string(),
                                               "GMMGEN_CACHE_DIR=" + (dir.path / "cache").string(),
                                               "GMMGEN_ASSUME_ISA=generic", GMMGEN_CLI, "verify",
                                               "--quick", "--spec", "k=8,n=8,g=2,isa=avx2"});
    EXPECT_EQ(1, refused.status) << refused.output;
    EXPECT_NE(refused.output.find("is not private"), std::string::npos) << refused.output;
    EXPECT_TRUE(fs::is_empty(bad)) << bad;
  }
}

// ---- All-or-nothing emission (item 6) -----------------------------------------------------------

// A file of the new set cannot be installed (a directory is in the way of its final name, after
// other files have been renamed into place): every previous file stays byte-identical, the old
// manifest.json with them, and no temporary file is left.
TEST(HardeningCli, EmitIsAllOrNothing) {
  const Scratch dir;
  const fs::path out = dir.path / "out";
  const std::string a = "k=64,n=48,g=4,lhs=f32,rhs=f32,out=f32,tm=16",
                    b = "k=32,n=16,g=2,lhs=f32,rhs=f32,out=f32,tm=8",
                    c = "k=16,n=16,g=2,lhs=f32,rhs=f32,out=f32,tm=8";
  ProcessResult r = cli({"emit", "--spec", a, "--spec", b, "--out", out.string()});
  ASSERT_EQ(0, r.status) << r.output;
  // Edit every file, so that emitting again rewrites each of them.
  for (const auto& e : fs::recursive_directory_iterator(out))
    if (e.is_regular_file()) std::ofstream(e.path(), std::ios::app) << "\n// edited\n";
  // In the way of the last kernel's source: a folder (not empty, so nothing can remove it).
  const fs::path blocked = out / "cpp" / (kernel_name(parse_text(c)) + ".cpp");
  fs::create_directories(blocked);
  write_file(blocked / "keep", "keep\n");
  const auto before = snapshot(out);

  r = cli({"emit", "--spec", a, "--spec", b, "--spec", c, "--out", out.string()});
  EXPECT_EQ(1, r.status) << r.output;
  EXPECT_NE(r.output.find(blocked.string()), std::string::npos) << r.output;
  EXPECT_EQ(before, snapshot(out));  // nothing replaced, nothing left behind

  // A file where a folder must go: the write stops while staging; no temporary is left.
  const fs::path fresh = dir.path / "fresh";
  fs::create_directories(fresh / "cpp");
  write_file(fresh / "cpp" / "gmmgen", "a file where a folder must go\n");
  const auto fresh_before = snapshot(fresh);
  r = cli({"emit", "--spec", a, "--out", fresh.string()});
  EXPECT_EQ(1, r.status) << r.output;
  EXPECT_EQ(fresh_before, snapshot(fresh));

  // The last file (manifest.json) cannot go in after every other one did: they are removed again,
  // and so are the folders made for them.
  const fs::path empty = dir.path / "empty";
  fs::create_directories(empty / "manifest.json" / "x");
  const auto empty_before = snapshot(empty);
  r = cli({"emit", "--spec", a, "--out", empty.string()});
  EXPECT_EQ(1, r.status) << r.output;
  EXPECT_EQ(empty_before, snapshot(empty));

  // Once the way is clear, the set goes in whole.
  fs::remove_all(blocked);
  r = cli({"emit", "--spec", a, "--spec", b, "--spec", c, "--out", out.string()});
  ASSERT_EQ(0, r.status) << r.output;
  for (const auto& [path, content] : snapshot(out))
    EXPECT_EQ(content.find("// edited"), std::string::npos) << path;
}

// Not root: a read-only folder among the outputs stops the write at the first file; as root the
// same holds as an unprivileged user (setpriv).
TEST(HardeningCli, EmitIntoAReadOnlySubfolderChangesNothing) {
  const Scratch dir;
  const fs::path out = dir.path / "out";
  const std::string a = "k=64,n=48,g=4,lhs=f32,rhs=f32,out=f32,tm=16";
  ProcessResult r = cli({"emit", "--spec", a, "--out", out.string()});
  ASSERT_EQ(0, r.status) << r.output;
  for (const auto& e : fs::recursive_directory_iterator(out))
    if (e.is_regular_file()) std::ofstream(e.path(), std::ios::app) << "\n// edited\n";
  std::vector<std::string> prefix;
  if (is_root()) {
    if (run_process({"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "true"})
            .status != 0)
      GTEST_SKIP() << "setpriv cannot switch to uid 65534";
    ASSERT_EQ(0, chmod(dir.path.c_str(), 0755));
    for (const auto& e : fs::recursive_directory_iterator(out))
      ASSERT_EQ(0, lchown(e.path().c_str(), 65534, 65534));
    ASSERT_EQ(0, chown(out.c_str(), 65534, 65534));
    prefix = {"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"};
  }
  ASSERT_EQ(0, chmod((out / "cpp" / "gmmgen").c_str(), 0555));
  const auto before = snapshot(out);
  std::vector<std::string> argv = prefix;
  for (const std::string& s : {std::string(GMMGEN_CLI), std::string("emit"), std::string("--spec"),
                               a, std::string("--out"), out.string()})
    argv.push_back(s);
  r = run_process(argv);
  EXPECT_EQ(1, r.status) << r.output;
  EXPECT_NE(r.output.find("emit: cannot"), std::string::npos) << r.output;
  EXPECT_EQ(before, snapshot(out));
  chmod((out / "cpp" / "gmmgen").c_str(), 0755);
}

// ---- ISA families the host cannot run (item 9) -------------------------------------------------

// A kernel of a family the host cannot run is compiled but not run (running it would die of
// SIGILL); verify says so per kernel and exits 0 when the rest pass. GMMGEN_ASSUME_ISA caps the
// families verify treats as runnable, as on an older CPU.
TEST(HardeningCli, VerifySkipsFamiliesTheHostCannotRun) {
  const Scratch dir;  // the disk cache of the kernels that run
  const std::string cache = "GMMGEN_CACHE_DIR=" + (dir.path / "cache").string();
  ProcessResult r = run_process({"env", cache, "GMMGEN_ASSUME_ISA=avx2", GMMGEN_CLI, "verify",
                                 "--quick", "--spec", "k=8,n=8,g=2,lhs=f32,rhs=f32,isa=avx512",
                                 "--spec", "k=8,n=8,g=2,lhs=f32,rhs=f32,isa=avx512bf16", "--spec",
                                 "k=8,n=8,g=2,lhs=f32,rhs=f32,isa=generic"});
  EXPECT_EQ(0, r.status) << r.output;
  EXPECT_NE(r.output.find("skipped: host lacks avx512\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("skipped: host lacks avx512bf16\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("1 kernels verified, 0 mismatched, 2 compiled but not run"),
            std::string::npos)
      << r.output;
  // The cap never adds a family: generic caps everything but generic (and native).
  r = run_process({"env", cache, "GMMGEN_ASSUME_ISA=generic", GMMGEN_CLI, "verify", "--quick",
                   "--spec", "k=8,n=8,g=2,lhs=f32,rhs=f32,isa=avx2", "--spec",
                   "k=8,n=8,g=2,lhs=f32,rhs=f32"});
  EXPECT_EQ(0, r.status) << r.output;
  EXPECT_NE(r.output.find("skipped: host lacks avx2\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("1 kernels verified, 0 mismatched, 1 compiled but not run"),
            std::string::npos)
      << r.output;
  // A compile error of a skipped family is still an error.
  r = run_process({"env", cache, "GMMGEN_ASSUME_ISA=avx2", "GMMGEN_CXXFLAGS=--no-such-flag",
                   GMMGEN_CLI, "verify", "--spec", "k=8,n=8,g=2,isa=avx512"});
  EXPECT_NE(0, r.status) << r.output;
  EXPECT_NE(r.output.find("--no-such-flag"), std::string::npos) << r.output;
  // A bad value names the variable and the accepted ones.
  r = run_process({"env", cache, "GMMGEN_ASSUME_ISA=sse9", GMMGEN_CLI, "verify", "--spec",
                   "k=8,n=8,g=2,isa=avx2"});
  EXPECT_EQ(2, r.status) << r.output;
  EXPECT_NE(r.output.find("GMMGEN_ASSUME_ISA=sse9 is not one of: native, amx, avx512bf16"),
            std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace gmmgen
