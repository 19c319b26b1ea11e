// Per-group baselines of bench: oneDNN matmul or OpenBLAS sgemm, one call per non-empty group,
// on the operands in the layouts users hold (plain [K, N] weights).
#pragma once

#include <memory>
#include <vector>

#include "gmmgen/bench/bench.h"

namespace gmmgen::bench {

// The operands of one bench problem, as the kernel reads them (raw bytes in the spec's dtypes
// and layouts), and the group sizes.
struct Operands {
  const KernelSpec* spec;
  const Workload* work;
  const void* lhs;
  const void* rhs;
};

class Baseline {
 public:
  virtual ~Baseline() = default;
  // Computes the product into output() (f32, logical layout: gmm [m, N], tgmm [G_local, K, N]).
  virtual void run() = 0;
  const std::vector<float>& output() const { return out_; }

 protected:
  std::vector<float> out_;
};

// nullptr when the kind was not found at configure time.
std::unique_ptr<Baseline> make_onednn(const Operands& ops, int threads);
std::unique_ptr<Baseline> make_openblas(const Operands& ops, int threads);

}  // namespace gmmgen::bench
