// oneDNN baseline: one matmul primitive per distinct group size, made outside the timing; each
// non-empty group is one execution (weights in the plain [K, N] layout; bf16 x bf16 -> f32 in
// bf16 where oneDNN has it).
#include "baseline.h"

#if defined(GMMGEN_HAVE_ONEDNN)
#include <omp.h>

#include <map>
#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace gmmgen::bench {

#if defined(GMMGEN_HAVE_ONEDNN)
namespace {

using dt = dnnl::memory::data_type;

dt dnnl_type(DType d) {
  switch (d) {
    case DType::kF32:
      return dt::f32;
    case DType::kBF16:
      return dt::bf16;
    case DType::kF16:
      return dt::f16;
    default:
      throw InvalidArgument("bench: no oneDNN type for " + std::string(to_string(d)));
  }
}

class OneDnn final : public Baseline {
 public:
  OneDnn(const Operands& ops, int threads) : eng_(dnnl::engine::kind::cpu, 0), strm_(eng_) {
    omp_set_num_threads(threads);
    const KernelSpec& s = *ops.spec;
    const int64_t K = s.k, N = s.n, M = ops.work->m;
    const bool tgmm = s.op == Op::kTgmm;
    out_.assign(size_t(tgmm ? s.g_local * K * N : M * N), 0.0f);
    const size_t lb = size_t(bits_of(s.lhs) / 8), rb = size_t(bits_of(s.rhs) / 8);
    int64_t start = 0;
    for (int32_t g = 0; g < int32_t(s.g); ++g) {
      const int64_t rows = ops.work->group_sizes[size_t(g)];
      const int64_t j = g;  // bench problems are unsharded
      if (rows > 0) {
        Call c;
        dnnl::memory::desc src, wei, dst;
        const char* lhs = static_cast<const char*>(ops.lhs);
        const char* rhs = static_cast<const char*>(ops.rhs);
        if (!tgmm) {
          // out[rows, N] = lhs[rows, K] @ rhs_j ([K, N], or [N, K] read transposed)
          src = {{rows, K}, dnnl_type(s.lhs), {K, 1}};
          wei = s.transpose_rhs ? dnnl::memory::desc({K, N}, dnnl_type(s.rhs), {1, K})
                                : dnnl::memory::desc({K, N}, dnnl_type(s.rhs), {N, 1});
          dst = {{rows, N}, dt::f32, {N, 1}};
          c.src = lhs + size_t(start * K) * lb;
          c.wei = rhs + size_t(j * K * N) * rb;
          c.dst = out_.data() + start * N;
        } else {
          // out_j[K, N] = lhs[rows, K]^T @ rhs[rows, N] (lhs stored [K, M] with lhs_layout=km)
          src = s.lhs_layout == LhsLayout::kKM
                    ? dnnl::memory::desc({K, rows}, dnnl_type(s.lhs), {M, 1})
                    : dnnl::memory::desc({K, rows}, dnnl_type(s.lhs), {1, K});
          wei = {{rows, N}, dnnl_type(s.rhs), {N, 1}};
          dst = {{K, N}, dt::f32, {N, 1}};
          c.src = lhs + size_t(s.lhs_layout == LhsLayout::kKM ? start : start * K) * lb;
          c.wei = rhs + size_t(start * N) * rb;
          c.dst = out_.data() + j * K * N;
        }
        auto& prim = prims_[{rows, 0}];
        if (!prim) {
          try {
            prim = std::make_unique<dnnl::matmul>(
                dnnl::matmul::primitive_desc(dnnl::matmul::desc(src, wei, dst), eng_));
          } catch (const dnnl::error& e) {
            // e.g. bf16 on a CPU without AVX-512: this oneDNN has no implementation there.
            throw InvalidArgument("oneDNN has no " + std::string(to_string(s.lhs)) + " x " +
                                  std::string(to_string(s.rhs)) + " -> f32 matmul on this CPU (" +
                                  e.what() + ")");
          }
        }
        c.prim = prim.get();
        c.src_m = dnnl::memory(src, eng_, const_cast<void*>(c.src));
        c.wei_m = dnnl::memory(wei, eng_, const_cast<void*>(c.wei));
        c.dst_m = dnnl::memory(dst, eng_, c.dst);
        calls_.push_back(std::move(c));
      }
      start += rows;
    }
  }
  void run() override {
    for (auto& c : calls_)
      c.prim->execute(
          strm_, {{DNNL_ARG_SRC, c.src_m}, {DNNL_ARG_WEIGHTS, c.wei_m}, {DNNL_ARG_DST, c.dst_m}});
    strm_.wait();
  }

 private:
  struct Call {
    const void* src;
    const void* wei;
    float* dst;
    dnnl::matmul* prim;
    dnnl::memory src_m, wei_m, dst_m;
  };
  dnnl::engine eng_;
  dnnl::stream strm_;
  std::map<std::pair<int64_t, int>, std::unique_ptr<dnnl::matmul>> prims_;
  std::vector<Call> calls_;
};

}  // namespace

std::unique_ptr<Baseline> make_onednn(const Operands& ops, int threads) {
  return std::make_unique<OneDnn>(ops, threads);
}
#else
std::unique_ptr<Baseline> make_onednn(const Operands&, int) {
  return nullptr;
}
#endif

}  // namespace gmmgen::bench
