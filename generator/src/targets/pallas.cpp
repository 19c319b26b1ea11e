// The Pallas target: a kernel is one Python module <name>.py (pallas/gmm.py or pallas/tgmm.py)
// for JAX Pallas on TPU, megablox-compatible. A gmm module also carries the backward kernels of
// its differentiable gmm (dlhs and drhs), each with its own tiling from the spec.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "gmmgen/codes.h"
#include "gmmgen/heuristics.h"
#include "gmmgen/target.h"
#include "gmmgen/templates.h"
#include "render.h"

namespace gmmgen {
namespace {

// One pallas_call of a module, as a spec of its own problem (its cost model and block rule are
// the spec's).
struct ModuleKernel {
  std::string_view var;           // the module's Python name of its baked configuration
  std::string_view role;          // gmm, dlhs, drhs, tgmm
  std::string_view tiling_key;    // the spec key of its tiling ("" for tm, tk, tn), for messages
  std::string_view k_key, n_key;  // the spec keys of its contraction and output sizes
  std::string_view doc;
  KernelSpec spec;
  // The rhs codes are dequantized in VMEM (decoded times the forward's scales, element by
  // element) before an f32 product: the dlhs kernel of a module with quantized weights.
  bool dequant = false;
};

// The kernels of a module: the forward, then its VJP's (pallas_vjp, pallas_dlhs_kernel,
// pallas_drhs_kernel). Both backward kernels write fresh outputs (plain).
std::vector<ModuleKernel> module_kernels(const KernelSpec& s) {
  if (s.op == Op::kTgmm) {
    return {{"_TGMM", "tgmm", "", "k", "n",
             codes::any_quantized(s)
                 ? "The kernel: out[j] = lhs codes[rows of g]^T @ rhs codes[rows of g], scaled "
                   "per block of rows."
                 : "The kernel: out[j] = lhs[rows of g]^T @ rhs[rows of g].",
             s}};
  }
  const auto dlhs = [&](const char* doc, bool dequant) {
    return ModuleKernel{"_DLHS", "dlhs", "dlhs_tiling",         "n",
                        "k",     doc,    pallas_dlhs_kernel(s), dequant};
  };
  const auto drhs = [&](const char* doc) {
    return ModuleKernel{"_DRHS", "drhs", "drhs_tiling", "k", "n", doc, pallas_drhs_kernel(s)};
  };
  switch (pallas_vjp(s)) {
    case PallasVjp::kNone:
      return {{"_GMM", "gmm", "", "k", "n",
               "The forward kernel: out = (lhs codes x rhs codes) per group, scaled per k-block.",
               s}};
    case PallasVjp::kFrozen:  // dlhs only, through the codes in place
      return {
          {"_GMM", "gmm", "", "k", "n",
           "The forward kernel: out = lhs x (rhs codes) per group, scaled per k-block.", s},
          dlhs("The backward's dlhs = gmm(dout, rhs dequantized in VMEM, read transposed).", true)};
    case PallasVjp::kFp8Blocks:
      return {
          {"_GMM", "gmm", "", "k", "n",
           "The forward kernel: out = (lhs codes x rhs codes) per group, scaled per k-block.", s},
          dlhs("The backward's dlhs = gmm(dout's e5m2 codes, rhs codes read transposed), "
               "scaled per block of N.",
               false),
          drhs("The backward's drhs = tgmm(lhs's column codes, dout's column codes), scaled "
               "per block of rows.")};
    case PallasVjp::kDequantized:
      return {
          {"_GMM", "gmm", "", "k", "n",
           "The forward kernel: out = (lhs codes x rhs codes) per group, scaled per k-block.", s},
          dlhs("The backward's dlhs = gmm(dout, rhs dequantized in VMEM, read transposed).", true),
          drhs("The backward's drhs = tgmm(lhs dequantized, dout), in f32.")};
    case PallasVjp::kFloat:
      break;
  }
  return {{"_GMM", "gmm", "", "k", "n", "The forward kernel: out = lhs x rhs per group.", s},
          dlhs("The backward's dlhs = gmm(dout, rhs read transposed): contracts over N.", false),
          drhs("The backward's drhs = tgmm(lhs, dout), in rhs's dtype and layout.")};
}

// A tile of a kernel in messages: "tk=100", or "dlhs_tiling tk=100" for a backward kernel.
std::string tile_text(const ModuleKernel& mk, std::string_view tile, int64_t value) {
  const std::string key = mk.tiling_key.empty() ? "" : std::string(mk.tiling_key) + " ";
  return key + std::string(tile) + "=" + std::to_string(value);
}

// Mosaic's block rule for a tile along an array dimension: a multiple of `unit`, or the whole
// dimension (dim empty: the dimension is M, known only at run time). A multiple larger than the
// dimension is a partial block: the kernels mask what lies past the array.
void check_block(const ModuleKernel& mk, std::string_view tile, int64_t value, std::string_view dim,
                 int64_t extent, int64_t unit, const char* why) {
  if (value % unit == 0 || (!dim.empty() && value == extent)) return;
  throw SpecError(
      tile_text(mk, tile, value) + " must be a multiple of " + std::to_string(unit) +
      (dim.empty() ? "" : " or equal to " + std::string(dim) + "=" + std::to_string(extent)) +
      " (target=pallas: Mosaic blocks are made of whole " + std::to_string(kTpuSublanes) + "x" +
      std::to_string(kTpuLanes) + " tiles; " + why + ")");
}

// A kernel's double-buffered blocks and accumulator must fit its TPU generation's VMEM.
void check_vmem(const ModuleKernel& mk) {
  const KernelSpec& k = mk.spec;
  const int64_t vmem = pallas_vmem_bytes(k);
  const TpuGeneration& gen = tpu_generation(k.tpu);
  if (vmem <= gen.vmem_bytes) return;
  std::string fits;
  for (const TpuGeneration& g : tpu_generations())
    if (g.vmem_bytes >= vmem)
      fits += (fits.empty() ? "" : ", ") + std::string("tpu=") + std::string(to_string(g.id)) +
              " (" + std::to_string(g.vmem_bytes >> 20) + " MiB)";
  const Tiling& t = k.tiling;
  throw SpecError((mk.tiling_key.empty() ? std::string("tiling") : std::string(mk.tiling_key)) +
                  "=" + std::to_string(t.tm) + "x" + std::to_string(t.tk) + "x" +
                  std::to_string(t.tn) + ": the " + std::string(mk.role) + " kernel needs " +
                  std::to_string(vmem) +
                  " bytes of VMEM (double-buffered blocks and the f32 accumulator), above the " +
                  std::to_string(gen.vmem_bytes) + " of tpu=" + std::string(to_string(k.tpu)) +
                  " (" + std::string(gen.what) + "); " +
                  (fits.empty() ? std::string("no TPU generation has that much: use smaller tiles")
                                : "use smaller tiles, or a generation with more VMEM: " + fits));
}

// A module's public names (its __all__ and the manifest's exports).
std::vector<std::string> exports(const KernelSpec& s) {
  if (s.op == Op::kTgmm) return {"tgmm", "tgmm_mk", "make_group_metadata"};
  switch (pallas_vjp(s)) {
    case PallasVjp::kNone:
      return {"gmm", "make_group_metadata"};
    case PallasVjp::kFloat:
      return {"gmm", "tgmm", "tgmm_mk", "differentiable_gmm", "make_group_metadata"};
    case PallasVjp::kFrozen:
      return {"gmm", "differentiable_gmm", "make_group_metadata"};
    default:  // training: the module quantizes float operands
      return {"gmm", "differentiable_gmm", "quantize_lhs", "quantize_rhs", "make_group_metadata"};
  }
}

std::string py_bool(bool b) {
  return b ? "True" : "False";
}
std::string py_items(const Tiling& t) {
  return std::to_string(t.tm) + ", " + std::to_string(t.tk) + ", " + std::to_string(t.tn);
}
std::string py_tuple(const Tiling& t) {
  return "(" + py_items(t) + ")";
}
std::string jnp_of(DType d) {
  return std::string(dtype_info(d).jnp);
}

// How a kernel multiplies: "int" (integer codes on both sides: exact int32 products and sums),
// "bf16" (every value of both operands is a bf16 value: exact products, f32 sums) or "f32".
std::string product_of(const KernelSpec& k) {
  const auto integer = [](DType d) { return dtype_info(d).kind == DTypeKind::kInteger; };
  if (integer(k.lhs) && integer(k.rhs)) return "int";
  return codes::bf16_exact(k.lhs) && codes::bf16_exact(k.rhs) ? "bf16" : "f32";
}

// The values of a sub-byte dtype's codes, 0 .. 2^bits - 1, as a Python tuple ("None" for codes
// of 8 bits and more, which convert with astype).
std::string levels_py(DType d) {
  if (codes::elements_per_byte(d) == 1) return "None";
  std::string out = "(";
  char buf[32];
  for (int c = 0; c < (1 << bits_of(d)); ++c) {
    std::snprintf(buf, sizeof buf, "%.9g", double(codes::decode(d, uint8_t(c))));
    out += std::string(c ? ", " : "") + buf;
  }
  return out + ")";
}

std::string scales_py(const Quant& q) {
  static const char* kKinds[] = {"none", "tensor", "channel", "block"};
  return kKinds[int(q.kind)];
}

class PallasTarget final : public Target {
 public:
  TargetKind kind() const override { return TargetKind::kPallas; }
  TargetCaps caps() const override { return {.bundles = false, .runtime_runs = false}; }
  Tiling default_tiling(const KernelSpec& s) const override { return pallas_default_tiling(s); }

  void check(const KernelSpec& s) const override {
    auto not_yet = [](const std::string& what, const char* why) {
      throw SpecError("not supported yet for target=pallas: " + what + " (" + why + ")");
    };
    for (auto [p, d] :
         {std::pair{"lhs", s.lhs}, std::pair{"rhs", s.rhs}, std::pair{"out", s.out}}) {
      if (dtype_info(d).jnp.empty())
        not_yet(std::string(p) + "=" + std::string(to_string(d)),
                "TPU matmuls take f32, bf16 and the quantized codes");
      else if (codes::elements_per_byte(d) > 1 && s.op == Op::kTgmm)
        not_yet("op=tgmm with " + std::string(p) + "=" + std::string(to_string(d)),
                "the Pallas tgmm reads codes of whole bytes: f8e4m3, f8e5m2, i8");
    }
    if (s.isa != Isa::kNative)
      throw SpecError("isa=" + std::string(to_string(s.isa)) +
                      " applies to target=cpp only (a Pallas module has no ISA family)");
    for (const ModuleKernel& mk : module_kernels(s)) {
      const KernelSpec& k = mk.spec;
      const Tiling& t = k.tiling;
      for (auto [tile, v] : {std::pair{"tm", t.tm}, std::pair{"tk", t.tk}, std::pair{"tn", t.tn}})
        if (v < 1 || v > kMaxTile)
          throw SpecError(tile_text(mk, tile, v) + " must be in [1, " + std::to_string(kMaxTile) +
                          "]");
      const bool km = k.op == Op::kTgmm && k.lhs_layout == LhsLayout::kKM;
      check_block(mk, "tm", t.tm, "", 0, km ? kTpuLanes : kTpuSublanes,
                  km ? "tm is the minor dimension of the lhs [K, M] blocks"
                     : "tm is a second-minor block dimension, and M is a run-time value");
      // Sub-byte codes pack along their operand's minor dimension: its blocks hold whole bytes
      // of whole 128-lane tiles.
      const PackedAxes per = pallas_packed_axes(k);
      check_block(mk, "tk", t.tk, mk.k_key, k.k, kTpuLanes * per.k,
                  per.k > 1 ? "tk / codes per byte is the minor dimension of the packed blocks"
                  : k.op == Op::kGmm ? "tk is the minor dimension of the lhs blocks"
                                     : "tk is a minor dimension of the lhs or out blocks");
      check_block(mk, "tn", t.tn, mk.n_key, k.n, kTpuLanes * per.n,
                  per.n > 1 ? "tn / codes per byte is the minor dimension of the packed rhs blocks"
                            : "tn is a minor dimension of the out blocks");
      // A dequantizing kernel reads the forward's scales in blocks of B along its output axis
      // (K): an n-tile holds whole blocks.
      const int64_t b = k.rhs_quant.kind == QuantKind::kBlock ? k.rhs_quant.block_k : 0;
      if (mk.dequant && b && t.tn % b != 0 && t.tn < k.n)
        throw SpecError(tile_text(mk, "tn", t.tn) + " must be a multiple of the scale block " +
                        std::to_string(b) + " (rhs_quant=" + to_string(k.rhs_quant) +
                        ") or cover k=" + std::to_string(k.n) +
                        " (target=pallas: the dlhs kernel dequantizes the weights' blocks)");
      // Scales apply per block of the finest block scale along the contraction axis: gmm's
      // k-tile holds whole blocks; tgmm's m-tile (its blocks run over global rows, and m-tiles
      // start at multiples of tm) holds whole blocks or lies inside one.
      const int64_t sb = mk.dequant ? 0 : pallas_scale_block(k);
      if (sb && k.op == Op::kTgmm && t.tm % sb != 0 && sb % t.tm != 0)
        throw SpecError(
            tile_text(mk, "tm", t.tm) + " must be a multiple or a divisor of the scale " +
            "block " + std::to_string(sb) +
            " (target=pallas: a tgmm m-tile holds whole blocks of rows or lies in one)");
      if (sb && k.op == Op::kGmm && t.tk % sb != 0 && t.tk < k.k) {
        const bool lhs_sb = k.lhs_quant.kind == QuantKind::kBlock && k.lhs_quant.block_k == sb;
        throw SpecError(tile_text(mk, "tk", t.tk) + " must be a multiple of the scale block " +
                        std::to_string(sb) + " (" + (lhs_sb ? "lhs_quant=" : "rhs_quant=") +
                        to_string(lhs_sb ? k.lhs_quant : k.rhs_quant) +
                        ") or cover k=" + std::to_string(k.k) +
                        " (target=pallas applies the scales once per block of a k-tile)");
      }
      check_vmem(mk);
    }
  }

  std::vector<EmittedFile> render(const KernelSpec& s, const KernelId& id,
                                  Renderer& r) const override {
    const bool gmm = s.op == Op::kGmm;
    const std::string tmpl = gmm ? "pallas/gmm.py" : "pallas/tgmm.py";
    mu::data ctx;
    ctx.set("name", id.name);
    ctx.set("spec", to_text(s));
    ctx.set("hash", id.hash);
    ctx.set("version", std::string(generator_version()));
    ctx.set("template", tmpl + ".mustache");
    ctx.set("op", std::string(to_string(s.op)));
    ctx.set("k", std::to_string(s.k));
    ctx.set("n", std::to_string(s.n));
    ctx.set("g", std::to_string(s.g));
    ctx.set("g_local", std::to_string(s.g_local));
    ctx.set("lhs_jnp", jnp_of(s.lhs));
    ctx.set("rhs_jnp", jnp_of(s.rhs));
    ctx.set("out_jnp", jnp_of(s.out));
    ctx.set("transpose_rhs_py", py_bool(s.transpose_rhs));
    ctx.set("lhs_layout", std::string(to_string(s.lhs_layout)));
    ctx.set("out_mode", std::string(to_string(s.out_mode)));
    ctx.set("tpu", std::string(to_string(s.tpu)));
    const PallasVjp vjp = pallas_vjp(s);
    ctx.set("vjp", mu::data(vjp == PallasVjp::kFloat));
    // Quantized weights with a float lhs: frozen weights, a VJP for lhs (the dlhs kernel).
    ctx.set("frozen", mu::data(vjp == PallasVjp::kFrozen));
    // Quantized activations and weights trained from float operands the module quantizes.
    ctx.set("training", mu::data(vjp == PallasVjp::kFp8Blocks || vjp == PallasVjp::kDequantized));
    ctx.set("fp8_blocks", mu::data(vjp == PallasVjp::kFp8Blocks));
    if (vjp == PallasVjp::kFp8Blocks) {
      ctx.set("grad_jnp", jnp_of(kPallasGradDtype));
      ctx.set("grad_doc", "its rows in blocks of " + std::to_string(s.rhs_quant.block_n) +
                              " along N for dlhs, its columns in blocks of " +
                              std::to_string(s.lhs_quant.block_k) + " global rows for drhs");
    }
    std::string tiling_py;  // every kernel's (tm, tk, tn), in the module's order
    for (const ModuleKernel& mk : module_kernels(s))
      tiling_py += (tiling_py.empty() ? "(" : ", ") + py_items(mk.spec.tiling);
    ctx.set("tiling_py", tiling_py + ")");
    ctx.set("quant", mu::data(codes::any_quantized(s)));
    ctx.set("lhs_quant", to_string(s.lhs_quant));
    ctx.set("rhs_quant", to_string(s.rhs_quant));
    const auto codes_doc = [](DType d, const Quant& q) {
      return codes::is_quantized(d) ? std::string(to_string(d)) + " codes (" + jnp_of(d) +
                                          ") with " + to_string(q) + " scales"
                                    : "plain " + std::string(to_string(d)) + " values";
    };
    ctx.set("lhs_codes_doc", codes_doc(s.lhs, s.lhs_quant));
    ctx.set("rhs_codes_doc", codes_doc(s.rhs, s.rhs_quant));
    std::string exports_py;
    for (const std::string& e : exports(s))
      exports_py += (exports_py.empty() ? "[\"" : ", \"") + e + "\"";
    ctx.set("exports_py", exports_py + "]");
    const std::string kk = "K=" + std::to_string(s.k), nn = "N=" + std::to_string(s.n);
    ctx.set("lhs_layout_doc", s.lhs_layout == LhsLayout::kKM
                                  ? "[" + kk + ", M] (lhs_layout=km, read in place)"
                                  : "[M, " + kk + "]");
    if (gmm) {
      ctx.set("rhs_layout_doc",
              s.transpose_rhs ? "stored [G_local, N, K]: transpose_rhs" : "stored [G_local, K, N]");
      static const char* kRows[] = {
          "zero",
          ("left as existing_out has them (the output aliases existing_out; active rows are "
           "overwritten)"),
          ("left as existing_out has them, and active rows add the product to existing_out (the "
           "output aliases it)")};
      static const char* kExisting[] = {
          "None: rows outside the active groups are zero",
          "required, [M, N]: rows outside the active groups keep its values",
          ("required, [M, N]: each row is its row plus the product (zero outside the active "
           "groups)")};
      ctx.set("out_mode_doc", std::string(kRows[int(s.out_mode)]));
      ctx.set("existing_doc", std::string(kExisting[int(s.out_mode)]));
      ctx.set("gmm_tiling_py", py_tuple(s.tiling));
      ctx.set("tgmm_out_jnp", jnp_of(s.rhs));
      ctx.set("tgmm_tiling_py", py_tuple(s.drhs_tiling));
      ctx.set("tgmm_var", std::string("_TGMM_API"));
      ctx.set("tgmm_out_doc", "[G_local, " + kk + ", " + nn + "]");
      ctx.set("tgmm_existing_doc", std::string("None (the result is written, not added)"));
      ctx.set("lhs_km", false);

    } else {
      const bool acc = s.out_mode == OutMode::kAccumulate;
      ctx.set("out_mode_doc", acc ? std::string("The product is added to existing_out (gradient "
                                                "accumulation; the output aliases it).")
                                  : std::string("out is overwritten."));
      const std::string existing =
          acc ? std::string("required, out's shape: the product is added") : std::string("None");
      ctx.set("existing_doc", existing);
      ctx.set("tgmm_tiling_py", py_tuple(s.tiling));
      ctx.set("tgmm_out_jnp", jnp_of(s.out));
      ctx.set("tgmm_var", std::string("_TGMM"));
      ctx.set("tgmm_out_doc", s.transpose_rhs ? "stored [G_local, " + nn + ", " + kk +
                                                    "] (transpose_rhs; megablox's is [G, K, N])"
                                              : "[G_local, " + kk + ", " + nn + "]");
      ctx.set("tgmm_existing_doc", existing);
      ctx.set("lhs_km", s.lhs_layout == LhsLayout::kKM);
    }
    mu::data kernels{mu::data::type::list};
    for (const ModuleKernel& mk : module_kernels(s)) {
      const KernelSpec& k = mk.spec;
      const Cost c = cost_estimate(k);
      mu::data e;
      e.set("var", std::string(mk.var));
      e.set("doc", std::string(mk.doc));
      e.set("role", std::string(mk.role));
      e.set("op", std::string(to_string(k.op)));
      e.set("k", std::to_string(k.k));
      e.set("n", std::to_string(k.n));
      e.set("lhs_jnp", jnp_of(k.lhs));
      e.set("rhs_jnp", jnp_of(k.rhs));
      e.set("out_jnp", jnp_of(k.out));
      e.set("tm", std::to_string(k.tiling.tm));
      e.set("tk", std::to_string(k.tiling.tk));
      e.set("tn", std::to_string(k.tiling.tn));
      e.set("transposed_py", py_bool(k.transpose_rhs));
      e.set("lhs_km_py", py_bool(k.op == Op::kTgmm && k.lhs_layout == LhsLayout::kKM));
      e.set("out_mode", std::string(to_string(k.out_mode)));
      e.set("product", mk.dequant ? std::string("f32") : product_of(k));
      e.set("rhs_dequant_py", py_bool(mk.dequant));
      e.set("lhs_scales", scales_py(k.lhs_quant));
      e.set("lhs_block", std::to_string(k.lhs_quant.block_k));
      e.set("rhs_scales", scales_py(k.rhs_quant));
      e.set("rhs_block_k", std::to_string(k.rhs_quant.block_k));
      e.set("rhs_block_n", std::to_string(k.rhs_quant.block_n));
      e.set("scale_block", std::to_string(mk.dequant ? 0 : pallas_scale_block(k)));
      e.set("lhs_per_byte", std::to_string(codes::elements_per_byte(k.lhs)));
      e.set("rhs_per_byte", std::to_string(codes::elements_per_byte(k.rhs)));
      e.set("lhs_levels", levels_py(k.lhs));
      e.set("rhs_levels", levels_py(k.rhs));
      const int64_t limit = pallas_vmem_limit(k);
      e.set("vmem_limit_py", limit ? std::to_string(limit) : std::string("None"));
      e.set("flops_per_m", std::to_string(c.flops.per_m));
      e.set("flops_fixed", std::to_string(c.flops.fixed));
      e.set("bytes_per_m", std::to_string(c.bytes.per_m));
      e.set("bytes_fixed", std::to_string(c.bytes.fixed));
      kernels.push_back(e);
    }
    ctx.set("kernels", kernels);
    return {{id.name + ".py", r.render(tmpl, ctx)}};
  }

  nlohmann::ordered_json manifest_fields(const KernelSpec& s, const KernelId& id) const override {
    nlohmann::ordered_json j;
    j["files"] = {std::string(name()) + "/" + id.name + ".py"};
    j["template"] =
        std::string(s.op == Op::kGmm ? "pallas/gmm.py" : "pallas/tgmm.py") + ".mustache";
    j["module"] = id.name;
    j["exports"] = exports(s);
    // Per pallas_call: its tiling, VMEM and cost model (the forward's cost is the entry's).
    nlohmann::ordered_json calls = nlohmann::ordered_json::object();
    int64_t vmem = 0, acc = 0;
    for (const ModuleKernel& mk : module_kernels(s)) {
      const KernelSpec& k = mk.spec;
      const Cost c = cost_estimate(k);
      vmem = std::max(vmem, pallas_vmem_bytes(k));
      acc = std::max(acc, pallas_acc_bytes(k));
      calls[std::string(mk.role)] = {
          {"tile", {{"tm", k.tiling.tm}, {"tk", k.tiling.tk}, {"tn", k.tiling.tn}}},
          {"vmem_bytes", pallas_vmem_bytes(k)},
          {"vmem_limit_bytes", pallas_vmem_limit(k)},
          {"cost",
           {{"flops", {{"per_m", c.flops.per_m}, {"fixed", c.flops.fixed}}},
            {"bytes", {{"per_m", c.bytes.per_m}, {"fixed", c.bytes.fixed}}}}}};
    }
    j["pallas_calls"] = calls;
    const TpuGeneration& gen = tpu_generation(s.tpu);
    j["tpu"] = {{"generation", std::string(to_string(s.tpu))},
                {"vmem_bytes", gen.vmem_bytes},
                {"mxu", gen.mxu}};
    // A TensorCore runs one grid step at a time: its scratch is the f32 accumulator tile.
    j["footprint"] = {{"scratch_bytes_per_thread", acc},
                      {"vmem_bytes", vmem},
                      {"tile", {{"tm", s.tiling.tm}, {"tk", s.tiling.tk}, {"tn", s.tiling.tn}}}};
    return j;
  }

  std::vector<EmittedFile> support_files() const override { return {}; }

  std::vector<EmittedFile> bundle(const std::string& bundle, std::span<const BundleMember>,
                                  nlohmann::ordered_json&) const override {
    throw SpecError("bundle '" + bundle + "': bundles hold C++ kernels; target=pallas has none");
  }

  std::vector<std::string> toolchain_flags(const KernelSpec&) const override { return {}; }
};

}  // namespace

const Target& pallas_target() {
  static const PallasTarget t;
  return t;
}

}  // namespace gmmgen
