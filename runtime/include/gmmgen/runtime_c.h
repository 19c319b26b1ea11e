/* gmmgen/runtime_c.h: the C API of the gmm-gen runtime (C++ API: gmmgen/runtime.hpp).
 *
 * Every function returns GMMGEN_OK (0) or an error code from gmmgen/kernel_abi.h or below, and
 * writes a message naming the problem into err (when err_len > 0). On error the output buffers
 * are untouched.
 */
#ifndef GMMGEN_RUNTIME_C_H_
#define GMMGEN_RUNTIME_C_H_

#include <stddef.h>
#include <stdint.h>

#include "gmmgen/kernel_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The compiler failed, could not be run, ran past GMMGEN_COMPILE_TIMEOUT, or built an object that
 * does not load (also after one rebuild); err has the command and its output. */
#define GMMGEN_ERR_COMPILE 5
/* The disk cache is unusable or unsafe: ownership, permissions, I/O (full disk, read-only). */
#define GMMGEN_ERR_CACHE 6
#define GMMGEN_ERR_JIT_DISABLED 7 /* a compile was needed but GMMGEN_DISABLE_JIT=1 */
#define GMMGEN_ERR_INTERNAL 8     /* anything else */

/* A row-major tensor view: ndim 2 ([rows, cols]) or 3 ([batch, rows, cols]); ld = elements
 * between consecutive rows (0: packed); 3-D matrices follow each other (stride rows * ld). */
typedef struct gmmgen_tensor {
  void* data;
  int32_t dtype; /* GMMGEN_DTYPE_* (gmmgen/kernel_abi.h) */
  int32_t ndim;
  int64_t shape[3];
  int64_t ld;
} gmmgen_tensor;

typedef struct gmmgen_gmm_options {
  int32_t transpose_rhs;             /* rhs is [G_local, N, K] */
  int32_t group_offset;              /* first active group */
  int32_t accumulate;                /* with existing_out: active rows add existing_out */
  int32_t tm, tk, tn;                /* tiling; 0 = the heuristic */
  const gmmgen_tensor* existing_out; /* NULL, or [M, N]; may alias out */
} gmmgen_gmm_options;

typedef struct gmmgen_tgmm_options {
  int32_t group_offset;              /* first active group */
  int32_t lhs_transposed;            /* lhs is [K, M] */
  int32_t transpose_out;             /* out is [G_local, N, K] */
  int32_t tm, tk, tn;                /* tiling; 0 = the heuristic */
  const gmmgen_tensor* existing_out; /* NULL, or shaped like out: out = existing_out + product */
} gmmgen_tgmm_options;

typedef struct gmmgen_vjp_options {
  int32_t transpose_rhs; /* as in the forward */
  int32_t group_offset;
  int32_t tiling[9]; /* (tm, tk, tn) of the forward, dlhs and drhs; 0s = the heuristic */
} gmmgen_vjp_options;

typedef struct gmmgen_runtime_stats {
  int64_t lookups, registry_hits, memory_hits, disk_hits, compiles, rebuilds;
  double compile_seconds, disk_load_seconds;
} gmmgen_runtime_stats;

typedef struct gmmgen_runtime gmmgen_runtime;

/* Creates a runtime configured from the environment (GMMGEN_CACHE_DIR, GMMGEN_NUM_THREADS,
 * GMMGEN_DISABLE_JIT, GMMGEN_LOG, GMMGEN_CXX, GMMGEN_CXXFLAGS, GMMGEN_COMPILE_TIMEOUT). */
int gmmgen_runtime_create(gmmgen_runtime** runtime, char* err, size_t err_len);
void gmmgen_runtime_destroy(gmmgen_runtime* runtime);

/* out = gmm(lhs [M, K], rhs [G_local, K, N] or [G_local, N, K], group_sizes [num_groups]);
 * options may be NULL (defaults). */
int gmmgen_runtime_gmm(gmmgen_runtime* runtime, const gmmgen_tensor* lhs, const gmmgen_tensor* rhs,
                       const int32_t* group_sizes, int32_t num_groups, const gmmgen_tensor* out,
                       const gmmgen_gmm_options* options, char* err, size_t err_len);

/* out [G_local, K, N] = tgmm(lhs [M, K] (or [K, M]), rhs [M, N], group_sizes). */
int gmmgen_runtime_tgmm(gmmgen_runtime* runtime, const gmmgen_tensor* lhs, const gmmgen_tensor* rhs,
                        const int32_t* group_sizes, int32_t num_groups, const gmmgen_tensor* out,
                        const gmmgen_tgmm_options* options, char* err, size_t err_len);

/* Backward of out = gmm(lhs, rhs): dlhs [M, K] and drhs (shaped like rhs) from dout [M, N]. */
int gmmgen_runtime_gmm_vjp(gmmgen_runtime* runtime, const gmmgen_tensor* dout,
                           const gmmgen_tensor* lhs, const gmmgen_tensor* rhs,
                           const int32_t* group_sizes, int32_t num_groups,
                           const gmmgen_tensor* dlhs, const gmmgen_tensor* drhs,
                           const gmmgen_vjp_options* options, char* err, size_t err_len);

/* Compiles (or loads) the kernel of a spec text ahead of time. */
int gmmgen_runtime_warmup(gmmgen_runtime* runtime, const char* spec_text, char* err,
                          size_t err_len);

/* Registers kernels compiled into the program (a bundle's table). Every entry is checked first
 * (non-NULL entry points, info() non-NULL with this ABI version and non-NULL strings, a spec
 * that parses): GMMGEN_ERR_INVALID_ARGUMENT naming table[i] and nothing registered otherwise. */
int gmmgen_runtime_register(gmmgen_runtime* runtime, const gmmgen_kernel_entry* table,
                            int32_t count, char* err, size_t err_len);

void gmmgen_runtime_get_stats(const gmmgen_runtime* runtime, gmmgen_runtime_stats* stats);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* GMMGEN_RUNTIME_C_H_ */
