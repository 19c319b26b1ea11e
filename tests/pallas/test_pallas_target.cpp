// The Pallas target without JAX: spec rules (Mosaic's block rule, VMEM, dtypes, the VJP tilings),
// the canonical forms and names of the VJP tilings, and what a module and its manifest entry
// hold. tests/pallas/*.py compile the modules and check their signatures and metadata builder;
// check_pallas.py runs them where JAX is installed.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "gmmgen/emit.h"
#include "gmmgen/heuristics.h"
#include "gmmgen/naming.h"
#include "gmmgen/spec.h"
#include "gmmgen/templates.h"
#include "render.h"

namespace gmmgen {
namespace {

size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// Each invalid Pallas spec is rejected with a message naming the parameter and the rule.
TEST(PallasSpec, ValidationNamesParameterAndRule) {
  const std::pair<const char*, const char*> cases[] = {
      {"k=200,n=128,g=4,tk=100,target=pallas",
       "tk=100 must be a multiple of 128 or equal to k=200"},
      {"k=256,n=200,g=4,tn=64,target=pallas", "tn=64 must be a multiple of 128 or equal to n=200"},
      {"k=256,n=256,g=4,tm=12,target=pallas", "tm=12 must be a multiple of 8 (target=pallas"},
      {"k=256,n=256,g=4,op=tgmm,lhs_layout=km,tm=64,target=pallas",
       "tm=64 must be a multiple of 128 (target=pallas: Mosaic blocks are made of whole 8x128 "
       "tiles; tm is the minor dimension of the lhs [K, M] blocks)"},
      // The backward kernels' own problems: dlhs contracts over N and writes K columns.
      {"k=256,n=200,g=4,dlhs_tiling=128x100x128,target=pallas",
       "dlhs_tiling tk=100 must be a multiple of 128 or equal to n=200"},
      {"k=200,n=256,g=4,dlhs_tiling=128x128x100,target=pallas",
       "dlhs_tiling tn=100 must be a multiple of 128 or equal to k=200"},
      {"k=256,n=256,g=4,drhs_tiling=0x128x128,target=pallas",
       "drhs_tiling tm=0 must be in [1, 8192]"},
      {"k=256,n=256,g=4,dlhs_tiling=128x-8x128,target=pallas",
       "dlhs_tiling tk=-8 must be in [1, 8192]"},
      {"k=256,n=256,g=4,drhs_tiling=12x128x128,target=pallas",
       "drhs_tiling tm=12 must be a multiple of 8"},
      {"k=8192,n=8192,g=2,tm=4096,tk=4096,tn=4096,target=pallas",
       "tiling=4096x4096x4096: the gmm kernel needs"},
      {"k=8192,n=8192,g=2,drhs_tiling=4096x4096x4096,target=pallas",
       "bytes of VMEM (double-buffered blocks and the f32 accumulator), above the 16777216 of "
       "tpu=any (every TPU generation"},
      // 48 MiB: past v4's VMEM (and every generation's, for tpu=any), within v5p's.
      {"k=8192,n=8192,g=2,tm=1024,tk=2048,tn=2048,target=pallas",
       "above the 16777216 of tpu=any (every TPU generation (v4's VMEM and MXU, the smallest)); "
       "use smaller tiles, or a generation with more VMEM: tpu=v5e (128 MiB), tpu=v5p (64 MiB), "
       "tpu=v6e (128 MiB)"},
      {"k=8192,n=8192,g=2,tm=1024,tk=2048,tn=2048,tpu=v4,target=pallas",
       "the gmm kernel needs 50331648 bytes of VMEM (double-buffered blocks and the f32 "
       "accumulator), above the 16777216 of tpu=v4 (TPU v4)"},
      {"k=8192,n=8192,g=2,tm=4096,tk=4096,tn=4096,tpu=v6e,target=pallas",
       "above the 134217728 of tpu=v6e (TPU v6e); no TPU generation has that much"},
      {"k=256,n=256,g=4,tpu=v5e", "tpu=v5e applies to target=pallas only"},
      {"k=256,n=256,g=4,tpu=v7,target=pallas", "tpu=v7 is not one of: any, v4, v5e, v5p, v6e"},
      {"k=256,n=256,g=4,lhs=f16,target=pallas", "not supported yet for target=pallas: lhs=f16"},
      {"k=256,n=256,g=4,out=f16,target=pallas", "not supported yet for target=pallas: out=f16"},
      {"op=tgmm,k=256,n=256,g=4,lhs=i4,rhs=i4,lhs_quant=block:128,rhs_quant=block:128,"
       "target=pallas",
       "not supported yet for target=pallas: op=tgmm with lhs=i4 (the Pallas tgmm reads codes "
       "of whole bytes: f8e4m3, f8e5m2, i8)"},
      // A quantized tgmm's m-tile holds whole scale blocks of rows, or lies inside one.
      {"op=tgmm,k=256,n=256,g=4,lhs=i8,rhs=i8,lhs_quant=block:32,rhs_quant=channel,tm=24,"
       "target=pallas",
       "tm=24 must be a multiple or a divisor of the scale block 32 (target=pallas: a tgmm "
       "m-tile holds whole blocks of rows or lies in one)"},
      {"k=256,n=256,g=4,rhs=f16,target=pallas", "not supported yet for target=pallas: rhs=f16"},
      // Packed codes: blocks of whole bytes of 128-lane tiles; k-tiles of whole scale blocks.
      {"k=512,n=512,g=4,rhs=nf4,rhs_quant=block:64,tn=128,target=pallas",
       "tn=128 must be a multiple of 256 or equal to n=512 (target=pallas: Mosaic blocks are "
       "made of whole 8x128 tiles; tn / codes per byte is the minor dimension of the packed rhs "
       "blocks)"},
      {"k=512,n=256,g=4,rhs=i4,rhs_quant=channel,transpose_rhs=1,tk=128,target=pallas",
       "tk=128 must be a multiple of 256 or equal to k=512"},
      {"k=512,n=256,g=4,lhs=f8e4m3,rhs=f8e4m3,lhs_quant=block:256,rhs_quant=block:256x128,"
       "tk=128,target=pallas",
       "tk=128 must be a multiple of the scale block 256 (lhs_quant=block:256) or cover k=512 "
       "(target=pallas applies the scales once per block of a k-tile)"},
      // Frozen quantized weights: a dlhs kernel (dequantizing whole scale blocks along K), no
      // drhs; a quantized lhs of sub-byte codes: no VJP; fp8 blocks for training: the dlhs
      // kernel's k-tiles (over N) hold whole blocks of dout's codes.
      {"k=256,n=256,g=4,rhs=i8,rhs_quant=channel,drhs_tiling=128x128x128,target=pallas",
       "drhs_tiling=128x128x128 applies to op=gmm with target=pallas and trained weights (float, "
       "or whole-byte codes on both sides) only"},
      {"k=256,n=256,g=4,lhs=i4,rhs=i4,lhs_quant=channel,rhs_quant=channel,"
       "dlhs_tiling=128x128x128,target=pallas",
       "dlhs_tiling=128x128x128 applies to op=gmm with target=pallas and a VJP (a float lhs, or "
       "whole-byte codes on both sides) only"},
      {"k=512,n=512,g=4,lhs=f8e4m3,rhs=f8e4m3,lhs_quant=block:128,rhs_quant=block:128x256,"
       "dlhs_tiling=128x128x128,target=pallas",
       "dlhs_tiling tk=128 must be a multiple of the scale block 256"},
      {"k=512,n=256,g=4,rhs=nf4,rhs_quant=block:128,dlhs_tiling=128x256x64,target=pallas",
       "dlhs_tiling tn=64 must be a multiple of 128 or equal to k=512"},
      {"k=512,n=256,g=4,rhs=i8,rhs_quant=block:256,dlhs_tiling=128x256x128,target=pallas",
       "dlhs_tiling tn=128 must be a multiple of the scale block 256 (rhs_quant=block:256) or "
       "cover k=512 (target=pallas: the dlhs kernel dequantizes the weights' blocks)"},
      {"k=256,n=256,g=4,isa=avx2,target=pallas", "isa=avx2 applies to target=cpp only"},
      // The VJP tilings belong to Pallas gmm modules only.
      {"k=256,n=256,g=4,dlhs_tiling=128x128x128",
       "dlhs_tiling=128x128x128 applies to op=gmm with target=pallas and a VJP (a float lhs, or "
       "whole-byte codes on both sides) only"},
      {"k=256,n=256,g=4,op=tgmm,target=pallas,drhs_tiling=128x128x128",
       "drhs_tiling=128x128x128 applies to op=gmm with target=pallas and trained weights (float, "
       "or whole-byte codes on both sides) only"},
  };
  for (const auto& [text, message] : cases) {
    try {
      validate(parse_text(text));
      ADD_FAILURE() << text << " was accepted";
    } catch (const SpecError& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos)
          << text << " -> '" << e.what() << "', expected '" << message << "'";
    }
  }
  for (const char* text : {"k=8,n=8,g=4,dlhs_tiling=1x2", "k=8,n=8,g=4,drhs_tiling=axbxc",
                           "k=8,n=8,g=4,dlhs_tiling=8x8x8x8", "k=8,n=8,g=4,dlhs_tiling=8x8x"}) {
    try {
      parse_text(text);
      ADD_FAILURE() << text << " was accepted";
    } catch (const SpecError& e) {
      EXPECT_NE(std::string(e.what()).find("is not a tiling TMxTKxTN"), std::string::npos)
          << e.what();
    }
  }
  // Partial blocks are fine: K and N need not be multiples of the tiles, and a tile may be the
  // whole dimension.
  for (const char* text :
       {"k=200,n=129,g=4,tm=8,target=pallas", "k=200,n=129,g=4,tk=200,tn=129,target=pallas",
        "k=64,n=40,g=4,tk=256,target=pallas", "k=256,n=256,g=4,drhs_tiling=8x128x128,target=pallas",
        "k=200,n=129,g=8,g_local=3,op=tgmm,lhs_layout=km,transpose_rhs=1,out_mode=accumulate,"
        "target=pallas",
        "k=200,n=129,g=4,lhs=f32,rhs=bf16,out=bf16,out_mode=existing_out,target=pallas"})
    EXPECT_NO_THROW(validate(parse_text(text))) << text;
}

// Defaults: megablox's (128, 128, 128) cut to K and N, for the forward and each backward kernel
// in its own terms (dlhs: K = N, N = K).
TEST(PallasSpec, DefaultTilingsComeFromTheTpuHeuristic) {
  const KernelSpec s = parse_text("k=96,n=300,g=4,target=pallas");
  EXPECT_EQ((Tiling{128, 96, 128}), s.tiling);
  EXPECT_EQ((Tiling{128, 128, 96}), s.dlhs_tiling);
  EXPECT_EQ((Tiling{128, 96, 128}), s.drhs_tiling);
  EXPECT_EQ(s.tiling, default_tiling(s));
  // The C++ target's defaults and canonical text are untouched: no VJP tilings.
  const KernelSpec c = parse_text("k=96,n=300,g=4");
  EXPECT_EQ((Tiling{0, 0, 0}), c.dlhs_tiling);
  EXPECT_EQ(std::string::npos, to_text(c).find("dlhs_tiling"));
  EXPECT_FALSE(to_json(c).contains("drhs_tiling"));
  EXPECT_NE(c.tiling, s.tiling);
}

// tpu= picks the generation: its MXU width sets the default tk and tn, its VMEM the limit a
// kernel's footprint must fit; a footprint past Mosaic's default scoped limit asks for the
// generation's VMEM. The field exists for Pallas specs only and names say it when it is set.
TEST(PallasSpec, TpuGenerationSetsTilesAndVmemLimit) {
  const KernelSpec v6 = parse_text("k=1024,n=200,g=4,tpu=v6e,target=pallas");
  EXPECT_EQ((Tiling{128, 256, 200}), v6.tiling);
  EXPECT_EQ((Tiling{128, 200, 256}), v6.dlhs_tiling);
  EXPECT_EQ((Tiling{128, 256, 200}), v6.drhs_tiling);
  EXPECT_EQ((Tiling{128, 128, 128}), parse_text("k=1024,n=256,g=4,tpu=v5p,target=pallas").tiling);
  EXPECT_NE(std::string::npos, to_text(v6).find(",isa=native,tpu=v6e")) << to_text(v6);
  EXPECT_EQ("v6e", to_json(v6)["tpu"]);
  EXPECT_EQ(v6, parse_text(to_text(v6)));
  EXPECT_EQ(v6, from_json(to_json(v6)));
  EXPECT_EQ("gmm_bf16xbf16_f32_k1024_n200_g4_t128x256x200_pallas_v6e", name_stem(v6));
  EXPECT_EQ(v6, parse_kernel_name(kernel_name(v6)).spec);
  // The C++ target has no such field: its text, JSON and hashes are unchanged.
  const KernelSpec c = parse_text("k=96,n=300,g=4");
  EXPECT_EQ(std::string::npos, to_text(c).find("tpu"));
  EXPECT_FALSE(to_json(c).contains("tpu"));

  // 48 MiB of blocks and accumulator: within v5p's 64 MiB, which the module asks Mosaic for.
  const KernelSpec big = parse_text(
      "k=8192,n=8192,g=2,tm=1024,tk=2048,tn=2048,tpu=v5p,"
      "dlhs_tiling=128x128x128,drhs_tiling=128x128x128,"
      "target=pallas");
  EXPECT_EQ(int64_t{48} << 20, pallas_vmem_bytes(big));
  EXPECT_EQ(int64_t{64} << 20, pallas_vmem_limit(big));
  const auto files = emit_set({big});
  const std::string& py = files[0].content;
  EXPECT_NE(std::string::npos, py.find("TPU = \"v5p\""));
  EXPECT_EQ(1u, count_of(py, "vmem_limit_bytes=67108864,"));
  EXPECT_EQ(2u, count_of(py, "vmem_limit_bytes=None,"));  // the backward kernels' 128-tiles
  const auto k = nlohmann::json::parse(files[1].content)["kernels"][0];
  EXPECT_EQ(int64_t{64} << 20, k["pallas_calls"]["gmm"]["vmem_limit_bytes"].get<int64_t>());
  EXPECT_EQ(0, k["pallas_calls"]["dlhs"]["vmem_limit_bytes"].get<int64_t>());
  EXPECT_EQ((nlohmann::json{{"generation", "v5p"}, {"vmem_bytes", 64 << 20}, {"mxu", 128}}),
            k["tpu"]);
}

TEST(PallasSpec, VjpTilingsRoundTripThroughEveryForm) {
  const KernelSpec d = parse_text("k=256,n=384,g=8,target=pallas,transpose_rhs=1");
  const KernelSpec s = parse_text(
      "k=256,n=384,g=8,target=pallas,transpose_rhs=1,dlhs_tiling=64x384x256,"
      "drhs_tiling=256x128x384");
  EXPECT_EQ((Tiling{64, 384, 256}), s.dlhs_tiling);
  EXPECT_NE(
      std::string::npos,
      to_text(s).find(",tn=128,dlhs_tiling=64x384x256,drhs_tiling=256x128x384,transpose_rhs=1"))
      << to_text(s);
  EXPECT_EQ(s, parse_text(to_text(s)));
  EXPECT_EQ(s, from_json(to_json(s)));
  EXPECT_EQ("64x384x256", to_json(s)["dlhs_tiling"]);
  // Names carry a VJP tiling only when it is not the default, and parse back either way.
  EXPECT_EQ(std::string::npos, name_stem(d).find("_dl"));
  EXPECT_EQ("gmm_bf16xbf16_f32_k256_n384_g8_t128x128x128_dl64x384x256_dr256x128x384_tr_pallas",
            name_stem(s));
  EXPECT_EQ(s, parse_kernel_name(kernel_name(s)).spec);
  EXPECT_EQ(d, parse_kernel_name(kernel_name(d)).spec);
  EXPECT_NE(spec_hash(s), spec_hash(d));
  // JSON specs: a string TMxTKxTN.
  EXPECT_EQ(s, from_json(nlohmann::ordered_json::parse(
                   R"({"k": 256, "n": 384, "g": 8, "target": "pallas", "transpose_rhs": true,
                       "dlhs_tiling": "64x384x256", "drhs_tiling": "256x128x384"})")));
  EXPECT_THROW(
      from_json(nlohmann::ordered_json::parse(
          R"({"k": 256, "n": 384, "g": 8, "target": "pallas", "dlhs_tiling": [64, 384, 256]})")),
      SpecError);
}

// A gmm module: one .py with the forward, dlhs and drhs kernels, each pallas_call with a cost
// estimate from the manifest's cost model; the manifest lists the file and each call.
TEST(PallasEmit, GmmModuleAndManifest) {
  const KernelSpec s = parse_text(
      "op=gmm,lhs=bf16,rhs=bf16,out=f32,k=512,n=768,g=16,g_local=4,tm=64,tk=256,tn=128,"
      "dlhs_tiling=64x384x256,target=pallas,transpose_rhs=1,out_mode=accumulate");
  const auto files = emit_set({s});
  ASSERT_EQ(2u, files.size());
  const std::string name = kernel_name(s);
  EXPECT_EQ("pallas/" + name + ".py", files[0].path);
  const std::string& py = files[0].content;
  EXPECT_EQ(0u, py.find("# Generated by gmm-gen " + std::string(generator_version()) +
                        " from template pallas/gmm.py.mustache. Do not edit.\n"));
  EXPECT_NE(std::string::npos, py.find("SPEC = \"" + to_text(s) + "\""));
  EXPECT_NE(std::string::npos, py.find("TILING = (64, 256, 128, 64, 384, 256, 128, 128, 128)"));
  EXPECT_NE(std::string::npos, py.find("TRANSPOSE_RHS = True"));
  EXPECT_NE(std::string::npos, py.find("OUT_MODE = \"accumulate\""));
  // Two kernel bodies (gmm, tgmm), each pallas_call with its cost estimate; three configs.
  EXPECT_EQ(2u, count_of(py, "pl.pallas_call("));
  EXPECT_EQ(2u, count_of(py, "cost_estimate=kernel.cost(m),"));
  for (const char* def :
       {"def make_group_metadata(", "def gmm(", "def tgmm(", "def differentiable_gmm(",
        "_GMM = _Kernel(", "_DLHS = _Kernel(", "_DRHS = _Kernel("})
    EXPECT_EQ(1u, count_of(py, def)) << def;
  // The backward kernels in their own terms: dlhs reads dout (f32) and rhs read transposed.
  const Cost fwd = cost_estimate(s);
  KernelSpec dlhs = s;
  dlhs.lhs = DType::kF32;
  dlhs.out = DType::kBF16;
  dlhs.k = 768;
  dlhs.n = 512;
  dlhs.transpose_rhs = false;
  dlhs.out_mode = OutMode::kPlain;
  const Cost dl = cost_estimate(dlhs);
  const std::string dlhs_cfg = py.substr(py.find("_DLHS = _Kernel("), 600);
  for (const std::string& line : std::initializer_list<std::string>{
           "k=768,", "n=512,", "lhs_dtype=jnp.float32,", "rhs_dtype=jnp.bfloat16,",
           "out_dtype=jnp.bfloat16,", "tm=64,", "tk=384,", "tn=256,", "transposed=False,",
           "out_mode=\"plain\",", "flops_per_m=" + std::to_string(dl.flops.per_m) + ",",
           "bytes_per_m=" + std::to_string(dl.bytes.per_m) + ","})
    EXPECT_NE(std::string::npos, dlhs_cfg.find(line)) << line << "\n" << dlhs_cfg;
  const std::string drhs_cfg = py.substr(py.find("_DRHS = _Kernel("), 600);
  for (const char* line : {"op=\"tgmm\",", "lhs_dtype=jnp.bfloat16,", "rhs_dtype=jnp.float32,",
                           "out_dtype=jnp.bfloat16,", "transposed=True,", "lhs_km=False,"})
    EXPECT_NE(std::string::npos, drhs_cfg.find(line)) << line << "\n" << drhs_cfg;

  const auto manifest = nlohmann::json::parse(files[1].content);
  const auto& k = manifest["kernels"][0];
  EXPECT_EQ(name, k["name"]);
  EXPECT_EQ("pallas", k["target"]);
  EXPECT_EQ(nlohmann::json::array({"pallas/" + name + ".py"}), k["files"]);
  EXPECT_EQ("pallas/gmm.py.mustache", k["template"]);
  EXPECT_EQ(fwd.flops.per_m, k["cost"]["flops"]["per_m"].get<int64_t>());
  EXPECT_EQ(fwd.bytes.fixed, k["cost"]["bytes"]["fixed"].get<int64_t>());
  EXPECT_EQ(dl.flops.per_m, k["pallas_calls"]["dlhs"]["cost"]["flops"]["per_m"].get<int64_t>());
  EXPECT_EQ(384, k["pallas_calls"]["dlhs"]["tile"]["tk"].get<int64_t>());
  EXPECT_EQ(3u, k["pallas_calls"].size());
  EXPECT_GT(k["footprint"]["scratch_bytes_per_thread"].get<int64_t>(), 0);
  EXPECT_LE(k["footprint"]["vmem_bytes"].get<int64_t>(), kTpuScopedVmemBytes);
  EXPECT_EQ(0, k["pallas_calls"]["gmm"]["vmem_limit_bytes"].get<int64_t>());
  EXPECT_EQ((nlohmann::json{{"generation", "any"}, {"vmem_bytes", 16 << 20}, {"mxu", 128}}),
            k["tpu"]);
  EXPECT_NE(std::string::npos, py.find("TPU = \"any\""));
  EXPECT_EQ(3u, count_of(py, "vmem_limit_bytes=None,"));
  EXPECT_EQ(files.size(), emit_set({s}).size());
  EXPECT_EQ(py, emit_set({s})[0].content);  // same spec, same bytes
}

// A quantized gmm module takes codes and f32 scales; default tiles hold whole bytes of packed
// codes and whole scale blocks; sub-byte codes carry their levels, rendered from the generator's
// own table of code values. Frozen quantized weights (a float lhs) give a differentiable gmm
// with a dequantizing dlhs kernel; a quantized lhs gives the forward only.
TEST(PallasEmit, QuantizedGmmModule) {
  const KernelSpec nf4 = parse_text("k=512,n=768,g=8,rhs=nf4,rhs_quant=block:64,target=pallas");
  EXPECT_EQ((Tiling{128, 128, 256}), nf4.tiling);
  // dlhs contracts over N, along which the codes are packed: k-tiles of 256 codes.
  EXPECT_EQ((Tiling{128, 256, 128}), nf4.dlhs_tiling);
  EXPECT_EQ((Tiling{0, 0, 0}), nf4.drhs_tiling);
  EXPECT_NE(std::string::npos, to_text(nf4).find("dlhs_tiling=128x256x128,transpose_rhs"));
  EXPECT_EQ((Tiling{128, 128, 256}),
            parse_text("k=512,n=768,g=8,rhs=i8,rhs_quant=block:256,target=pallas").dlhs_tiling);
  EXPECT_EQ((Tiling{128, 256, 128}),
            parse_text("k=512,n=768,g=8,lhs=f8e4m3,rhs=f8e4m3,lhs_quant=block:256,"
                       "rhs_quant=block:256x128,target=pallas")
                .tiling);
  EXPECT_EQ(
      (Tiling{128, 200, 128}),
      parse_text("k=200,n=768,g=8,rhs=i4,rhs_quant=channel,transpose_rhs=1,target=pallas").tiling);
  const auto files = emit_set({nf4});
  const std::string& py = files[0].content;
  for (const char* text :
       {"__all__ = [\"gmm\", \"differentiable_gmm\", \"make_group_metadata\"]",
        "TILING = (128, 128, 256, 128, 256, 128)", "rhs_dequant=True,", "    lhs_scales=None,\n",
        "    rhs_scales=None,\n", "scale_block=64,", "rhs_per_byte=2,", "rhs_dtype=jnp.uint8,",
        "lhs_levels=None,", "rhs_levels=(-1, -0.6953125, -0.5234375,", "product=\"bf16\","})
    EXPECT_NE(std::string::npos, py.find(text)) << text;
  for (const char* text : {"def tgmm(", "_DRHS = _Kernel("})
    EXPECT_EQ(std::string::npos, py.find(text)) << text;
  const auto k = nlohmann::json::parse(files[1].content)["kernels"][0];
  EXPECT_EQ(nlohmann::json::array({"gmm", "differentiable_gmm", "make_group_metadata"}),
            k["exports"]);
  EXPECT_EQ(2u, k["pallas_calls"].size());
  // Integer codes on both sides: exact int32 products; whole bytes: the module quantizes float
  // operands for training, its VJP through the dequantized operands (dlhs dequantizes the
  // weights in VMEM, drhs is an f32 tgmm).
  const std::string i8 =
      emit_set({parse_text("k=512,n=768,g=8,lhs=i8,rhs=i8,lhs_quant=channel,"
                           "rhs_quant=channel,target=pallas")})[0]
          .content;
  for (const char* text :
       {"product=\"int\",", "scale_block=0,", "def differentiable_gmm(", "def quantize_lhs(",
        "rhs_dequant=True,", "lhs_dtype=jnp.float32,",
        "__all__ = [\"gmm\", \"differentiable_gmm\", \"quantize_lhs\", \"quantize_rhs\", "
        "\"make_group_metadata\"]"})
    EXPECT_NE(std::string::npos, i8.find(text)) << text;
  // fp8 blocks: dout's e5m2 codes in blocks of the weights' N-block, a quantized tgmm.
  const std::string fp8 =
      emit_set({parse_text("k=512,n=768,g=8,lhs=f8e4m3,rhs=f8e4m3,lhs_quant=block:128,"
                           "rhs_quant=block:128x128,target=pallas")})[0]
          .content;
  for (const char* text : {"lhs_dtype=jnp.float8_e5m2,", "rhs_dtype=jnp.float8_e5m2,",
                           "_quantize(d, jnp.float8_e5m2, (1, _DLHS.lhs_block))"})
    EXPECT_NE(std::string::npos, fp8.find(text)) << text;
  // Sub-byte activations: the forward only.
  const std::string i4 =
      emit_set({parse_text("k=512,n=768,g=8,lhs=i4,rhs=i4,lhs_quant=channel,"
                           "rhs_quant=channel,target=pallas")})[0]
          .content;
  EXPECT_NE(std::string::npos, i4.find("__all__ = [\"gmm\", \"make_group_metadata\"]"));
  EXPECT_EQ(std::string::npos, i4.find("def differentiable_gmm("));
}

// A tgmm module carries the tgmm kernel and the metadata builder only; its hash covers the
// Pallas templates it is rendered from, not the C++ ones.
TEST(PallasEmit, TgmmModuleAndTheTemplatesItUses) {
  const KernelSpec s =
      parse_text("op=tgmm,lhs=bf16,rhs=bf16,out=f32,k=512,n=768,g=8,lhs_layout=km,target=pallas");
  Renderer r;
  const auto files = target_of(s.target).render(s, {kernel_name(s), spec_hash(s)}, r);
  ASSERT_EQ(1u, files.size());
  const std::string& py = files[0].content;
  EXPECT_EQ(1u, count_of(py, "pl.pallas_call("));
  EXPECT_EQ(0u, count_of(py, "def gmm("));
  EXPECT_EQ(0u, count_of(py, "differentiable_gmm"));
  EXPECT_EQ(1u, count_of(py, "def tgmm("));
  EXPECT_NE(std::string::npos, py.find("lhs_km=True,"));
  EXPECT_NE(std::string::npos, py.find("TILING = (128, 128, 128)"));
  for (const char* path : {"pallas/tgmm.py.mustache", "pallas/common.inc.mustache",
                           "pallas/metadata.inc.mustache", "pallas/tgmm_kernel.inc.mustache"})
    EXPECT_TRUE(r.used().count(path)) << path;
  for (const auto& path : r.used()) EXPECT_FALSE(path.starts_with("cpp/")) << path;
  EXPECT_FALSE(r.used().count("pallas/gmm_kernel.inc.mustache"));
  // Bundles hold C++ kernels.
  EXPECT_THROW(emit_set({s}, "bundle"), SpecError);
}

}  // namespace
}  // namespace gmmgen
