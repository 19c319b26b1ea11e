// A DeepSeek-style Mixture-of-Experts feed-forward layer on the CPU, built only on the public
// gmm-gen runtime API (gmmgen/runtime.hpp): router, top-k, tokens sorted by expert, grouped
// matmuls for w0/w1 (or one merged w0|w1 product), silu(h0) * h1 * routing weight, wo, unsort
// and combine; and its backward pass through Runtime::gmm_vjp and Runtime::tgmm.
#pragma once

#include <cstdint>
#include <vector>

#include "gmmgen/runtime.hpp"

namespace moe {

struct Config {
  int64_t tokens = 2048;  // T
  int64_t d_model = 512;  // D
  int64_t d_ff = 768;     // F, per expert
  int64_t experts = 8;    // E
  int64_t top_k = 2;      // k experts per token
  bool merged = true;     // one gmm against w0|w1 concatenated along N instead of two
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
  Layer(gmmgen::Runtime& rt, Config c, const Weights& w);

  // y [T, D]; keeps what backward needs.
  std::vector<float> forward(const std::vector<float>& x);
  // Gradients of sum(y * dy) for the last forward's input and the weights.
  Gradients backward(const std::vector<float>& dy);

  // Multiply-adds x 2 of one forward / backward pass (the grouped products and the router).
  double forward_flops() const;
  double backward_flops() const;

 private:
  gmmgen::Runtime& rt_;
  Config c_;
  std::vector<float> router_, w01_, w0_, w1_, wo_;  // w01_: [E, D, 2F] when merged

  // Saved by forward.
  std::vector<float> x_, logits_;
  std::vector<int32_t> group_sizes_;
  std::vector<int64_t> token_of_;    // sorted row -> token
  std::vector<int64_t> expert_of_;   // sorted row -> expert
  std::vector<float> weight_of_;     // sorted row -> routing weight
  std::vector<float> xs_, h01_, a_;  // sorted inputs [Tk, D], h0|h1 [Tk, 2F], a [Tk, F]
};

}  // namespace moe
