/* gmmgen/kernel_abi.h: the plain-C interface of every kernel emitted by gmm-gen.
 *
 * A compiled kernel needs nothing but this header: C, C++, Rust or Python (ctypes) can call it
 * directly. Each kernel <name> exports, with C linkage:
 *
 *   const gmmgen_kernel_info* <name>_info(void);
 *       Static description: ABI version, name, canonical spec, hash, shapes and tiling.
 *
 *   int64_t <name>_workspace_bytes(int64_t m);
 *       Bytes of workspace that <name>_plan needs for a call with m rows; -1 if m is outside
 *       [0, GMMGEN_MAX_M] (the computation cannot overflow).
 *
 *   int <name>_plan(const gmmgen_args* args, void* workspace, int64_t workspace_bytes,
 *                   int64_t* num_items, char* err, size_t err_len);
 *       Checks every argument, then builds the grid metadata into workspace, writes the count
 *       of independent work items to *num_items and returns GMMGEN_OK. On a bad argument it
 *       returns an error code (below) with a message in err, and writes nothing else. The
 *       workspace must be GMMGEN_WORKSPACE_ALIGNMENT-byte aligned and hold at least
 *       <name>_workspace_bytes(args->m) bytes (else GMMGEN_ERR_WORKSPACE); the arguments are
 *       checked before the workspace, so a NULL workspace only checks them.
 *
 *   int <name>_run_items(const gmmgen_args* args, void* workspace,
 *                        int64_t begin, int64_t end);
 *       Runs work items [begin, end). Items write disjoint parts of the output and may run in
 *       any order on any threads; together they write every output element exactly once.
 *       Results do not depend on how items are split among threads. Each item of a plan runs
 *       exactly once (items may update counters in the workspace: tgmm adds the partial sums
 *       of a split group when its last slice finishes). Returns GMMGEN_OK, or (running
 *       nothing; there is no err buffer) GMMGEN_ERR_INVALID_ARGUMENT when args or workspace is
 *       NULL, the workspace was not planned by this kernel's _plan for these args (m,
 *       group_offset), or not 0 <= begin <= end <= *num_items.
 *
 *   int <name>(const gmmgen_args* args, char* err, size_t err_len);
 *       Convenience: plan + run every item on the calling thread (allocates the workspace).
 *
 *   int <name>_make_group_metadata(const int32_t* group_sizes, int32_t num_groups, int64_t m,
 *                                  int32_t start_group, int32_t num_nonzero_groups,
 *                                  int visit_empty_groups, int32_t* group_offsets,
 *                                  int32_t* group_ids, int32_t* m_tile_ids, int64_t* num_tiles);
 *       The megablox metadata builder for this kernel's tm (docs/operations.md, "Group metadata").
 *       group_offsets has num_groups + 1 entries; group_ids and m_tile_ids have
 *       ceil(m / tm) + num_groups - 1 entries (at least 1). Returns GMMGEN_OK or
 *       GMMGEN_ERR_INVALID_ARGUMENT.
 *
 * Messages in err read "<what is wrong> [<kernel name>]", the rule first, so that a short
 * buffer keeps it; they are truncated to err_len - 1 characters and NUL-terminated.
 *
 * Limits: 0 <= m <= GMMGEN_MAX_M (2^31 - 1). With m = 0, lhs and rhs may be NULL (nothing is
 * read); out (and existing_out where the mode needs it) is still required, except gmm's out,
 * which then has no rows. Outputs must not overlap any input (lhs, rhs, group_sizes, or
 * existing_out unless existing_out == out with the same leading dimension: in place).
 *
 * Memory layout: all operands are row-major. Leading dimensions (*_ld) are in elements and
 * must be >= the row length; a leading dimension of 0 means "packed" (exactly the row length).
 * Pointers must be aligned to their element size. Sub-byte dtypes (i4, nf4: two per byte, element
 * 2j in the low nibble; t2: four per byte, element 4j in the lowest bits) pack along the stored
 * row; their leading dimensions (in elements) must be multiples of the elements per byte, and a
 * "packed" row is its length rounded up to whole bytes.
 *
 * Scales (docs/quantization.md), f32, one array per quantized operand, with rows *_scale_ld apart:
 *   gmm lhs [M, K]:  tensor [1]; channel [M]; block:B [M, ceil(K/B)].
 *   gmm rhs:         tensor [1]; channel [G_local, N];
 *                    block:B   [G_local, ceil(K/B), N]   ([G_local, N, ceil(K/B)] if
 * transpose_rhs); block:BxC [G_local, ceil(K/B), ceil(N/C)] (transposed: [.., ceil(N/C),
 *                    ceil(K/B)]).
 *   tgmm lhs:        tensor [1]; channel [K]; block:B [ceil(M/B), K] ([K, ceil(M/B)] if lhs is
 *                    [K, M]), blocks of GLOBAL rows: a block straddling a group boundary serves
 *                    both groups, each summing only its own rows.
 *   tgmm rhs [M, N]: tensor [1]; channel [N]; block:B [ceil(M/B), N].
 * Every scale a call reads must be finite and > 0 (else GMMGEN_ERR_INVALID_ARGUMENT, output
 * untouched); scales of experts or rows the call does not read are not looked at.
 */
#ifndef GMMGEN_KERNEL_ABI_H_
#define GMMGEN_KERNEL_ABI_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped on any incompatible change of the structs or function signatures below. */
#define GMMGEN_ABI_VERSION 4

/* Return codes. */
#define GMMGEN_OK 0
#define GMMGEN_ERR_INVALID_ARGUMENT 1 /* a bad argument; err names it; output untouched */
#define GMMGEN_ERR_ABI 2              /* args->abi_version differs from GMMGEN_ABI_VERSION */
#define GMMGEN_ERR_WORKSPACE 3        /* workspace NULL, not 64-byte aligned, or too small */
#define GMMGEN_ERR_OUT_OF_MEMORY 4    /* the convenience entry could not allocate */

/* The alignment, in bytes, of the workspace passed to _plan and _run_items: a workspace that
 * is not aligned to it is refused (GMMGEN_ERR_WORKSPACE, "workspace must be 64-byte aligned"). */
#define GMMGEN_WORKSPACE_ALIGNMENT 64

/* The largest m (rows) a kernel accepts: 2^31 - 1. */
#define GMMGEN_MAX_M 2147483647

/* Element types: X(NAME, code). The codes are the dtype values of the C API
 * (GMMGEN_DTYPE_<NAME>); the generator's dtype table (generator/src/spec/dtypes.cpp) describes
 * each one. */
#define GMMGEN_DTYPES(X) \
  X(F32, 0)              \
  X(BF16, 1)             \
  X(F16, 2)              \
  X(F8E4M3, 3)           \
  X(F8E5M2, 4)           \
  X(I8, 5)               \
  X(I4, 6)               \
  X(NF4, 7)              \
  X(T2, 8)
#define GMMGEN_DTYPE_ENUM_(name, code) GMMGEN_DTYPE_##name = code,
enum { GMMGEN_DTYPES(GMMGEN_DTYPE_ENUM_) GMMGEN_DTYPE_COUNT_ };

/* Scale schemes of a quantized operand (docs/quantization.md), in gmmgen_kernel_info.*_quant. */
#define GMMGEN_QUANT_NONE 0    /* no scales: the codes are the values */
#define GMMGEN_QUANT_TENSOR 1  /* one scale */
#define GMMGEN_QUANT_CHANNEL 2 /* one scale per row (lhs) or output column (rhs) */
#define GMMGEN_QUANT_BLOCK                                         \
  3 /* one scale per block of *_block_k along the contraction axis \
       (and of rhs_block_n along N for rhs block:BxB) */

/* Operation codes in gmmgen_kernel_info.op. */
#define GMMGEN_OP_GMM 0
#define GMMGEN_OP_TGMM 1

/* Output modes in gmmgen_kernel_info.out_mode. */
#define GMMGEN_OUT_PLAIN 0      /* rows outside active groups are written as zero */
#define GMMGEN_OUT_EXISTING 1   /* rows outside active groups keep existing_out's values */
#define GMMGEN_OUT_ACCUMULATE 2 /* like EXISTING, and active rows add existing_out */

typedef struct gmmgen_kernel_info {
  uint32_t abi_version;          /* GMMGEN_ABI_VERSION the kernel was generated for */
  const char* name;              /* kernel name, also the symbol prefix */
  const char* spec;              /* canonical spec text (op=gmm,lhs=bf16,...) */
  const char* hash;              /* 32 hex digits: XXH3-128 of spec, generator version, templates */
  const char* generator_version; /* gmm-gen version that emitted the kernel */
  int32_t op;                    /* GMMGEN_OP_* */
  int32_t out_mode;              /* GMMGEN_OUT_* */
  int64_t k, n;                  /* contraction and output sizes */
  int32_t num_groups;            /* G: length of group_sizes */
  int32_t num_local_groups;      /* G_local: groups held in rhs (gmm) or out (tgmm) */
  int32_t transpose_rhs;         /* gmm: 1 if rhs is [G_local, N, K], 0 if [G_local, K, N];
                                    tgmm: the same for out */
  int32_t lhs_layout;            /* tgmm: 0 if lhs is [M, K], 1 if [K, M]; gmm: 0 */
  int32_t tm, tk, tn;            /* the spec's tiling (tk > k, tn > n run as k, n) */
  int32_t lhs_dtype, rhs_dtype, out_dtype; /* element types: GMMGEN_DTYPE_* codes */
  int32_t lhs_quant, rhs_quant;            /* scale schemes: GMMGEN_QUANT_* */
  int32_t lhs_block_k, rhs_block_k;        /* block sizes along the contraction axis (BLOCK) */
  int32_t rhs_block_n;                     /* rhs block:BxB: block size along N; else 0 */
} gmmgen_kernel_info;

typedef struct gmmgen_args {
  uint32_t abi_version;       /* set to GMMGEN_ABI_VERSION */
  int64_t m;                  /* rows (tokens); >= sum(group_sizes) */
  const void* lhs;            /* gmm: [m, k]; tgmm: [m, k], or [k, m] with lhs_layout=km */
  int64_t lhs_ld;             /* elements between consecutive lhs rows (0: packed) */
  const void* rhs;            /* gmm: [G_local, k, n], or [G_local, n, k] if transpose_rhs;
                                 tgmm: [m, n] */
  int64_t rhs_ld;             /* elements between consecutive rhs rows (0: packed); gmm: rows
                                 of each group's matrix, groups following each other */
  const int32_t* group_sizes; /* [G], each >= 0, sum <= m */
  int32_t group_offset;       /* first active (global) group; 0 <= offset <= G - G_local */
  int32_t reserved0;          /* must be 0 */
  void* out;                  /* gmm: [m, n]; tgmm: [G_local, k, n], or [G_local, n, k] if
                                 transpose_rhs */
  int64_t out_ld;             /* elements between consecutive out rows (0: packed); tgmm: rows
                                 of each group's matrix, groups following each other */
  const void* existing_out;   /* EXISTING/ACCUMULATE modes: shaped like out, may equal out;
                                 NULL in PLAIN mode */
  int64_t existing_out_ld;    /* elements between consecutive existing_out rows (0: packed) */
  /* Scales of quantized operands (f32, positive and finite; NULL when the operand's scheme is
   * GMMGEN_QUANT_NONE). Each scale array is laid out like the operand it scales, rows
   * *_scale_ld elements apart (0: packed); see "Scales" above. */
  const float* lhs_scale;
  int64_t lhs_scale_ld;
  const float* rhs_scale;
  int64_t rhs_scale_ld;
} gmmgen_args;

/* The entry points of every kernel, in one list: X(ARG, return type, field, symbol suffix,
 * parameters). The symbol of an entry point is <name><suffix> (the one-shot entry has no
 * suffix). ARG is passed through to X unchanged (used to carry the kernel name). Everything
 * that lists entry points -- gmmgen_kernel_entry, GMMGEN_DECLARE_KERNEL, GMMGEN_KERNEL_ENTRY,
 * the runtime's loader and the generator's manifest -- expands this list. */
#define GMMGEN_ENTRY_POINTS(X, ARG)                                                         \
  X(ARG, const gmmgen_kernel_info*, info, _info, (void))                                    \
  X(ARG, int64_t, workspace_bytes, _workspace_bytes, (int64_t m))                           \
  X(ARG, int, plan, _plan,                                                                  \
    (const gmmgen_args* args, void* workspace, int64_t workspace_bytes, int64_t* num_items, \
     char* err, size_t err_len))                                                            \
  X(ARG, int, run_items, _run_items,                                                        \
    (const gmmgen_args* args, void* workspace, int64_t begin, int64_t end))                 \
  X(ARG, int, run, , (const gmmgen_args* args, char* err, size_t err_len))                  \
  X(ARG, int, make_group_metadata, _make_group_metadata,                                    \
    (const int32_t* group_sizes, int32_t num_groups, int64_t m, int32_t start_group,        \
     int32_t num_nonzero_groups, int visit_empty_groups, int32_t* group_offsets,            \
     int32_t* group_ids, int32_t* m_tile_ids, int64_t* num_tiles))

/* The entry points of one kernel, as listed by a bundle (gmm-gen emit --bundle NAME emits
 * NAME.cpp, which compiles every kernel of a spec set and defines
 *   extern const gmmgen_kernel_entry NAME_kernels[];  extern const int32_t NAME_kernel_count;). */
#define GMMGEN_ENTRY_FIELD_(arg, ret, field, suffix, params) ret(*field) params;
typedef struct gmmgen_kernel_entry {
  GMMGEN_ENTRY_POINTS(GMMGEN_ENTRY_FIELD_, ~)
} gmmgen_kernel_entry;

/* Declares the entry points of kernel NAME (what <NAME>.h holds). */
#define GMMGEN_DECLARE_ENTRY_(name, ret, field, suffix, params) ret name##suffix params;
#define GMMGEN_DECLARE_KERNEL(name) GMMGEN_ENTRY_POINTS(GMMGEN_DECLARE_ENTRY_, name)

/* The gmmgen_kernel_entry initializer of kernel NAME (a bundle's table row). */
#define GMMGEN_ENTRY_ADDRESS_(name, ret, field, suffix, params) &name##suffix,
#define GMMGEN_KERNEL_ENTRY(name) \
  { GMMGEN_ENTRY_POINTS(GMMGEN_ENTRY_ADDRESS_, name) }

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* GMMGEN_KERNEL_ABI_H_ */
