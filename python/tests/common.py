"""Shared pieces of the gmmgen package tests: random ragged problems and float64 references.

Every test file reuses the few problem shapes below, so that the kernels they need are compiled
once (into the build tree's test cache) and then shared by the files.
"""

import numpy as np

import gmmgen

# The problem every test uses: ragged groups (an empty one; rows past sum(group_sizes) belong to
# no group), an odd N, and a K that is not a multiple of the usual tile sizes.
M, K, N, G = 150, 200, 77, 5
SIZES = np.array([31, 0, 52, 19, 23], dtype=np.int32)  # sum 125 < M
# Sharding: this shard holds groups 1..3.
OFFSET, G_LOCAL = 1, 3

# Unit roundoff of each output type.
EPS = {"f32": 2.0**-24, "bf16": 2.0**-8, "f16": 2.0**-11}


def rng(seed):
    return np.random.default_rng(seed)


def randn(r, *shape):
    return r.standard_normal(shape).astype(np.float32)


def starts(sizes):
    return np.concatenate([[0], np.cumsum(np.asarray(sizes, dtype=np.int64))])


def ref_gmm(lhs, rhs, sizes, group_offset=0, transpose_rhs=False, existing=None,
            accumulate=False):
    """docs/operations.md's gmm in float64."""
    lhs, rhs = np.asarray(lhs, np.float64), np.asarray(rhs, np.float64)
    n = rhs.shape[1] if transpose_rhs else rhs.shape[2]
    out = np.zeros((lhs.shape[0], n)) if existing is None else np.array(existing, np.float64)
    s = starts(sizes)
    for j in range(rhs.shape[0]):
        a, b = s[group_offset + j], s[group_offset + j + 1]
        w = rhs[j].T if transpose_rhs else rhs[j]
        out[a:b] = (out[a:b] if accumulate else 0) + lhs[a:b] @ w
    return out


def ref_tgmm(lhs, rhs, sizes, group_offset=0, g_local=None, existing=None):
    """docs/operations.md's tgmm in float64: lhs [M, K], rhs [M, N] -> [G_local, K, N]."""
    lhs, rhs = np.asarray(lhs, np.float64), np.asarray(rhs, np.float64)
    g_local = len(sizes) - group_offset if g_local is None else g_local
    out = np.zeros((g_local, lhs.shape[1], rhs.shape[1]))
    if existing is not None:
        out += np.asarray(existing, np.float64)
    s = starts(sizes)
    for j in range(g_local):
        a, b = s[group_offset + j], s[group_offset + j + 1]
        out[j] += lhs[a:b].T @ rhs[a:b]
    return out


def as_f64(x):
    """A result as float64 (bf16 bit patterns decoded)."""
    if hasattr(x, "detach"):  # torch
        x = x.detach().float().numpy()
    x = np.asarray(x)
    if x.dtype == np.uint16:
        x = gmmgen.from_bf16(x)
    return x.astype(np.float64)


def assert_close(test, got, ref, bound, out_type="f32", what="result"):
    """|got - ref| <= 1e-5 * bound + 2 * eps(out) * |ref| elementwise: f32 accumulation error
    (bound = the products' sum of magnitudes, e.g. |lhs| @ |rhs|) plus one rounding to the
    output type."""
    got = as_f64(got)
    test.assertEqual(got.shape, ref.shape, what)
    tol = 1e-5 * bound + 2 * EPS[out_type] * np.abs(ref)
    bad = np.abs(got - ref) > tol
    if bad.any():
        i = tuple(int(v) for v in np.argwhere(bad)[0])
        test.fail(f"{what}: {int(bad.sum())} elements off, first at {i}: got {got[i]}, "
                  f"expected {ref[i]} (tolerance {tol[i]})")
