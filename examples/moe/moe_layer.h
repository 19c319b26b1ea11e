// A DeepSeek-style Mixture-of-Experts feed-forward layer on the CPU, built only on the public
// gmm-gen runtime API (gmmgen/runtime.hpp): router, top-k, tokens sorted by expert, grouped
// matmuls for w0/w1 (or one merged w0|w1 product), silu(h0) * h1 * routing weight, wo, unsort
// and combine; and its backward pass through Runtime::gmm_vjp and Runtime::tgmm.
//
// Quantized modes (docs/quantization.md) of the expert products; the router stays f32 in every mode
// (routing decisions are the part of an MoE layer least tolerant of rounding):
//   fp8-block:    activations (the sorted inputs xs, and a = silu(h0) * h1 * w) quantized to
//                 e4m3 in 1x128 blocks for the forward and 128x1 blocks for the weight gradients,
//                 in one pass (dual quantization); weights e4m3 in 128x128 blocks. Backward as
//                 DeepGEMM / Transformer Engine: dout quantized by the runtime to e5m2 (1x128 for
//                 dlhs, 128x1 for dw), dlhs reads the weights' codes transposed with the same
//                 scale array, dw = tgmm(activation 128x1 codes, dout 128x1 codes).
//   int8-channel: activations i8 with one scale per row, weights i8 with one scale per expert
//                 and output column; an exact i32 product per forward gmm. Per-column weight
//                 scales lie along the contraction axis of dlhs, so they cannot scale dlhs's
//                 output: the runtime folds them into dout (dout'[r, n] = dout[r, n] * s[e, n])
//                 and multiplies dout' (f32) by the i8 codes with a tensor scale of 1, which is
//                 exactly dout @ dequantized(w)^T. Per-row activation scales lie along the
//                 contraction axis of dw, and an i8 x f32 tgmm does not exist (integer
//                 activations pair only with integer operands), so dw = tgmm(dequantized
//                 activation, dout) in f32. Gradients are not quantized in this mode.
// In both modes the gradients are those of the quantized forward with the quantizers taken as the
// identity (straight-through): with respect to the dequantized weights and inputs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gmmgen/runtime.hpp"

namespace moe {

enum class Quant { kNone, kFp8Block, kInt8Channel };
// "none", "fp8-block", "int8-channel".
Quant parse_quant(const std::string& text);
const char* to_string(Quant q);

struct Config {
  int64_t tokens = 2048;  // T
  int64_t d_model = 512;  // D
  int64_t d_ff = 768;     // F, per expert
  int64_t experts = 8;    // E
  int64_t top_k = 2;      // k experts per token
  bool merged = true;     // one gmm against w0|w1 concatenated along N instead of two
  Quant quant = Quant::kNone;
};

// All tensors row-major f32.
struct Weights {
  std::vector<float> router;  // [D, E]
  std::vector<float> w0, w1;  // [E, D, F] each (unmerged layout)
  std::vector<float> wo;      // [E, F, D]
  static Weights random(const Config& c, uint64_t seed);
};

struct Gradients {
  std::vector<float> dx;        // [T, D]
  std::vector<float> drouter;   // [D, E]
  std::vector<float> dw0, dw1;  // [E, D, F]
  std::vector<float> dwo;       // [E, F, D]
};

class Layer {
 public:
  // Quantized modes quantize the weights here, once.
  Layer(gmmgen::Runtime& rt, Config c, const Weights& w);

  // The weights the layer computes with: dequantized in the quantized modes.
  Weights effective_weights() const;
  // x [T, D] as the first expert product reads it: each row quantized as the forward quantizes
  // it (1x128 e4m3 blocks, or one i8 scale per row), then dequantized; x itself in mode none.
  std::vector<float> effective_input(const std::vector<float>& x) const;

  // y [T, D]; keeps what backward needs.
  std::vector<float> forward(const std::vector<float>& x);
  // Gradients of sum(y * dy) for the last forward's input and the weights.
  Gradients backward(const std::vector<float>& dy);

  // Multiply-adds x 2 of one forward / backward pass (the grouped products and the router).
  double forward_flops() const;
  double backward_flops() const;

 private:
  // A quantized weight stack [E, K, N]: codes and scales (block:128x128 [E, ceil(K/128),
  // ceil(N/128)], or channel [E, N]).
  struct QWeight {
    std::vector<uint8_t> codes;
    std::vector<float> scales;
    int64_t k = 0, n = 0;
  };
  // A quantized activation [R, C] as one operand reads it: codes, scales and their scheme.
  struct QAct {
    std::vector<uint8_t> codes;
    std::vector<float> scales;
    gmmgen::Quant scheme;
  };

  QWeight quantize_weight(const std::vector<float>& w, int64_t k, int64_t n) const;
  std::vector<float> dequantize_weight(const QWeight& q) const;
  gmmgen::TensorView weight_view(const QWeight& q) const;
  gmmgen::Scales weight_scales(const QWeight& q) const;
  // An activation [R, C] quantized for the forward product (`fwd`) and, saved for the backward
  // pass, as the weight gradient reads it (`bwd`: fp8 128x1 codes; `bwd_value`: int8's
  // dequantized values). Nothing in mode none.
  void quantize_activation(const std::vector<float>& act, int64_t cols, QAct& fwd, QAct& bwd,
                           std::vector<float>& bwd_value) const;
  // out [R, N] (out_ld apart) = act [R, C] @ w[expert of row], through the mode's operands.
  void expert_gmm(const std::vector<float>& act, const QAct& fwd, int64_t cols,
                  const std::vector<float>& w, const QWeight& qw, int64_t n, float* out,
                  int64_t out_ld);
  // The backward of expert_gmm: dact [R, C] and dw [E, C, N] from dout [R, N] (dout_ld apart).
  void expert_vjp(const float* dout, int64_t n, int64_t dout_ld, const std::vector<float>& act,
                  const QAct& bwd, const std::vector<float>& bwd_value, int64_t cols,
                  const std::vector<float>& w, const QWeight& qw, std::vector<float>& dact,
                  std::vector<float>& dw);

  gmmgen::Runtime& rt_;
  Config c_;
  std::vector<float> router_, w01_, w0_, w1_, wo_;  // w01_: [E, D, 2F] when merged
  QWeight qw01_, qw0_, qw1_, qwo_;                  // the quantized modes' weights

  // Saved by forward.
  std::vector<float> x_, logits_;
  std::vector<int32_t> group_sizes_;
  std::vector<int64_t> token_of_;    // sorted row -> token
  std::vector<int64_t> expert_of_;   // sorted row -> expert
  std::vector<float> weight_of_;     // sorted row -> routing weight
  std::vector<float> xs_, h01_, a_;  // sorted inputs [Tk, D], h0|h1 [Tk, 2F], a [Tk, F]
  // Quantized modes: xs and a as the weight gradients read them (fp8: 128x1 codes; int8: their
  // dequantized values).
  QAct xs_bwd_, a_bwd_;
  std::vector<float> xs_hat_, a_hat_;
};

}  // namespace moe
