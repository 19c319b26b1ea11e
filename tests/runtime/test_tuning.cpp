// Tuning tables (docs/tuning.md): the format (parse, write, merge, match, buckets), where the
// runtime finds tables and in which order, tables it must ignore, and dispatch through a table
// entry.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "gmmgen/heuristics.h"
#include "gmmgen/platform.hpp"
#include "gmmgen/runtime.hpp"
#include "gmmgen/tuning/table.h"
#include "gmmgen/verify/distributions.h"
#include "gmmgen/verify/reference.h"
#include "scratch.h"
#include "tuning/tables.h"

namespace gmmgen {
namespace {

namespace fs = std::filesystem;
using tuning::Bucket;
using tuning::Table;
using tuning::TableError;

KernelSpec problem(int64_t k, int64_t n, int64_t g, Op op = Op::kGmm) {
  KernelSpec s;
  s.op = op;
  s.lhs = s.rhs = s.out = DType::kF32;
  s.k = k, s.n = n, s.g = s.g_local = g;
  s.tiling = default_tiling(s);
  return s;
}

tuning::Entry entry(KernelSpec s, Tiling t, Bucket b, double gflops = 10, double base = 8) {
  s.tiling = t;
  tuning::Entry e;
  e.spec = s;
  e.rows_per_group = b;
  e.gflops = gflops, e.baseline_gflops = base;
  return e;
}

Table table_of(std::vector<tuning::Entry> entries) {
  Table t;
  t.device = {"Test CPU", std::string(to_string(host_isa())), "g++ test"};
  t.entries = std::move(entries);
  return t;
}

TEST(TuningTable, WritesAndReadsBack) {
  KernelSpec tr = problem(64, 48, 4);
  tr.transpose_rhs = true;
  tr.isa = Isa::kGeneric;
  KernelSpec tg = problem(32, 16, 8, Op::kTgmm);
  tg.lhs_layout = LhsLayout::kKM;
  tg.out_mode = OutMode::kAccumulate;
  const Table t =
      table_of({entry(tr, {16, 32, 16}, {16, 32}, 123.45, 100.04),
                entry(tg, {64, 32, 16}, {512, std::numeric_limits<double>::infinity()})});
  const std::string text = tuning::dump_table(t);
  EXPECT_NE(text.find("\"rows_per_group\": [\n        512,\n        null"), std::string::npos)
      << text;
  EXPECT_NE(text.find("\"isa\": \"generic\""), std::string::npos) << text;
  const Table back = tuning::parse_table(text, "t.json");
  EXPECT_EQ(t.device, back.device);
  ASSERT_EQ(2u, back.entries.size());
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(t.entries[i].spec, back.entries[i].spec) << i;
    EXPECT_EQ(t.entries[i].rows_per_group, back.entries[i].rows_per_group) << i;
  }
  EXPECT_DOUBLE_EQ(123.5, back.entries[0].gflops);  // one decimal is written
  EXPECT_DOUBLE_EQ(100.0, back.entries[0].baseline_gflops);
  // The problem is written with problem fields only: no tiling or ISA keys inside it.
  const auto j = nlohmann::json::parse(text);
  for (const auto& e : j["entries"])
    for (const char* key : {"tm", "tk", "tn", "isa", "target"})
      EXPECT_FALSE(e["problem"].contains(key)) << key;
  EXPECT_EQ(tuning::dump_table(back), text);
}

TEST(TuningTable, MatchesProblemAndBucketOnly) {
  const KernelSpec a = problem(64, 48, 4);
  KernelSpec a_t = a;
  a_t.transpose_rhs = true;
  const Table t = table_of({entry(a, {16, 32, 16}, {16, 32}), entry(a, {32, 64, 48}, {32, 64}),
                            entry(a_t, {8, 8, 8}, {0, 1e9})});
  KernelSpec call = a;
  call.tiling = {1, 2, 3};  // the call's tiling and ISA play no part
  call.isa = Isa::kGeneric;
  ASSERT_NE(nullptr, tuning::match(t, call, 16.0));
  EXPECT_EQ((Tiling{16, 32, 16}), tuning::match(t, call, 16.0)->spec.tiling);
  EXPECT_EQ((Tiling{16, 32, 16}), tuning::match(t, call, 31.99)->spec.tiling);
  EXPECT_EQ((Tiling{32, 64, 48}), tuning::match(t, call, 32.0)->spec.tiling);  // [lo, hi)
  EXPECT_EQ(nullptr, tuning::match(t, call, 15.9));
  EXPECT_EQ(nullptr, tuning::match(t, call, 64.0));
  EXPECT_EQ((Tiling{8, 8, 8}), tuning::match(t, a_t, 3)->spec.tiling);
  EXPECT_EQ(nullptr, tuning::match(t, problem(64, 48, 8), 16.0));  // another G
  EXPECT_EQ(nullptr, tuning::match(t, problem(64, 48, 4, Op::kTgmm), 16.0));
}

TEST(TuningTable, MergeReplacesOverlappingEntriesOfTheSameProblem) {
  const KernelSpec a = problem(64, 48, 4), b = problem(128, 48, 4);
  Table into = table_of({entry(a, {16, 32, 16}, {16, 32}), entry(a, {32, 32, 16}, {32, 64}),
                         entry(b, {64, 64, 16}, {16, 32})});
  Table from = table_of({entry(a, {128, 64, 48}, {16, 32}, 99, 50)});
  from.device.compiler = "clang++ test";
  tuning::merge(into, from);
  ASSERT_EQ(3u, into.entries.size());
  EXPECT_EQ("clang++ test", into.device.compiler);
  EXPECT_EQ((Tiling{128, 64, 48}), tuning::match(into, a, 20)->spec.tiling);
  EXPECT_EQ((Tiling{32, 32, 16}), tuning::match(into, a, 40)->spec.tiling);  // kept
  EXPECT_EQ((Tiling{64, 64, 16}), tuning::match(into, b, 20)->spec.tiling);  // another problem
  // A wider bucket replaces every entry it overlaps.
  tuning::merge(into, table_of({entry(a, {8, 8, 16}, {0, 1000})}));
  ASSERT_EQ(2u, into.entries.size());
  EXPECT_EQ((Tiling{8, 8, 16}), tuning::match(into, a, 40)->spec.tiling);
}

TEST(TuningTable, BucketsAndRowsPerGroup) {
  EXPECT_EQ((Bucket{0, 1}), tuning::bucket_of(0));
  EXPECT_EQ((Bucket{0, 1}), tuning::bucket_of(0.5));
  EXPECT_EQ((Bucket{1, 2}), tuning::bucket_of(1));
  EXPECT_EQ((Bucket{16, 32}), tuning::bucket_of(16));
  EXPECT_EQ((Bucket{16, 32}), tuning::bucket_of(31.999));
  EXPECT_EQ((Bucket{512, 1024}), tuning::bucket_of(512));
  EXPECT_EQ("[16, 32)", tuning::to_string(Bucket{16, 32}));
  EXPECT_EQ("[0, inf)", tuning::to_string(Bucket{}));
  const std::vector<int32_t> sizes{10, 0, 30, 20};
  EXPECT_DOUBLE_EQ(15.0, tuning::rows_per_group(sizes, 0, 4));
  EXPECT_DOUBLE_EQ(25.0, tuning::rows_per_group(sizes, 2, 2));  // the active groups only
  EXPECT_DOUBLE_EQ(0.0, tuning::rows_per_group(sizes, 1, 1));
  // Arguments the kernel will reject never make it read out of bounds.
  EXPECT_DOUBLE_EQ(10.0, tuning::rows_per_group(sizes, 3, 2));
  EXPECT_DOUBLE_EQ(0.0, tuning::rows_per_group(sizes, -5, 2));
  EXPECT_DOUBLE_EQ(0.0, tuning::rows_per_group(sizes, 9, 2));
  EXPECT_DOUBLE_EQ(10.0, tuning::rows_per_group(std::vector<int32_t>{-7, 20}, 0, 2));
  EXPECT_DOUBLE_EQ(0.0, tuning::rows_per_group(sizes, 0, 0));
}

// The untuned tiling follows the rows per group of a call: gmm's n-blocks (and on avx2 its
// k-blocks) grow when each weight byte serves fewer than 64 rows (clamped to K and N), float
// operands of larger groups take k-blocks of up to 1024 on the vector families, tgmm's
// k-blocks deepen for a narrow output, and every choice is a valid spec and fits the kernels'
// scratch limit.
TEST(Heuristic, FollowsRowsPerGroupAndStaysValid) {
  KernelSpec s3 = problem(4096, 512, 128), s1 = problem(1024, 1408, 8);
  s3.isa = Isa::kAvx512Bf16;
  EXPECT_EQ((Tiling{512, 128, 256}), heuristic_tiling(s3, 16));
  EXPECT_EQ((Tiling{512, 128, 256}), heuristic_tiling(s3, 63.9));
  // The ISA family: 256-bit vectors (avx2) take other k-blocks for small groups (f32 [K, N]
  // weights 64, others 256); native is the host's family.
  KernelSpec s3_avx2 = s3;
  s3_avx2.isa = Isa::kAvx2;
  EXPECT_EQ((Tiling{512, 64, 256}), heuristic_tiling(s3_avx2, 16));
  EXPECT_EQ((Tiling{512, 1024, 64}), heuristic_tiling(s3_avx2, 100));
  KernelSpec s3_avx2_bf16 = s3_avx2;
  s3_avx2_bf16.lhs = s3_avx2_bf16.rhs = DType::kBF16;
  EXPECT_EQ((Tiling{512, 256, 256}), heuristic_tiling(s3_avx2_bf16, 16));
  // On amx, f32 [K, N] weights of small groups take whole rows (up to 2048 columns, while the
  // groups' n-tiles number at least 16) in shallow k-blocks; quantized weights with f32
  // activations k-blocks of 64 and items of 512 columns; [N, K] weights and bf16 keep the choice
  // of the other families.
  KernelSpec s3_amx = s3;
  s3_amx.isa = Isa::kAmx;
  EXPECT_EQ((Tiling{512, 32, 512}), heuristic_tiling(s3_amx, 16));
  EXPECT_EQ((Tiling{512, 1024, 128}), heuristic_tiling(s3_amx, 64));
  KernelSpec s4_amx = problem(2048, 2048, 32);
  s4_amx.isa = Isa::kAmx;
  EXPECT_EQ((Tiling{512, 32, 2048}), heuristic_tiling(s4_amx, 16));
  s4_amx.g = s4_amx.g_local = 4;  // 16 items of 512 columns
  EXPECT_EQ((Tiling{512, 32, 512}), heuristic_tiling(s4_amx, 16));
  s4_amx.g_local = 1;  // never narrower than before
  EXPECT_EQ((Tiling{512, 32, 256}), heuristic_tiling(s4_amx, 16));
  s4_amx.transpose_rhs = true;
  EXPECT_EQ((Tiling{512, 128, 256}), heuristic_tiling(s4_amx, 16));
  s4_amx.transpose_rhs = false, s4_amx.rhs = DType::kI8;  // quantized weights
  s4_amx.rhs_quant.kind = QuantKind::kChannel;
  EXPECT_EQ((Tiling{512, 64, 512}), heuristic_tiling(s4_amx, 16));
  EXPECT_EQ((Tiling{512, 1024, 128}), heuristic_tiling(s4_amx, 100));
  s4_amx.transpose_rhs = false, s4_amx.lhs = s4_amx.rhs = DType::kBF16;
  EXPECT_EQ((Tiling{512, 128, 256}), heuristic_tiling(s4_amx, 16));
  KernelSpec s3_native = s3;
  s3_native.isa = Isa::kNative;
  s3.isa = host_isa();
  EXPECT_EQ(heuristic_tiling(s3, 16), heuristic_tiling(s3_native, 16));
  EXPECT_EQ(heuristic_tiling(s3, 64), heuristic_tiling(s3_native, 64));
  s3.isa = s1.isa = Isa::kAvx512Bf16;
  // Float operands of larger groups on the vector families: k-blocks of up to 1024 (all of K at
  // S1); quantized weights and the generic family keep the default.
  EXPECT_EQ((Tiling{512, 1024, 64}), heuristic_tiling(s3, 64));
  EXPECT_EQ((Tiling{512, 1024, 64}), heuristic_tiling(s1, 512));
  EXPECT_EQ((Tiling{512, 1024, 64}), heuristic_tiling(s1, 0));  // unknown: the large-group choice
  KernelSpec s1_i8 = s1;
  s1_i8.rhs = DType::kI8, s1_i8.rhs_quant.kind = QuantKind::kChannel;
  EXPECT_EQ((Tiling{512, 128, 64}), heuristic_tiling(s1_i8, 512));
  KernelSpec s1_generic = s1;
  s1_generic.isa = Isa::kGeneric;
  EXPECT_EQ((Tiling{512, 128, 64}), heuristic_tiling(s1_generic, 512));
  // On amx, f32 lhs of larger groups is read in whole rows (tk up to 1024) by 128 columns.
  s3.isa = s1.isa = Isa::kAmx;
  EXPECT_EQ((Tiling{512, 1024, 128}), heuristic_tiling(s3, 64));
  EXPECT_EQ((Tiling{512, 1024, 128}), heuristic_tiling(s1, 512));
  EXPECT_EQ((Tiling{512, 1024, 128}), heuristic_tiling(s1, 0));
  // bf16 x bf16 on amx tiles, larger groups: items as wide as 1 MiB of packed weights allows
  // (K x tn bf16), between one and four register tiles.
  s1.lhs = s1.rhs = DType::kBF16;
  EXPECT_EQ((Tiling{512, 128, 256}), heuristic_tiling(s1, 512));
  s1.k = 4096;
  EXPECT_EQ((Tiling{512, 128, 128}), heuristic_tiling(s1, 512));
  s1.k = 16384;
  EXPECT_EQ((Tiling{512, 128, 64}), heuristic_tiling(s1, 512));
  s1.k = 1024, s1.transpose_rhs = true;  // [N, K] weights, packed panel by panel
  EXPECT_EQ((Tiling{512, 128, 64}), heuristic_tiling(s1, 512));
  s1.isa = Isa::kAvx512Bf16, s1.transpose_rhs = false;  // no tiles: one register tile wide
  EXPECT_EQ((Tiling{512, 1024, 64}), heuristic_tiling(s1, 512));
  // bf16 x bf16 [K, N] weights in vdpbf16ps pairs, small groups: one register tile of columns;
  // [N, K] weights and quantized weights keep 256 (quantized [K, N] ones with k-blocks of 256).
  KernelSpec s3_bf16 = problem(4096, 512, 128);
  s3_bf16.lhs = s3_bf16.rhs = DType::kBF16;
  s3_bf16.isa = Isa::kAvx512Bf16;
  EXPECT_EQ((Tiling{512, 128, 64}), heuristic_tiling(s3_bf16, 16));
  EXPECT_EQ((Tiling{512, 1024, 64}), heuristic_tiling(s3_bf16, 100));
  // The AVX-512 families without a bf16 dot product (bf16 widened to f32): small groups' [K, N]
  // weights in whole rows as on amx (up to 2048 columns while the n-tiles number at least 16), in
  // k-blocks of 32 (f32 weights) or 64 (bf16); larger groups keep their choice.
  KernelSpec s4_f32 = problem(2048, 2048, 32);
  for (Isa isa : {Isa::kAvx512, Isa::kAvx512Vnni}) {
    s3_bf16.isa = s3.isa = s4_f32.isa = isa;
    EXPECT_EQ((Tiling{512, 64, 512}), heuristic_tiling(s3_bf16, 16));
    EXPECT_EQ((Tiling{512, 1024, 64}), heuristic_tiling(s3_bf16, 100));
    EXPECT_EQ((Tiling{512, 32, 512}), heuristic_tiling(s3, 16));
    EXPECT_EQ((Tiling{512, 32, 2048}), heuristic_tiling(s4_f32, 16));
    EXPECT_EQ((Tiling{512, 1024, 64}), heuristic_tiling(s4_f32, 64));
  }
  s3_bf16.isa = Isa::kAvx512Bf16, s3_bf16.transpose_rhs = true;
  EXPECT_EQ((Tiling{512, 128, 256}), heuristic_tiling(s3_bf16, 16));
  s3_bf16.transpose_rhs = false, s3_bf16.rhs = DType::kI4;
  s3_bf16.rhs_quant.kind = QuantKind::kBlock, s3_bf16.rhs_quant.block_k = 128;
  EXPECT_EQ((Tiling{512, 256, 256}), heuristic_tiling(s3_bf16, 16));
  // f32 [N, K] weights of small groups on the AVX-512 families: deeper, narrower items; avx2,
  // amx and larger groups keep their choice.
  KernelSpec s3_nk = problem(4096, 512, 128);
  s3_nk.transpose_rhs = true;
  for (Isa isa : {Isa::kAvx512Bf16, Isa::kAvx512}) {
    s3_nk.isa = isa;
    EXPECT_EQ((Tiling{512, 512, 128}), heuristic_tiling(s3_nk, 16));
    EXPECT_EQ((Tiling{512, 1024, 64}), heuristic_tiling(s3_nk, 100));
  }
  s3_nk.isa = Isa::kAvx2;
  EXPECT_EQ((Tiling{512, 256, 256}), heuristic_tiling(s3_nk, 16));
  s3_nk.isa = Isa::kAmx;
  EXPECT_EQ((Tiling{512, 128, 256}), heuristic_tiling(s3_nk, 16));
  KernelSpec tiny = problem(40, 24, 3);  // clamped to K and N
  tiny.isa = Isa::kAvx512Bf16;
  EXPECT_EQ((Tiling{512, 40, 24}), heuristic_tiling(tiny, 2));
  tiny.isa = Isa::kAmx;
  EXPECT_EQ((Tiling{512, 32, 24}), heuristic_tiling(tiny, 2));
  KernelSpec t = problem(4096, 512, 128, Op::kTgmm);
  t.isa = Isa::kAvx512Bf16;
  EXPECT_EQ(default_tiling(t), heuristic_tiling(t, 16));
  EXPECT_EQ((Tiling{256, 96, 128}), default_tiling(t));
  // Out stored [N, K]: the same C tile (96 rows over n, 128 columns over k) by default, and on
  // the AVX-512 families columns over k 512 wide; avx2 keeps the default.
  t.transpose_rhs = true;
  EXPECT_EQ((Tiling{256, 128, 96}), default_tiling(t));
  EXPECT_EQ((Tiling{256, 512, 96}), heuristic_tiling(t, 16));
  t.isa = Isa::kAvx512;
  EXPECT_EQ((Tiling{256, 512, 96}), heuristic_tiling(t, 16));
  t.isa = Isa::kAvx2;
  EXPECT_EQ(default_tiling(t), heuristic_tiling(t, 16));
  t.transpose_rhs = false;
  // amx: f32 tgmm sums 288 x 384 output tiles (C rows x columns, whichever layout) over 64 rows.
  t.isa = Isa::kAmx;
  EXPECT_EQ((Tiling{64, 288, 384}), heuristic_tiling(t, 16));
  t.transpose_rhs = true;
  EXPECT_EQ((Tiling{64, 384, 288}), heuristic_tiling(t, 16));
  // bf16 x bf16 on AMX tiles: C tiles of 384 x 384 either way; on a family with vdpbf16ps (pairs
  // of rows) 192 x 192; a family without it keeps the f32 rules.
  t.lhs = t.rhs = DType::kBF16;
  EXPECT_EQ((Tiling{256, 384, 384}), heuristic_tiling(t, 16));
  t.transpose_rhs = false;
  EXPECT_EQ((Tiling{256, 384, 384}), heuristic_tiling(t, 16));
  t.transpose_rhs = true;
  t.isa = Isa::kAvx512Bf16;
  EXPECT_EQ((Tiling{256, 192, 192}), heuristic_tiling(t, 16));
  t.transpose_rhs = false;
  EXPECT_EQ((Tiling{256, 192, 192}), heuristic_tiling(t, 16));
  t.isa = Isa::kAvx512;
  EXPECT_EQ(default_tiling(t), heuristic_tiling(t, 16));
  t.transpose_rhs = true;
  EXPECT_EQ((Tiling{256, 512, 96}), heuristic_tiling(t, 16));
  EXPECT_EQ((Tiling{256, 256, 8}), heuristic_tiling(problem(512, 8, 1, Op::kTgmm), 2048));
  // Whatever the rows, the chosen tiling validates for every dtype pair the runtime serves.
  for (double rows : {0.0, 1.0, 16.0, 100.0, 5000.0})
    for (DType d : {DType::kF32, DType::kBF16, DType::kI8}) {
      KernelSpec s = problem(8192, 8192, 8);
      s.lhs = d == DType::kI8 ? DType::kBF16 : d, s.rhs = d;
      if (d == DType::kI8) s.rhs_quant.kind = QuantKind::kChannel;
      s.tiling = heuristic_tiling(s, rows);
      EXPECT_NO_THROW(validate(s)) << rows << " rows, " << to_string(d);
    }
}

// A table text with one entry whose parts can be replaced.
std::string table_text(const std::string& entry_json, const std::string& version = "1") {
  return "{\"version\": " + version +
         ", \"device\": {\"cpu\": \"c\", \"isa\": \"generic\", \"compiler\": \"x\"}, "
         "\"entries\": [" +
         entry_json + "]}";
}
const std::string kProblem =
    "{\"op\": \"gmm\", \"lhs\": \"f32\", \"rhs\": \"f32\", \"out\": \"f32\", \"k\": 64, "
    "\"n\": 48, \"g\": 4}";
std::string entry_json(const std::string& problem = kProblem,
                       const std::string& tiling = "{\"tm\": 16, \"tk\": 32, \"tn\": 16}",
                       const std::string& bucket = "[16, 32]") {
  return "{\"problem\": " + problem + ", \"rows_per_group\": " + bucket +
         ", \"tiling\": " + tiling + "}";
}

TEST(TuningTable, RejectsWhatItCannotReadNamingTheRule) {
  const Table ok = tuning::parse_table(table_text(entry_json()), "ok.json");
  ASSERT_EQ(1u, ok.entries.size());
  EXPECT_EQ((Tiling{16, 32, 16}), ok.entries[0].spec.tiling);
  EXPECT_EQ(problem(64, 48, 4).k, ok.entries[0].spec.k);

  const std::pair<std::string, std::string> bad[] = {
      {"{\"version\": 1, \"device\": ", "bad.json: not JSON"},
      // Numbers the parser itself cannot hold: the key is named, nothing escapes as another error.
      {"{\"version\": 1e400}", "not JSON in the value of key 'version'"},
      {table_text(entry_json(kProblem, "{\"tm\": 16, \"tk\": 32, \"tn\": 16}", "[0, 1e999]")),
       "not JSON in the value of key 'rows_per_group'"},
      {"[1, 2]", "not a gmm-gen tuning table"},
      {table_text(entry_json(), "2"), "version 2; this gmm-gen reads tuning tables of version 1"},
      {table_text(entry_json(), "\"1\""), "version \"1\""},
      {"{\"version\": 1, \"version\": 1}", "key 'version' appears twice"},
      {std::string(100, '[') + std::string(100, ']'), "nested deeper than 64"},
      {"{\"version\": 1, \"entries\": []}", "key 'device' is missing"},
      {"{\"version\": 1, \"device\": {\"cpu\": \"c\", \"isa\": 3, \"compiler\": \"x\"}, "
       "\"entries\": []}",
       "'isa' must be a string"},
      {table_text("7"), "entries[0] must be an object"},
      {table_text(entry_json("{\"k\": 64, \"n\": 48, \"g\": 4, \"tm\": 8}")),
       "problem key 'tm' is not a problem field"},
      {table_text(entry_json("{\"k\": 64, \"n\": 48, \"g\": 4, \"colour\": 1}")),
       "unknown spec key 'colour'"},
      {table_text(entry_json("{\"k\": \"64\", \"n\": 48, \"g\": 4}")),
       "spec key 'k' must be a JSON integer"},
      {table_text(entry_json("{\"n\": 48, \"g\": 4}")), "spec key 'k' is required"},
      {table_text(entry_json(kProblem, "{\"tm\": 0, \"tk\": 32, \"tn\": 16}")), "tm=0 must be"},
      {table_text(entry_json(kProblem, "{\"tm\": 16, \"tk\": 32}")), "key 'tn' is missing"},
      {table_text(entry_json(kProblem, "{\"tm\": 16, \"tk\": 32, \"tn\": 8, \"tx\": 1}")),
       "tiling key 'tx' is not one of tm, tk, tn"},
      {table_text(entry_json(kProblem, "{\"tm\": 16, \"tk\": 32, \"tn\": 16}", "[32, 16]")),
       "must have 0 <= lo < hi"},
      {table_text(entry_json(kProblem, "{\"tm\": 16, \"tk\": 32, \"tn\": 16}", "[1]")),
       "'rows_per_group' must be [lo, hi]"},
      {table_text(entry_json(kProblem, "{\"tm\": 16, \"tk\": 32, \"tn\": 16}", "[\"a\", 2]")),
       "must be a finite number"},
  };
  for (const auto& [text, message] : bad) {
    try {
      tuning::parse_table(text, "bad.json");
      ADD_FAILURE() << "accepted: " << text;
    } catch (const TableError& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos)
          << e.what() << "\nexpected: " << message;
      EXPECT_EQ(0u, std::string(e.what()).find("bad.json")) << e.what();
    }
  }
  // With `skipped`, an entry that breaks its own rules is left out; the others are read.
  std::vector<std::string> skipped;
  const Table some = tuning::parse_table(
      table_text(entry_json() + ", " + entry_json(kProblem, "{\"tm\": -1, \"tk\": 1, \"tn\": 1}")),
      "some.json", &skipped);
  EXPECT_EQ(1u, some.entries.size());
  ASSERT_EQ(1u, skipped.size());
  EXPECT_NE(skipped[0].find("some.json: entries[1]"), std::string::npos) << skipped[0];
}

// ---- Where the runtime finds tables
// --------------------------------------------------------------

class TuningDirs : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = scratch_.path;
    fs::create_directories(dir_ / "env");
    fs::create_directories(dir_ / "cache" / "tuning");
    setenv("GMMGEN_CACHE_DIR", (dir_ / "cache").c_str(), 1);
    unsetenv("GMMGEN_TUNING_DIR");
    unsetenv("GMMGEN_DISABLE_JIT");
  }
  void TearDown() override { unsetenv("GMMGEN_TUNING_DIR"); }
  static void write(const fs::path& p, const std::string& text) { std::ofstream(p) << text; }
  // A tables object over the env folder, the cache folder and one "shipped" text.
  struct Loaded {
    std::vector<std::string> info, warnings;
    std::unique_ptr<tuning::Tables> tables;
  };
  std::unique_ptr<Loaded> load(const std::string& shipped) {
    auto l = std::make_unique<Loaded>();
    std::vector<tuning::TableSource> sources{
        {"GMMGEN_TUNING_DIR=" + (dir_ / "env").string(), dir_ / "env", {}},
        {(dir_ / "cache" / "tuning").string(), dir_ / "cache" / "tuning", {}}};
    sources.push_back({"shipped:test.json", {}, shipped_text_ = shipped});
    Loaded* raw = l.get();
    l->tables = std::make_unique<tuning::Tables>(
        sources, true, [raw](const std::string& m) { raw->info.push_back(m); },
        [raw](const std::string& m) { raw->warnings.push_back(m); });
    return l;
  }
  static std::string host_table(const std::vector<tuning::Entry>& entries) {
    return tuning::dump_table(table_of(entries));
  }
  testing::Scratch scratch_{"gmmgen_tuning"};
  fs::path dir_;
  std::string shipped_text_;
};

TEST_F(TuningDirs, FirstMatchWinsInOrderEnvCacheShipped) {
  const KernelSpec a = problem(64, 48, 4);
  write(dir_ / "env" / "b.json", host_table({entry(a, {16, 16, 16}, {16, 32})}));
  write(dir_ / "env" / "a.json", host_table({entry(a, {32, 32, 32}, {16, 24})}));  // name order
  write(dir_ / "cache" / "tuning" / "t.json",
        host_table({entry(a, {64, 64, 48}, {0, 1000}), entry(a, {1, 1, 1}, {16, 32})}));
  write(dir_ / "cache" / "tuning" / "notes.txt", "not a table: not read");
  write(dir_ / "cache" / "tuning" / ".hidden.json", "{");
  auto l = load(host_table({entry(a, {8, 8, 8}, {0, 1e9})}));
  const auto at = [&](double rows) { return l->tables->lookup(a, rows)->tiling; };
  EXPECT_EQ((Tiling{32, 32, 32}), at(20));   // env/a.json
  EXPECT_EQ((Tiling{16, 16, 16}), at(30));   // env/b.json
  EXPECT_EQ((Tiling{64, 64, 48}), at(100));  // the cache's table
  EXPECT_EQ((Tiling{8, 8, 8}), at(5000));    // shipped
  EXPECT_EQ(TilingSource::kTable, l->tables->lookup(a, 20)->source);
  EXPECT_FALSE(l->tables->lookup(problem(64, 48, 8), 20));  // no entry: the heuristic
  EXPECT_EQ(5u, l->tables->size());
  EXPECT_TRUE(l->warnings.empty()) << l->warnings[0];
  // GMMGEN_LOG: which entry a call used, once per problem and entry.
  for (int i = 0; i < 3; ++i) l->tables->lookup(a, 20);
  int used = 0;
  for (const auto& m : l->info)
    used += m.find("tuning: " + tuning::problem_text(a) +
                   " at 20.0 rows/group: tm=32,tk=32,tn=32 "
                   "from " +
                   (dir_ / "env" / "a.json").string()) == 0;
  EXPECT_EQ(1, used);
  bool miss = false;
  for (const auto& m : l->info)
    miss |= m.find("no table entry; the heuristic's tm=") != std::string::npos;
  EXPECT_TRUE(miss);
}

// The index compares problems exactly: one entry per problem, each differing from another in
// one problem field only, and every problem field of the field table is among those varied (a
// new problem field fails here until it is added).
TEST_F(TuningDirs, EveryProblemFieldTellsEntriesApart) {
  const std::string base = "lhs=f8e4m3,rhs=f8e4m3,out=f32,k=64,n=48,g=4,g_local=4";
  const std::vector<std::string> texts = {
      "op=gmm," + base,
      "op=tgmm," + base,
      "op=tgmm,lhs_layout=km," + base,
      "op=gmm,lhs=bf16,rhs=f8e4m3,out=f32,k=64,n=48,g=4,g_local=4",
      "op=gmm,lhs=f8e4m3,rhs=bf16,out=f32,k=64,n=48,g=4,g_local=4",
      "op=gmm,lhs=f8e4m3,rhs=f8e4m3,out=bf16,k=64,n=48,g=4,g_local=4",
      "op=gmm,lhs_quant=tensor," + base,
      "op=gmm,rhs_quant=tensor," + base,
      "op=gmm,lhs=f8e4m3,rhs=f8e4m3,out=f32,k=128,n=48,g=4,g_local=4",
      "op=gmm,lhs=f8e4m3,rhs=f8e4m3,out=f32,k=64,n=64,g=4,g_local=4",
      "op=gmm,lhs=f8e4m3,rhs=f8e4m3,out=f32,k=64,n=48,g=8,g_local=4",
      "op=gmm,lhs=f8e4m3,rhs=f8e4m3,out=f32,k=64,n=48,g=4,g_local=2",
      "op=gmm,transpose_rhs=1," + base,
      "op=gmm,out_mode=accumulate," + base};
  std::vector<KernelSpec> specs;
  std::vector<tuning::Entry> entries;
  for (size_t i = 0; i < texts.size(); ++i) {
    specs.push_back(parse_text(texts[i]));
    ASSERT_NO_THROW(validate(specs.back())) << texts[i];
    entries.push_back(entry(specs.back(), {int64_t(i + 1), 16, 16}, {0, 100}));
  }
  std::set<std::string> varied;
  for (size_t a = 0; a < specs.size(); ++a)
    for (size_t b = a + 1; b < specs.size(); ++b) {
      std::vector<std::string> differ;
      for (const SpecField& f : spec_fields())
        if (f.role == FieldRole::kProblem && field_text(f, specs[a]) != field_text(f, specs[b]))
          differ.push_back(std::string(f.key));
      if (differ.size() == 1) varied.insert(differ[0]);
    }
  for (const SpecField& f : spec_fields())
    if (f.role == FieldRole::kProblem) {
      EXPECT_TRUE(varied.count(std::string(f.key)))
          << "no two entries differ in " << f.key << " alone";
    }
  write(dir_ / "env" / "all.json", host_table(entries));
  auto l = load(host_table({}));
  for (size_t i = 0; i < specs.size(); ++i) {
    KernelSpec call = specs[i];
    call.tiling = {7, 7, 7};  // the call's tiling and family play no part
    call.isa = Isa::kGeneric;
    const auto c = l->tables->lookup(call, 10);
    ASSERT_TRUE(c) << texts[i];
    EXPECT_EQ(int64_t(i + 1), c->tiling.tm) << texts[i];
  }
  EXPECT_TRUE(l->warnings.empty()) << l->warnings[0];
}

// Tables another user could have written choose nothing: a folder or file writable by group or
// others, a file owned by someone else, a symlinked file or folder (to another user's table).
// Each is named in a warning, its control characters escaped; the user's own tables still serve.
TEST_F(TuningDirs, TablesAnotherUserCouldWriteAreIgnored) {
  const KernelSpec a = problem(64, 48, 4), b = problem(64, 48, 8);
  const fs::path env = dir_ / "env", cache = dir_ / "cache" / "tuning";
  const std::string theirs = host_table({entry(a, {16, 16, 16}, {0, 1000})});
  write(env / "1-open.json", theirs);
  ASSERT_EQ(0, chmod((env / "1-open.json").c_str(), 0666));
  write(env / "2-group.json", theirs);
  ASSERT_EQ(0, chmod((env / "2-group.json").c_str(), 0620));
  fs::create_directories(dir_ / "elsewhere");
  write(dir_ / "elsewhere" / "t.json", theirs);
  fs::create_symlink(dir_ / "elsewhere" / "t.json", env / "3-link.json");
  write(env / "4-\x1b[31mred.json", theirs);
  ASSERT_EQ(0, chmod((env / "4-\x1b[31mred.json").c_str(), 0646));
  write(env / "5-mine.json", host_table({entry(b, {32, 32, 32}, {0, 1000})}));
  if (geteuid() == 0) {  // a file another uid owns, even with a safe mode
    write(env / "6-nobody.json", theirs);
    ASSERT_EQ(0, chown((env / "6-nobody.json").c_str(), 65534, 65534));
  }
  auto l = load(host_table({}));
  EXPECT_FALSE(l->tables->lookup(a, 50)) << "a table another user could write was used";
  ASSERT_TRUE(l->tables->lookup(b, 50));
  EXPECT_EQ((Tiling{32, 32, 32}), l->tables->lookup(b, 50)->tiling);
  std::string all;
  for (const auto& w : l->warnings) all += w + "\n";
  const auto warned = [&](const std::string& what) { return all.find(what) != std::string::npos; };
  EXPECT_TRUE(warned("1-open.json: writable by group or others (mode 0666)")) << all;
  EXPECT_TRUE(warned("2-group.json: writable by group or others (mode 0620)")) << all;
  EXPECT_TRUE(warned("3-link.json is a symlink")) << all;
  EXPECT_TRUE(warned("4-\\x1b[31mred.json: writable by group or others")) << all;
  EXPECT_EQ(std::string::npos, all.find('\x1b')) << "a raw control character reached the log";
  if (geteuid() == 0) {
    EXPECT_TRUE(warned("6-nobody.json: owned by uid 65534")) << all;
  }
  EXPECT_EQ(geteuid() == 0 ? 5u : 4u, l->warnings.size()) << all;

  // Folders: the user-named one writable by others, the cache's a symlink to another folder.
  ASSERT_EQ(0, chmod(env.c_str(), 0777));
  fs::remove_all(cache);
  fs::create_symlink(dir_ / "elsewhere", cache);
  l = load(host_table({}));
  EXPECT_FALSE(l->tables->lookup(b, 50));
  EXPECT_FALSE(l->tables->lookup(a, 50));
  all.clear();
  for (const auto& w : l->warnings) all += w + "\n";
  EXPECT_TRUE(warned("GMMGEN_TUNING_DIR=" + env.string() +
                     " ignored: writable by group or others (mode 0777)"))
      << all;
  EXPECT_TRUE(warned(cache.string() + " is not a folder: ignored (a symlink)")) << all;
  EXPECT_EQ(2u, l->warnings.size()) << all;
  ASSERT_EQ(0, chmod(env.c_str(), 0700));
}

TEST_F(TuningDirs, CorruptAndForeignTablesAreIgnoredWithAWarning) {
  const KernelSpec a = problem(64, 48, 4);
  write(dir_ / "env" / "1-truncated.json",
        host_table({entry(a, {16, 16, 16}, {0, 100})}).substr(0, 60));
  write(dir_ / "env" / "2-foreign.json", "{\"version\": 7, \"something\": \"else\"}");
  write(dir_ / "env" / "3-binary.json", std::string("\x7f"
                                                    "ELF\x02\x01\x01\0\0",
                                                    9));
  write(dir_ / "env" / "4-bad-entry.json",
        table_text(entry_json(kProblem, "{\"tm\": 99999, \"tk\": 1, \"tn\": 1}", "[0, 100]")));
  write(dir_ / "env" / "5-bad-isa.json",
        "{\"version\": 1, \"device\": {\"cpu\": \"c\", \"isa\": \"sse9\", \"compiler\": \"x\"}, "
        "\"entries\": []}");
  fs::create_directories(dir_ / "env" / "6-folder.json");
  write(dir_ / "env" / "7-huge-number.json", "{\"version\": 1e400}");
  write(dir_ / "cache" / "tuning" / "good.json", host_table({entry(a, {64, 64, 48}, {0, 1000})}));
  auto l = load("not json at all");
  const auto choice = l->tables->lookup(a, 50);
  ASSERT_TRUE(choice);
  EXPECT_EQ((Tiling{64, 64, 48}), choice->tiling);
  const auto warned = [&](const std::string& what) {
    for (const auto& w : l->warnings)
      if (w.find(what) != std::string::npos) return true;
    return false;
  };
  std::string all;
  for (const auto& w : l->warnings) all += w + "\n";
  EXPECT_TRUE(warned("1-truncated.json: not JSON")) << all;
  EXPECT_TRUE(warned("2-foreign.json: version 7")) << all;
  EXPECT_TRUE(warned("3-binary.json: not JSON")) << all;
  EXPECT_TRUE(warned("tuning table entry ignored: " + (dir_ / "env" / "4-bad-entry.json").string() +
                     ": entries[0]: tm=99999"))
      << all;
  EXPECT_TRUE(warned("5-bad-isa.json: device.isa")) << all;
  EXPECT_TRUE(warned("6-folder.json is not a regular file")) << all;
  EXPECT_TRUE(warned("7-huge-number.json: not JSON in the value of key 'version'")) << all;
  EXPECT_TRUE(warned("shipped:test.json: not JSON")) << all;
  EXPECT_EQ(8u, l->warnings.size()) << all;
}

TEST_F(TuningDirs, TablesForAFamilyThisCpuCannotRunAreSkipped) {
  Isa missing = Isa::kNative;
  for (const IsaFamily& f : isa_families())
    if (!host_supports(f.isa)) missing = f.isa;
  if (missing == Isa::kNative) GTEST_SKIP() << "this CPU runs every family";
  const KernelSpec a = problem(64, 48, 4);
  Table t = table_of({entry(a, {16, 16, 16}, {0, 100})});
  t.device.isa = std::string(to_string(missing));
  write(dir_ / "env" / "other.json", tuning::dump_table(t));
  auto l = load(host_table({}));
  EXPECT_FALSE(l->tables->lookup(a, 50));
  EXPECT_TRUE(l->warnings.empty());
  bool said = false;
  for (const auto& m : l->info)
    said |= m.find("which this CPU cannot run: skipped") != std::string::npos;
  EXPECT_TRUE(said);
}

// ---- Dispatch through a table
// --------------------------------------------------------------------

struct TunedCall {
  int64_t m = 61, k = 40, n = 24, g = 3;
  std::vector<float> lhs, rhs, out;
  std::vector<int32_t> sizes{20, 0, 38};  // 58 rows in groups: 19.3 rows per group
  TunedCall() {
    std::mt19937_64 rng(7);
    lhs.resize(size_t(m * k));
    rhs.resize(size_t(g * k * n));
    for (auto& v : lhs) v = float(uniform_real(rng, -1, 1));
    for (auto& v : rhs) v = float(uniform_real(rng, -1, 1));
    out.assign(size_t(m * n), std::nanf(""));
  }
  TensorView l() { return TensorView::matrix(lhs.data(), DType::kF32, m, k); }
  TensorView r() { return TensorView::batch(rhs.data(), DType::kF32, g, k, n); }
  TensorView o() { return TensorView::matrix(out.data(), DType::kF32, m, n); }
  void expect_correct() const {
    GmmProblem p;
    p.m = m, p.k = k, p.n = n, p.num_groups = p.num_local_groups = int32_t(g);
    p.group_sizes = sizes;
    p.lhs.assign(lhs.begin(), lhs.end());
    p.rhs.assign(rhs.begin(), rhs.end());
    const ReferenceResult ref = reference_gmm(p);
    for (int64_t i = 0; i < m * n; ++i)
      ASSERT_NEAR(ref.out[size_t(i)], out[size_t(i)], 1e-5 * (1 + ref.abs_dot[size_t(i)]))
          << "element " << i;
  }
};

TEST_F(TuningDirs, DispatchUsesTheTableEntryAndStaysCorrect) {
  TunedCall c;
  const KernelSpec a = problem(c.k, c.n, c.g);
  const Tiling tuned{8, 16, 8};
  ASSERT_NE(tuned, default_tiling(a));
  const KernelSpec tg = problem(c.k, c.n, c.g, Op::kTgmm);
  write(dir_ / "cache" / "tuning" / "host.json",
        host_table({entry(a, tuned, {16, 32}), entry(tg, {32, 8, 8}, {0, 1e9})}));
  // GMMGEN_TUNING_DIR comes first; its tgmm entry names an explicit family, which the spec takes
  // (generic runs on every CPU).
  tuning::Entry generic = entry(tg, {16, 8, 8}, {0, 1e9});
  generic.spec.isa = Isa::kGeneric;
  write(dir_ / "env" / "generic.json", host_table({generic}));
  setenv("GMMGEN_TUNING_DIR", (dir_ / "env").c_str(), 1);
  RuntimeOptions o;
  o.num_threads = 2, o.log = true;
  ::testing::internal::CaptureStderr();
  Runtime rt(o);
  EXPECT_EQ(tuned, rt.gmm_spec(c.l(), c.r(), c.sizes, c.o()).tiling);
  rt.gmm(c.l(), c.r(), c.sizes, c.o());
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(
      log.find("tuning: " + tuning::problem_text(a) + " at 19.3 rows/group: tm=8,tk=16,tn=8 from " +
               (dir_ / "cache" / "tuning" / "host.json").string() +
               " entry 0 (rows_per_group [16, 32), tuned 10.0 GFLOP/s, heuristic 8.0)"),
      std::string::npos)
      << log;
  // choose_tiling says where the tiling came from.
  const TilingChoice chosen = rt.choose_tiling(a, c.sizes);
  EXPECT_EQ(tuned, chosen.tiling);
  EXPECT_EQ("table " + (dir_ / "cache" / "tuning" / "host.json").string() +
                " entry 0 (rows_per_group [16, 32), tuned 10.0 GFLOP/s, heuristic 8.0)",
            to_string(chosen));
  EXPECT_EQ("override", to_string(rt.choose_tiling(a, c.sizes, 0, Tiling{4, 8, 8})));
  const std::vector<int32_t> two{1, 2, 3};
  EXPECT_EQ("heuristic", to_string(rt.choose_tiling(a, two)));
  c.expect_correct();
  EXPECT_EQ(1, rt.stats().compiles);

  // Other group sizes in the same bucket: the entry; outside it: the heuristic.
  const std::vector<int32_t> other{40, 10, 11};  // 20.3 rows per group
  EXPECT_EQ(tuned, rt.gmm_spec(c.l(), c.r(), other, c.o()).tiling);
  const std::vector<int32_t> few{1, 2, 3};
  EXPECT_EQ(heuristic_tiling(a, 2.0), rt.gmm_spec(c.l(), c.r(), few, c.o()).tiling);
  // Sharded: the mean is over the active groups of this shard.
  const std::vector<int32_t> wide{0, 0, 0, 20, 0, 38};  // G = 6, groups 3..5 held
  GmmOptions shard;
  shard.group_offset = 3;
  KernelSpec sharded = rt.gmm_spec(c.l(), c.r(), wide, c.o(), shard);
  EXPECT_EQ(6, sharded.g);
  EXPECT_EQ(heuristic_tiling(sharded, 58.0 / 3), sharded.tiling);  // another problem (G_local=3)
  // The caller's override wins over the table.
  GmmOptions over;
  over.tiling = Tiling{4, 8, 8};
  EXPECT_EQ(*over.tiling, rt.gmm_spec(c.l(), c.r(), c.sizes, c.o(), over).tiling);
  // tgmm: the GMMGEN_TUNING_DIR entry, with its ISA family.
  std::vector<float> dw(size_t(c.g * c.k * c.n));
  const KernelSpec t =
      rt.tgmm_spec(c.l(), TensorView::matrix(c.out.data(), DType::kF32, c.m, c.n), c.sizes,
                   TensorView::batch(dw.data(), DType::kF32, c.g, c.k, c.n));
  EXPECT_EQ((Tiling{16, 8, 8}), t.tiling);
  EXPECT_EQ(Isa::kGeneric, t.isa);
}

TEST_F(TuningDirs, CorruptTableInTheCacheNeverChangesAResult) {
  TunedCall c;
  write(dir_ / "cache" / "tuning" / "broken.json", "{\"version\": 1, \"device\": {");
  RuntimeOptions o;
  o.num_threads = 2;
  ::testing::internal::CaptureStderr();
  Runtime rt(o);
  rt.gmm(c.l(), c.r(), c.sizes, c.o());
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("gmm-gen: warning: tuning table ignored: " +
                     (dir_ / "cache" / "tuning" / "broken.json").string() + ": not JSON"),
            std::string::npos)
      << err;
  c.expect_correct();
  EXPECT_EQ(heuristic_tiling(problem(c.k, c.n, c.g), tuning::rows_per_group(c.sizes, 0, c.g)),
            rt.gmm_spec(c.l(), c.r(), c.sizes, c.o()).tiling);
}

}  // namespace
}  // namespace gmmgen
