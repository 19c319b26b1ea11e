// The Pallas target on TPU: the generations, default tilings and the VMEM footprint of a
// kernel. No TPU measurements back the tilings yet: megablox's (128, 128, 128), with tk and tn
// as wide as the generation's MXU.
#include <algorithm>
#include <array>

#include "gmmgen/codes.h"
#include "gmmgen/heuristics.h"

namespace gmmgen {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;
// Per TensorCore, from JAX's get_tpu_info(): VMEM 16 MiB on v4, 128 MiB on v5e and v6e, 64 MiB
// on v5p; the MXU is 128 columns wide before v6 and 256 on v6e.
constexpr std::array<TpuGeneration, 5> kTpus{{
    {Tpu::kAny, "every TPU generation (v4's VMEM and MXU, the smallest)", 16 * kMiB, 128},
    {Tpu::kV4, "TPU v4", 16 * kMiB, 128},
    {Tpu::kV5e, "TPU v5e", 128 * kMiB, 128},
    {Tpu::kV5p, "TPU v5p", 64 * kMiB, 128},
    {Tpu::kV6e, "TPU v6e", 128 * kMiB, 256},
}};

}  // namespace

std::span<const TpuGeneration> tpu_generations() {
  return kTpus;
}

const TpuGeneration& tpu_generation(Tpu t) {
  for (const TpuGeneration& g : kTpus)
    if (g.id == t) return g;
  throw SpecError("tpu=" + std::to_string(int(t)) + " is not a TPU generation");
}

// megablox's tm (128), tk and tn one MXU wide, each cut to K or N when that is smaller (a block
// as large as its array's dimension always satisfies the block rule).
Tiling pallas_default_tiling(Op op, int64_t k, int64_t n, Tpu tpu) {
  (void)op;  // gmm and tgmm share the default until a TPU sweep says otherwise
  const int64_t mxu = tpu_generation(tpu).mxu;
  return Tiling{128, std::clamp<int64_t>(k, 1, mxu), std::clamp<int64_t>(n, 1, mxu)};
}

int64_t pallas_scale_block(const KernelSpec& s) {
  int64_t sb = 0;
  for (const Quant& q : {s.lhs_quant, s.rhs_quant})
    if (q.kind == QuantKind::kBlock) sb = sb ? std::min(sb, q.block_k) : q.block_k;
  return sb;
}

PackedAxes pallas_packed_axes(const KernelSpec& s) {
  const int64_t lhs = codes::elements_per_byte(s.lhs), rhs = codes::elements_per_byte(s.rhs);
  return {std::max(lhs, s.transpose_rhs ? rhs : 1), s.transpose_rhs ? 1 : rhs};
}

Tiling pallas_default_tiling(const KernelSpec& s) {
  Tiling t = pallas_default_tiling(s.op, s.k, s.n, s.tpu);
  if (s.op != Op::kGmm) return t;
  // Packed sub-byte codes: blocks of whole 128-lane tiles of bytes along their minor axis; a
  // k-tile of whole scale blocks.
  const PackedAxes per = pallas_packed_axes(s);
  const int64_t sb = pallas_scale_block(s);
  int64_t tk = std::max(t.tk, kTpuLanes * per.k);
  if (sb) tk = (tk + sb - 1) / sb * sb;
  t.tk = std::min(tk, s.k);
  t.tn = std::min(std::max(t.tn, kTpuLanes * per.n), s.n);
  return t;
}

PallasVjp pallas_vjp(const KernelSpec& s) {
  if (s.target != TargetKind::kPallas || s.op != Op::kGmm) return PallasVjp::kNone;
  if (!codes::is_quantized(s.lhs))
    return codes::is_quantized(s.rhs) ? PallasVjp::kFrozen : PallasVjp::kFloat;
  // The module quantizes float operands itself: whole-byte codes on both sides.
  if (codes::elements_per_byte(s.lhs) > 1 || !codes::is_quantized(s.rhs) ||
      codes::elements_per_byte(s.rhs) > 1)
    return PallasVjp::kNone;
  const auto fp8 = [](DType d) { return d == DType::kF8E4M3 || d == DType::kF8E5M2; };
  if (fp8(s.lhs) && fp8(s.rhs) && s.lhs_quant.kind == QuantKind::kBlock &&
      s.rhs_quant.kind == QuantKind::kBlock && s.rhs_quant.block_n != 0)
    return PallasVjp::kFp8Blocks;
  return PallasVjp::kDequantized;
}

KernelSpec pallas_dlhs_kernel(const KernelSpec& s) {
  KernelSpec k = s;
  k.lhs = s.out;
  k.lhs_quant = Quant{};
  k.out = codes::is_quantized(s.lhs) ? DType::kF32 : s.lhs;  // the module casts to lhs's dtype
  k.k = s.n;
  k.n = s.k;
  k.tiling = s.dlhs_tiling;
  k.transpose_rhs = !s.transpose_rhs;
  k.out_mode = OutMode::kPlain;
  if (pallas_vjp(s) == PallasVjp::kFp8Blocks) {
    // dout's codes in blocks of Bn along N (its contraction axis); the weights' BkxBn blocks read
    // with the axes swapped: Bn along the contraction, Bk along the output.
    k.lhs = kPallasGradDtype;
    k.lhs_quant = Quant{QuantKind::kBlock, s.rhs_quant.block_n, 0};
    k.rhs_quant = Quant{QuantKind::kBlock, s.rhs_quant.block_n, s.rhs_quant.block_k};
  }
  return k;
}

KernelSpec pallas_drhs_kernel(const KernelSpec& s) {
  KernelSpec k = s;
  k.op = Op::kTgmm;
  k.rhs = s.out;
  k.out = s.rhs;
  k.tiling = s.drhs_tiling;
  k.out_mode = OutMode::kPlain;
  switch (pallas_vjp(s)) {
    case PallasVjp::kFp8Blocks:  // lhs's and dout's codes in blocks of B global rows
      k.rhs = kPallasGradDtype;
      k.rhs_quant = Quant{QuantKind::kBlock, s.lhs_quant.block_k, 0};
      k.out = DType::kF32;
      break;
    case PallasVjp::kDequantized:  // lhs's values (codes times scales) and dout, in f32
      k.lhs = DType::kF32;
      k.lhs_quant = k.rhs_quant = Quant{};
      k.out = DType::kF32;
      break;
    default:
      break;
  }
  return k;
}

Tiling pallas_dlhs_default_tiling(const KernelSpec& s) {
  if (pallas_vjp(s) == PallasVjp::kFp8Blocks) return pallas_default_tiling(pallas_dlhs_kernel(s));
  Tiling t = pallas_default_tiling(Op::kGmm, s.n, s.k, s.tpu);
  if (!codes::is_quantized(s.rhs)) return t;
  const int64_t lanes = kTpuLanes * codes::elements_per_byte(s.rhs);
  if (s.transpose_rhs)  // codes stored [G, N, K]: packed along K, the kernel's output axis
    t.tn = std::min(std::max(t.tn, lanes), s.k);
  else  // stored [G, K, N]: packed along N, its contraction axis
    t.tk = std::min(std::max(t.tk, lanes), s.n);
  if (const int64_t b = s.rhs_quant.kind == QuantKind::kBlock ? s.rhs_quant.block_k : 0)
    t.tn = std::min((t.tn + b - 1) / b * b, s.k);
  return t;
}

int64_t pallas_vmem_limit(const KernelSpec& s) {
  return pallas_vmem_bytes(s) <= kTpuScopedVmemBytes ? 0 : tpu_generation(s.tpu).vmem_bytes;
}

int64_t pallas_acc_bytes(const KernelSpec& s) {
  // gmm accumulates a [tm, tn] tile of out, tgmm a [tk, tn] tile of one group's out.
  return 4 * (s.op == Op::kGmm ? s.tiling.tm : s.tiling.tk) * s.tiling.tn;
}

int64_t pallas_vmem_bytes(const KernelSpec& s) {
  const auto bytes = [](DType d, int64_t elements) { return elements * bits_of(d) / 8; };
  const Tiling& t = s.tiling;
  // Pallas double-buffers every block it pipelines (inputs, existing_out, out).
  const int64_t out_blocks = s.out_mode == OutMode::kPlain ? 1 : 2;
  int64_t blocks = 0;
  if (s.op == Op::kGmm)
    blocks = bytes(s.lhs, t.tm * t.tk) + bytes(s.rhs, t.tk * t.tn) +
             out_blocks * bytes(s.out, t.tm * t.tn);
  else
    blocks = bytes(s.lhs, t.tm * t.tk) + bytes(s.rhs, t.tm * t.tn) +
             out_blocks * bytes(s.out, t.tk * t.tn);
  // A quantized gmm's scales, whole along the k-blocks: lhs [tm, blocks], rhs [blocks, tn]; a
  // quantized tgmm's, per block of rows of its m-tile: lhs [blocks, tk], rhs [blocks, tn].
  if (codes::any_quantized(s)) {
    const int64_t sb = pallas_scale_block(s);
    if (s.op == Op::kGmm)
      blocks += 4 * (sb ? (s.k + sb - 1) / sb : 1) * (t.tm + t.tn);
    else
      blocks += 4 * (sb ? std::max<int64_t>(1, t.tm / sb) : 1) * (t.tk + t.tn);
  }
  return 2 * blocks + pallas_acc_bytes(s);
}

}  // namespace gmmgen
