// KernelSpec: canonical forms, round trips, validation messages, hash and name.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "gmmgen/heuristics.h"
#include "gmmgen/naming.h"
#include "gmmgen/spec.h"

namespace gmmgen {
namespace {

KernelSpec sample() {
  return parse_text(
      "op=gmm,lhs=bf16,rhs=f16,out=bf16,k=2048,n=1408,g=64,g_local=8,tm=128,tk=256,tn=64,"
      "transpose_rhs=1,out_mode=accumulate,isa=avx2");
}

TEST(Spec, TextRoundTrip) {
  const KernelSpec s = sample();
  EXPECT_EQ(s, parse_text(to_text(s)));
  EXPECT_EQ(to_text(s), to_text(parse_text(to_text(s))));
  EXPECT_EQ(
      "op=gmm,lhs=bf16,rhs=f16,out=bf16,lhs_quant=none,rhs_quant=none,k=2048,n=1408,g=64,"
      "g_local=8,tm=128,tk=256,tn=64,transpose_rhs=1,lhs_layout=mk,out_mode=accumulate,"
      "target=cpp,isa=avx2",
      to_text(s));
}

TEST(Spec, JsonRoundTrip) {
  const KernelSpec s = sample();
  EXPECT_EQ(s, from_json(to_json(s)));
  EXPECT_EQ(to_json(s).dump(), to_json(from_json(to_json(s))).dump());
  EXPECT_EQ(s, from_json(nlohmann::ordered_json::parse(to_json(s).dump())));
}

TEST(Spec, KeyOrderAndDefaultsDoNotMatter) {
  const KernelSpec a = parse_text("k=64,n=32,g=4,op=gmm");
  const KernelSpec b = parse_text("op=gmm, g=4 ,n=32,k=64,g_local=4,out_mode=plain,target=cpp");
  EXPECT_EQ(a, b);
  EXPECT_EQ(spec_hash(a), spec_hash(b));
  EXPECT_EQ(4, a.g_local);
}

TEST(Spec, MissingTileSizesComeFromTheHeuristic) {
  const KernelSpec s = parse_text("k=64,n=32,g=4,tm=8");
  EXPECT_EQ(8, s.tiling.tm);
  EXPECT_EQ(64, s.tiling.tk);  // clipped to K
  EXPECT_EQ(32, s.tiling.tn);  // clipped to N
}

TEST(Spec, HashIsStableAndDistinguishesSpecs) {
  const KernelSpec s = sample();
  EXPECT_EQ(spec_hash(s), spec_hash(sample()));
  EXPECT_EQ(32u, spec_hash(s).size());
  KernelSpec t = s;
  t.tiling.tn = 128;
  EXPECT_NE(spec_hash(s), spec_hash(t));
  t = s;
  t.transpose_rhs = false;
  EXPECT_NE(spec_hash(s), spec_hash(t));
  EXPECT_NE(kernel_name(s), kernel_name(t));
}

TEST(Spec, NameIsReadableAndParses) {
  const KernelSpec s =
      parse_text("op=gmm,lhs=bf16,rhs=bf16,out=f32,k=2048,n=1408,g=64,tm=128,tk=128,tn=128");
  const std::string name = kernel_name(s);
  EXPECT_EQ("gmm_bf16xbf16_f32_k2048_n1408_g64_t128x128x128_" + spec_hash(s).substr(0, 8), name);
  for (const KernelSpec& x :
       {s, sample(),
        parse_text("op=gmm,lhs=f32,rhs=f32,out=f16,k=8,n=8,g=3,out_mode=existing_out,isa=generic"),
        parse_text("op=tgmm,lhs=f32,rhs=f32,out=f32,k=8,n=8,g=3,lhs_layout=km,transpose_rhs=1,"
                   "out_mode=accumulate,isa=avx512bf16")}) {
    const ParsedName p = parse_kernel_name(kernel_name(x));
    EXPECT_EQ(x, p.spec) << kernel_name(x);
    EXPECT_EQ(spec_hash(x).substr(0, 8), p.hash8);
  }
  // Specs without a kernel yet (no hash) still have names that parse back.
  for (const char* text :
       {"op=tgmm,lhs=f32,rhs=f32,out=f32,k=8,n=8,g=3,lhs_layout=km,target=pallas",
        "op=gmm,lhs=i8,rhs=i8,out=bf16,k=256,n=256,g=2,g_local=1,lhs_quant=channel,"
        "rhs_quant=block:128x128,isa=avx2",
        "op=gmm,lhs=f8e4m3,rhs=nf4,out=f16,k=256,n=256,g=2,lhs_quant=block:128,"
        "rhs_quant=tensor"}) {
    const KernelSpec x = parse_text(text);
    const ParsedName p = parse_kernel_name(name_stem(x) + "_0123abcd");
    EXPECT_EQ(x, p.spec) << name_stem(x);
    EXPECT_EQ("0123abcd", p.hash8);
  }
  EXPECT_EQ("tgmm_f32xf32_f32_k8_n8_g3_t128x8x8_km_pallas",
            name_stem(parse_text("op=tgmm,lhs=f32,rhs=f32,out=f32,k=8,n=8,g=3,lhs_layout=km,"
                                 "target=pallas")));
  for (const char* bad :
       {"gmm_bf16", "gmm_bf16xbf16_f32_k8_n8_g2_t8x8x8_bogus_12345678",
        "gmm_bf16xbf16_f32_n8_k8_g2_t8x8x8_12345678", "gmm_bf16xq_f32_k8_n8_g2_t8x8x8_12345678"})
    EXPECT_THROW(parse_kernel_name(bad), SpecError) << bad;
}

// Each invalid spec is rejected with a message naming the parameter and the rule.
TEST(Spec, ValidationNamesParameterAndRule) {
  struct Case {
    const char* text;
    const char* message;
  };
  const Case cases[] = {
      {"k=0,n=8,g=2", "k=0 must be in [1, 2147483647]"},
      {"k=8,n=-3,g=2", "n=-3 must be in [1,"},
      {"k=8,n=8,g=0", "g=0 must be in [1,"},
      {"k=8,n=8,g=4,g_local=5", "g_local=5 must be in [1, g=4]"},
      {"k=8,n=8,g=4,tm=0", "tm=0 must be in [1, 8192]"},
      {"k=8,n=8,g=4,tk=100000", "tk=100000 must be in [1, 8192]"},
      {"k=8192,n=8192,g=4,tm=8192,tn=8192", "bytes of scratch per thread"},  // tn <= N: no clamp
      {"k=8,n=8,g=4,out=i8", "out=i8 is not one of: f32, bf16, f16"},
      {"k=8,n=8,g=4,lhs=nf4,rhs=nf4", "lhs=nf4: nf4 and t2 are weight formats"},
      {"k=8,n=8,g=4,lhs=t2,rhs=t2", "lhs=t2: nf4 and t2 are weight formats"},
      {"k=8,n=8,g=4,lhs=i8,rhs=bf16,lhs_quant=channel", "integer activations pair only with"},
      {"k=8,n=8,g=4,lhs=i8,rhs=nf4,lhs_quant=channel,rhs_quant=channel",
       "integer activations pair only with integer weights"},
      {"k=8,n=8,g=4,op=tgmm,rhs=nf4,rhs_quant=channel", "rhs=nf4: tgmm takes activations"},
      // Codes that are not values need scales; values that are not codes take none.
      {"k=8,n=8,g=4,lhs=i8,rhs=i8,rhs_quant=channel", "lhs=i8 needs scales"},
      {"k=8,n=8,g=4,rhs=i4", "rhs=i4 needs scales"},
      {"k=8,n=8,g=4,rhs=nf4", "rhs=nf4 needs scales"},
      {"k=8,n=8,g=4,rhs=t2", "rhs=t2 needs scales"},
      {"k=8,n=8,g=4,lhs_quant=tensor", "lhs_quant=tensor: scales apply to quantized dtypes"},
      {"k=8,n=8,g=4,rhs=f32,rhs_quant=channel", "not rhs=f32"},
      // Block sizes: powers of two >= 16; 2-D blocks on gmm's weights only.
      {"k=64,n=8,g=4,lhs=f8e4m3,lhs_quant=block:24", "block size 24 must be a power of two"},
      {"k=64,n=8,g=4,lhs=f8e4m3,lhs_quant=block:8", "block size 8 must be a power of two in [16"},
      {"k=64,n=64,g=4,rhs=i8,rhs_quant=block:32x12", "block size 12 must be a power of two"},
      {"k=1024,n=128,g=4,lhs=f8e4m3,lhs_quant=block:128x128",
       "block:BxB (2-D blocks) is for gmm's rhs"},
      {"k=64,n=64,g=4,op=tgmm,rhs=f8e5m2,rhs_quant=block:32x32",
       "is for gmm's rhs (the weights) only"},
      {"k=8,n=8,g=4,lhs_layout=km", "lhs_layout=km applies to op=tgmm only"},
      {"k=8,n=8,g=4,op=tgmm,out_mode=existing_out", "out_mode=existing_out: tgmm writes every"},
      {"k=8,n=8,g=4,op=tgmm,out_mode=existing_out", "use out_mode=accumulate"},
      {"k=8,n=8,g=4,op=tgmm,target=pallas,lhs_layout=km,tm=64", "tm=64 must be a multiple of 128"},
      {"k=65536,n=65536,g=4,op=tgmm", "overflows the 2^31 element limit of one out operand"},
      // gmm's scratch for this tiling is about 1 MiB; tgmm's lhs chunk [tm][tk] adds 16 MiB.
      {"k=2048,n=8,g=4,op=tgmm,tm=2048,tk=2048,tn=8", "bytes of scratch per thread, above"},
      {"k=8,n=8,g=4,lhs=f16,target=pallas", "not supported yet for target=pallas: lhs=f16"},
      {"k=8,n=8,g=4,op=tgmm,lhs=i4,rhs=i4,lhs_quant=tensor,rhs_quant=tensor,target=pallas",
       "not supported yet for target=pallas: op=tgmm with lhs=i4"},
      {"k=65536,n=65536,g=4", "overflows"},
  };
  for (const auto& c : cases) {
    try {
      validate(parse_text(c.text));
      ADD_FAILURE() << c.text << " was accepted";
    } catch (const SpecError& e) {
      EXPECT_NE(std::string(e.what()).find(c.message), std::string::npos)
          << c.text << " -> '" << e.what() << "', expected '" << c.message << "'";
    }
  }
}

TEST(Spec, ParseErrorsNameTheKey) {
  const std::pair<const char*, const char*> cases[] = {
      {"k=8,n=8,g=4,bogus=1", "unknown spec key 'bogus'"},
      {"k=8,n=8,g=4,k=9", "spec key 'k' is given twice"},
      {"n=8,g=4", "spec key 'k' is required"},
      {"k=eight,n=8,g=4", "k=eight is not an integer"},
      {"k=8,n=8,g=4,lhs=f64", "lhs=f64 is not one of: f32, bf16"},
      {"k=8,n=8,g=4,transpose_rhs=yes", "transpose_rhs=yes is not a boolean"},
      {"k=8,n=8,g=4,rhs_quant=row", "rhs_quant=row is not one of"},
      {"k=8,n8,g=4", "spec item 'n8' is not of the form key=value"},
  };
  for (auto [text, message] : cases) {
    try {
      parse_text(text);
      ADD_FAILURE() << text << " was parsed";
    } catch (const SpecError& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(from_json(nlohmann::ordered_json::parse(R"({"k": 8, "n": 8, "g": 4, "tm": [1]})")),
               SpecError);
  EXPECT_THROW(from_json(nlohmann::ordered_json::parse(R"([1, 2])")), SpecError);
}

TEST(Spec, ValidSpecsPass) {
  for (const char* text :
       {"k=1,n=1,g=1", "k=4096,n=14336,g=8,lhs=bf16,rhs=bf16,out=bf16",
        "k=7,n=3,g=5,g_local=2,lhs=f16,rhs=f32,out=f16,tm=1,tk=1,tn=1,isa=generic",
        "op=tgmm,k=1,n=1,g=1", "k=2048,n=8,g=4,tm=2048,tk=2048,tn=8",
        "op=tgmm,k=7,n=3,g=5,g_local=2,lhs=f16,rhs=bf16,out=f16,tm=1,tk=1,tn=1,lhs_layout=km,"
        "transpose_rhs=1,out_mode=accumulate"})
    EXPECT_NO_THROW(validate(parse_text(text))) << text;
}

// tgmm's defaults, scratch and cost follow its own loop nest (heuristics.h).
TEST(Spec, TgmmHeuristics) {
  const KernelSpec s =
      parse_text("op=tgmm,lhs=bf16,rhs=f16,out=f32,k=1000,n=48,g=8,g_local=2,isa=avx2");
  EXPECT_EQ(256, s.tiling.tm);
  EXPECT_EQ(96, s.tiling.tk);
  EXPECT_EQ(48, s.tiling.tn);  // clipped to N
  // The f32 output tile [tk][tn'] (tn' = tn in whole 16-column avx2 register tiles), a chunk of
  // tm rows of lhs [tm][tk] and of rhs [tm][tn'], all f32, and a line saying which lhs rows it
  // holds.
  EXPECT_EQ(48, packed_cols(48, 16));
  EXPECT_EQ(64, packed_cols(48, 64));
  EXPECT_EQ(256, tgmm_a_rows(s, isa_family(Isa::kAvx2)));
  EXPECT_EQ((96 * 48 + 256 * 96 + 256 * 48 + 16) * 4, scratch_bytes(s));
  // On the AVX-512 families that copy f32 operands, lhs holds as many rows as fit in
  // kTgmmKeepABytes (all the rows of a tile of up to 682 rows at tk = 96); not on those that read
  // them in place, nor with bf16 pairs or quantized operands.
  const KernelSpec f32 =
      parse_text("op=tgmm,lhs=f32,rhs=f32,out=f32,k=1024,n=1408,g=8,isa=avx512vnni");
  EXPECT_EQ(96, f32.tiling.tk);
  EXPECT_EQ(kTgmmKeepABytes / (4 * 96), tgmm_a_rows(f32, isa_family(Isa::kAvx512Vnni)));
  EXPECT_EQ(682, tgmm_a_rows(f32, isa_family(Isa::kAvx512)));
  EXPECT_EQ((96 * 128 + 682 * 96 + 256 * 128 + 16) * 4, scratch_bytes(f32));
  EXPECT_EQ(256, tgmm_a_rows(f32, isa_family(Isa::kAvx512Bf16)));
  const KernelSpec bf16 = parse_text("op=tgmm,k=1024,n=1408,g=8,isa=avx512bf16");
  EXPECT_EQ(bf16.tiling.tm, tgmm_a_rows(bf16, isa_family(Isa::kAvx512Bf16)));
  // bf16 x bf16 without a pair dot product (avx512vnni widens it to f32) keeps A as f32 does.
  EXPECT_EQ(682, tgmm_a_rows(parse_text("op=tgmm,k=1024,n=1408,g=8,tk=96,isa=avx512vnni"),
                             isa_family(Isa::kAvx512Vnni)));
  const KernelSpec q = parse_text(
      "op=tgmm,lhs=i8,rhs=i8,lhs_quant=channel,rhs_quant=channel,k=1024,n=1408,g=8,isa=avx512vnni");
  EXPECT_EQ(q.tiling.tm, tgmm_a_rows(q, isa_family(Isa::kAvx512Vnni)));
  // isa=native bounds every family's.
  KernelSpec native = s;
  native.isa = Isa::kNative;
  for (const auto& f : isa_families()) EXPECT_LE(scratch_bytes(s, f), scratch_bytes(native));
  const Cost c = cost_estimate(s);
  EXPECT_EQ(2 * 1000 * 48, c.flops.per_m);
  EXPECT_EQ(0, c.flops.fixed);
  EXPECT_EQ(1000 * 2 + 48 * 2, c.bytes.per_m);  // a row of lhs and a row of rhs
  EXPECT_EQ(2 * 1000 * 48 * 4, c.bytes.fixed);  // out [G_local, K, N] in f32
  KernelSpec acc = s;
  acc.out_mode = OutMode::kAccumulate;  // existing_out is read too
  EXPECT_EQ(2 * c.bytes.fixed, cost_estimate(acc).bytes.fixed);
  EXPECT_EQ(c.bytes.per_m, cost_estimate(acc).bytes.per_m);
  // gmm's cost for the same shapes is unchanged by tgmm: out grows with M, rhs is fixed.
  KernelSpec fwd = s;
  fwd.op = Op::kGmm;
  EXPECT_EQ(1000 * 2 + 48 * 4, cost_estimate(fwd).bytes.per_m);
  EXPECT_EQ(2 * 1000 * 48 * 2, cost_estimate(fwd).bytes.fixed);
  // gmm: accumulators [tm][tn'], the packed rhs block [tk'][tn'] (tk' even), mr lhs rows [mr][tk].
  EXPECT_EQ((256 * 48 + 96 * 48 + 6 * 96) * 4, scratch_bytes(fwd));
}

}  // namespace
}  // namespace gmmgen
