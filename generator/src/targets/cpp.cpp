// The C++ target: a kernel is <name>.h (its entry points) and <name>.cpp (self-contained C++17
// from cpp/gmm.cpp or cpp/tgmm.cpp, its dtype partials and the micro-kernel of its ISA family);
// a set carries gmmgen/kernel_abi.h and optionally a bundle (one translation unit + a table).
#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>

#include "gmmgen/codes.h"
#include "gmmgen/heuristics.h"
#include "gmmgen/target.h"
#include "gmmgen/templates.h"
#include "render.h"

namespace gmmgen {
namespace {

constexpr std::string_view kAbiHeader = "gmmgen/kernel_abi.h";

// The entry points of a kernel, from the ABI's one list: field name and symbol suffix.
struct EntrySymbol {
  const char* field;
  const char* suffix;
};
#define GMMGEN_ENTRY_SYMBOL_(arg, ret, field, suffix, params) {#field, #suffix},
constexpr EntrySymbol kEntrySymbols[] = {GMMGEN_ENTRY_POINTS(GMMGEN_ENTRY_SYMBOL_, ~)};
#undef GMMGEN_ENTRY_SYMBOL_

// The template of each op and how its header comment describes each output mode (by OutMode).
struct OpTemplate {
  Op op;
  std::string_view path;
  std::array<std::string_view, 3> out_mode_doc;
};
constexpr std::array<OpTemplate, 2> kOpTemplates{{
    {Op::kGmm,
     "cpp/gmm.cpp",
     {"written as zero", "left as existing_out has them",
      "left as existing_out has them; active rows add existing_out"}},
    {Op::kTgmm,
     "cpp/tgmm.cpp",
     {"out_mode=plain: out is overwritten; an empty group gives zeros.",
      "out_mode=existing_out is not a tgmm mode (validate() rejects it).",
      "out_mode=accumulate: out = existing_out + product, rounded once; existing_out may be out."}},
}};

const OpTemplate& op_template(Op op) {
  for (const auto& t : kOpTemplates)
    if (t.op == op) return t;
  throw std::logic_error("op " + std::string(to_string(op)) + " has no C++ template");
}

// A float as an exact C++ literal (hex float; NaN and infinity through compiler builtins).
std::string float_literal(float v) {
  if (std::isnan(v)) return "__builtin_nanf(\"\")";
  if (std::isinf(v)) return v > 0 ? "__builtin_inff()" : "-__builtin_inff()";
  char buf[48];
  std::snprintf(buf, sizeof buf, "%af", double(v));
  return buf;
}

// The context of a quantized dtype's traits (cpp/dtypes/quant.inc): the value of every code,
// from gmmgen/codes.h, so that kernels decode by table exactly as the host does.
mu::data quant_context(const DTypeInfo& d, mu::data ctx) {
  const int codes_count = 1 << d.bits;
  ctx.set("dtype", std::string(d.name));
  ctx.set("traits", std::string(d.traits));
  ctx.set("doc", d.kind == DTypeKind::kFloat     ? std::string("OCP FP8 values")
                 : d.kind == DTypeKind::kInteger ? std::string("integer codes")
                                                 : std::string("codebook indices"));
  ctx.set("is_int", d.kind == DTypeKind::kInteger ? "true" : "false");
  ctx.set("bits", std::to_string(d.bits));
  ctx.set("per_byte", std::to_string(codes::elements_per_byte(d.id)));
  ctx.set("codes", std::to_string(codes_count));
  ctx.set("qmax", float_literal(float(codes::qmax(d.id))));
  mu::data values{mu::data::type::list}, bf16{mu::data::type::list};
  // The bf16 bit pattern of every code (round to nearest even), padded with zeros to 32 entries
  // so that one 512-bit table register holds a sub-byte dtype's table.
  for (int c = 0; c < std::max(codes_count, 32); ++c) {
    const float v = c < codes_count ? codes::decode(d.id, uint8_t(c)) : 0.0f;
    uint32_t u;
    std::memcpy(&u, &v, 4);
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    if (c < codes_count) values.push_back(mu::object{{"v", float_literal(v)}});
    char hex[8];
    std::snprintf(hex, sizeof hex, "0x%04x", unsigned(rounded));
    bf16.push_back(mu::object{{"b", std::string(hex)}});
  }
  ctx.set("values", values);
  ctx.set("bf16_bits", bf16);
  ctx.set("bf16_count", std::to_string(std::max(codes_count, 32)));
  ctx.set("bf16_exact", codes::bf16_exact(d.id) ? "true" : "false");
  return ctx;
}

// The dtype partials a kernel needs (f32 always for quantized kernels: codes decode to f32), once
// each, after the shared helpers.
std::string render_dtypes(const KernelSpec& s, Renderer& r, const mu::data& ctx) {
  std::string text = r.render("cpp/dtypes/common.inc", ctx);
  for (const auto& d : dtype_table())
    if (s.lhs == d.id || s.rhs == d.id || s.out == d.id ||
        (d.id == DType::kF32 && codes::any_quantized(s)))
      text += codes::is_quantized(d.id)
                  ? r.render("cpp/dtypes/quant.inc", quant_context(d, ctx))
                  : r.render("cpp/dtypes/" + std::string(d.name) + ".inc", ctx);
  return text;
}

// Mustache lists that write out registers one by one: {i} for i < n, and the vectors {j, off}
// (j < n, off = j * vec elements) of a register tile's row.
mu::data index_list(int64_t n) {
  mu::data list{mu::data::type::list};
  for (int64_t i = 0; i < n; ++i) list.push_back(mu::object{{"i", std::to_string(i)}});
  return list;
}
mu::data vector_list(int64_t n, int64_t vec) {
  mu::data list{mu::data::type::list};
  for (int64_t j = 0; j < n; ++j)
    list.push_back(mu::object{{"j", std::to_string(j)}, {"off", std::to_string(j * vec)}});
  return list;
}

// The context of one ISA family's code: its register tile written out register by register
// (rows x vecs), whether bf16 x bf16 uses its pair dot product, and the #if chain of isa=native.
mu::data family_context(const KernelSpec& s, const IsaFamily& f, size_t index, size_t count,
                        Renderer& r, mu::data ctx) {
  ctx.set("family", std::string(f.name));
  if (!f.target.empty()) ctx.set("target_attr", std::string(f.target));
  ctx.set("mr", std::to_string(f.mr));
  ctx.set("nr", std::to_string(f.nr));
  ctx.set("nvec", std::to_string(f.nr / f.vec));
  ctx.set("naccs", std::to_string(f.mr * f.nr / f.vec));
  ctx.set("rows", index_list(f.mr));
  ctx.set("vecs", vector_list(f.nr / f.vec, f.vec));
  // The vectors of a register tile half as wide (a tile that also holds its f32 accumulators).
  ctx.set("fold_vecs", vector_list(f.nr / f.vec / 2, f.vec));
  const bool pairs = bf16_pairs(s, f);
  const bool qint = quant_int_dot(s, f), qpairs = quant_pairs(s, f);
  ctx.set("bf16_dot", mu::data(pairs || qpairs));
  ctx.set("pairs", mu::data(pairs));
  // bf16 [K, N] weights that the AVX-512 f32 micro-kernel can read in place, widening them.
  ctx.set("widens_in_place", mu::data(s.rhs == DType::kBF16 && !s.transpose_rhs && !pairs &&
                                      f.vec == 16 && !codes::any_quantized(s)));
  ctx.set("row_streams", mu::data(row_streams(s, f)));
  // The accumulators of an item of whole rows, and of its passes 32 columns wide (two a row).
  ctx.set("stream_rows", index_list(kRowStreamRows));
  ctx.set("wide_rows", index_list(kRowStreamWideRows));
  ctx.set("tiles", mu::data(tile_path(s, f)));
  // Quantized weights with bf16 activations on tiles.
  const bool tiles_q = quant_tile_path(s, f);
  ctx.set("tiles_q", mu::data(tiles_q));
  ctx.set("tiles_any", mu::data(tile_path(s, f) || tiles_q));
  ctx.set("qpairs", mu::data(qpairs));
  ctx.set("qint", mu::data(qint));
  if (codes::any_quantized(s)) ctx.set("qdecode", r.render(f.qdecode, ctx));
  ctx.set("scratch_bytes", std::to_string(scratch_bytes(s, f)));
  ctx.set("tgmm_in_place", f.tgmm_in_place ? "true" : "false");
  ctx.set("tgmm_prefetch", f.tgmm_prefetch ? "true" : "false");
  ctx.set("tgmm_a_rows", std::to_string(tgmm_a_rows(s, f)));
  ctx.set("gmm_prefetch_max_tiles", std::to_string(f.gmm_prefetch_max_tiles));
  // isa=native: one family per branch of an #if chain on the compiler's flags, best first.
  if (count > 1) {
    ctx.set("pp_open", index == 0          ? "#if " + std::string(f.guard)
                       : index + 1 < count ? "#elif " + std::string(f.guard)
                                           : std::string("#else"));
    if (index + 1 == count) ctx.set("pp_close", "#endif");
  }
  ctx.set("ukernel", r.render(f.ukernel, ctx));
  return ctx;
}

// The families a kernel carries: its own, or for isa=native every family (the compiler's flags
// pick one).
mu::data families_context(const KernelSpec& s, Renderer& r, const mu::data& ctx) {
  std::vector<const IsaFamily*> fams;
  if (s.isa == Isa::kNative)
    for (const auto& f : isa_families()) fams.push_back(&f);
  else
    fams.push_back(&isa_family(s.isa));
  mu::data list{mu::data::type::list};
  for (size_t i = 0; i < fams.size(); ++i)
    list.push_back(family_context(s, *fams[i], i, fams.size(), r, ctx));
  return list;
}

// A bundle's flags for compiling it as one translation unit: explicit families carry their own
// target attributes, so only isa=native kernels need flags (-march=native).
std::vector<std::string> bundle_flags(std::span<const BundleMember> members) {
  for (const auto& m : members)
    if (m.spec.target == TargetKind::kCpp && m.spec.isa == Isa::kNative)
      return isa_flags(Isa::kNative);
  return {};
}

// The weakest family with vector code: isa=native compiled without its flags is generic code.
const IsaFamily& weakest_vector_family() {
  const IsaFamily* weakest = nullptr;
  for (const auto& f : isa_families())
    if (f.vec > 1) weakest = &f;
  return *weakest;
}

// Throws SpecError if two things a bundle defines share a symbol: its table and count, and
// every entry point of each alias.
void check_bundle_symbols(const std::string& bundle, std::span<const BundleMember> members) {
  std::map<std::string, std::string> owner;  // symbol -> what defines it
  auto claim = [&](const std::string& symbol, const std::string& what) {
    const auto [it, fresh] = owner.emplace(symbol, what);
    if (!fresh)
      throw SpecError(what + " and " + it->second + " would both define the symbol " + symbol);
  };
  claim(bundle + "_kernels", "bundle '" + bundle + "'");
  claim(bundle + "_kernel_count", "bundle '" + bundle + "'");
  for (size_t i = 0; i < members.size(); ++i)
    for (const auto& alias : members[i].aliases)
      for (const auto& e : kEntrySymbols)
        claim(alias + e.suffix, "alias '" + alias + "' (spec #" + std::to_string(i + 1) + ")");
}

class CppTarget final : public Target {
 public:
  TargetKind kind() const override { return TargetKind::kCpp; }
  TargetCaps caps() const override { return {.bundles = true, .runtime_runs = true}; }
  Tiling default_tiling(const KernelSpec& s) const override { return cpp_default_tiling(s); }

  void check(const KernelSpec& s) const override {
    auto not_yet = [](const std::string& what) { throw SpecError("not supported yet: " + what); };
    for (auto [p, d] : {std::pair{"lhs", s.lhs}, std::pair{"rhs", s.rhs}, std::pair{"out", s.out}})
      if (dtype_info(d).c_type.empty()) not_yet(std::string(p) + "=" + std::string(to_string(d)));
    const int64_t scratch = scratch_bytes(s);
    if (scratch > kMaxScratchBytes) {
      const Tiling t = run_tiling(s);
      throw SpecError("tiling tm=" + std::to_string(t.tm) + " tk=" + std::to_string(t.tk) +
                      " tn=" + std::to_string(t.tn) + " (tk, tn clamped to K, N) needs " +
                      std::to_string(scratch) +
                      " bytes of scratch per thread, above the limit of " +
                      std::to_string(kMaxScratchBytes));
    }
  }

  std::vector<EmittedFile> render(const KernelSpec& s, const KernelId& id,
                                  Renderer& r) const override {
    const OpTemplate& op = op_template(s.op);
    mu::data ctx;
    ctx.set("name", id.name);
    ctx.set("spec", to_text(s));
    ctx.set("hash", id.hash);
    ctx.set("version", std::string(generator_version()));
    ctx.set("abi_version", std::to_string(GMMGEN_ABI_VERSION));
    ctx.set("template", std::string(op.path) + ".mustache");
    // Every spec field by its key, as in the canonical text ({{k}}, {{tm}}, {{transpose_rhs}}:
    // 0/1, a valid C++ bool).
    for (const SpecField& f : spec_fields()) ctx.set(std::string(f.key), field_text(f, s));
    // The tiles the kernel runs: tk and tn beyond K and N are clamped (same results, less scratch).
    const Tiling run = run_tiling(s);
    ctx.set("run_tk", std::to_string(run.tk));
    ctx.set("run_tn", std::to_string(run.tn));
    ctx.set("lhs_km", s.lhs_layout == LhsLayout::kKM ? "true" : "false");
    for (auto [key, d] : {std::pair{"lhs_dtype_code", s.lhs}, std::pair{"rhs_dtype_code", s.rhs},
                          std::pair{"out_dtype_code", s.out}}) {
      std::string code = "GMMGEN_DTYPE_" + std::string(to_string(d));
      for (char& c : code) c = char(std::toupper(static_cast<unsigned char>(c)));
      ctx.set(key, code);
    }
    static const char* kModeCode[] = {"GMMGEN_OUT_PLAIN", "GMMGEN_OUT_EXISTING",
                                      "GMMGEN_OUT_ACCUMULATE"};
    ctx.set("out_mode_code", kModeCode[int(s.out_mode)]);
    ctx.set("out_mode_doc", std::string(op.out_mode_doc[int(s.out_mode)]));
    ctx.set("lhs_traits", std::string(dtype_info(s.lhs).traits));
    ctx.set("rhs_traits", std::string(dtype_info(s.rhs).traits));
    ctx.set("out_traits", std::string(dtype_info(s.out).traits));
    ctx.set("scratch_bytes", std::to_string(scratch_bytes(s)));
    // Quantized operands (docs/quantization.md): scale schemes as GMMGEN_QUANT_* codes and block
    // sizes.
    const bool quant = codes::any_quantized(s);
    ctx.set("quant", mu::data(quant));
    ctx.set("quant_cpp", quant ? "true" : "false");
    ctx.set("int_product", is_integer(s.lhs) && is_integer(s.rhs) ? "true" : "false");
    static const char* kQuantCode[] = {"GMMGEN_QUANT_NONE", "GMMGEN_QUANT_TENSOR",
                                       "GMMGEN_QUANT_CHANNEL", "GMMGEN_QUANT_BLOCK"};
    ctx.set("lhs_quant_code", kQuantCode[int(s.lhs_quant.kind)]);
    ctx.set("rhs_quant_code", kQuantCode[int(s.rhs_quant.kind)]);
    ctx.set("lhs_block_k", std::to_string(s.lhs_quant.block_k));
    ctx.set("rhs_block_k", std::to_string(s.rhs_quant.block_k));
    ctx.set("rhs_block_n", std::to_string(s.rhs_quant.block_n));
    ctx.set("split_chunks", std::to_string(kSplitChunks));
    ctx.set("split_max_tiles", std::to_string(kSplitMaxTiles));
    ctx.set("split_max_elements", std::to_string(kSplitMaxElements));
    ctx.set("slices_per_group", std::to_string(kSlicesPerGroup));
    ctx.set("prefetch_spread_tiles", std::to_string(kPrefetchSpreadTiles));
    ctx.set("prefetch_last_tiles", std::to_string(kPrefetchLastTiles));
    ctx.set("row_stream_columns", std::to_string(kRowStreamColumns));
    ctx.set("row_stream_rows", std::to_string(kRowStreamRows));
    ctx.set("row_stream_wide_rows", std::to_string(kRowStreamWideRows));
    ctx.set("row_stream_ahead", std::to_string(kRowStreamAhead));
    ctx.set("row_stream_passes", std::to_string(kRowStreamPasses));
    ctx.set("row_stream_steps", std::to_string(kRowStreamSteps));
    ctx.set("row_stream_depth", std::to_string(kRowStreamDepth));
    ctx.set("max_slices", std::to_string(kMaxSlices));
    ctx.set("tile_write_rows", std::to_string(kTileWriteRows));
    ctx.set("intrinsics", mu::data(s.isa == Isa::kNative || isa_family(s.isa).vec > 1));
    for (const auto& d : dtype_table())
      ctx.set("uses_" + std::string(d.name),
              mu::data(s.lhs == d.id || s.rhs == d.id || s.out == d.id ||
                       (d.id == DType::kF32 && codes::any_quantized(s))));
    ctx.set("dtypes", render_dtypes(s, r, ctx));
    ctx.set("families", families_context(s, r, ctx));
    r.file(kAbiHeader);  // the source includes it: part of what the kernel is made of
    return {{id.name + ".h", r.render("cpp/kernel.h", ctx)},
            {id.name + ".cpp", r.render(op.path, ctx)}};
  }

  nlohmann::ordered_json manifest_fields(const KernelSpec& s, const KernelId& id) const override {
    nlohmann::ordered_json j;
    j["files"] = {std::string(name()) + "/" + id.name + ".h",
                  std::string(name()) + "/" + id.name + ".cpp"};
    j["template"] = std::string(op_template(s.op).path) + ".mustache";
    nlohmann::ordered_json symbols = nlohmann::ordered_json::object();
    for (const auto& e : kEntrySymbols) symbols[e.field] = id.name + e.suffix;
    j["symbols"] = symbols;
    j["compile_flags"] = isa_flags(s.isa);
    j["footprint"] = {{"scratch_bytes_per_thread", scratch_bytes(s)},
                      {"tile", {{"tm", s.tiling.tm}, {"tk", s.tiling.tk}, {"tn", s.tiling.tn}}}};
    return j;
  }

  std::vector<EmittedFile> support_files() const override {
    return {{std::string(kAbiHeader), std::string(embedded_file(kAbiHeader))}};
  }

  void check_bundle(const std::string& bundle,
                    std::span<const BundleMember> members) const override {
    const bool ident = !bundle.empty() &&
                       (std::isalpha(static_cast<unsigned char>(bundle[0])) || bundle[0] == '_') &&
                       std::all_of(bundle.begin(), bundle.end(), [](char c) {
                         return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
                       });
    if (!ident)
      throw SpecError("bundle='" + bundle + "' must be a C identifier ([A-Za-z_][A-Za-z0-9_]*)");
    check_bundle_symbols(bundle, members);
  }

  std::vector<EmittedFile> bundle(const std::string& bundle, std::span<const BundleMember> members,
                                  nlohmann::ordered_json& manifest) const override {
    check_bundle(bundle, members);
    const std::string dir = std::string(name()) + "/";
    const std::string version(generator_version());
    Renderer r;
    // One translation unit per entry: the kernel's source and its aliases on its first entry,
    // otherwise a comment saying where its code is.
    std::vector<EmittedFile> units;
    mu::data kernels{mu::data::type::list}, aliases{mu::data::type::list},
        with_code{mu::data::type::list};
    nlohmann::ordered_json unit_list = nlohmann::ordered_json::array();
    nlohmann::ordered_json alias_map = nlohmann::ordered_json::object();
    size_t count = 0;
    for (size_t i = 0; i < members.size(); ++i) {
      const BundleMember& m = members[i];
      const std::string file = bundle + "_" + std::to_string(i) + ".cpp";
      mu::data ctx;
      ctx.set("version", version);
      ctx.set("bundle", bundle);
      ctx.set("index", std::to_string(i));
      nlohmann::ordered_json unit = {{"file", dir + file}};
      if (m.spec.target != kind()) {
        ctx.set("note", "This entry is a target=" + std::string(to_string(m.spec.target)) +
                            " kernel (" + std::string(to_string(m.spec.target)) + "/" + m.id.name +
                            "): no C++ code.");
        unit["compile_flags"] = nlohmann::ordered_json::array();
      } else if (m.first != i) {
        ctx.set("note", "This entry's kernel " + m.id.name + " is entry " +
                            std::to_string(m.first) + "'s (" + bundle + "_" +
                            std::to_string(m.first) + ".cpp): no code of its own.");
        unit["compile_flags"] = nlohmann::ordered_json::array();
      } else {
        mu::data kernel;
        kernel.set("name", m.id.name);
        kernel.set("spec", to_text(m.spec));
        kernel.set("native", mu::data(m.spec.isa == Isa::kNative));
        kernel.set("vector_guard", std::string(weakest_vector_family().guard));
        kernel.set("vector_family", std::string(weakest_vector_family().name));
        mu::data own_aliases{mu::data::type::list};
        for (const auto& a : m.aliases) {
          own_aliases.push_back(mu::object{{"alias", a}, {"name", m.id.name}});
          aliases.push_back(mu::object{{"alias", a}, {"name", m.id.name}});
          alias_map[a] = m.id.name;
        }
        kernel.set("aliases", own_aliases);
        ctx.set("kernel", kernel);
        kernels.push_back(mu::object{{"name", m.id.name}});
        with_code.push_back(mu::object{{"file", file}});
        unit["kernel"] = m.id.name;
        unit["compile_flags"] = isa_flags(m.spec.isa);
        ++count;
      }
      unit_list.push_back(unit);
      units.push_back({file, r.render("cpp/bundle.member.cpp", ctx)});
    }
    mu::data ctx;
    ctx.set("bundle", bundle);
    ctx.set("version", version);
    ctx.set("count", std::to_string(count));
    ctx.set("kernels", kernels);
    ctx.set("aliases", aliases);
    ctx.set("has_aliases", mu::data(!alias_map.empty()));
    ctx.set("members", with_code);
    const std::string table = bundle + "_table.cpp";
    unit_list.insert(unit_list.begin(),
                     nlohmann::ordered_json{{"file", dir + table},
                                            {"compile_flags", nlohmann::ordered_json::array()}});
    nlohmann::ordered_json files = {dir + bundle + ".h", dir + bundle + ".cpp"};
    for (const auto& u : unit_list) files.push_back(u["file"]);
    manifest = {{"name", bundle},
                {"files", files},
                {"table", bundle + "_kernels"},
                {"count", bundle + "_kernel_count"},
                {"compile_flags", bundle_flags(members)},
                {"translation_units", unit_list},
                {"aliases", alias_map}};
    std::vector<EmittedFile> out = {{bundle + ".h", r.render("cpp/bundle.h", ctx)},
                                    {bundle + ".cpp", r.render("cpp/bundle.cpp", ctx)},
                                    {table, r.render("cpp/bundle.table.cpp", ctx)}};
    for (auto& u : units) out.push_back(std::move(u));
    return out;
  }

  std::vector<std::string> toolchain_flags(const KernelSpec& s) const override {
    return isa_flags(s.isa);
  }
};

}  // namespace

const Target& cpp_target() {
  static const CppTarget t;
  return t;
}

}  // namespace gmmgen
