/* A C consumer of emitted kernels: calls gmm and tgmm through their aliases (stable names from
 * kernels.json) on random ragged groups and checks them against plain double loops. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "c_consumer_kernels.h"

enum { M = 61, K = 64, N = 48, G = 4 };

static unsigned state = 12345u;
static float next_value(void) { /* uniform in [-1, 1) */
  state = state * 1664525u + 1013904223u;
  return (float)((state >> 8) & 0xffff) / 32768.0f - 1.0f;
}

int main(void) {
  static float lhs[M * K], rhs[G * K * N], out[M * N], grad[M * N], drhs[G * K * N];
  const int32_t group_sizes[G] = {17, 0, 30, 9}; /* 56 rows in groups; 5 rows in none */
  char err[512];
  for (int i = 0; i < M * K; ++i) lhs[i] = next_value();
  for (int i = 0; i < G * K * N; ++i) rhs[i] = next_value();
  for (int i = 0; i < M * N; ++i) out[i] = 7.0f, grad[i] = next_value();

  gmmgen_args a;
  memset(&a, 0, sizeof a);
  a.abi_version = GMMGEN_ABI_VERSION;
  a.m = M, a.lhs = lhs, a.rhs = rhs, a.group_sizes = group_sizes, a.out = out;
  if (c_gmm(&a, err, sizeof err) != GMMGEN_OK) {
    fprintf(stderr, "c_gmm: %s\n", err);
    return 1;
  }
  a.rhs = grad, a.out = drhs; /* tgmm: lhs [M, K], rhs [M, N] -> out [G, K, N] */
  if (c_tgmm(&a, err, sizeof err) != GMMGEN_OK) {
    fprintf(stderr, "c_tgmm: %s\n", err);
    return 1;
  }

  double worst_gmm = 0.0, worst_tgmm = 0.0;
  int row = 0;
  for (int g = 0; g < G; ++g) {
    const int start = row;
    for (int i = 0; i < group_sizes[g]; ++i, ++row)
      for (int n = 0; n < N; ++n) {
        double want = 0.0;
        for (int k = 0; k < K; ++k) want += (double)lhs[row * K + k] * rhs[(g * K + k) * N + n];
        worst_gmm = fmax(worst_gmm, fabs(want - out[row * N + n]));
      }
    for (int k = 0; k < K; ++k)
      for (int n = 0; n < N; ++n) {
        double want = 0.0;
        for (int r = start; r < row; ++r) want += (double)lhs[r * K + k] * grad[r * N + n];
        worst_tgmm = fmax(worst_tgmm, fabs(want - drhs[(g * K + k) * N + n]));
      }
  }
  for (; row < M; ++row)
    for (int n = 0; n < N; ++n) worst_gmm = fmax(worst_gmm, fabs(out[row * N + n])); /* zero */

  /* Both aliases of one kernel are the same function; the table holds each kernel once. */
  const int same = c_gmm_again_info() == c_gmm_info();
  printf("c_consumer: %s, %d kernels in the table, worst |error| gmm %.3g, tgmm %.3g\n",
         c_gmm_info()->name, (int)c_consumer_kernels_kernel_count, worst_gmm, worst_tgmm);
  return worst_gmm < 1e-4 && worst_tgmm < 1e-4 && same && c_consumer_kernels_kernel_count == 2 ? 0
                                                                                               : 1;
}
