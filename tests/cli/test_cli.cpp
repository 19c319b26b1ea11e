// The gmm-gen command line, run as a user runs it.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli.h"
#include "runtime_fixtures.h"
#include "scratch.h"

namespace gmmgen {
namespace {

namespace fs = std::filesystem;
using testing::cli;
using testing::Scratch;

TEST(Cli, EveryCommandHasHelpWithAnExample) {
  for (const char* cmd : {"emit", "describe", "list", "verify", "bench", "tune", "cache"}) {
    const ProcessResult r = cli({cmd, "--help"});
    EXPECT_EQ(0, r.status) << cmd;
    EXPECT_NE(r.output.find("Example"), std::string::npos) << cmd << ":\n" << r.output;
  }
  EXPECT_EQ(0, cli({"--help"}).status);
}

TEST(Cli, EmitWritesSourcesAndManifest) {
  const Scratch dir;
  const fs::path out = dir.path / "emit";
  const ProcessResult r = cli({"emit", "-k", "64", "-n", "48", "-g", "4", "--lhs", "f32", "--rhs",
                               "f32", "--out-dtype", "f32", "--tm", "16", "--out", out.string()});
  ASSERT_EQ(0, r.status) << r.output;
  EXPECT_TRUE(fs::exists(out / "manifest.json"));
  EXPECT_TRUE(fs::exists(out / "cpp/gmmgen/kernel_abi.h"));
  size_t cpp = 0;
  for (const auto& e : fs::directory_iterator(out / "cpp")) cpp += e.path().extension() == ".cpp";
  EXPECT_EQ(1u, cpp);
}

TEST(Cli, InvalidSpecExitsNonZeroNamesParameterWritesNothing) {
  const Scratch dir;
  const fs::path out = dir.path / "invalid";
  ProcessResult r = cli(
      {"emit", "--spec", "k=1000,n=64,g=4,lhs=i8,rhs=i8,rhs_quant=channel", "--out", out.string()});
  EXPECT_NE(0, r.status);
  EXPECT_NE(r.output.find("lhs=i8 needs scales"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(out));
  // One bad spec among good ones: still nothing written.
  r = cli(
      {"emit", "--spec", "k=64,n=64,g=4", "--spec", "k=64,n=64,g=4,tm=0", "--out", out.string()});
  EXPECT_NE(0, r.status);
  EXPECT_NE(r.output.find("tm=0 must be in"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(out));
  r = cli({"emit", "--spec", "k=64,n=64,g=4,colour=red", "--out", out.string()});
  EXPECT_NE(0, r.status);
  EXPECT_NE(r.output.find("unknown spec key 'colour'"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(out));
}

TEST(Cli, DescribeAndList) {
  ProcessResult r =
      cli({"describe", "--spec",
           "op=gmm,lhs=bf16,rhs=bf16,out=f32,k=2048,n=1408,g=64,tm=128,tk=128,tn=128"});
  ASSERT_EQ(0, r.status) << r.output;
  EXPECT_NE(r.output.find("gmm_bf16xbf16_f32_k2048_n1408_g64_t128x128x128_"), std::string::npos);
  EXPECT_NE(r.output.find("flops(M):   5767168 * M"), std::string::npos) << r.output;
  r = cli({"list", std::string(GMMGEN_SOURCE_DIR) + "/generated"});
  ASSERT_EQ(0, r.status) << r.output;
  EXPECT_NE(r.output.find("op=gmm,lhs=bf16"), std::string::npos);
}

// verify compiles with the system compiler and checks against the reference; each ISA flavour.
TEST(Cli, VerifyPassesForEveryIsa) {
  const ProcessResult r =
      cli({"GMMGEN_CACHE_DIR=" + testing::shared_test_cache().string()},
          {"verify", "--quick", "--spec",
           "k=40,n=24,g=5,lhs=bf16,rhs=bf16,out=bf16,tm=8,tk=16,tn=8", "--spec",
           "k=40,n=24,g=5,lhs=f16,rhs=f32,out=f32,tm=8,tk=16,tn=8,isa=generic,transpose_rhs=1",
           "--spec",
           "k=40,n=24,g=5,lhs=f32,rhs=f32,out=f16,tm=8,tk=16,tn=8,isa=avx2,out_mode=accumulate"});
  EXPECT_EQ(0, r.status) << r.output;
  EXPECT_NE(r.output.find("3 kernels verified, 0 mismatched"), std::string::npos) << r.output;
}

// A compile that cannot be done is reported with the compiler's command; exit status 1.
TEST(Cli, VerifyReportsCompilerErrors) {
  const Scratch dir;
  const std::string env = "GMMGEN_CACHE_DIR=" + (dir.path / "cache").string();
  ProcessResult r = cli({env, "GMMGEN_CXX=/nonexistent/c++"}, {"verify", "--spec", "k=8,n=8,g=2"});
  EXPECT_EQ(1, r.status);
  EXPECT_NE(r.output.find("/nonexistent/c++"), std::string::npos) << r.output;
  r = cli({env, "GMMGEN_CXXFLAGS=--no-such-flag"}, {"verify", "--spec", "k=8,n=8,g=2"});
  EXPECT_EQ(1, r.status);
  EXPECT_NE(r.output.find("--no-such-flag"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("FAILED"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace gmmgen
