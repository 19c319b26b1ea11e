/* Embedding example, in plain C: registers the kernels compiled into this program (the bundle
 * emitted from kernels.json at build time) with a runtime that may not compile anything, runs
 * a grouped matmul through the C API and checks it against a plain loop. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "embed_kernels.h"
#include "gmmgen/runtime_c.h"

enum { M = 50, K = 64, N = 48, G = 4 };

int main(void) {
  static float lhs[M * K], rhs[G * K * N], out[M * N];
  const int32_t group_sizes[G] = {13, 0, 20, 12}; /* 45 rows in groups; 5 rows belong to none */
  char err[1024];
  for (int i = 0; i < M * K; ++i) lhs[i] = (float)((i * 37) % 17 - 8) / 8.0f;
  for (int i = 0; i < G * K * N; ++i) rhs[i] = (float)((i * 11) % 13 - 6) / 16.0f;

  setenv("GMMGEN_DISABLE_JIT", "1", 1); /* prove the compiled-in kernels serve the call */
  gmmgen_runtime* rt = NULL;
  if (gmmgen_runtime_create(&rt, err, sizeof err) != GMMGEN_OK ||
      gmmgen_runtime_register(rt, embed_kernels_kernels, embed_kernels_kernel_count, err,
                              sizeof err) != GMMGEN_OK) {
    fprintf(stderr, "setup failed: %s\n", err);
    return 1;
  }
  gmmgen_tensor l = {lhs, GMMGEN_DTYPE_F32, 2, {M, K, 0}, 0};
  gmmgen_tensor r = {rhs, GMMGEN_DTYPE_F32, 3, {G, K, N}, 0};
  gmmgen_tensor o = {out, GMMGEN_DTYPE_F32, 2, {M, N, 0}, 0};
  gmmgen_gmm_options opts = {0};
  opts.tm = 16, opts.tk = 32, opts.tn = 16; /* the tiling of the compiled-in kernel */
  if (gmmgen_runtime_gmm(rt, &l, &r, group_sizes, G, &o, &opts, err, sizeof err) != GMMGEN_OK) {
    fprintf(stderr, "gmm failed: %s\n", err);
    return 1;
  }

  double worst = 0.0;
  int row = 0;
  for (int g = 0; g < G; ++g)
    for (int i = 0; i < group_sizes[g]; ++i, ++row)
      for (int n = 0; n < N; ++n) {
        double want = 0.0;
        for (int k = 0; k < K; ++k) want += (double)lhs[row * K + k] * rhs[(g * K + k) * N + n];
        worst = fmax(worst, fabs(want - out[row * N + n]));
      }
  for (; row < M; ++row)
    for (int n = 0; n < N; ++n) worst = fmax(worst, fabs(out[row * N + n])); /* must be zero */

  gmmgen_runtime_stats s;
  gmmgen_runtime_get_stats(rt, &s);
  printf("embed_example: %d kernels compiled in, worst |error| %.3g, %lld compiles, %lld registry hits\n",
         (int)embed_kernels_kernel_count, worst, (long long)s.compiles, (long long)s.registry_hits);
  gmmgen_runtime_destroy(rt);
  return worst < 1e-4 && s.compiles == 0 && s.registry_hits == 1 ? 0 : 1;
}
