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

/* The scales of a quantized operand (docs/quantization.md), laid out as "Scales" in
 * gmmgen/kernel_abi.h says: scheme as in specs ("tensor", "channel", "block:B", "block:BxC"; NULL,
 * "" or "none": no scales, data NULL), f32 data (finite and > 0 where read), ld floats between rows
 * (0: packed). All zeros: no scales. An operand of dtype i8, i4, nf4 or t2 needs scales; fp8 may
 * have them. */
typedef struct gmmgen_scales {
  const char* scheme;
  const float* data;
  int64_t ld;
} gmmgen_scales;

/* Options structs: all zeros (e.g. `gmmgen_gmm_options o = {0};`) are the defaults. */
typedef struct gmmgen_gmm_options {
  int32_t transpose_rhs;             /* rhs is [G_local, N, K] */
  int32_t group_offset;              /* first active group */
  int32_t accumulate;                /* with existing_out: active rows add existing_out */
  int32_t tm, tk, tn;                /* tiling; 0 = the heuristic */
  const gmmgen_tensor* existing_out; /* NULL, or [M, N]; may alias out */
  gmmgen_scales lhs_scales;          /* lhs: tensor [1], channel [M], block:B [M, ceil(K/B)] */
  gmmgen_scales rhs_scales;          /* rhs: tensor, channel [G_local, N], block:B, block:BxC */
} gmmgen_gmm_options;

typedef struct gmmgen_tgmm_options {
  int32_t group_offset;              /* first active group */
  int32_t lhs_transposed;            /* lhs is [K, M] */
  int32_t transpose_out;             /* out is [G_local, N, K] */
  int32_t tm, tk, tn;                /* tiling; 0 = the heuristic */
  const gmmgen_tensor* existing_out; /* NULL, or shaped like out: out = existing_out + product */
  gmmgen_scales lhs_scales; /* tensor, channel [K], block:B [ceil(M/B), K] (global row blocks) */
  gmmgen_scales rhs_scales; /* tensor, channel [N], block:B [ceil(M/B), N] */
} gmmgen_tgmm_options;

/* The backward of a quantized forward (C++: gmmgen::QuantVjp in gmmgen/runtime.hpp):
 * dlhs = gmm(dout quantized 1xB along N, rhs codes read transposed with the same scales),
 * drhs = tgmm(lhs codes Bx1 along M, dout quantized Bx1 along M); the runtime dual-quantizes
 * dout (f32) itself. gmmgen_runtime_gmm_vjp's lhs is the activation as tgmm reads it: the
 * column-wise codes of gmmgen_quantize_dual (or f32/bf16 values with no scales). */
typedef struct gmmgen_vjp_quant {
  gmmgen_scales lhs_scales;     /* lhs as drhs reads it: block:B [ceil(M/B), K] (quantize_dual's
                                   col_scales), tensor, channel [K], or none */
  gmmgen_scales rhs_scales;     /* the forward's rhs scales as given to gmmgen_runtime_gmm: tensor,
                                   block:BxC (read transposed as they are), channel (folded into
                                   dout; the codes then read with scale 1) or none */
  const char* grad_dtype;       /* dout's codes: NULL or "" = "f8e5m2" (the default), "f8e4m3", or
                                   "none" (dout stays f32) */
  int64_t grad_block;           /* B of dout's 1xB and Bx1 blocks; 0 = 128 */
  const char* grad_calibration; /* NULL or "" = "absmax", or "fixed:LO:HI" */
} gmmgen_vjp_quant;

typedef struct gmmgen_vjp_options {
  int32_t transpose_rhs; /* as in the forward */
  int32_t group_offset;
  int32_t tiling[9];             /* (tm, tk, tn) of the forward, dlhs and drhs; 0s = heuristic */
  const gmmgen_vjp_quant* quant; /* NULL: an unquantized forward */
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

/* Activations a gmm call quantizes itself (C++: gmmgen::LhsQuantization): gmmgen_runtime_gmm_
 * quantize_lhs's lhs is f32 or bf16 [M, K], quantized along K into `dtype` codes with `scheme`
 * scales by `calibration`, bit for bit as gmmgen_quantize would of its f32 values (bf16 widened,
 * exactly; values checked in the same pass: one read of lhs), then the kernel of those codes
 * runs; options.lhs_scales must be empty. */
typedef struct gmmgen_lhs_quant {
  int32_t dtype;           /* a quantized GMMGEN_DTYPE_* code (i8, i4, f8e4m3, ...) */
  const char* scheme;      /* "tensor", "channel" or "block:B"; NULL or "" = none (fp8 only) */
  const char* calibration; /* NULL or "" = "absmax", or "fixed:LO:HI" */
} gmmgen_lhs_quant;

/* out [M, N] = gmm(lhs quantized by `quant`, rhs, group_sizes): as gmmgen_runtime_gmm. */
int gmmgen_runtime_gmm_quantize_lhs(gmmgen_runtime* runtime, const gmmgen_tensor* lhs,
                                    const gmmgen_tensor* rhs, const int32_t* group_sizes,
                                    int32_t num_groups, const gmmgen_tensor* out,
                                    const gmmgen_gmm_options* options,
                                    const gmmgen_lhs_quant* quant, char* err, size_t err_len);

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

/* ---- Quantizers (docs/quantization.md; C++ API and the rules in detail: gmmgen/quantize.hpp)
 * ---------- x is f32 row-major [rows, cols], x_ld elements apart; codes are [rows, cols] in the
 * dtype's storage (sub-byte codes packed along the row), codes_ld in elements (a multiple of the
 * codes per byte); scales f32, scales_ld apart; every ld 0 = packed. dtype: a quantized
 * GMMGEN_DTYPE_*; scheme as in specs: "tensor", "channel", "block:B", "block:BxC" ("none": fp8
 * cast, no scales); calibration: "absmax" (NULL means absmax) or "fixed:LO:HI" (e.g.
 * "fixed:-1.5:2"). axis: the contraction axis, which decides the scale layout:
 *   GMMGEN_QUANT_AXIS_COLS (gmm lhs [M, K], weights [N, K]): channel [rows]; block:B
 *     [rows, ceil(cols/B)]; block:BxC [ceil(rows/C), ceil(cols/B)];
 *   GMMGEN_QUANT_AXIS_ROWS (weights [K, N], tgmm operands): channel [cols]; block:B
 *     [ceil(rows/B), cols]; block:BxC [ceil(rows/B), ceil(cols/C)];
 *   tensor: [1] either way. Last blocks may be partial.
 * Every argument and every value of x (finite) is checked before anything is written. */
#define GMMGEN_QUANT_AXIS_ROWS 0
#define GMMGEN_QUANT_AXIS_COLS 1

int gmmgen_quantize(const float* x, int64_t rows, int64_t cols, int64_t x_ld, int32_t dtype,
                    const char* scheme, int32_t axis, const char* calibration, void* codes,
                    int64_t codes_ld, float* scales, int64_t scales_ld, char* err, size_t err_len);

/* gmmgen_quantize in one read of x (C++: ValueCheck::kWhileWriting), at memory speed where
 * gmmgen_quantize reads x twice: x's values are checked as they are encoded, so a value that is
 * not finite is the same error (naming the first) but codes and scales may then be partly
 * written. Every other argument is checked before anything is written, as there. */
int gmmgen_quantize_one_pass(const float* x, int64_t rows, int64_t cols, int64_t x_ld,
                             int32_t dtype, const char* scheme, int32_t axis,
                             const char* calibration, void* codes, int64_t codes_ld, float* scales,
                             int64_t scales_ld, char* err, size_t err_len);

/* An activation x [M, K] quantized with scheme "block:B" both row-wise (row_codes [M, K],
 * row_scales [M, ceil(K/B)]: as gmmgen_quantize with axis COLS) and column-wise (col_codes
 * [M, K], col_scales [ceil(M/B), K]: axis ROWS), in one call that reads x twice (the maxima,
 * then both encodings); bit for bit the two calls. */
int gmmgen_quantize_dual(const float* x, int64_t rows, int64_t cols, int64_t x_ld, int32_t dtype,
                         const char* scheme, const char* calibration, void* row_codes,
                         int64_t row_codes_ld, float* row_scales, int64_t row_scales_ld,
                         void* col_codes, int64_t col_codes_ld, float* col_scales,
                         int64_t col_scales_ld, char* err, size_t err_len);

/* x [rows, cols] = decode(code) * scale, rounded once to f32; every scale must be finite, > 0. */
int gmmgen_dequantize(const void* codes, int64_t codes_ld, const float* scales, int64_t scales_ld,
                      int64_t rows, int64_t cols, int32_t dtype, const char* scheme, int32_t axis,
                      float* x, int64_t x_ld, char* err, size_t err_len);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* GMMGEN_RUNTIME_C_H_ */
