#include "gmmgen/kernel_check.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <sstream>

#include "gmmgen/numeric.h"
#include "gmmgen/reference.h"

namespace gmmgen {
namespace {

// A buffer of `count` elements of dtype d, 64-byte aligned.
struct Buffer {
  DType dtype;
  std::vector<unsigned char> storage;
  size_t offset = 0;
  Buffer(DType d, int64_t count) : dtype(d), storage(size_t(count) * element_bytes(d) + 64) {
    offset = (64 - reinterpret_cast<uintptr_t>(storage.data()) % 64) % 64;
  }
  void* data() { return storage.data() + offset; }
  void set(int64_t i, double v) { store_element(dtype, data(), i, v); }
  double get(int64_t i) { return load_element(dtype, data(), i); }
  void poison(int64_t count) {
    for (int64_t i = 0; i < count; ++i) set(i, std::numeric_limits<double>::quiet_NaN());
  }
};

double floor_of(DType d) {
  return d == DType::kF16 ? std::ldexp(1.0, -25) : 1e-38;
}

}  // namespace

const char* to_string(Distribution d) {
  switch (d) {
    case Distribution::kUniform:
      return "uniform";
    case Distribution::kSkewedEmpty:
      return "skewed+empty";
    case Distribution::kManyTiny:
      return "many-tiny";
    case Distribution::kRandom:
      return "random";
  }
  return "?";
}

std::vector<int32_t> make_group_sizes(Distribution d, int32_t g, int64_t rows,
                                      std::mt19937_64& rng) {
  std::vector<int32_t> sizes(g, 0);
  switch (d) {
    case Distribution::kUniform:
      for (int32_t i = 0; i < g; ++i) sizes[i] = int32_t(rows / g + (i < rows % g ? 1 : 0));
      break;
    case Distribution::kSkewedEmpty: {
      // About a quarter of the groups get rows, weighted 1, 2, 4, ...; first and last empty.
      std::vector<int32_t> chosen;
      for (int32_t i = 1; i + 1 < g; ++i)
        if (rng() % 4 == 0) chosen.push_back(i);
      if (chosen.empty()) chosen.push_back(g > 2 ? g / 2 : g - 1);
      double total_w = 0;
      std::vector<double> w;
      for (size_t i = 0; i < chosen.size(); ++i)
        total_w += w.emplace_back(std::ldexp(1.0, int(i % 5)));
      int64_t left = rows;
      for (size_t i = 0; i < chosen.size(); ++i) {
        int64_t take = i + 1 == chosen.size() ? left : int64_t(double(rows) * w[i] / total_w);
        take = std::min(take, left);
        sizes[chosen[i]] = int32_t(take);
        left -= take;
      }
      break;
    }
    case Distribution::kManyTiny: {
      int64_t left = rows;
      for (int32_t i = 0; i < g && left > 0; ++i) {
        sizes[i] = int32_t(std::min<int64_t>(left, int64_t(rng() % 4)));
        left -= sizes[i];
      }
      sizes[g - 1] += int32_t(left);
      break;
    }
    case Distribution::kRandom: {
      std::vector<int64_t> cuts{0, rows};
      for (int32_t i = 0; i + 1 < g; ++i) cuts.push_back(rows ? int64_t(rng() % (rows + 1)) : 0);
      std::sort(cuts.begin(), cuts.end());
      for (int32_t i = 0; i < g; ++i) sizes[i] = int32_t(cuts[i + 1] - cuts[i]);
      break;
    }
  }
  return sizes;
}

CheckResult check_kernel(const KernelFns& fns, const KernelSpec& spec, const CheckCase& c) {
  CheckResult res;
  std::mt19937_64 rng(c.seed);
  std::uniform_real_distribution<double> real(-1.0, 1.0);
  // Exact mode: integers in [-16, 16] (exact in every float dtype; |sum| <= 256*K << 2^24).
  auto uni = [&](std::mt19937_64& g) {
    return c.exact_inputs ? double(int64_t(g() % 33) - 16) : real(g);
  };
  const int64_t K = spec.k, N = spec.n, M = c.m;
  const int64_t lhs_ld = K + c.lhs_pad, out_ld = N + c.out_pad;
  const bool existing = spec.out_mode != OutMode::kPlain;

  GmmProblem p;
  p.m = M, p.k = K, p.n = N;
  p.num_groups = int32_t(spec.g), p.num_local_groups = int32_t(spec.g_local);
  p.group_offset = c.group_offset, p.transpose_rhs = spec.transpose_rhs;
  p.out_mode = spec.out_mode;
  p.group_sizes = c.group_sizes;

  Buffer lhs(spec.lhs, std::max<int64_t>(1, M * lhs_ld));
  p.lhs.resize(M * K);
  for (int64_t r = 0; r < M; ++r)
    for (int64_t k = 0; k < lhs_ld; ++k) {
      const double v = round_to(spec.lhs, uni(rng));
      lhs.set(r * lhs_ld + k, k < K ? v : std::numeric_limits<double>::quiet_NaN());
      if (k < K) p.lhs[r * K + k] = v;
    }
  // rhs rows: [G_local * rows, row_len] with rhs_ld = row_len + rhs_pad (padding holds NaN).
  const int64_t row_len = spec.transpose_rhs ? K : N;
  const int64_t rhs_rows = spec.g_local * (spec.transpose_rhs ? N : K),
                rhs_ld = row_len + c.rhs_pad;
  Buffer rhs(spec.rhs, rhs_rows * rhs_ld);
  p.rhs.resize(rhs_rows * row_len);
  for (int64_t r = 0; r < rhs_rows; ++r)
    for (int64_t i = 0; i < rhs_ld; ++i) {
      const double v =
          i < row_len ? round_to(spec.rhs, uni(rng)) : std::numeric_limits<double>::quiet_NaN();
      rhs.set(r * rhs_ld + i, v);
      if (i < row_len) p.rhs[r * row_len + i] = v;
    }
  if (c.nan_expert) {
    const int64_t j = spec.g_local / 2, i = j * K * N + int64_t(rng() % uint64_t(K * N));
    p.rhs[i] = std::numeric_limits<double>::quiet_NaN();
    rhs.set((i / row_len) * rhs_ld + i % row_len, p.rhs[i]);
  }

  const int64_t out_count = std::max<int64_t>(1, M * out_ld);
  Buffer out(spec.out, out_count), existing_buf(spec.out, out_count);
  out.poison(out_count);
  existing_buf.poison(out_count);
  if (existing) {
    p.existing_out.resize(M * N);
    Buffer& e = c.in_place ? out : existing_buf;
    for (int64_t r = 0; r < M; ++r)
      for (int64_t n = 0; n < N; ++n)
        e.set(r * out_ld + n, p.existing_out[r * N + n] = round_to(spec.out, uni(rng)));
  }
  // Keep a copy of the padding columns' bits to prove they are never written.
  const std::vector<unsigned char> out_before(out.storage);

  gmmgen_args a{};
  a.abi_version = GMMGEN_ABI_VERSION;
  a.m = M;
  a.lhs = lhs.data(), a.lhs_ld = lhs_ld;
  a.rhs = rhs.data(), a.rhs_ld = rhs_ld;
  a.group_sizes = c.group_sizes.data();
  a.group_offset = c.group_offset;
  a.out = out.data(), a.out_ld = out_ld;
  if (existing) {
    a.existing_out = c.in_place ? out.data() : existing_buf.data();
    a.existing_out_ld = out_ld;
  }

  const int64_t ws_bytes = fns.workspace_bytes(M);
  std::unique_ptr<void, decltype(&std::free)> ws(
      std::aligned_alloc(64, size_t((ws_bytes + 63) / 64 * 64)), &std::free);
  char err[512] = {0};
  int64_t items = 0;
  if (int rc = fns.plan(&a, ws.get(), ws_bytes, &items, err, sizeof err); rc != GMMGEN_OK) {
    res.ok = false;
    res.failure = c.label + ": plan failed (" + std::to_string(rc) + "): " + err;
    return res;
  }
  if (c.reverse_items) {  // uneven chunks, last first: items must be independent
    for (int64_t end = items; end > 0;) {
      const int64_t begin = std::max<int64_t>(0, end - 1 - int64_t(rng() % 5));
      fns.run_items(&a, ws.get(), begin, end);
      end = begin;
    }
  } else {
    fns.run_items(&a, ws.get(), 0, items);
  }

  const ReferenceResult ref = reference_gmm(p);
  const double u_out = unit_roundoff(spec.out), u32 = std::ldexp(1.0, -24);
  auto fail = [&](int64_t r, int64_t n, const std::string& why) {
    if (!res.ok) return;
    std::ostringstream os;
    os.precision(9);
    os << c.label << ": out[" << r << ", " << n << "] (row group " << ref.row_group[r]
       << "): " << why;
    res.ok = false;
    res.failure = os.str();
  };
  for (int64_t r = 0; r < M; ++r) {
    for (int64_t n = 0; n < out_ld; ++n) {
      const int64_t i = r * out_ld + n;
      if (n >= N) {  // padding: untouched bits
        const size_t bytes = element_bytes(spec.out), at = out.offset + size_t(i) * bytes;
        if (std::memcmp(&out.storage[at], &out_before[at], bytes) != 0)
          fail(r, n, "padding column past N was written");
        continue;
      }
      ++res.elements;
      const double got = out.get(i), want = ref.out[r * N + n];
      if (ref.row_group[r] < 0) {  // outside the active groups: exact
        if (!(got == want) || std::signbit(got) != std::signbit(want)) {
          std::ostringstream os;
          os << "row outside active groups is " << got << ", expected exactly " << want;
          fail(r, n, os.str());
        }
        continue;
      }
      if (c.exact_inputs && !std::isnan(want)) {
        const double rounded = round_to(spec.out, want);
        if (got != rounded) {
          std::ostringstream os;
          os.precision(17);
          os << "exact inputs: got " << got << ", reference " << want << " rounds to " << rounded;
          fail(r, n, os.str());
        }
        continue;
      }
      if (std::isnan(want)) {
        if (!std::isnan(got))
          fail(r, n, "expected NaN (this group's weights hold a NaN), got " + std::to_string(got));
        continue;
      }
      const double extra =
          spec.out_mode == OutMode::kAccumulate ? std::fabs(p.existing_out[r * N + n]) : 0.0;
      const double bound = u_out * std::fabs(want) +
                           double(K + 2) * u32 * (ref.abs_dot[r * N + n] + extra) +
                           floor_of(spec.out);
      const double diff = std::fabs(got - want);
      if (!(diff <= bound)) {
        std::ostringstream os;
        os.precision(9);
        os << "got " << got << ", reference " << want << ", |diff| " << diff << " > bound "
           << bound;
        fail(r, n, os.str());
      }
      if (std::isfinite(diff)) {
        res.worst_bound_ratio = std::max(res.worst_bound_ratio, diff / bound);
        const double scale = std::max(std::fabs(want), ref.abs_dot[r * N + n] + extra);
        if (scale > 0) res.worst_rel_error = std::max(res.worst_rel_error, diff / scale);
      }
    }
  }
  return res;
}

std::vector<CheckCase> standard_cases(const KernelSpec& spec, uint64_t seed) {
  std::vector<CheckCase> cases;
  std::mt19937_64 rng(seed);
  const int32_t G = int32_t(spec.g), GL = int32_t(spec.g_local);
  const int64_t tm = spec.tiling.tm;
  // Offsets: unsharded, or first/middle/last shard position.
  std::vector<int32_t> offsets{0};
  if (GL < G) offsets = {0, (G - GL) / 2, G - GL};
  const int64_t ms[] = {0, 1, std::max<int64_t>(2, tm - 1), std::min<int64_t>(3 * tm + 5, 300), 97};
  const Distribution dists[] = {Distribution::kUniform, Distribution::kSkewedEmpty,
                                Distribution::kManyTiny, Distribution::kRandom};
  int index = 0;
  for (int64_t m : ms) {
    for (Distribution d : dists) {
      for (int32_t off : offsets) {
        CheckCase c;
        c.m = m;
        c.seed = rng();
        // Every other case leaves rows past sum(group_sizes).
        const int64_t rows = (index % 2 && m > 2) ? m - 1 - int64_t(rng() % 3) : m;
        c.group_sizes = make_group_sizes(d, G, rows, rng);
        c.group_offset = off;
        c.nan_expert = index % 5 == 3;
        c.in_place = index % 2 == 0;
        c.lhs_pad = index % 3 == 1 ? 3 : 0;
        c.rhs_pad = index % 3 == 2 ? 2 : 0;
        c.out_pad = index % 4 == 2 ? 5 : 0;
        c.reverse_items = index % 2 == 1;
        c.exact_inputs = index % 4 == 1;
        std::ostringstream label;
        label << "M=" << m << " sum=" << rows << " " << to_string(d) << " offset=" << off
              << (c.nan_expert ? " nan-expert" : "")
              << (c.lhs_pad || c.rhs_pad || c.out_pad ? " strided" : "")
              << (c.exact_inputs ? " exact" : "")
              << (spec.out_mode != OutMode::kPlain ? (c.in_place ? " in-place" : " separate") : "");
        c.label = label.str();
        cases.push_back(std::move(c));
        ++index;
      }
    }
  }
  return cases;
}

}  // namespace gmmgen
