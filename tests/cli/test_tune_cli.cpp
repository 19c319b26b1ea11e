// gmm-gen tune, run as a user runs it: a tiny sweep writes a table the runtime then uses, a CSV
// and a well-formed SVG; a repeated sweep compiles nothing; the budget stops a sweep; option
// errors name the option and the rule and write nothing.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <tuple>

#include "gmmgen/heuristics.h"
#include "gmmgen/platform.hpp"
#include "gmmgen/runtime.hpp"
#include "gmmgen/tuning/table.h"
#include "jit/toolchain.h"
#include "scratch.h"

namespace gmmgen {
namespace {

namespace fs = std::filesystem;

constexpr const char* kSpec = "op=gmm,lhs=f32,rhs=f32,out=f32,k=32,n=32,g=2";

class TuneCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = scratch_.path;
    fs::create_directories(dir_ / "out");
    setenv("GMMGEN_CACHE_DIR", (dir_ / "cache").c_str(), 1);
    unsetenv("GMMGEN_TUNING_DIR");
  }
  void TearDown() override { unsetenv("GMMGEN_TUNING_DIR"); }
  ProcessResult tune(std::vector<std::string> args) {
    args.insert(args.begin(), {GMMGEN_CLI, "tune"});
    return run_process(args);
  }
  static std::string read(const fs::path& p) { return testing::read_file(p); }
  testing::Scratch scratch_{"gmmgen_tune"};
  fs::path dir_;
};

// RFC 4180 fields of one CSV line.
std::vector<std::string> csv_fields(const std::string& line) {
  std::vector<std::string> out(1);
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted && c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
      out.back() += '"', ++i;
    } else if (c == '"') {
      quoted = !quoted;
    } else if (c == ',' && !quoted) {
      out.emplace_back();
    } else {
      out.back() += c;
    }
  }
  return out;
}

// Every element opened is closed, in order; the document is one <svg> element. (Scanned by
// hand: GCC 12's std::regex trips -Wmaybe-uninitialized under the sanitizer build's -O1.)
void expect_well_formed_svg(const std::string& svg) {
  ASSERT_EQ(0u, svg.find("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg "));
  std::vector<std::string> open;
  size_t elements = 0;
  const std::string rest = svg.substr(svg.find("<svg"));
  for (size_t at = rest.find('<'); at != std::string::npos; at = rest.find('<', at + 1)) {
    const size_t end = rest.find('>', at);
    ASSERT_NE(std::string::npos, end) << "an unterminated tag at " << at;
    const std::string tag = rest.substr(at + 1, end - at - 1);
    ASSERT_EQ(std::string::npos, tag.find('<')) << "'<' inside a tag: " << tag;
    const bool closing = !tag.empty() && tag[0] == '/';
    const bool self_closing = !tag.empty() && tag.back() == '/';
    const size_t name_begin = closing ? 1 : 0;
    size_t name_end = name_begin;
    while (name_end < tag.size() && (std::isalnum(static_cast<unsigned char>(tag[name_end])) ||
                                     tag[name_end] == ':' || tag[name_end] == '-'))
      ++name_end;
    const std::string name = tag.substr(name_begin, name_end - name_begin);
    ASSERT_FALSE(name.empty()) << "a tag without a name: <" << tag << ">";
    if (closing) {
      ASSERT_FALSE(open.empty()) << "</" << name << "> closes nothing";
      ASSERT_EQ(open.back(), name) << "</" << name << "> closes <" << open.back() << ">";
      open.pop_back();
      if (open.empty()) {  // the root closes last: only a newline follows
        ASSERT_EQ(rest.size(), end + 2);
      }
    } else if (!self_closing) {
      open.push_back(name);
    }
    ++elements;
  }
  EXPECT_TRUE(open.empty());
  EXPECT_GT(elements, 20u);
  // Text is escaped: every '&' starts an entity (&name;).
  for (size_t at = svg.find('&'); at != std::string::npos; at = svg.find('&', at + 1)) {
    size_t p = at + 1;
    while (p < svg.size() && std::islower(static_cast<unsigned char>(svg[p]))) ++p;
    EXPECT_TRUE(p > at + 1 && p < svg.size() && svg[p] == ';') << "a bare '&' at " << at;
  }
}

TEST_F(TuneCli, TinySweepWritesTableCsvSvgThatTheRuntimeUses) {
  const fs::path table = dir_ / "out" / "table.json", csv = dir_ / "out" / "s.csv",
                 svg = dir_ / "out" / "s.svg";
  const std::vector<std::string> args{"--spec",    kSpec,
                                      "--m",       "64",
                                      "--space",   "tm=16,32;tk=32;tn=32",
                                      "-j",        "2",
                                      "--threads", "1",
                                      "--reps",    "1",
                                      "--table",   table.string(),
                                      "--csv",     csv.string(),
                                      "--svg",     svg.string()};
  ProcessResult r = tune(args);
  ASSERT_EQ(0, r.status) << r.output;
  // Not a terminal: one line per variant, the heuristic's first.
  EXPECT_NE(r.output.find("[1/3] tm=512,tk=32,tn=32 (heuristic)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[3/3] tm="), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("32.0 rows/group (bucket [32, 64)); 3 candidates"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("top 3 of 3 timed"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("speed-up: over the heuristic's tm=512,tk=32,tn=32"), std::string::npos)
      << r.output;

  // The table: one entry for the problem and the bucket, the fastest of the three.
  const tuning::Table t = tuning::parse_table(read(table), table.string());
  ASSERT_EQ(1u, t.entries.size());
  const tuning::Entry& e = t.entries[0];
  const KernelSpec problem = parse_text(kSpec);
  EXPECT_TRUE(SameProblem{}(problem, e.spec));
  EXPECT_EQ((tuning::Bucket{32, 64}), e.rows_per_group);
  EXPECT_GT(e.gflops, 0);
  EXPECT_GT(e.baseline_gflops, 0);
  EXPECT_GE(e.gflops, e.baseline_gflops);
  EXPECT_EQ(std::string(to_string(host_isa())), t.device.isa);
  EXPECT_EQ(64, e.m);

  // The CSV: a header and one row per variant, all checked correct.
  std::istringstream lines(read(csv));
  std::string line;
  std::getline(lines, line);
  const std::vector<std::string> header = csv_fields(line);
  ASSERT_EQ(16u, header.size()) << line;
  EXPECT_EQ("problem", header[0]);
  int rows = 0;
  double best = 0;
  while (std::getline(lines, line)) {
    const auto f = csv_fields(line);
    ASSERT_EQ(header.size(), f.size()) << line;
    EXPECT_EQ(tuning::problem_text(problem), f[0]);
    EXPECT_EQ("ok", f[9]) << line;
    EXPECT_EQ("32", f[6]);
    best = std::max(best, std::stod(f[10]));
    ++rows;
  }
  EXPECT_EQ(3, rows);
  EXPECT_NEAR(best, e.gflops, 0.06);

  // The SVG: well formed, labelled, one winner, a colour scale.
  const std::string s = read(svg);
  expect_well_formed_svg(s);
  for (const char* text : {"tk = 32", "tm (rows per tile)", "tn (columns per tile)", "GFLOP/s",
                           "linearGradient", "class=\"scale\"", "class=\"heuristic\""})
    EXPECT_NE(s.find(text), std::string::npos) << text;
  EXPECT_NE(s.find("\u2605 "), std::string::npos);  // the winner's star
  size_t winners = 0;
  for (size_t p = s.find("class=\"winner\""); p != std::string::npos;
       p = s.find("class=\"winner\"", p + 1))
    ++winners;
  EXPECT_EQ(1u, winners);

  // A later call of the problem in the bucket uses the entry (and says so with GMMGEN_LOG).
  setenv("GMMGEN_TUNING_DIR", (dir_ / "out").c_str(), 1);
  RuntimeOptions o;
  o.log = true;
  ::testing::internal::CaptureStderr();
  Runtime rt(o);
  std::vector<float> lhs(64 * 32), rhs(2 * 32 * 32), out(64 * 32);
  const std::vector<int32_t> sizes{30, 34};
  const KernelSpec used = rt.gmm_spec(TensorView::matrix(lhs.data(), DType::kF32, 64, 32),
                                      TensorView::batch(rhs.data(), DType::kF32, 2, 32, 32), sizes,
                                      TensorView::matrix(out.data(), DType::kF32, 64, 32));
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(e.spec.tiling, used.tiling);
  EXPECT_NE(log.find("at 32.0 rows/group: " + std::string("tm=") +
                     std::to_string(e.spec.tiling.tm) + ",tk=32,tn=32 from " + table.string()),
            std::string::npos)
      << log;

  // Again: every kernel comes from the disk cache, and the table is merged (still one entry).
  r = tune(args);
  ASSERT_EQ(0, r.status) << r.output;
  EXPECT_EQ(std::string::npos, r.output.find("compiled")) << r.output;
  EXPECT_NE(r.output.find("(cached)"), std::string::npos) << r.output;
  EXPECT_EQ(1u, tuning::parse_table(read(table), "t").entries.size());

  // A budget of 1 s: the first batch (the heuristic's tiling and tm=128, a compile) is always
  // compiled and the heuristic's tiling timed; what would end past the budget does not run.
  r = tune({"--spec", kSpec, "--m", "64", "--space", "tm=16,32,64,128;tk=32;tn=32", "-j", "2",
            "--threads", "1", "--reps", "1", "--budget", "1", "--table", table.string()});
  ASSERT_EQ(0, r.status) << r.output;
  EXPECT_NE(r.output.find("stopped at the budget"), std::string::npos) << r.output;
  // "... of N timed (5 candidates)": fewer than 5 ran.
  const size_t timed = r.output.find(" timed (5 candidates)");
  ASSERT_NE(std::string::npos, timed) << r.output;
  const size_t of = r.output.rfind("of ", timed);
  ASSERT_NE(std::string::npos, of) << r.output;
  EXPECT_LT(std::stoi(r.output.substr(of + 3, timed - of - 3)), 5) << r.output;
  EXPECT_NE(r.output.find("[1/5] tm=512,tk=32,tn=32 (heuristic)"), std::string::npos) << r.output;
}

// A new user's sequence: tune a problem, then bench it. bench times the tuned tiling when the
// table is where the runtime reads tables, the heuristic's (the one tune compared with)
// otherwise, a spec's own tiling when it names one, and says which in its table and its JSON.
TEST_F(TuneCli, BenchTimesATunedProblemAtItsTunedTilingAndSaysWhereItCameFrom) {
  const fs::path table = dir_ / "out" / "table.json";
  ProcessResult r =
      tune({"--spec", kSpec, "--m", "64", "--dist", "tiny", "--space", "tm=16,32;tk=32;tn=32",
            "--threads", "1", "--reps", "1", "--table", table.string()});
  ASSERT_EQ(0, r.status) << r.output;
  const tuning::Entry e = tuning::parse_table(read(table), table.string()).entries.at(0);
  const std::string marker = "speed-up: over the heuristic's ";
  const size_t at = r.output.find(marker);
  ASSERT_NE(std::string::npos, at) << r.output;
  const std::string heuristic = r.output.substr(
      at + marker.size(), r.output.find(' ', at + marker.size()) - at - marker.size());

  const auto bench = [&](const std::string& spec) {
    const fs::path json = dir_ / "out" / "bench.json";
    fs::remove(json);
    ProcessResult b = run_process({GMMGEN_CLI, "bench", "--spec", spec, "--m", "64", "--dist",
                                   "tiny", "--threads", "1", "--reps", "1", "--baseline", "none",
                                   "--json", json.string()});
    EXPECT_EQ(0, b.status) << b.output;
    const auto row = nlohmann::json::parse(read(json))["rows"].at(0);
    const Tiling t{row["tiling"]["tm"], row["tiling"]["tk"], row["tiling"]["tn"]};
    return std::make_tuple(t, row["tiling_source"].get<std::string>(), b.output);
  };
  const auto text = [](const Tiling& t) {
    return "tm=" + std::to_string(t.tm) + ",tk=" + std::to_string(t.tk) +
           ",tn=" + std::to_string(t.tn);
  };

  // The table where the runtime reads tables: the tuned tiling, "table <file> entry 0".
  setenv("GMMGEN_TUNING_DIR", (dir_ / "out").c_str(), 1);
  auto [tuned, source, out] = bench(kSpec);
  EXPECT_EQ(e.spec.tiling, tuned);
  EXPECT_EQ(0u, source.rfind("table " + table.string() + " entry 0 (rows_per_group [", 0))
      << source;
  EXPECT_NE(out.find(std::to_string(tuned.tm) + "x32x32 table 1  ok"), std::string::npos) << out;
  EXPECT_NE(out.find("table 1: " + table.string() + " entry 0"), std::string::npos) << out;

  // No table: the heuristic's tiling, the one tune reported.
  unsetenv("GMMGEN_TUNING_DIR");
  auto [untuned, untuned_source, untuned_out] = bench(kSpec);
  EXPECT_EQ(heuristic, text(untuned)) << untuned_out;
  EXPECT_EQ("heuristic", untuned_source);

  // A spec that names its tiling keeps it, table or not.
  setenv("GMMGEN_TUNING_DIR", (dir_ / "out").c_str(), 1);
  auto [own, own_source, own_out] = bench(std::string(kSpec) + ",tm=8");
  EXPECT_EQ(8, own.tm) << own_out;
  EXPECT_EQ("override", own_source);
}

TEST_F(TuneCli, OptionErrorsNameTheOptionAndTheRuleAndWriteNothing) {
  const fs::path corrupt = dir_ / "out" / "corrupt.json";
  std::ofstream(corrupt) << "{\"version\": 1";
  const std::pair<std::vector<std::string>, std::string> cases[] = {
      {{"--space", "tm=16;tx=3"}, "--space 'tm=16;tx=3': key 'tx' is not one of tm, tk, tn"},
      {{"--space", "tm=16,abc"}, "tm value 'abc' is not an integer in [1, 8192]"},
      {{"--space", "tm=0"}, "tm value '0' is not an integer in [1, 8192]"},
      {{"--space", "tm=16;tm=32"}, "tm is given twice"},
      {{"--space", "tm"}, "'tm' is not KEY=V1,V2,..."},
      {{"--space", "tm=16;"}, "'' is not KEY=V1,V2,..."},
      {{"--isa", "sse9"}, "--isa"},
      {{"--m", "0"}, "--m=0 must be in [1, 2^31)"},
      {{"-j", "-1"}, "-j -1 must be in [1, 256]"},
      {{"-j", "0"}, "-j 0 must be in [1, 256]"},
      {{"--budget", "0"}, "--budget 0.0 must be a number of seconds > 0"},
      {{"--budget", "-5"}, "--budget -5.0 must be a number of seconds > 0"},
      {{"--reps", "0"}, "--reps 0 must be in [1, 1000]"},
      {{"--threads", "-2"}, "--threads -2 must be in [1, 4096]"},
      {{"--dist", "pareto"}, "--dist pareto is not one of: uniform, zipf, tiny, decode"},
      {{"--dist", "sizes:1,2,3"}, "3 sizes given, the spec has g=2"},
      {{"--csv", (dir_ / "missing" / "x.csv").string()}, "does not exist"},
      {{"--svg", (dir_ / "out").string()}, "is a folder; name a file"},
      {{"--table", corrupt.string()}, "exists and is not a tuning table"},
  };
  for (const auto& [extra, message] : cases) {
    std::vector<std::string> args{"--spec", kSpec};
    if (extra[0] != "--space") args.insert(args.end(), {"--space", "tm=16;tk=32;tn=32"});
    args.insert(args.end(), extra.begin(), extra.end());
    const ProcessResult r = tune(args);
    EXPECT_NE(0, r.status) << message;
    EXPECT_NE(r.output.find(message), std::string::npos) << "expected: " << message << "\n"
                                                         << r.output;
  }
  const std::pair<std::string, std::string> specs[] = {
      {"op=gmm,k=32,n=32,g=4,g_local=2", "g_local=2 < g=4: tune times unsharded problems only"},
      {"op=gmm,k=32,n=128,g=4,target=pallas,lhs=f32,rhs=f32",
       "target=pallas: tune times C++ kernels"},
      {"op=gmm,k=0,n=32,g=4", "k=0"},
  };
  for (const auto& [spec, message] : specs) {
    const ProcessResult r = tune({"--spec", spec, "--space", "tm=16"});
    EXPECT_NE(0, r.status) << spec;
    EXPECT_NE(r.output.find(message), std::string::npos) << "expected: " << message << "\n"
                                                         << r.output;
  }
  const ProcessResult help = tune({"--help"});
  EXPECT_EQ(0, help.status);
  EXPECT_NE(help.output.find("Example"), std::string::npos) << help.output;
  // Nothing compiled, nothing written.
  EXPECT_FALSE(fs::exists(dir_ / "cache"));
  EXPECT_EQ("{\"version\": 1", read(corrupt));
  size_t files = 0;
  for (const auto& f : fs::directory_iterator(dir_ / "out")) files += f.path() != corrupt;
  EXPECT_EQ(0u, files);
}

}  // namespace
}  // namespace gmmgen
