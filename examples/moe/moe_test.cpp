// The MoE layer against a naive per-token dense implementation in float64: forward output and
// the gradients of sum(y * dy) with respect to x, the router and every expert weight; in the
// quantized modes, of the dequantized operands (the weights the layer computes with, and the
// input as its first product reads it).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numeric>
#include <ostream>
#include <random>

#include "moe_layer.h"

namespace {

struct Naive {
  std::vector<double> y, dx, drouter, dw0, dw1, dwo;
};

// Token by token, expert by expert, no grouping and no sorting. The router reads x, the experts
// xe (x itself, or x as the quantized expert products read it).
Naive naive(const moe::Config& c, const moe::Weights& w, const std::vector<float>& x,
            const std::vector<float>& xe, const std::vector<float>& dy) {
  const int64_t T = c.tokens, D = c.d_model, F = c.d_ff, E = c.experts, K = c.top_k;
  Naive r;
  r.y.assign(T * D, 0), r.dx.assign(T * D, 0), r.drouter.assign(D * E, 0);
  r.dw0.assign(E * D * F, 0), r.dw1.assign(E * D * F, 0), r.dwo.assign(E * F * D, 0);
  for (int64_t t = 0; t < T; ++t) {
    const float* xt = &x[t * D];
    const float* xet = &xe[t * D];
    const float* dyt = &dy[t * D];
    std::vector<double> logits(E, 0);
    for (int64_t e = 0; e < E; ++e)
      for (int64_t d = 0; d < D; ++d) logits[e] += double(xt[d]) * w.router[d * E + e];
    std::vector<int64_t> order(E);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return logits[a] > logits[b]; });
    std::vector<double> wt(K);
    double sum = 0;
    for (int64_t j = 0; j < K; ++j) sum += wt[j] = std::exp(logits[order[j]] - logits[order[0]]);
    for (auto& v : wt) v /= sum;
    std::vector<double> dwt(K, 0);
    for (int64_t j = 0; j < K; ++j) {
      const int64_t e = order[j];
      std::vector<double> h0(F, 0), h1(F, 0), g(F), dg(F, 0);
      for (int64_t f = 0; f < F; ++f)
        for (int64_t d = 0; d < D; ++d) {
          h0[f] += double(xet[d]) * w.w0[(e * D + d) * F + f];
          h1[f] += double(xet[d]) * w.w1[(e * D + d) * F + f];
        }
      for (int64_t f = 0; f < F; ++f) g[f] = h0[f] / (1 + std::exp(-h0[f])) * h1[f];
      for (int64_t d = 0; d < D; ++d) {
        double o = 0;
        for (int64_t f = 0; f < F; ++f) o += g[f] * w.wo[(e * F + f) * D + d];
        r.y[t * D + d] += wt[j] * o;
        dwt[j] += o * dyt[d];
        for (int64_t f = 0; f < F; ++f) {
          dg[f] += wt[j] * w.wo[(e * F + f) * D + d] * dyt[d];
          r.dwo[(e * F + f) * D + d] += wt[j] * g[f] * dyt[d];
        }
      }
      for (int64_t f = 0; f < F; ++f) {
        const double s = 1 / (1 + std::exp(-h0[f]));
        const double dh0 = dg[f] * h1[f] * s * (1 + h0[f] * (1 - s)), dh1 = dg[f] * h0[f] * s;
        for (int64_t d = 0; d < D; ++d) {
          r.dw0[(e * D + d) * F + f] += xet[d] * dh0;
          r.dw1[(e * D + d) * F + f] += xet[d] * dh1;
          r.dx[t * D + d] += w.w0[(e * D + d) * F + f] * dh0 + w.w1[(e * D + d) * F + f] * dh1;
        }
      }
    }
    double dot = 0;
    for (int64_t j = 0; j < K; ++j) dot += wt[j] * dwt[j];
    for (int64_t j = 0; j < K; ++j) {
      const double dl = wt[j] * (dwt[j] - dot);
      const int64_t e = order[j];
      for (int64_t d = 0; d < D; ++d) {
        r.drouter[d * E + e] += xt[d] * dl;
        r.dx[t * D + d] += w.router[d * E + e] * dl;
      }
    }
  }
  return r;
}

// f32 kernels against float64: the worst difference relative to the tensor's largest entry.
void expect_close(const std::vector<double>& want, const std::vector<float>& got,
                  const char* what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  double scale = 0;
  for (double v : want) scale = std::max(scale, std::fabs(v));
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::fabs(want[i] - got[i]));
  EXPECT_LE(worst, 2e-5 * scale) << what << ": worst |diff| " << worst << " at scale " << scale;
  ::testing::Test::RecordProperty(what, std::to_string(worst / scale));
}

// Quantization the reference does not replicate (below): the relative Frobenius distance.
void expect_near(const std::vector<double>& want, const std::vector<float>& got, double tol,
                 const char* what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  double err = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i)
    err += (want[i] - got[i]) * (want[i] - got[i]), norm += want[i] * want[i];
  const double rel = std::sqrt(err / norm);
  EXPECT_LE(rel, tol) << what << ": relative Frobenius error";
  ::testing::Test::RecordProperty(what, std::to_string(rel));
}

struct Mode {
  bool merged;
  moe::Quant quant;
};
// Names the parameter in test names (the default prints the struct's bytes, padding included).
void PrintTo(const Mode& m, std::ostream* os) {
  *os << (m.merged ? "merged" : "separate") << ", quant " << moe::to_string(m.quant);
}

class MoeTest : public ::testing::TestWithParam<Mode> {};

TEST_P(MoeTest, ForwardAndGradientsMatchNaiveDense) {
  moe::Config c;
  c.tokens = 53, c.d_model = 24, c.d_ff = 20, c.experts = 7, c.top_k = 3;
  c.merged = GetParam().merged;
  c.quant = GetParam().quant;
  const moe::Weights w = moe::Weights::random(c, 11);
  std::mt19937_64 rng(5);
  std::normal_distribution<float> n01;
  std::vector<float> x(c.tokens * c.d_model), dy(c.tokens * c.d_model);
  for (auto& v : x) v = n01(rng);
  for (auto& v : dy) v = n01(rng);

  // One cache for every test of this program, kept in the build tree (or the one the test suite
  // shares, $GMMGEN_TEST_CACHE_DIR): the modes share most kernels (the router's, the f32 weight
  // gradients), so each is compiled once, and a second run compiles nothing. The cache is safe
  // for concurrent test processes.
  gmmgen::RuntimeOptions o;
  const char* shared = std::getenv("GMMGEN_TEST_CACHE_DIR");
  o.cache_dir = shared && *shared ? shared : MOE_TEST_CACHE_DIR;
  o.num_threads = 2;
  gmmgen::Runtime rt(o);
  moe::Layer layer(rt, c, w);
  const std::vector<float> y = layer.forward(x);
  const moe::Gradients g = layer.backward(dy);
  // The reference multiplies the dequantized weights and input exactly; what the layer quantizes
  // on the way (the activation a, and in fp8-block the gradients and the 128x1 copies of xs and
  // a that the weight gradients read) it does not.
  const Naive ref = naive(c, layer.effective_weights(), x, layer.effective_input(x), dy);
  switch (c.quant) {
    case moe::Quant::kNone:
      expect_close(ref.y, y, "y");
      expect_close(ref.dx, g.dx, "dx");
      expect_close(ref.drouter, g.drouter, "drouter");
      expect_close(ref.dw0, g.dw0, "dw0");
      expect_close(ref.dw1, g.dw1, "dw1");
      expect_close(ref.dwo, g.dwo, "dwo");
      break;
    case moe::Quant::kInt8Channel: {
      // Only a is quantized beyond the reference (i8, one absmax scale per row of F values):
      // every element is within s/2 = amax/254 of a, and amax <= |a_row|_2, so a row moves by at
      // most sqrt(F) amax / 254 <= sqrt(F) / 254 of its norm (1.8% at F = 20). y = a_hat @ wo and
      // dwo = a_hat^T dys carry that relative error; the check allows twice it for the
      // conditioning of the products. The backward pass reads a itself (straight-through), the
      // dequantized xs and the weights, all as the reference: f32 accuracy.
      const double tol = 2 * std::sqrt(double(c.d_ff)) / 254;
      expect_near(ref.y, y, tol, "y");
      expect_near(ref.dwo, g.dwo, tol, "dwo");
      expect_close(ref.dx, g.dx, "dx");
      expect_close(ref.drouter, g.drouter, "drouter");
      expect_close(ref.dw0, g.dw0, "dw0");
      expect_close(ref.dw1, g.dw1, "dw1");
      break;
    }
    case moe::Quant::kFp8Block: {
      // Each quantization the reference lacks rounds an element by at most u relative (RNE;
      // e4m3 u_a = 2^-4, e5m2 u_g = 2^-3). Independent roundings of random data have RMS near
      // u / sqrt(3) and add in quadrature, so a result fed by roundings u_1..u_j is off by about
      // sqrt(sum u_i^2 / 3) in relative Frobenius norm; the checks allow sqrt(sum u_i^2)
      // (sqrt(3) of margin), which still fails for any misplaced scale (errors of order 1).
      //   y:            a (e4m3, 1x128)
      //   dwo:          a (e4m3, 128x1), dys (e5m2)
      //   dx, drouter:  dys (e5m2), dh01 (e5m2)
      //   dw0, dw1:     xs (e4m3, 128x1, vs the reference's 1x128), dys, dh01 (e5m2)
      const double ua = 0x1p-4, ug = 0x1p-3;
      expect_near(ref.y, y, ua, "y");
      expect_near(ref.dwo, g.dwo, std::hypot(ua, ug), "dwo");
      expect_near(ref.dx, g.dx, std::hypot(ug, ug), "dx");
      expect_near(ref.drouter, g.drouter, std::hypot(ug, ug), "drouter");
      expect_near(ref.dw0, g.dw0, std::sqrt(ua * ua + 2 * ug * ug), "dw0");
      expect_near(ref.dw1, g.dw1, std::sqrt(ua * ua + 2 * ug * ug), "dw1");
      break;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, MoeTest,
                         ::testing::Values(Mode{true, moe::Quant::kNone},
                                           Mode{false, moe::Quant::kNone},
                                           Mode{true, moe::Quant::kFp8Block},
                                           Mode{true, moe::Quant::kInt8Channel}),
                         [](const auto& info) {
                           std::string name = info.param.merged ? "merged" : "separate";
                           if (info.param.quant == moe::Quant::kFp8Block) name += "_fp8_block";
                           if (info.param.quant == moe::Quant::kInt8Channel)
                             name += "_int8_channel";
                           return name;
                         });

}  // namespace
