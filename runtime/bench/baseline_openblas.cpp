// OpenBLAS baseline: cblas_sgemm per non-empty group on f32 copies of the operands (made
// outside the timing for bf16/f16 inputs).
#include "baseline.h"

#if defined(GMMGEN_HAVE_OPENBLAS)
#include <cblas.h>

#include "gmmgen/verify/numeric.h"
#endif

namespace gmmgen::bench {

#if defined(GMMGEN_HAVE_OPENBLAS)
namespace {

std::vector<float> as_f32(DType d, const void* p, int64_t count) {
  std::vector<float> v(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) v[size_t(i)] = float(load_element(d, p, i));
  return v;
}

class OpenBlas final : public Baseline {
 public:
  OpenBlas(const Operands& ops, int threads) : ops_(ops) {
    openblas_set_num_threads(threads);
    const KernelSpec& s = *ops.spec;
    const int64_t M = ops.work->m;
    const bool tgmm = s.op == Op::kTgmm;
    lhs_ = as_f32(s.lhs, ops.lhs, M * s.k);
    rhs_ = as_f32(s.rhs, ops.rhs, tgmm ? M * s.n : s.g_local * s.k * s.n);
    out_.assign(size_t(tgmm ? s.g_local * s.k * s.n : M * s.n), 0.0f);
  }
  void run() override {
    const KernelSpec& s = *ops_.spec;
    const int64_t K = s.k, N = s.n, M = ops_.work->m;
    int64_t start = 0;
    for (int32_t g = 0; g < int32_t(s.g); ++g) {
      const int rows = ops_.work->group_sizes[size_t(g)];
      if (rows > 0) {
        if (s.op == Op::kGmm)
          cblas_sgemm(CblasRowMajor, CblasNoTrans, s.transpose_rhs ? CblasTrans : CblasNoTrans,
                      rows, int(N), int(K), 1.0f, lhs_.data() + start * K, int(K),
                      rhs_.data() + g * K * N, s.transpose_rhs ? int(K) : int(N), 0.0f,
                      out_.data() + start * N, int(N));
        else if (s.lhs_layout == LhsLayout::kKM)
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(K), int(N), rows, 1.0f,
                      lhs_.data() + start, int(M), rhs_.data() + start * N, int(N), 0.0f,
                      out_.data() + g * K * N, int(N));
        else
          cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(K), int(N), rows, 1.0f,
                      lhs_.data() + start * K, int(K), rhs_.data() + start * N, int(N), 0.0f,
                      out_.data() + g * K * N, int(N));
      }
      start += rows;
    }
  }

 private:
  Operands ops_;
  std::vector<float> lhs_, rhs_;
};

}  // namespace

std::unique_ptr<Baseline> make_openblas(const Operands& ops, int threads) {
  return std::make_unique<OpenBlas>(ops, threads);
}
#else
std::unique_ptr<Baseline> make_openblas(const Operands&, int) {
  return nullptr;
}
#endif

}  // namespace gmmgen::bench
