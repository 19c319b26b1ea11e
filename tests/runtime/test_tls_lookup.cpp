// Where compiled kernels look up their per-thread scratch. A kernel's scratch is reached through
// a thread_local of its shared object, whose address comes from a call of __tls_get_addr; Clang 14
// assumes that call leaves the AVX-512 registers xmm16-31 intact and glibc 2.36 may clear them in
// it (the first call in a thread allocates the block), so a clang++-built kernel that kept values
// there across an inline lookup crashed. Kernels therefore call __tls_get_addr only from
// thread_scratch (see templates/cpp/common/scratch_canary.inc.mustache), a function that is not
// inlined and whose result Clang cannot fold back into its callers. This test compiles kernels of
// every path that has a scratch (float, bf16-pair and quantized gmm and tgmm; the amx tile items)
// with g++ and clang++ and reads the disassembly: every function that calls __tls_get_addr must be
// a thread_scratch.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "gmmgen/emit.h"
#include "gmmgen/spec.h"
#include "jit/toolchain.h"
#include "runtime_fixtures.h"

namespace gmmgen {
namespace {

namespace fs = std::filesystem;

// The functions (demangled names) of a shared object whose code calls __tls_get_addr.
std::set<std::string> functions_calling_tls_get_addr(const fs::path& so) {
  const ProcessResult r = run_process({"objdump", "-d", "-C", "--no-show-raw-insn", so.string()});
  EXPECT_EQ(0, r.status) << r.output.substr(0, 2000);
  std::set<std::string> callers;
  std::istringstream lines(r.output);
  std::string function;
  for (std::string line; std::getline(lines, line);) {
    // "0000000000001234 <name>:" starts a function; calls name their target in "<...>".
    if (!line.empty() && line.back() == ':' && line.find(" <") != std::string::npos)
      function = line.substr(line.find(" <") + 2, line.size() - line.find(" <") - 4);
    else if (line.find("call") != std::string::npos &&
             line.find("<__tls_get_addr") != std::string::npos)
      callers.insert(function);
  }
  return callers;
}

TEST(TlsLookup, ThreadScratchIsTheOnlyCallerOfTlsGetAddr) {
  const std::string objdump = testing::on_path("objdump");
  ASSERT_FALSE(objdump.empty()) << "objdump (binutils) is needed";
  std::vector<std::string> compilers;
  for (const char* c : {"g++", "clang++"})
    if (!testing::on_path(c).empty()) compilers.push_back(c);
  ASSERT_FALSE(compilers.empty());
  const std::vector<KernelSpec> specs = {
      parse_text("op=gmm,lhs=f32,rhs=f32,out=f32,k=64,n=48,g=3,tm=16,tk=32,tn=32,isa=avx512"),
      parse_text("op=gmm,lhs=bf16,rhs=bf16,out=f32,k=64,n=48,g=3,tm=16,tk=32,tn=32,isa=amx"),
      parse_text("op=gmm,lhs=bf16,rhs=i4,out=bf16,rhs_quant=block:32,k=64,n=48,g=3,tm=16,tk=32,"
                 "tn=32,isa=amx"),
      parse_text("op=gmm,lhs=i8,rhs=i8,out=f32,lhs_quant=channel,rhs_quant=channel,k=64,n=48,g=3,"
                 "tm=16,tk=32,tn=32,isa=avx2"),
      parse_text("op=tgmm,lhs=bf16,rhs=bf16,out=f32,k=64,n=48,g=3,tm=16,tk=32,tn=32,"
                 "isa=avx512bf16"),
      parse_text("op=tgmm,lhs=f32,rhs=f32,out=f32,k=64,n=48,g=3,tm=16,tk=32,tn=32,isa=generic"),
      parse_text("op=tgmm,lhs=f8e4m3,rhs=f8e5m2,out=f32,lhs_quant=block:16,rhs_quant=block:16,"
                 "k=64,n=48,g=3,tm=16,tk=32,tn=32,isa=avx512bf16"),
  };
  const fs::path dir = testing::make_private_dir("gmmgen_test_tls");
  ASSERT_FALSE(dir.empty());
  for (const auto& f : emit_set(specs, "tls")) {
    fs::create_directories((dir / f.path).parent_path());
    std::ofstream(dir / f.path) << f.content;
  }
  for (const std::string& cxx : compilers) {
    SCOPED_TRACE(cxx);
    CompilerConfig cc = default_compiler({});
    cc.cxx = cxx;
    const fs::path so = dir / (cxx + ".so");
    ASSERT_NO_THROW(compile_shared_object(cc, dir / "cpp" / "tls.cpp", dir / "cpp", so));
    const std::set<std::string> callers = functions_calling_tls_get_addr(so);
    // One lookup per scratch type: float and tile scratch in gmm, and so on; at least one.
    EXPECT_FALSE(callers.empty()) << "no kernel function calls __tls_get_addr: the test reads "
                                     "the disassembly wrongly";
    for (const std::string& f : callers)
      EXPECT_NE(f.find("thread_scratch<"), std::string::npos)
          << f << " calls __tls_get_addr itself: a thread_local lookup was inlined there";
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
}

}  // namespace
}  // namespace gmmgen
