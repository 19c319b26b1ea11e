// The C API: thin wrappers that turn exceptions into error codes and messages.
#include <cstring>
#include <functional>
#include <optional>
#include <span>

#include "api/c_args.h"
#include "api/c_errors.h"
#include "gmmgen/codes.h"
#include "gmmgen/heuristics.h"
#include "gmmgen/quantize.hpp"
#include "gmmgen/runtime.hpp"
#include "gmmgen/runtime_c.h"

struct gmmgen_runtime {
  gmmgen::Runtime rt{gmmgen::RuntimeOptions{}};  // Runtime's constructor is explicit
};

namespace {

using gmmgen::c_api::guarded;

gmmgen::TensorView view(const gmmgen_tensor* t, const char* what) {
  if (!t) throw gmmgen::InvalidArgument(std::string(what) + " is NULL");
  if (t->ndim < 1 || t->ndim > 3)
    throw gmmgen::InvalidArgument(std::string(what) + ".ndim=" + std::to_string(t->ndim) +
                                  " must be 1 to 3");
  if (t->dtype < 0 || t->dtype >= gmmgen::kNumDTypes)
    throw gmmgen::InvalidArgument(std::string(what) + ".dtype=" + std::to_string(t->dtype) +
                                  " is not a GMMGEN_DTYPE_* code");
  gmmgen::TensorView v;
  v.data = t->data;
  v.dtype = gmmgen::DType(t->dtype);
  v.ndim = t->ndim;
  for (int i = 0; i < 3; ++i) v.shape[i] = i < t->ndim ? t->shape[i] : 0;
  v.ld = t->ld;
  return v;
}

std::span<const int32_t> groups(const int32_t* group_sizes, int32_t num_groups) {
  if (!group_sizes) throw gmmgen::InvalidArgument("group_sizes is NULL");
  if (num_groups < 1)
    throw gmmgen::InvalidArgument("num_groups=" + std::to_string(num_groups) + " must be >= 1");
  return {group_sizes, size_t(num_groups)};
}

// A gmmgen_scales of options field `field` (e.g. "options.rhs_scales"); `operand` (a view
// already checked) decides whether scales are needed.
gmmgen::Scales scales(const gmmgen_scales& s, const std::string& field,
                      const gmmgen::TensorView* operand) {
  gmmgen::Scales out;
  if (s.scheme && *s.scheme) out.scheme = gmmgen::c_api::scheme_arg(s.scheme, field + ".");
  // The spec's block rule, checked here so that the message names the field (block_n is 0 for
  // 1-D blocks).
  const gmmgen::Quant& q = out.scheme;
  auto bad_block = [](int64_t b) { return b < 16 || b > gmmgen::kMaxTile || (b & (b - 1)) != 0; };
  if (q.kind == gmmgen::QuantKind::kBlock &&
      (bad_block(q.block_k) || (q.block_n && bad_block(q.block_n))))
    throw gmmgen::InvalidArgument(field + ".scheme=" + gmmgen::to_string(q) + ": block size " +
                                  std::to_string(bad_block(q.block_k) ? q.block_k : q.block_n) +
                                  " must be a power of two in [16, " +
                                  std::to_string(gmmgen::kMaxTile) + "]");
  out.data = s.data, out.ld = s.ld;
  const bool none = out.scheme.kind == gmmgen::QuantKind::kNone;
  if (none && s.data)
    throw gmmgen::InvalidArgument(field + ".data must be NULL: " + field +
                                  ".scheme is none (set it to the scales' scheme)");
  if (!none && !s.data)
    throw gmmgen::InvalidArgument(field + ".data is NULL: scheme " + gmmgen::to_string(out.scheme) +
                                  " needs scales");
  if (s.ld < 0)
    throw gmmgen::InvalidArgument(field + ".ld=" + std::to_string(s.ld) +
                                  " must be >= 0 (0 means packed)");
  if (none && operand && gmmgen::codes::needs_scales(operand->dtype))
    throw gmmgen::InvalidArgument(field + ".scheme is none, but dtype " +
                                  std::string(gmmgen::to_string(operand->dtype)) +
                                  " holds codes that need scales (tensor, channel, block:B)");
  return out;
}

std::optional<gmmgen::Tiling> tiling(int32_t tm, int32_t tk, int32_t tn) {
  if (!tm && !tk && !tn) return std::nullopt;
  return gmmgen::Tiling{tm, tk, tn};
}

gmmgen::LhsQuantization lhs_quantization(const gmmgen_lhs_quant* q) {
  if (!q) throw gmmgen::InvalidArgument("quant is NULL");
  gmmgen::LhsQuantization l;
  l.dtype = gmmgen::c_api::dtype_arg(q->dtype, "quant.");
  l.scheme =
      q->scheme && *q->scheme ? gmmgen::c_api::scheme_arg(q->scheme, "quant.") : gmmgen::Quant{};
  l.calibration = gmmgen::c_api::calibration_arg(
      q->calibration && *q->calibration ? q->calibration : nullptr, "quant.");
  return l;
}

// gmmgen_runtime_gmm, with lhs quantized by the call when `quant` is given.
void run_gmm(gmmgen_runtime* runtime, const gmmgen_tensor* lhs, const gmmgen_tensor* rhs,
             const int32_t* group_sizes, int32_t num_groups, const gmmgen_tensor* out,
             const gmmgen_gmm_options* options, std::optional<gmmgen::LhsQuantization> quant) {
  if (!runtime) throw gmmgen::InvalidArgument("runtime is NULL");
  const auto sizes = groups(group_sizes, num_groups);
  const gmmgen::TensorView l = view(lhs, "lhs"), r = view(rhs, "rhs"), y = view(out, "out");
  gmmgen::GmmOptions o;
  gmmgen::TensorView existing;
  const gmmgen_gmm_options none{};
  if (!options) options = &none;
  o.transpose_rhs = options->transpose_rhs != 0;
  o.group_offset = options->group_offset;
  o.accumulate = options->accumulate != 0;
  o.tiling = tiling(options->tm, options->tk, options->tn);
  if (options->existing_out) {
    existing = view(options->existing_out, "existing_out");
    o.existing_out = &existing;
  }
  o.lhs_scales = scales(options->lhs_scales, "options.lhs_scales", quant ? nullptr : &l);
  o.rhs_scales = scales(options->rhs_scales, "options.rhs_scales", &r);
  o.quantize_lhs = quant;
  runtime->rt.gmm(l, r, sizes, y, o);
}

}  // namespace

extern "C" {

int gmmgen_runtime_create(gmmgen_runtime** runtime, char* err, size_t err_len) {
  return guarded(err, err_len, [&] {
    if (!runtime) throw gmmgen::InvalidArgument("runtime is NULL");
    *runtime = new gmmgen_runtime();
  });
}

void gmmgen_runtime_destroy(gmmgen_runtime* runtime) {
  delete runtime;
}

int gmmgen_runtime_gmm(gmmgen_runtime* runtime, const gmmgen_tensor* lhs, const gmmgen_tensor* rhs,
                       const int32_t* group_sizes, int32_t num_groups, const gmmgen_tensor* out,
                       const gmmgen_gmm_options* options, char* err, size_t err_len) {
  return guarded(err, err_len, [&] {
    run_gmm(runtime, lhs, rhs, group_sizes, num_groups, out, options, std::nullopt);
  });
}

int gmmgen_runtime_gmm_quantize_lhs(gmmgen_runtime* runtime, const gmmgen_tensor* lhs,
                                    const gmmgen_tensor* rhs, const int32_t* group_sizes,
                                    int32_t num_groups, const gmmgen_tensor* out,
                                    const gmmgen_gmm_options* options,
                                    const gmmgen_lhs_quant* quant, char* err, size_t err_len) {
  return guarded(err, err_len, [&] {
    run_gmm(runtime, lhs, rhs, group_sizes, num_groups, out, options, lhs_quantization(quant));
  });
}

int gmmgen_runtime_tgmm(gmmgen_runtime* runtime, const gmmgen_tensor* lhs, const gmmgen_tensor* rhs,
                        const int32_t* group_sizes, int32_t num_groups, const gmmgen_tensor* out,
                        const gmmgen_tgmm_options* options, char* err, size_t err_len) {
  return guarded(err, err_len, [&] {
    if (!runtime) throw gmmgen::InvalidArgument("runtime is NULL");
    const auto sizes = groups(group_sizes, num_groups);
    const gmmgen::TensorView l = view(lhs, "lhs"), r = view(rhs, "rhs"), y = view(out, "out");
    gmmgen::TgmmOptions o;
    gmmgen::TensorView existing;
    const gmmgen_tgmm_options none{};
    if (!options) options = &none;
    o.group_offset = options->group_offset;
    o.lhs_transposed = options->lhs_transposed != 0;
    o.transpose_out = options->transpose_out != 0;
    o.tiling = tiling(options->tm, options->tk, options->tn);
    if (options->existing_out) {
      existing = view(options->existing_out, "existing_out");
      o.existing_out = &existing;
    }
    o.lhs_scales = scales(options->lhs_scales, "options.lhs_scales", &l);
    o.rhs_scales = scales(options->rhs_scales, "options.rhs_scales", &r);
    runtime->rt.tgmm(l, r, sizes, y, o);
  });
}

int gmmgen_runtime_gmm_vjp(gmmgen_runtime* runtime, const gmmgen_tensor* dout,
                           const gmmgen_tensor* lhs, const gmmgen_tensor* rhs,
                           const int32_t* group_sizes, int32_t num_groups,
                           const gmmgen_tensor* dlhs, const gmmgen_tensor* drhs,
                           const gmmgen_vjp_options* options, char* err, size_t err_len) {
  return guarded(err, err_len, [&] {
    if (!runtime) throw gmmgen::InvalidArgument("runtime is NULL");
    const auto sizes = groups(group_sizes, num_groups);
    const gmmgen::TensorView d = view(dout, "dout"), l = view(lhs, "lhs"), r = view(rhs, "rhs");
    gmmgen::GmmVjpOptions o;
    if (options) {
      o.transpose_rhs = options->transpose_rhs != 0;
      o.group_offset = options->group_offset;
      const int32_t* t = options->tiling;
      o.tiling = {tiling(t[0], t[1], t[2]), tiling(t[3], t[4], t[5]), tiling(t[6], t[7], t[8])};
      if (const gmmgen_vjp_quant* q = options->quant) {
        gmmgen::QuantVjp& v = o.quant.emplace();
        v.lhs_scales = scales(q->lhs_scales, "options.quant.lhs_scales", &l);
        v.rhs_scales = scales(q->rhs_scales, "options.quant.rhs_scales", &r);
        const std::string g = q->grad_dtype ? q->grad_dtype : "";
        if (g == "none")
          v.grad_dtype.reset();
        else if (!g.empty())
          v.grad_dtype = gmmgen::parse_dtype(g, "options.quant.grad_dtype");
        if (q->grad_block != 0) v.grad_block = q->grad_block;
        if (q->grad_calibration && *q->grad_calibration) {
          try {
            v.grad_calibration = gmmgen::parse_calibration(q->grad_calibration);
          } catch (const std::invalid_argument& e) {  // "calibration=... <rule>"
            throw gmmgen::InvalidArgument(std::string("options.quant.grad_") + e.what());
          }
        }
      }
    }
    runtime->rt.gmm_vjp(d, l, r, sizes, view(dlhs, "dlhs"), view(drhs, "drhs"), o);
  });
}

int gmmgen_runtime_warmup(gmmgen_runtime* runtime, const char* spec_text, char* err,
                          size_t err_len) {
  return guarded(err, err_len, [&] {
    if (!runtime || !spec_text) throw gmmgen::InvalidArgument("runtime or spec_text is NULL");
    runtime->rt.warmup({gmmgen::parse_text(spec_text)});
  });
}

int gmmgen_runtime_register(gmmgen_runtime* runtime, const gmmgen_kernel_entry* table,
                            int32_t count, char* err, size_t err_len) {
  return guarded(err, err_len, [&] {
    if (!runtime) throw gmmgen::InvalidArgument("runtime is NULL");
    runtime->rt.register_kernels(table, count);
  });
}

void gmmgen_runtime_get_stats(const gmmgen_runtime* runtime, gmmgen_runtime_stats* stats) {
  if (!runtime || !stats) return;
  const gmmgen::RuntimeStats s = runtime->rt.stats();
  *stats = {s.lookups,  s.registry_hits, s.memory_hits,     s.disk_hits,
            s.compiles, s.rebuilds,      s.compile_seconds, s.disk_load_seconds};
}

}  // extern "C"
