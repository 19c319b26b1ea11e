// The C++ target's tiling rules (cpu_tiling_rules): every rule is documented, none is dead, and
// heuristic_tiling names the rules it applied.
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>
#include <set>
#include <string>

#include "gmmgen/heuristics.h"
#include "gmmgen/spec.h"
#include "scratch.h"

namespace gmmgen {
namespace {

namespace fs = std::filesystem;

// Each rule's measurements are a section of docs/internals/tiling-rules.md under its name, and
// each section but the default tiling's is a rule.
TEST(TilingRules, EveryRuleHasADocsSectionAndEverySectionARule) {
  std::set<std::string> rules, sections;
  for (const TilingRule& r : cpu_tiling_rules()) rules.emplace(r.name);
  const std::string doc =
      testing::read_file(fs::path(GMMGEN_SOURCE_DIR) / "docs/internals/tiling-rules.md");
  const std::regex heading(R"(\n## ([^\n]+))");
  for (auto it = std::sregex_iterator(doc.begin(), doc.end(), heading);
       it != std::sregex_iterator(); ++it)
    if ((*it)[1] != "Default tiling") sections.insert((*it)[1]);
  EXPECT_EQ(rules, sections);
}

// Over a grid of problems (op, operands, layout, family, rows per group, width), every rule holds
// for some problem, and each problem's heuristic tiling is valid for it.
TEST(TilingRules, EveryRuleHoldsForSomeProblem) {
  std::set<std::string> seen;
  const std::pair<DType, DType> operands[] = {
      {DType::kF32, DType::kF32}, {DType::kBF16, DType::kBF16},     {DType::kBF16, DType::kI4},
      {DType::kF32, DType::kI8},  {DType::kF8E4M3, DType::kF8E5M2}, {DType::kF16, DType::kF32},
      {DType::kI8, DType::kI4},   {DType::kI8, DType::kI8}};
  for (const Op op : {Op::kGmm, Op::kTgmm})
    for (const auto& [lhs, rhs] : operands)
      for (const bool transposed : {false, true})
        for (const Isa isa : {Isa::kAmx, Isa::kAvx512Bf16, Isa::kAvx512Vnni, Isa::kAvx512,
                              Isa::kAvx2, Isa::kGeneric})
          for (const double rows : {0.0, 16.0, 512.0})
            for (const int64_t n : {8, 1408}) {
              KernelSpec s;
              s.op = op, s.lhs = lhs, s.rhs = rhs, s.out = DType::kF32;
              s.k = 1024, s.n = n, s.g = s.g_local = 8;
              s.transpose_rhs = transposed, s.isa = isa;
              if (is_integer(lhs) || lhs == DType::kF8E4M3) s.lhs_quant.kind = QuantKind::kTensor;
              if (is_integer(rhs) || rhs == DType::kF8E5M2) s.rhs_quant.kind = QuantKind::kChannel;
              s.tiling = default_tiling(s);
              try {
                validate(s);
              } catch (const SpecError&) {
                continue;  // not a kernel gmm-gen makes (e.g. a quantized pairing it lacks)
              }
              std::vector<std::string_view> applied;
              s.tiling = heuristic_tiling(s, rows, Isa::kNative, &applied);
              EXPECT_NO_THROW(validate(s)) << to_text(s);
              seen.insert(applied.begin(), applied.end());
            }
  std::set<std::string> rules;
  for (const TilingRule& r : cpu_tiling_rules()) rules.emplace(r.name);
  EXPECT_EQ(rules, seen);
}

// The rules a problem gets, in the table's order.
TEST(TilingRules, HeuristicNamesTheRulesItApplied) {
  KernelSpec s = parse_text("op=gmm,lhs=f32,rhs=f32,out=f32,k=4096,n=512,g=128,isa=avx2");
  std::vector<std::string_view> applied;
  EXPECT_EQ((Tiling{512, 64, 256}), heuristic_tiling(s, 16, Isa::kNative, &applied));
  EXPECT_EQ((std::vector<std::string_view>{"gmm-rows", "gmm-small", "gmm-avx2-small",
                                           "gmm-avx2-f32-kn-small"}),
            applied);
  // bf16 weights on avx2 keep the small groups' tk=256.
  applied.clear();
  s.lhs = s.rhs = DType::kBF16;
  EXPECT_EQ((Tiling{512, 256, 256}), heuristic_tiling(s, 16, Isa::kNative, &applied));
  EXPECT_EQ((std::vector<std::string_view>{"gmm-rows", "gmm-small", "gmm-avx2-small"}), applied);
  s.lhs = s.rhs = DType::kF32;
  applied.clear();
  s.isa = Isa::kNative;
  EXPECT_EQ((Tiling{512, 1024, 64}), heuristic_tiling(s, 100, Isa::kAvx512, &applied));
  EXPECT_EQ((std::vector<std::string_view>{"gmm-rows", "gmm-vector-float-large"}), applied);
  // Integer codes on both sides take the integer dot product's rule where there is one.
  applied.clear();
  s = parse_text(
      "op=gmm,lhs=i8,rhs=i8,out=f32,lhs_quant=block:32,rhs_quant=block:32,k=1024,n=1408,g=8,"
      "isa=avx2");
  EXPECT_EQ((Tiling{512, 256, 128}), heuristic_tiling(s, 512, Isa::kNative, &applied));
  EXPECT_EQ((std::vector<std::string_view>{"gmm-rows", "gmm-int-large"}), applied);
  s.isa = Isa::kAvx512Bf16;  // vpdpbusd, k-blocks of all of K up to 1024
  applied.clear();
  EXPECT_EQ((Tiling{512, 1024, 128}), heuristic_tiling(s, 512, Isa::kNative, &applied));
  EXPECT_EQ((std::vector<std::string_view>{"gmm-rows", "gmm-int-large", "gmm-avx512bf16-int-deep"}),
            applied);
  s.transpose_rhs = true;  // [N, K] weights: the same rules
  applied.clear();
  EXPECT_EQ((Tiling{512, 1024, 128}), heuristic_tiling(s, 512, Isa::kNative, &applied));
  EXPECT_EQ((std::vector<std::string_view>{"gmm-rows", "gmm-int-large", "gmm-avx512bf16-int-deep"}),
            applied);
  s.isa = Isa::kAvx512Vnni;  // the same vpdpbusd code, not measured deeper
  applied.clear();
  EXPECT_EQ((Tiling{512, 256, 128}), heuristic_tiling(s, 512, Isa::kNative, &applied));
  EXPECT_EQ((std::vector<std::string_view>{"gmm-rows", "gmm-int-large"}), applied);
  s.isa = Isa::kAvx512Bf16;
  applied.clear();  // small groups: narrower items than other small groups', deeper k-blocks
  EXPECT_EQ((Tiling{512, 256, 128}), heuristic_tiling(s, 16, Isa::kNative, &applied));
  EXPECT_EQ((std::vector<std::string_view>{"gmm-rows", "gmm-small", "gmm-int-nk-small"}), applied);
  s.rhs = DType::kI4;  // i4 weights too
  applied.clear();
  EXPECT_EQ((Tiling{512, 256, 128}), heuristic_tiling(s, 16, Isa::kNative, &applied));
  EXPECT_EQ((std::vector<std::string_view>{"gmm-rows", "gmm-small", "gmm-int-nk-small"}), applied);
  s.isa = Isa::kAvx512Vnni;  // the same vpdpbusd code
  applied.clear();
  EXPECT_EQ((Tiling{512, 256, 128}), heuristic_tiling(s, 16, Isa::kNative, &applied));
  EXPECT_EQ((std::vector<std::string_view>{"gmm-rows", "gmm-small", "gmm-int-nk-small"}), applied);
  s.rhs = DType::kI8;
  s.isa = Isa::kAvx2;  // not on avx2
  EXPECT_EQ((Tiling{512, 256, 256}), heuristic_tiling(s, 16, Isa::kNative, nullptr));
  s.transpose_rhs = false;
  s.isa = Isa::kAmx;  // AMX tiles (tdpbssd): wider items, k-blocks kept at 128
  applied.clear();
  EXPECT_EQ((Tiling{512, 128, 128}), heuristic_tiling(s, 512, Isa::kNative, &applied));
  EXPECT_EQ((std::vector<std::string_view>{"gmm-rows", "gmm-amx-int-large"}), applied);
  applied.clear();  // small groups keep the small-group rule's columns
  EXPECT_EQ((Tiling{512, 128, 256}), heuristic_tiling(s, 16, Isa::kNative, &applied));
  EXPECT_EQ((std::vector<std::string_view>{"gmm-rows", "gmm-small"}), applied);
  s.transpose_rhs = true;  // [N, K] weights: not measured faster
  applied.clear();
  EXPECT_EQ((Tiling{512, 128, 64}), heuristic_tiling(s, 512, Isa::kNative, &applied));
  EXPECT_EQ((std::vector<std::string_view>{"gmm-rows"}), applied);
  s.transpose_rhs = false;
  s.lhs_quant = s.rhs_quant = Quant{QuantKind::kChannel};  // P over all K: deeper k-blocks
  applied.clear();
  EXPECT_EQ((Tiling{512, 1024, 128}), heuristic_tiling(s, 512, Isa::kNative, &applied));
  EXPECT_EQ((std::vector<std::string_view>{"gmm-rows", "gmm-amx-int-large", "gmm-amx-int-whole-k"}),
            applied);
  s.lhs_quant = s.rhs_quant = Quant{QuantKind::kBlock, 32};
  s.isa = Isa::kAvx512;  // no integer dot product: codes are decoded to f32
  applied.clear();
  EXPECT_EQ((Tiling{512, 128, 64}), heuristic_tiling(s, 512, Isa::kNative, &applied));
  EXPECT_EQ((std::vector<std::string_view>{"gmm-rows"}), applied);
  // f32 activations by quantized weights, small groups: shallow k-blocks, items of 512 columns
  // where that leaves two per group, of 256 where the weights are narrower; not on avx2.
  s = parse_text("op=gmm,lhs=f32,rhs=i8,rhs_quant=channel,out=f32,k=2048,n=2048,g=32,isa=amx");
  applied.clear();
  EXPECT_EQ((Tiling{512, 64, 512}), heuristic_tiling(s, 16, Isa::kNative, &applied));
  EXPECT_EQ((std::vector<std::string_view>{"gmm-rows", "gmm-small", "gmm-f32-quantized-small"}),
            applied);
  s.n = 768;
  EXPECT_EQ((Tiling{512, 64, 384}), heuristic_tiling(s, 16, Isa::kNative, nullptr));
  s.n = 512;
  s.isa = Isa::kAvx512;
  EXPECT_EQ((Tiling{512, 64, 256}), heuristic_tiling(s, 16, Isa::kNative, nullptr));
  s.n = 100;
  EXPECT_EQ((Tiling{512, 64, 100}), heuristic_tiling(s, 16, Isa::kNative, nullptr));
  s.n = 2048;
  EXPECT_EQ((Tiling{512, 128, 64}), heuristic_tiling(s, 512, Isa::kNative, nullptr));
  s.isa = Isa::kAvx2;
  EXPECT_EQ((Tiling{512, 256, 256}), heuristic_tiling(s, 16, Isa::kNative, nullptr));
  // bf16 x 4-bit and 8-bit weights on AMX tiles: small groups take shallower, wider items;
  // 2-bit and [N, K] weights do not.
  s = parse_text("op=gmm,lhs=bf16,rhs=i4,rhs_quant=block:128,out=f32,k=2048,n=2048,g=32,isa=amx");
  applied.clear();
  EXPECT_EQ((Tiling{512, 128, 512}), heuristic_tiling(s, 16, Isa::kNative, &applied));
  EXPECT_EQ((std::vector<std::string_view>{"gmm-rows", "gmm-small", "gmm-amx-bf16-quantized",
                                           "gmm-amx-bf16-codes-small"}),
            applied);
  applied.clear();
  EXPECT_EQ((Tiling{512, 256, 64}), heuristic_tiling(s, 512, Isa::kNative, &applied));
  EXPECT_EQ((std::vector<std::string_view>{"gmm-rows", "gmm-amx-bf16-quantized"}), applied);
  s.rhs = DType::kF8E4M3;
  EXPECT_EQ((Tiling{512, 128, 512}), heuristic_tiling(s, 16, Isa::kNative, nullptr));
  s.rhs = DType::kT2;
  EXPECT_EQ((Tiling{512, 256, 256}), heuristic_tiling(s, 16, Isa::kNative, nullptr));
  s.rhs = DType::kI8;
  s.transpose_rhs = true;
  EXPECT_EQ((Tiling{512, 256, 256}), heuristic_tiling(s, 16, Isa::kNative, nullptr));
  // On avx512bf16 (vdpbf16ps) small groups' [K, N] codes of any kind take k-blocks of 256; [N, K]
  // ones and larger groups keep 128.
  s.isa = Isa::kAvx512Bf16;
  s.rhs = DType::kNF4;
  s.rhs_quant = Quant{QuantKind::kBlock, 64};
  s.transpose_rhs = false;
  applied.clear();
  EXPECT_EQ((Tiling{512, 256, 256}), heuristic_tiling(s, 16, Isa::kNative, &applied));
  EXPECT_EQ((std::vector<std::string_view>{"gmm-rows", "gmm-small", "gmm-bf16-quantized-small"}),
            applied);
  s.transpose_rhs = true;
  EXPECT_EQ((Tiling{512, 128, 256}), heuristic_tiling(s, 16, Isa::kNative, nullptr));
  s.transpose_rhs = false;
  EXPECT_EQ((Tiling{512, 128, 64}), heuristic_tiling(s, 512, Isa::kNative, nullptr));
}

}  // namespace
}  // namespace gmmgen
