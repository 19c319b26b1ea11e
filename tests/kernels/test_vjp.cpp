// The backward pass: Runtime::gmm_vjp against finite differences of the float64 reference
// forward, and the megablox peer matrix (shapes x dtypes x transposes x ragged groups).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>

#include "gmmgen/runtime.hpp"
#include "gmmgen/verify/distributions.h"
#include "gmmgen/verify/numeric.h"
#include "gmmgen/verify/reference.h"
#include "runtime_fixtures.h"

namespace gmmgen {
namespace {

// Kernels built by these tests are cached across test processes and builds (the shared test
// cache).
RuntimeOptions test_runtime_options() {
  return testing::shared_cache_options();
}

std::vector<int32_t> random_partition(int32_t g, int64_t rows, std::mt19937_64& rng) {
  std::vector<int64_t> cuts{0, rows};
  for (int32_t i = 0; i + 1 < g; ++i) cuts.push_back(int64_t(rng() % uint64_t(rows + 1)));
  std::sort(cuts.begin(), cuts.end());
  std::vector<int32_t> sizes(g);
  for (int32_t i = 0; i < g; ++i) sizes[i] = int32_t(cuts[i + 1] - cuts[i]);
  if (g > 2) {  // make sure some groups are empty, including one at an end
    sizes[1] += sizes[0];
    sizes[0] = 0;
  }
  return sizes;
}

// Typed storage of a tensor plus the exact values it holds.
struct Tensor {
  DType dtype;
  std::vector<double> values;
  std::vector<unsigned char> bytes;
  Tensor(DType d, int64_t count) : dtype(d), values(count, 0.0), bytes(count * element_bytes(d)) {}
  static Tensor random(DType d, int64_t count, std::mt19937_64& rng) {
    Tensor t(d, count);
    for (int64_t i = 0; i < count; ++i) t.set(i, uniform_real(rng, -1, 1));
    return t;
  }
  void set(int64_t i, double v) {
    store_element(dtype, bytes.data(), i, v);
    values[i] = load_element(dtype, bytes.data(), i);
  }
  double get(int64_t i) const { return load_element(dtype, bytes.data(), i); }
  void poison() {
    for (size_t i = 0; i < values.size(); ++i)
      store_element(dtype, bytes.data(), int64_t(i), std::nan(""));
  }
  void* data() { return bytes.data(); }
};

// |got - want| <= u_out*|want| + (len+2)*2^-24*abs_dot, per element (one rounding + f32 sums).
void expect_within_bound(const Tensor& got, const std::vector<double>& want,
                         const std::vector<double>& abs_dot, const std::vector<int64_t>& len,
                         const std::string& what, double* worst_rel) {
  const double u = unit_roundoff(got.dtype), u32 = std::ldexp(1.0, -24);
  for (size_t i = 0; i < want.size(); ++i) {
    const double g = got.get(int64_t(i)),
                 bound = u * std::fabs(want[i]) + double(len[i] + 2) * u32 * abs_dot[i] + 1e-30;
    ASSERT_LE(std::fabs(g - want[i]), bound)
        << what << "[" << i << "]: got " << g << ", want " << want[i];
    const double scale = std::max(std::fabs(want[i]), abs_dot[i]);
    if (scale > 0) *worst_rel = std::max(*worst_rel, std::fabs(g - want[i]) / scale);
  }
}

struct VjpCase {
  int64_t m, k, n;
  int32_t g, g_local, offset;
  bool transpose;
  DType lhs, rhs, out;
};

// Runs forward and VJP through the runtime and checks out, dlhs and drhs against the float64
// references of the same (rounded) operands. Returns the worst relative errors.
std::array<double, 3> run_vjp_case(Runtime& rt, const VjpCase& c, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const std::vector<int32_t> sizes = random_partition(c.g, c.m - int64_t(rng() % 3), rng);
  Tensor lhs = Tensor::random(c.lhs, c.m * c.k, rng);
  Tensor rhs = Tensor::random(c.rhs, int64_t(c.g_local) * c.k * c.n, rng);
  Tensor out(c.out, c.m * c.n), dout = Tensor::random(c.out, c.m * c.n, rng);
  Tensor dlhs(c.lhs, c.m * c.k), drhs(c.rhs, int64_t(c.g_local) * c.k * c.n);
  out.poison(), dlhs.poison(), drhs.poison();
  const TensorView rhs_view = c.transpose
                                  ? TensorView::batch(rhs.data(), c.rhs, c.g_local, c.n, c.k)
                                  : TensorView::batch(rhs.data(), c.rhs, c.g_local, c.k, c.n);
  const TensorView drhs_view = c.transpose
                                   ? TensorView::batch(drhs.data(), c.rhs, c.g_local, c.n, c.k)
                                   : TensorView::batch(drhs.data(), c.rhs, c.g_local, c.k, c.n);
  GmmOptions fo;
  fo.transpose_rhs = c.transpose;
  fo.group_offset = c.offset;
  rt.gmm(TensorView::matrix(lhs.data(), c.lhs, c.m, c.k), rhs_view, sizes,
         TensorView::matrix(out.data(), c.out, c.m, c.n), fo);
  GmmVjpOptions vo;
  vo.transpose_rhs = c.transpose;
  vo.group_offset = c.offset;
  rt.gmm_vjp(TensorView::matrix(dout.data(), c.out, c.m, c.n),
             TensorView::matrix(lhs.data(), c.lhs, c.m, c.k), rhs_view, sizes,
             TensorView::matrix(dlhs.data(), c.lhs, c.m, c.k), drhs_view, vo);

  std::array<double, 3> worst{};
  // out = gmm(lhs, rhs, t)
  GmmProblem p;
  p.m = c.m, p.k = c.k, p.n = c.n, p.num_groups = c.g, p.num_local_groups = c.g_local;
  p.group_offset = c.offset, p.transpose_rhs = c.transpose, p.group_sizes = sizes;
  p.lhs = lhs.values, p.rhs = rhs.values;
  const ReferenceResult fwd = reference_gmm(p);
  expect_within_bound(out, fwd.out, fwd.abs_dot, std::vector<int64_t>(fwd.out.size(), c.k), "out",
                      &worst[0]);
  // dlhs = gmm(dout, rhs, !t): the same rhs buffer read the other way round.
  GmmProblem d = p;
  d.k = c.n, d.n = c.k, d.transpose_rhs = !c.transpose, d.lhs = dout.values;
  const ReferenceResult dl = reference_gmm(d);
  expect_within_bound(dlhs, dl.out, dl.abs_dot, std::vector<int64_t>(dl.out.size(), c.n), "dlhs",
                      &worst[1]);
  // drhs = tgmm(lhs, dout), stored like rhs.
  TgmmProblem t;
  t.m = c.m, t.k = c.k, t.n = c.n, t.num_groups = c.g, t.num_local_groups = c.g_local;
  t.group_offset = c.offset, t.group_sizes = sizes, t.lhs = lhs.values, t.rhs = dout.values;
  const TgmmReferenceResult dr = reference_tgmm(t);
  std::vector<double> want(dr.out.size()), abs(dr.out.size());
  std::vector<int64_t> len(dr.out.size());
  for (int64_t j = 0; j < c.g_local; ++j)
    for (int64_t kk = 0; kk < c.k; ++kk)
      for (int64_t nn = 0; nn < c.n; ++nn) {
        const int64_t logical = (j * c.k + kk) * c.n + nn;
        const int64_t stored = c.transpose ? (j * c.n + nn) * c.k + kk : logical;
        want[stored] = dr.out[logical], abs[stored] = dr.abs_dot[logical], len[stored] = dr.rows[j];
      }
  expect_within_bound(drhs, want, abs, len, "drhs", &worst[2]);
  return worst;
}

// dL/dlhs and dL/drhs of L = sum(gmm(lhs, rhs) * dout), by central differences of the float64
// reference forward, against the runtime's VJP (f32 kernels).
TEST(Vjp, MatchesFiniteDifferencesOfTheReference) {
  Runtime rt(test_runtime_options());
  for (bool transpose : {false, true}) {
    for (auto [g, g_local, offset] : {std::tuple{3, 3, 0}, std::tuple{5, 2, 2}}) {
      const int64_t m = 26, k = 9, n = 7;
      std::mt19937_64 rng(transpose * 10 + offset);
      const std::vector<int32_t> sizes = random_partition(g, m - 2, rng);
      Tensor lhs = Tensor::random(DType::kF32, m * k, rng);
      Tensor rhs = Tensor::random(DType::kF32, int64_t(g_local) * k * n, rng);
      Tensor dout = Tensor::random(DType::kF32, m * n, rng);
      Tensor dlhs(DType::kF32, m * k), drhs(DType::kF32, int64_t(g_local) * k * n);
      GmmVjpOptions vo;
      vo.transpose_rhs = transpose;
      vo.group_offset = offset;
      rt.gmm_vjp(TensorView::matrix(dout.data(), DType::kF32, m, n),
                 TensorView::matrix(lhs.data(), DType::kF32, m, k),
                 transpose ? TensorView::batch(rhs.data(), DType::kF32, g_local, n, k)
                           : TensorView::batch(rhs.data(), DType::kF32, g_local, k, n),
                 sizes, TensorView::matrix(dlhs.data(), DType::kF32, m, k),
                 transpose ? TensorView::batch(drhs.data(), DType::kF32, g_local, n, k)
                           : TensorView::batch(drhs.data(), DType::kF32, g_local, k, n),
                 vo);
      GmmProblem p;
      p.m = m, p.k = k, p.n = n, p.num_groups = g, p.num_local_groups = g_local;
      p.group_offset = offset, p.transpose_rhs = transpose, p.group_sizes = sizes;
      p.lhs = lhs.values, p.rhs = rhs.values;
      auto loss = [&](const GmmProblem& q) {
        const ReferenceResult r = reference_gmm(q);
        double s = 0;
        for (int64_t i = 0; i < m * n; ++i) s += r.out[i] * dout.values[i];
        return s;
      };
      const double h = 1e-3;
      auto fd = [&](std::vector<double>& param, int64_t i) {
        const double saved = param[i];
        param[i] = saved + h;
        const double up = loss(p);
        param[i] = saved - h;
        const double down = loss(p);
        param[i] = saved;
        return (up - down) / (2 * h);
      };
      for (int64_t i = 0; i < m * k; ++i)
        ASSERT_NEAR(fd(p.lhs, i), dlhs.get(i), 1e-5)
            << "dlhs[" << i << "] t=" << transpose << " offset=" << offset;
      for (int64_t i = 0; i < int64_t(g_local) * k * n; ++i)
        ASSERT_NEAR(fd(p.rhs, i), drhs.get(i), 1e-5)
            << "drhs[" << i << "] t=" << transpose << " offset=" << offset;
    }
  }
}

TEST(Vjp, BadInputWritesNeitherGradient) {
  Runtime rt(test_runtime_options());
  std::mt19937_64 rng(3);
  const int64_t m = 16, k = 8, n = 8;
  Tensor lhs = Tensor::random(DType::kF32, m * k, rng),
         rhs = Tensor::random(DType::kF32, 2 * k * n, rng);
  Tensor dout = Tensor::random(DType::kF32, m * n, rng), dlhs(DType::kF32, m * k),
         drhs(DType::kF32, 2 * k * n);
  dlhs.poison(), drhs.poison();
  const std::vector<unsigned char> before_l = dlhs.bytes, before_r = drhs.bytes;
  const std::vector<int32_t> sizes{4, 40};  // sum > m
  EXPECT_THROW(rt.gmm_vjp(TensorView::matrix(dout.data(), DType::kF32, m, n),
                          TensorView::matrix(lhs.data(), DType::kF32, m, k),
                          TensorView::batch(rhs.data(), DType::kF32, 2, k, n), sizes,
                          TensorView::matrix(dlhs.data(), DType::kF32, m, k),
                          TensorView::batch(drhs.data(), DType::kF32, 2, k, n)),
               InvalidArgument);
  EXPECT_EQ(before_l, dlhs.bytes);
  EXPECT_EQ(before_r, drhs.bytes);
  // dout of the wrong shape.
  EXPECT_THROW(
      rt.gmm_vjp(TensorView::matrix(dout.data(), DType::kF32, m, n - 1),
                 TensorView::matrix(lhs.data(), DType::kF32, m, k),
                 TensorView::batch(rhs.data(), DType::kF32, 2, k, n), std::vector<int32_t>{4, 4},
                 TensorView::matrix(dlhs.data(), DType::kF32, m, k),
                 TensorView::batch(drhs.data(), DType::kF32, 2, k, n)),
      InvalidArgument);
  EXPECT_EQ(before_l, dlhs.bytes);
}

// The megablox test matrix: shapes (m, k, n), every lhs/rhs/out combination of f32 and bf16,
// both transpose_rhs values, random partitions that include empty groups. Each shape has its own
// fixed G (1 to 32; the shapes with the same K and N share one, so they share kernels): what is
// random is the data and the partition, so the kernels a shape needs are compiled once and every
// run of the test uses the same ones.
struct PeerShape {
  int64_t m, k, n;
  int32_t g;
};
class PeerMatrix : public ::testing::TestWithParam<std::tuple<PeerShape, bool>> {};

TEST_P(PeerMatrix, OutDlhsDrhsMatchReference) {
  const auto [shape, transpose] = GetParam();
  Runtime rt(test_runtime_options());
  const DType types[] = {DType::kF32, DType::kBF16};
  int index = 0;
  for (DType lhs : types)
    for (DType rhs : types)
      for (DType out : types) {
        std::mt19937_64 rng(uint64_t(shape.m * 31 + shape.k * 7 + shape.n + index++));
        const VjpCase c{shape.m, shape.k, shape.n, shape.g, shape.g, 0, transpose, lhs, rhs, out};
        SCOPED_TRACE(std::string("lhs=") + std::string(to_string(lhs)) +
                     " rhs=" + std::string(to_string(rhs)) + " out=" + std::string(to_string(out)) +
                     " G=" + std::to_string(shape.g));
        const auto worst = run_vjp_case(rt, c, rng());
        char errors[96];
        std::snprintf(errors, sizeof errors, "out %.3e dlhs %.3e drhs %.3e", worst[0], worst[1],
                      worst[2]);
        RecordProperty(std::string(to_string(lhs)) + "x" + std::string(to_string(rhs)) + "_" +
                           std::string(to_string(out)),
                       errors);
        if (HasFatalFailure()) return;
      }
}

std::string peer_name(const ::testing::TestParamInfo<std::tuple<PeerShape, bool>>& info) {
  const PeerShape s = std::get<0>(info.param);
  return "m" + std::to_string(s.m) + "_k" + std::to_string(s.k) + "_n" + std::to_string(s.n) +
         "_g" + std::to_string(s.g) + (std::get<1>(info.param) ? "_tr" : "");
}

// The smallest shape (K below any tile, five groups) in both layouts: every dtype combination's
// backward (the ci tier runs the transposed one).
INSTANTIATE_TEST_SUITE_P(MegabloxSmall, PeerMatrix,
                         ::testing::Combine(::testing::Values(PeerShape{128, 8, 16, 5}),
                                            ::testing::Bool()),
                         peer_name);
// The rest of megablox's shapes (the full tier).
INSTANTIATE_TEST_SUITE_P(
    Megablox, PeerMatrix,
    ::testing::Combine(::testing::Values(PeerShape{128, 128, 128, 7}, PeerShape{512, 2048, 256, 32},
                                         PeerShape{256, 128, 512, 1}, PeerShape{512, 128, 128, 7},
                                         PeerShape{512, 2048, 128, 16}),
                       ::testing::Bool()),
    peer_name);

// Sharded backward: only the active groups' rows get gradient; other rows of dlhs are zero.
TEST(Vjp, ShardedMatchesReference) {
  Runtime rt(test_runtime_options());
  for (bool transpose : {false, true})
    run_vjp_case(rt, {96, 40, 24, 8, 3, 4, transpose, DType::kBF16, DType::kBF16, DType::kF32}, 17);
}

}  // namespace
}  // namespace gmmgen
