#!/usr/bin/env python3
"""Checks gmm-gen's Pallas modules in TPU interpret mode.

usage: check_pallas.py DIR [--seed S] [--quick] [--only PATTERNS] [--shard I/N] [--python PY]
                       [--interpret hlo] [--no-shared] [--cpp-lib LIB --cpp-manifest M]

DIR is a folder written by `gmm-gen emit` (its pallas/ subfolder holds the modules) or a folder
of modules; --only checks the modules whose names match one of its comma-separated shell
patterns; --shard I/N checks every N-th module from the I-th (the test suite runs shards in
parallel); --python PY re-runs the checker under PY (a Python with JAX) where PY exists.
For every module, on the edge-case families that `gmm-gen verify` uses for C++
kernels (empty groups first, in the middle and last; groups starting inside an m-tile;
sum(group_sizes) < M; shards at both ends of the groups; 13 and 45 m-tiles; M = 0; a NaN in one
expert; small-integer inputs whose sums are exact; --quick: one case per shard combining the
first three, and M = 0), it runs

  gmm modules:  the VJP of differentiable_gmm (the forward, the dlhs and drhs kernels, and the
                cotangent of existing_out); without --quick also gmm, tgmm (lhs [K, M]) and
                tgmm_mk (lhs [M, K]) in megablox's layout [G_local, K, N], which must
                give the VJP's drhs bytes where rhs is [K, N] (the same kernel) and, where
                rhs is [N, K], its values within the bound of the reference,
                the VJP once more with jax_custom_vjp3 on where this JAX has the flag
                (interpret="hlo": a custom VJP under that flag rejects TPU interpret
                mode's host callbacks),
  tgmm modules: tgmm (lhs [K, M]) or tgmm_mk (lhs [M, K]), whichever reads the module's layout
                in place; without --quick also the other (same bytes),

in TPU interpret mode (pltpu.InterpretParams with uninitialized memory poisoned to NaN, or
interpret=True where this JAX has no InterpretParams; --interpret hlo: Pallas's generic
interpreter, ~15x faster, no TPU memory model; JAX_PLATFORMS defaults to cpu), and
compares every output element with a float64 numpy reference (elements outside the active
groups exactly; the others within the bound of f32 summation plus one rounding to the output
dtype) and with jax.lax.ragged_dot (and its VJP). Rows outside the active groups hold NaN in
the inputs, so a kernel that reads them poisons its result. Modules whose K or N is not a
multiple of tk or tn exercise the masked partial blocks; each module's line says what it
covers, its cases, its worst error as a share of the bound and its run time. Interpret mode
compiles per shape and runs host callbacks per grid step (~25 ms each): most cases share one M.

It also checks make_group_metadata against a brute-force builder (megablox's definition,
group by group) on 300 (--quick: 12) random partitions of up to ~5000 m-tiles, running the
module's code under jax.numpy and under numpy; with --cpp-lib (a shared object of C++ gmm
kernels emitted by gmm-gen) and --cpp-manifest (its manifest.json) also against their C++
builders (ctypes). The metadata check and the jax_custom_vjp3 run exercise code that is the same
word for word in every module: they run once, in shard 0, on its first module that has it (the
metadata check alone compiles ~540 variants, ~4 minutes), with --no-shared not at all (another
set of modules runs them).

Exit status: 0 every check passed; 1 a mismatch or an error; 2 bad usage; 77 skipped (no JAX;
with GMMGEN_REQUIRE_JAX=1 that is an error, 1).
"""
import argparse
import ctypes
import glob
import importlib.util
import json
import os
import random
import sys
import time
import traceback
import zlib

EXIT_SKIPPED = 77
U = 2.0**-24  # unit roundoff of f32
sys.dont_write_bytecode = True  # no __pycache__ beside the modules (generated/ stays as emitted)
import jax_env  # noqa: E402  (--only)


def load_module(path):
    name = "gmmgen_pallas_" + os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---- Group sizes and cases --------------------------------------------------------------------


def partition(rng, total, groups):
    """A random partition of `total` rows into `groups` sizes (empty groups anywhere)."""
    cuts = sorted(rng.randint(0, total) for _ in range(groups - 1))
    return [b - a for a, b in zip([0] + cuts, cuts + [total])]


class Case:
    def __init__(self, label, m, sizes, offset, nan=False, exact=False):
        self.label, self.m, self.sizes, self.offset = label, m, sizes, offset
        self.nan, self.exact = nan, exact


def make_cases(mod, tm, rng, quick):
    """The edge-case families for a module with m-tiles of tm rows. Most share one M, so that
    each kernel is traced and compiled once for them (interpret mode compiles per shape); the
    quick subset keeps, per shard, one case that combines empty groups (first, middle, last),
    groups starting inside m-tiles and sum(group_sizes) < M, and M = 0."""
    g = mod.G
    offsets = [0] if mod.G_LOCAL == mod.G else [0, mod.G - mod.G_LOCAL]
    m = 3 * tm + 5
    cases = []
    for off in offsets:
        shard = f" offset={off}"
        sizes = partition(rng, m - min(3, m // 4), g)
        for i in {0, g // 2, g - 1}:  # empty groups first, in the middle and last
            sizes[i] = 0
        sizes[next((i for i in range(g) if i not in {0, g // 2, g - 1}), 0)] += (
            m - min(3, m // 4) - sum(sizes))
        cases.append(Case("empty first/middle/last, sum(group_sizes) < M" + shard, m, sizes, off))
        if quick:
            continue
        cases.append(Case("uniform" + shard, m, [m // g + (i < m % g) for i in range(g)], off))
        # Every group but the first starts inside an m-tile.
        step = max(1, tm // 2 + 1)
        cases.append(Case("starts mid-tile" + shard, m,
                          [step] * min(g, m // step) + [0] * (g - min(g, m // step)), off))
        cases.append(Case("NaN in one expert" + shard, m, partition(rng, m, g), off, nan=True))
        cases.append(Case("exact sums" + shard, m, partition(rng, m, g), off, exact=True))
    if not quick:
        for t in (13, 45):
            mt = (t - 1) * tm + max(1, tm // 2)  # t m-tiles, the last one partial
            cases.append(Case(f"{t} m-tiles", mt, partition(rng, mt, g), offsets[-1]))
    cases.append(Case("M = 0", 0, [0] * g, 0))
    return cases


# ---- References and comparison ----------------------------------------------------------------


class Checker:
    """Compares outputs with float64 references; collects the first failure of each module."""

    def __init__(self, np, jnp):
        self.np, self.jnp = np, jnp
        self.failures = []
        self.checks = 0
        self.worst = 0.0  # worst |got - ref| / bound over the elements with a bound

    def unit(self, dtype):
        return 2.0**-8 if self.jnp.dtype(dtype) == self.jnp.bfloat16 else U

    def round_to(self, x64, dtype):
        """float64 values rounded once to dtype (nearest even), as float64."""
        jnp, np = self.jnp, self.np
        return np.asarray(jnp.asarray(x64.astype(np.float32)).astype(dtype).astype(jnp.float32),
                          dtype=np.float64)

    def compare(self, what, got, ref, bound, exact, round_dtype=None):
        """got vs ref: NaN where ref is NaN; elements with exact=True equal; others within
        bound (or, with round_dtype, equal to ref rounded once to it)."""
        np = self.np
        self.checks += 1
        got = np.asarray(self.jnp.asarray(got).astype(self.jnp.float32), dtype=np.float64)
        if got.shape != ref.shape:
            self.failures.append(f"{what}: shape {got.shape}, expected {ref.shape}")
            return False
        ref_nan, got_nan = np.isnan(ref), np.isnan(got)
        bad = ref_nan != got_nan
        finite = ~ref_nan & ~got_nan
        diff = np.where(finite, np.abs(got - np.where(finite, ref, 0)), 0.0)
        if round_dtype is not None:
            want = self.round_to(np.where(ref_nan, 0, ref), round_dtype)
            bad |= finite & (got != want)
        else:
            bad |= finite & exact & (diff != 0)
            with np.errstate(invalid="ignore", divide="ignore"):
                ratio = np.where(finite & ~exact, diff / np.maximum(bound, 1e-300), 0.0)
            bad |= finite & ~exact & (diff > bound)
            if ratio.size:
                self.worst = max(self.worst, float(np.max(ratio)))
        if np.any(bad):
            idx = tuple(int(i) for i in np.argwhere(bad)[0])
            self.failures.append(
                f"{what}: {int(np.sum(bad))} of {bad.size} elements differ; first at {idx}: "
                f"got {got[idx]!r}, reference {ref[idx]!r}, bound {np.broadcast_to(bound, ref.shape)[idx]!r}"
            )
            return False
        return True


def group_rows(sizes):
    offsets = [0]
    for s in sizes:
        offsets.append(offsets[-1] + s)
    return offsets


def random_values(np, rng_np, shape, exact):
    if exact:
        return rng_np.integers(-3, 4, size=shape).astype(np.float64)
    return rng_np.uniform(-1.0, 1.0, size=shape)


# ---- gmm modules ------------------------------------------------------------------------------


def check_gmm_module(mod, case, ctx, diff_mod=None):
    """diff_mod: the module whose differentiable_gmm is differentiated (mod itself, or a copy
    of it loaded with another custom_vjp implementation)."""
    np, jnp, jax, chk = ctx.np, ctx.jnp, ctx.jax, ctx.checker
    diff_mod = diff_mod or mod
    K, N, GL = mod.K, mod.N, mod.G_LOCAL
    m, sizes, go = case.m, case.sizes, case.offset
    offs = group_rows(sizes)
    lo, hi = offs[go], offs[go + GL]
    rng = np.random.default_rng(ctx.seed_for(case))
    lhs_t, rhs_t, out_t = mod.LHS_DTYPE, mod.RHS_DTYPE, mod.OUT_DTYPE

    def cast(x, dtype):  # values exactly representable in dtype, as float64 and as jnp
        arr = jnp.asarray(x.astype(np.float32)).astype(dtype)
        return np.asarray(arr.astype(jnp.float32), dtype=np.float64), arr

    lhs64, lhs = cast(random_values(np, rng, (m, K), case.exact), lhs_t)
    # Rows outside the active groups are poison: a kernel that reads them into a result fails.
    lhs64[:lo], lhs64[hi:] = np.nan, np.nan
    lhs = jnp.asarray(lhs64.astype(np.float32)).astype(lhs_t)
    rshape = (GL, N, K) if mod.TRANSPOSE_RHS else (GL, K, N)
    rhs64, rhs = cast(random_values(np, rng, rshape, case.exact), rhs_t)
    nan_cols = {}
    if case.nan:  # one NaN in the weights of a local expert whose group has rows
        full = [j for j in range(GL) if sizes[go + j] > 0]
        if full:
            j = full[len(full) // 2]
            kk, nn = int(rng.integers(K)), int(rng.integers(N))
            if mod.TRANSPOSE_RHS:
                rhs64[j, nn, kk] = np.nan
            else:
                rhs64[j, kk, nn] = np.nan
            rhs = jnp.asarray(rhs64.astype(np.float32)).astype(rhs_t)
            nan_cols = {j: (kk, nn)}
    existing64, existing = None, None
    if mod.OUT_MODE != "plain":
        existing64, existing = cast(random_values(np, rng, (m, N), case.exact), out_t)
    dout64, dout = cast(random_values(np, rng, (m, N), case.exact), out_t)
    dout64[:lo], dout64[hi:] = np.nan, np.nan  # dlhs must be zero there, drhs must not see them
    dout = jnp.asarray(dout64.astype(np.float32)).astype(out_t)
    gs = jnp.asarray(np.array(sizes, dtype=np.int32))

    # float64 references, with the sums of |products| for the error bounds.
    out_ref = np.zeros((m, N)) if existing64 is None else existing64.copy()
    out_abs = np.zeros((m, N)) if existing64 is None else np.abs(existing64)
    exact_rows = np.ones((m, 1), dtype=bool)  # rows outside the active groups: exact
    dlhs_ref, dlhs_abs = np.zeros((m, K)), np.zeros((m, K))
    drhs_ref = np.zeros((GL, K, N))
    drhs_abs = np.zeros((GL, K, N))
    drhs_terms = np.zeros((GL, 1, 1))
    for j in range(GL):
        r0, r1 = offs[go + j], offs[go + j + 1]
        w = rhs64[j].T if mod.TRANSPOSE_RHS else rhs64[j]  # [K, N]
        wc = np.nan_to_num(w, nan=0.0)
        x, dy = lhs64[r0:r1], dout64[r0:r1]
        prod = x @ wc
        dl = dy @ wc.T
        if j in nan_cols:  # NaN * anything is NaN, 0 included
            kk, nn = nan_cols[j]
            prod[:, nn] = np.nan
            dl[:, kk] = np.nan
        out_ref[r0:r1] = prod + (existing64[r0:r1] if mod.OUT_MODE == "accumulate" else 0)
        out_abs[r0:r1] = np.abs(x) @ np.abs(wc) + (
            np.abs(existing64[r0:r1]) if mod.OUT_MODE == "accumulate" else 0)
        exact_rows[r0:r1] = False
        dlhs_ref[r0:r1], dlhs_abs[r0:r1] = dl, np.abs(dy) @ np.abs(wc.T)
        drhs_ref[j], drhs_abs[j] = x.T @ dy, np.abs(x.T) @ np.abs(dy)
        drhs_terms[j] = r1 - r0
    if mod.TRANSPOSE_RHS:
        drhs_ref, drhs_abs = drhs_ref.swapaxes(1, 2), drhs_abs.swapaxes(1, 2)
        drhs_terms = drhs_terms.swapaxes(1, 2)

    def bound(ref, abs_sum, terms, dtype):
        return chk.unit(dtype) * np.abs(np.nan_to_num(ref)) + (terms + 2) * U * abs_sum

    where = f"{mod.NAME} [{case.label}, M={m}]"
    round_out = out_t if case.exact else None
    # One VJP gives the cotangents of lhs, rhs and (where the module takes it) existing_out.
    fn = lambda l, r, *e: diff_mod.differentiable_gmm(  # noqa: E731
        l, r, gs, preferred_element_type=out_t, group_offset=go,
        existing_out=e[0] if e else None, interpret=ctx.interpret)
    primals = (lhs, rhs) if existing is None else (lhs, rhs, existing)
    out, vjp = jax.vjp(fn, *primals)
    dlhs, drhs, *dexisting = vjp(dout)
    ok = chk.compare(f"{where} gmm", out, out_ref, bound(out_ref, out_abs, K, out_t),
                     exact_rows, round_out)
    ok &= chk.compare(f"{where} dlhs", dlhs, dlhs_ref, bound(dlhs_ref, dlhs_abs, N, lhs_t),
                      exact_rows, lhs_t if case.exact else None)
    ok &= chk.compare(f"{where} drhs", drhs, drhs_ref, bound(drhs_ref, drhs_abs, drhs_terms, rhs_t),
                      np.zeros(drhs_ref.shape, dtype=bool), rhs_t if case.exact else None)
    if mod.OUT_MODE != "plain":  # the cotangent of existing_out
        want = dout64 if mod.OUT_MODE == "accumulate" else np.where(exact_rows, dout64, 0.0)
        ok &= chk.compare(f"{where} d existing_out", dexisting[0], want, 0.0,
                          np.ones((m, 1), dtype=bool))
    if not ctx.quick:  # the plain entry point gives the same bytes as the differentiable path
        direct = mod.gmm(lhs, rhs, gs, preferred_element_type=out_t, group_offset=go,
                         existing_out=existing, interpret=ctx.interpret)
        ok &= chk.compare(f"{where} gmm vs differentiable_gmm", direct,
                          np.asarray(jnp.asarray(out).astype(jnp.float32), dtype=np.float64), 0.0,
                          np.ones((m, 1), dtype=bool))
        # megablox's tgmm (lhs [K, M]) and tgmm_mk write megablox's layout [G_local, K, N]
        # whatever rhs's. With rhs [K, N] that is the VJP's drhs kernel: the same bytes. With rhs
        # [N, K] the VJP's kernel writes [N, K] tiles (y^T x) where tgmm writes [K, N] ones (x^T y):
        # each tile's product may sum in another order, so both are held to the reference's bound.
        drhs64 = np.asarray(jnp.asarray(drhs).astype(jnp.float32), dtype=np.float64)
        for name, x in (("tgmm", jnp.swapaxes(lhs, 0, 1)), ("tgmm_mk", lhs)):
            got = getattr(mod, name)(x, dout, gs, preferred_element_type=rhs_t, group_offset=go,
                                     interpret=ctx.interpret)
            if mod.TRANSPOSE_RHS:
                ref_kn = drhs_ref.swapaxes(1, 2)
                ok &= chk.compare(f"{where} {name}", got, ref_kn,
                                  bound(ref_kn, drhs_abs.swapaxes(1, 2), drhs_terms.swapaxes(1, 2), rhs_t),
                                  np.zeros(ref_kn.shape, dtype=bool), rhs_t if case.exact else None)
            else:
                ok &= chk.compare(f"{where} {name} vs the VJP's drhs", got, drhs64, 0.0,
                                  np.ones(drhs64.shape, dtype=bool))
    if case.nan or m == 0 or not ctx.ragged or diff_mod is not mod:
        return ok
    # jax.lax.ragged_dot and its VJP, on NaN-free copies (its dense formulation multiplies
    # every row by every group's weights), over all G groups with zero weights for the groups
    # this shard does not hold.
    common = jnp.promote_types(lhs_t, rhs_t)  # ragged_dot takes one operand dtype
    lhs_c = jnp.asarray(np.nan_to_num(lhs64).astype(np.float32)).astype(lhs_t).astype(common)
    dout_c = jnp.asarray(np.nan_to_num(dout64).astype(np.float32)).astype(out_t)
    w_local = (jnp.swapaxes(rhs, 1, 2) if mod.TRANSPOSE_RHS else rhs).astype(common)

    def ragged(l, w):
        full = jnp.zeros((mod.G, K, N), common).at[go:go + GL].set(w)
        y = jax.lax.ragged_dot(l, full, gs, preferred_element_type=jnp.float32)
        return y

    y, rvjp = jax.vjp(ragged, lhs_c, w_local)
    rd_lhs, rd_w = rvjp(dout_c.astype(jnp.float32))
    active = ~exact_rows
    y64 = np.asarray(y, dtype=np.float64)
    if mod.OUT_MODE == "accumulate":
        y64 = y64 + existing64
    ok &= chk.compare(f"{where} gmm vs ragged_dot", np.where(active, np.asarray(
        jnp.asarray(out).astype(jnp.float32)), 0.0), np.where(active, y64, 0.0),
        2 * bound(out_ref, out_abs, K, out_t), ~active)
    ok &= chk.compare(f"{where} dlhs vs ragged_dot VJP", np.where(active, np.asarray(
        jnp.asarray(dlhs).astype(jnp.float32)), 0.0), np.where(active, np.asarray(
            rd_lhs, dtype=np.float64), 0.0), 2 * bound(dlhs_ref, dlhs_abs, N, lhs_t), ~active)
    rd_w64 = np.asarray(rd_w, dtype=np.float64)
    if mod.TRANSPOSE_RHS:
        rd_w64 = rd_w64.swapaxes(1, 2)
    ok &= chk.compare(f"{where} drhs vs ragged_dot VJP", drhs, rd_w64,
                      2 * bound(drhs_ref, drhs_abs, drhs_terms, rhs_t),
                      np.zeros(drhs_ref.shape, dtype=bool))
    return ok


# ---- Quantized gmm modules --------------------------------------------------------------------

# The spec's NF4 levels (QLoRA's NormalFloat levels rounded to bf16), code 0..15.
NF4 = (-1.0, -0.6953125, -0.5234375, -0.39453125, -0.28515625, -0.1845703125, -0.0908203125, 0.0,
       0.07958984375, 0.1611328125, 0.24609375, 0.337890625, 0.44140625, 0.5625, 0.72265625, 1.0)
PACKED = {"i4": 2, "nf4": 2, "t2": 4}  # codes per byte, along the operand's minor axis
FLOAT_CODES = {"f8e4m3": "float8_e4m3fn", "f8e5m2": "float8_e5m2"}


def spec_fields(mod):
    return dict(item.split("=", 1) for item in mod.SPEC.split(","))


def random_codes(np, jnp, rng, dtype, shape):
    """(the array the module takes, the codes' values as float64 [shape]) for a dtype of the
    spec: i8 in [-127, 127]; i4 in [-7, 7], t2 in {-1, 0, 1} and nf4 codes 0..15 packed along
    the last axis, the lowest bits first; fp8 values; bf16 and f32 plain values."""
    if dtype in FLOAT_CODES:
        arr = jnp.asarray(rng.normal(0.0, 8.0, size=shape).astype(np.float32)).astype(
            getattr(jnp, FLOAT_CODES[dtype]))
        return arr, np.asarray(arr.astype(jnp.float32), dtype=np.float64)
    if dtype in ("f32", "bf16"):
        arr = jnp.asarray(rng.uniform(-1.0, 1.0, size=shape).astype(np.float32)).astype(
            jnp.float32 if dtype == "f32" else jnp.bfloat16)
        return arr, np.asarray(arr.astype(jnp.float32), dtype=np.float64)
    if dtype == "i8":
        codes = rng.integers(-127, 128, size=shape)
        return jnp.asarray(codes.astype(np.int8)), codes.astype(np.float64)
    per = PACKED[dtype]
    if dtype == "nf4":
        codes = rng.integers(0, 16, size=shape)
        values = np.asarray(NF4)[codes]
    elif dtype == "i4":
        values = rng.integers(-7, 8, size=shape)
        codes = values & 15  # two's complement nibble
    else:  # t2: 00 = 0, 01 = +1, 10 = -1
        values = rng.integers(-1, 2, size=shape)
        codes = np.where(values < 0, 2, values)
    bits = 8 // per
    width = -(-shape[-1] // per)
    padded = np.zeros(shape[:-1] + (width * per,), dtype=np.int64)
    padded[..., :shape[-1]] = codes
    packed = np.zeros(shape[:-1] + (width,), dtype=np.int64)
    for i in range(per):
        packed |= padded[..., i::per] << (bits * i)
    return jnp.asarray(packed.astype(np.uint8)), values.astype(np.float64)


def random_scales(np, rng, shape):
    """f32 scales of a quantized operand: 2^[-3, 3] times [1, 2)."""
    return (np.exp2(rng.integers(-3, 4, size=shape)) *
            rng.uniform(1, 2, size=shape)).astype(np.float32)


def scale_layout(np, scheme, rows, k, n, groups, transposed, is_rhs):
    """The shape of a scheme's scales (the layouts of docs/quantization.md) and a function that
    expands them to a scale per element: lhs [rows, k], rhs [groups, k, n]."""
    if scheme == "none":
        return None, None
    if scheme == "tensor":
        return (1,), (lambda s: np.full((groups, k, n) if is_rhs else (rows, k), s[0]))
    if scheme == "channel":
        if is_rhs:
            return (groups, n), (lambda s: np.broadcast_to(s[:, None, :], (groups, k, n)))
        return (rows,), (lambda s: np.broadcast_to(s[:, None], (rows, k)))
    bk, _, bn = scheme[len("block:"):].partition("x")
    bk, bn = int(bk), int(bn or 0)
    kb = -(-k // bk)
    if not is_rhs:
        return (rows, kb), (lambda s: np.repeat(s, bk, axis=1)[:, :k])
    nb = -(-n // bn) if bn else n

    def expand(s):
        if transposed:
            s = s.swapaxes(1, 2)
        s = np.repeat(s, bk, axis=1)[:, :k]
        return np.repeat(s, bn, axis=2)[:, :, :n] if bn else s
    return ((groups, nb, kb) if transposed else (groups, kb, nb)), expand


def check_frozen_vjp(mod, case, ctx, args, out, x, w, where):
    """The VJP of a frozen-weight module's differentiable_gmm (x, w: the dequantized operands,
    float64; rows of x outside the active groups NaN)."""
    np, jnp, jax, chk = ctx.np, ctx.jnp, ctx.jax, ctx.checker
    lhs, rhs, gs, existing, rhs_s = args
    m, sizes, go, GL = case.m, case.sizes, case.offset, mod.G_LOCAL
    offs = group_rows(sizes)
    lo, hi = offs[go], offs[go + GL]
    rng = np.random.default_rng(ctx.seed_for(case) + 1)
    dout = jnp.asarray(rng.uniform(-1, 1, size=(m, mod.N)).astype(np.float32)).astype(
        mod.OUT_DTYPE)
    dout64 = np.asarray(dout.astype(jnp.float32), dtype=np.float64)
    dout64[:lo], dout64[hi:] = np.nan, np.nan  # rows no kernel may read
    dout = jnp.asarray(dout64.astype(np.float32)).astype(mod.OUT_DTYPE)

    def fn(l, *e):
        return mod.differentiable_gmm(l, rhs, gs, preferred_element_type=mod.OUT_DTYPE,
                                      group_offset=go, existing_out=e[0] if e else None,
                                      interpret=ctx.interpret, rhs_scales=rhs_s)
    primals = (lhs,) if existing is None else (lhs, existing)
    got, vjp = jax.vjp(fn, *primals)
    dlhs, *dexisting = vjp(dout)
    ok = chk.compare(f"{where} differentiable_gmm vs gmm", got, np.asarray(
        jnp.asarray(out).astype(jnp.float32), dtype=np.float64), 0.0, np.ones((m, 1), bool))
    ref, ref_abs = np.zeros((m, mod.K)), np.zeros((m, mod.K))
    exact = np.ones((m, 1), dtype=bool)
    for j in range(GL):
        r0, r1 = offs[go + j], offs[go + j + 1]
        ref[r0:r1], ref_abs[r0:r1] = dout64[r0:r1] @ w[j].T, np.abs(dout64[r0:r1]) @ np.abs(w[j].T)
        exact[r0:r1] = False
    bound = chk.unit(mod.LHS_DTYPE) * np.abs(ref) + (mod.N + 2) * U * ref_abs
    ok &= chk.compare(f"{where} dlhs (frozen weights)", dlhs, ref, bound, exact)
    if mod.OUT_MODE != "plain":
        want = dout64 if mod.OUT_MODE == "accumulate" else np.where(exact, dout64, 0.0)
        ok &= chk.compare(f"{where} d existing_out", dexisting[0], want, 0.0,
                          np.ones((m, 1), dtype=bool))
    return ok


QMAX = {"i8": 127.0, "f8e4m3": 448.0, "f8e5m2": 57344.0}
MANTISSA_BITS = {"f8e4m3": (3, -6), "f8e5m2": (2, -14)}  # and the smallest normal exponent


def check_quantized(ctx, what, a, codes, scales, dtype, blocks):
    """The module's absmax quantization of a (float64) against the spec: every scale within 2
    ulps (f32) of max|block| / qmax (1 for a block of zeros), every code a / scale rounded to
    one of its two nearest codes and within half a step of it (the division may round
    differently on each platform, so a tie may go either way), saturating. Returns the values
    (float64) of codes times scales."""
    np, jnp = ctx.np, ctx.jnp
    if a.size == 0:  # M = 0: nothing to quantize
        return np.zeros(a.shape)
    sizes = [b or n for n, b in zip(a.shape, blocks)]
    pad = [(0, -(-n // b) * b - n) for n, b in zip(a.shape, sizes)]
    shape = [d for n, b in zip(a.shape, sizes) for d in (-(-n // b), b)]
    amax = np.abs(np.pad(a, pad).reshape(shape)).max(axis=tuple(range(1, 2 * a.ndim, 2)))
    want = np.where(amax > 0, amax / QMAX[dtype], 1.0)
    s = np.asarray(scales, dtype=np.float64).reshape(want.shape)
    ok = ctx.checker.compare(f"{what} scales", s, want, 2 * U * want, np.zeros(want.shape, bool))
    for axis, b in enumerate(sizes):
        s = np.repeat(s, b, axis=axis)
    s = s[tuple(slice(0, n) for n in a.shape)]
    q = np.clip(a / s, -QMAX[dtype], QMAX[dtype])
    if dtype == "i8":
        step = np.ones(q.shape)
    else:
        bits, emin = MANTISSA_BITS[dtype]
        e = np.floor(np.log2(np.maximum(np.abs(q), 2.0**emin)))
        step = np.exp2(e - bits)
    c = np.asarray(jnp.asarray(codes).astype(jnp.float32), dtype=np.float64)
    # Not a compare(): a code at a tie sits at its bound, which says nothing of the kernels' worst.
    bad = ~(np.abs(c - q) <= 0.5 * step * (1 + 2.0**-16))
    ctx.checker.checks += 1
    if np.any(bad):
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        ctx.checker.failures.append(f"{what} codes: {int(bad.sum())} of {bad.size} are not a / "
                                    f"scale rounded; first at {idx}: {c[idx]!r} for {q[idx]!r}")
        ok = False
    return c * s if ok else None


def check_training_vjp(mod, case, ctx, where):
    """differentiable_gmm of a module that quantizes float operands (training): its quantizer
    (quantize_lhs, quantize_rhs, and for the fp8 recipe the one it applies to dout and lhs's
    columns) against the spec's absmax quantizer (check_quantized); then, on the module's own
    codes, the forward against the float64 product of the dequantized operands (rows outside the
    active groups as zeros), and the VJP against the dequantized operands' (straight-through): for fp8 block scales on both sides, dout quantized to e5m2 (rows in
    blocks of the weights' N-block, columns in blocks of lhs's block of global rows), dlhs =
    dout's rows x the weights^T, drhs = lhs's columns^T x dout's columns; otherwise dlhs = dout x
    the weights^T, drhs = lhs^T x dout, all dequantized. Each also within a loose distance of
    the float VJP (quantization error, not a wrong scale)."""
    np, jnp, jax, chk = ctx.np, ctx.jnp, ctx.jax, ctx.checker
    f = spec_fields(mod)
    K, N, GL = mod.K, mod.N, mod.G_LOCAL
    m, sizes, go = case.m, case.sizes, case.offset
    offs = group_rows(sizes)
    lo, hi = offs[go], offs[go + GL]
    rng = np.random.default_rng(ctx.seed_for(case) + 2)
    transposed = mod.TRANSPOSE_RHS
    x = jnp.asarray(rng.normal(0, 1, size=(m, K)).astype(np.float32))  # lhs in f32
    w = jnp.asarray(rng.normal(0, 0.5, size=(GL, N, K) if transposed else (GL, K, N)).astype(
        np.float32)).astype(jnp.bfloat16)  # rhs in bf16
    dout = jnp.asarray(rng.normal(0, 1, size=(m, N)).astype(np.float32)).astype(mod.OUT_DTYPE)
    x64 = np.asarray(x, dtype=np.float64)
    w64 = np.asarray(w.astype(jnp.float32), dtype=np.float64)
    d64 = np.asarray(dout.astype(jnp.float32), dtype=np.float64)
    x64[:lo], x64[hi:], d64[:lo], d64[hi:] = np.nan, np.nan, np.nan, np.nan  # never read
    x = jnp.asarray(x64.astype(np.float32))
    dout = jnp.asarray(d64.astype(np.float32)).astype(mod.OUT_DTYPE)
    active = np.zeros((m, 1), dtype=bool)
    active[lo:hi] = True
    xz, dz = np.where(active, x64, 0.0), np.where(active, d64, 0.0)

    def blocks(scheme, rhs):
        if scheme == "tensor":
            return (0, 0, 0) if rhs else (0, 0)
        if scheme == "channel":
            return ((1, 1, 0) if transposed else (1, 0, 1)) if rhs else (1, 0)
        bk, _, bn = scheme[len("block:"):].partition("x")
        bk, bn = int(bk), int(bn or 1)
        return ((1, bn, bk) if transposed else (1, bk, bn)) if rhs else (1, bk)
    # The module's quantizer, checked against the spec; the references use its codes.
    gs = jnp.asarray(np.array(sizes, dtype=np.int32))
    xq = check_quantized(ctx, f"{where} quantize_lhs", xz, *mod.quantize_lhs(x, gs, go),
                         f["lhs"], blocks(f["lhs_quant"], False))
    wq = check_quantized(ctx, f"{where} quantize_rhs", w64, *mod.quantize_rhs(w), f["rhs"],
                         blocks(f["rhs_quant"], True))
    if xq is None or wq is None:
        return False
    if transposed:
        wq, w64 = wq.swapaxes(1, 2), w64.swapaxes(1, 2)  # [GL, K, N]
    existing = None
    if mod.OUT_MODE != "plain":
        existing = jnp.asarray(rng.uniform(-1, 1, size=(m, N)).astype(np.float32)).astype(
            mod.OUT_DTYPE)

    def fn(a, b, *e):
        return mod.differentiable_gmm(a, b, gs, preferred_element_type=mod.OUT_DTYPE,
                                      group_offset=go, existing_out=e[0] if e else None,
                                      interpret=ctx.interpret)
    primals = (x, w) if existing is None else (x, w, existing)
    out, vjp = jax.vjp(fn, *primals)
    dx, dw, *dexisting = vjp(dout)
    fp8_blocks = (f["lhs"] in FLOAT_CODES and f["rhs"] in FLOAT_CODES and
                  f["lhs_quant"].startswith("block:") and "x" in f["rhs_quant"])
    if fp8_blocks:  # the module's own quantizer (checked above) on dout and lhs's columns
        bn = int(f["rhs_quant"].partition("x")[2])
        b = int(f["lhs_quant"][len("block:"):])
        dzj, xzj = jnp.asarray(dz.astype(np.float32)), jnp.asarray(xz.astype(np.float32))
        d_rows = check_quantized(ctx, f"{where} dout rows", dz,
                                 *mod._quantize(dzj, jnp.float8_e5m2, (1, bn)), "f8e5m2", (1, bn))
        d_cols = check_quantized(ctx, f"{where} dout columns", dz,
                                 *mod._quantize(dzj, jnp.float8_e5m2, (b, 1)), "f8e5m2", (b, 1))
        x_cols = check_quantized(ctx, f"{where} lhs columns", xz,
                                 *mod._quantize(xzj, mod.LHS_DTYPE, (b, 1)), f["lhs"], (b, 1))
        if d_rows is None or d_cols is None or x_cols is None:
            return False
    else:
        d_rows, d_cols, x_cols = dz, dz, xq
    e64 = (np.zeros((m, N)) if existing is None else
           np.asarray(existing.astype(jnp.float32), dtype=np.float64))
    acc = mod.OUT_MODE == "accumulate"
    y_ref, y_abs = np.zeros((m, N)), np.zeros((m, N))
    dx_ref, dx_abs, dx_float = np.zeros((m, K)), np.zeros((m, K)), np.zeros((m, K))
    dw_ref, dw_abs, dw_float = np.zeros((GL, K, N)), np.zeros((GL, K, N)), np.zeros((GL, K, N))
    terms = np.zeros((GL, 1, 1))
    for j in range(GL):
        r0, r1 = offs[go + j], offs[go + j + 1]
        y_ref[r0:r1] = xq[r0:r1] @ wq[j] + (e64[r0:r1] if acc else 0)
        y_abs[r0:r1] = np.abs(xq[r0:r1]) @ np.abs(wq[j]) + (np.abs(e64[r0:r1]) if acc else 0)
        dx_ref[r0:r1] = d_rows[r0:r1] @ wq[j].T
        dx_abs[r0:r1] = np.abs(d_rows[r0:r1]) @ np.abs(wq[j].T)
        dx_float[r0:r1] = dz[r0:r1] @ w64[j].T
        dw_ref[j], dw_abs[j] = x_cols[r0:r1].T @ d_cols[r0:r1], np.abs(x_cols[r0:r1].T) @ np.abs(
            d_cols[r0:r1])
        dw_float[j] = xz[r0:r1].T @ dz[r0:r1]
        terms[j] = r1 - r0
    y_ref = np.where(active, y_ref, e64)  # rows outside the active groups: zero or existing_out
    ok = chk.compare(f"{where} differentiable_gmm (float operands)", out, y_ref,
                     chk.unit(mod.OUT_DTYPE) * np.abs(y_ref) + (K + 2) * U * y_abs, ~active)
    ok &= chk.compare(f"{where} dlhs (quantized training)", dx, dx_ref,
                      chk.unit(jnp.float32) * np.abs(dx_ref) + (N + 2) * U * dx_abs, ~active)
    if transposed:
        dw_ref, dw_abs, dw_float = (a.swapaxes(1, 2) for a in (dw_ref, dw_abs, dw_float))
        terms = terms.swapaxes(1, 2)
    empty = np.zeros(dw_ref.shape, dtype=bool)
    for j in range(GL):
        empty[j] = sizes[go + j] == 0
    ok &= chk.compare(f"{where} drhs (quantized training)", dw, dw_ref,
                      chk.unit(jnp.bfloat16) * np.abs(dw_ref) + (terms + 2) * U * dw_abs, empty)
    if mod.OUT_MODE != "plain":
        want = d64 if acc else np.where(active, 0.0, d64)
        ok &= chk.compare(f"{where} d existing_out", dexisting[0], want, 0.0,
                          np.ones((m, 1), dtype=bool))
    # Quantization error, not a wrong scale: within 25% (Frobenius) of the float VJP.
    for name, got, ref in (("dlhs", dx, dx_float), ("drhs", dw, dw_float)):
        got64 = np.asarray(jnp.asarray(got).astype(jnp.float32), dtype=np.float64)
        norm = np.linalg.norm(ref)
        if norm > 0 and np.linalg.norm(got64 - ref) > 0.25 * norm:
            chk.failures.append(f"{where} {name}: {np.linalg.norm(got64 - ref) / norm:.3f} of "
                                f"the float VJP's norm away from it (allowed 0.25)")
            ok = False
    return ok


def check_qgmm_module(mod, case, ctx):
    """A quantized gmm: codes and scales drawn at random (scales 2^[-3, 3]; those the call does
    not read poisoned with NaN, as are float lhs values outside the active groups), against the
    float64 product of the dequantized operands and jax.lax.ragged_dot of them in f32. With a
    float lhs (frozen weights) also the VJP of differentiable_gmm: dlhs against dout x the
    dequantized weights^T, zero cotangents for the codes and scales, existing_out's."""
    np, jnp, jax, chk = ctx.np, ctx.jnp, ctx.jax, ctx.checker
    f = spec_fields(mod)
    K, N, GL = mod.K, mod.N, mod.G_LOCAL
    m, sizes, go = case.m, case.sizes, case.offset
    offs = group_rows(sizes)
    lo, hi = offs[go], offs[go + GL]
    rng = np.random.default_rng(ctx.seed_for(case))
    transposed = mod.TRANSPOSE_RHS
    lhs, xv = random_codes(np, jnp, rng, f["lhs"], (m, K))
    if f["lhs"] in FLOAT_CODES or f["lhs"] in ("f32", "bf16"):  # rows no kernel may read
        xv[:lo], xv[hi:] = np.nan, np.nan
        lhs = jnp.asarray(xv.astype(np.float32)).astype(lhs.dtype)
    rhs, wv = random_codes(np, jnp, rng, f["rhs"], (GL, N, K) if transposed else (GL, K, N))
    if transposed:
        wv = wv.swapaxes(1, 2)  # [GL, K, N]
    lshape, lexpand = scale_layout(np, f["lhs_quant"], m, K, N, GL, transposed, False)
    rshape, rexpand = scale_layout(np, f["rhs_quant"], m, K, N, GL, transposed, True)
    lhs_s = rhs_s = None
    xs, ws = np.ones((m, K)), np.ones((GL, K, N))
    if lshape is not None:
        s = random_scales(np, rng, lshape).astype(np.float64)
        if f["lhs_quant"] != "tensor":
            s[:lo], s[hi:] = np.nan, np.nan  # rows outside the active groups: not read
        xs, lhs_s = lexpand(s), jnp.asarray(s.astype(np.float32))
    if rshape is not None:
        s = random_scales(np, rng, rshape).astype(np.float64)
        if f["rhs_quant"] != "tensor":
            for j in range(GL):
                if sizes[go + j] == 0:
                    s[j] = np.nan  # a local group without rows: not read
        ws, rhs_s = rexpand(s), jnp.asarray(s.astype(np.float32))
    x, w = xv * xs, wv * ws  # dequantized, float64
    out_t = mod.OUT_DTYPE
    existing64, existing = None, None
    if mod.OUT_MODE != "plain":
        e = jnp.asarray(rng.uniform(-1, 1, size=(m, N)).astype(np.float32)).astype(out_t)
        existing64 = np.asarray(e.astype(jnp.float32), dtype=np.float64)
        existing = e
    ref = np.zeros((m, N)) if existing64 is None else existing64.copy()
    ref_abs = np.zeros((m, N)) if existing64 is None else np.abs(existing64)
    exact = np.ones((m, 1), dtype=bool)
    for j in range(GL):
        r0, r1 = offs[go + j], offs[go + j + 1]
        prod = x[r0:r1] @ w[j]
        acc = mod.OUT_MODE == "accumulate"
        ref[r0:r1] = prod + (existing64[r0:r1] if acc else 0)
        ref_abs[r0:r1] = np.abs(x[r0:r1]) @ np.abs(w[j]) + (np.abs(existing64[r0:r1]) if acc else 0)
        exact[r0:r1] = False
    bound = chk.unit(out_t) * np.abs(ref) + (K + 2) * U * ref_abs
    gs = jnp.asarray(np.array(sizes, dtype=np.int32))
    where = f"{mod.NAME} [{case.label}, M={m}]"
    out = mod.gmm(lhs, rhs, gs, preferred_element_type=out_t, group_offset=go,
                  existing_out=existing, interpret=ctx.interpret, lhs_scales=lhs_s,
                  rhs_scales=rhs_s)
    ok = chk.compare(f"{where} gmm", out, ref, bound, exact)
    if ok and hasattr(mod, "quantize_lhs"):
        ok = check_training_vjp(mod, case, ctx, where)
    elif ok and hasattr(mod, "differentiable_gmm"):
        ok = check_frozen_vjp(mod, case, ctx, (lhs, rhs, gs, existing, rhs_s), out, x, w, where)
    if m == 0 or not ctx.ragged or not ok:
        return ok
    # ragged_dot of the dequantized operands in f32, zero weights for the groups not held.
    xc = jnp.asarray(np.nan_to_num(x).astype(np.float32))
    full = np.zeros((mod.G, K, N), dtype=np.float32)
    full[go:go + GL] = np.nan_to_num(w)
    y = jax.lax.ragged_dot(xc, jnp.asarray(full), gs, preferred_element_type=jnp.float32,
                           precision=jax.lax.Precision.HIGHEST)
    y64 = np.asarray(y, dtype=np.float64)
    if mod.OUT_MODE == "accumulate":
        y64 = y64 + existing64
    active = ~exact
    got = np.asarray(jnp.asarray(out).astype(jnp.float32), dtype=np.float64)
    return chk.compare(f"{where} gmm vs ragged_dot", np.where(active, got, 0.0),
                       np.where(active, y64, 0.0), 2 * bound, ~active)


def tgmm_scale_layout(np, scheme, m, width):
    """The shape of a tgmm operand's scales (tensor [1], channel [width], block:B [ceil(M/B),
    width] over global rows) and a function that expands them to a scale per element [m, width]."""
    if scheme == "tensor":
        return (1,), (lambda s: np.full((m, width), s[0]))
    if scheme == "channel":
        return (width,), (lambda s: np.broadcast_to(s[None, :], (m, width)))
    b = int(scheme[len("block:"):])
    return (-(-m // b), width), (lambda s: np.repeat(s, b, axis=0)[:m])


def check_qtgmm_module(mod, case, ctx):
    """A quantized tgmm: codes and scales drawn at random (scales 2^[-3, 3]; the blocks of rows
    without an active row poisoned with NaN, as are fp8 codes outside the active groups), against
    the float64 product of the dequantized operands, per group, whose scale blocks run over
    global rows."""
    np, jnp, chk = ctx.np, ctx.jnp, ctx.checker
    f = spec_fields(mod)
    K, N, GL = mod.K, mod.N, mod.G_LOCAL
    m, sizes, go = case.m, case.sizes, case.offset
    offs = group_rows(sizes)
    lo, hi = offs[go], offs[go + GL]
    rng = np.random.default_rng(ctx.seed_for(case))
    operands = []
    for side, width in (("lhs", K), ("rhs", N)):
        codes, v = random_codes(np, jnp, rng, f[side], (m, width))
        if f[side] in FLOAT_CODES:  # rows no kernel may read
            v[:lo], v[hi:] = np.nan, np.nan
            codes = jnp.asarray(v.astype(np.float32)).astype(codes.dtype)
        scheme = f[f"{side}_quant"]
        shape, expand = tgmm_scale_layout(np, scheme, m, width)
        s = random_scales(np, rng, shape).astype(np.float64)
        if scheme.startswith("block:"):
            b = int(scheme[len("block:"):])
            for blk in range(shape[0]):  # blocks without an active row: not read
                if blk * b >= hi or (blk + 1) * b <= lo:
                    s[blk] = np.nan
        scales = jnp.asarray(s.astype(np.float32))
        operands.append((codes, v * (expand(s) if m else np.zeros((0, width))), scales))
    (lhs, x, lhs_s), (rhs, y, rhs_s) = operands
    out_t = mod.OUT_DTYPE
    oshape = (GL, N, K) if mod.TRANSPOSE_RHS else (GL, K, N)
    existing64, existing = None, None
    if mod.OUT_MODE == "accumulate":
        e = jnp.asarray(rng.uniform(-1, 1, size=oshape).astype(np.float32)).astype(out_t)
        existing64, existing = np.asarray(e.astype(jnp.float32), dtype=np.float64), e
    ref, ref_abs, terms = np.zeros((GL, K, N)), np.zeros((GL, K, N)), np.zeros((GL, 1, 1))
    for j in range(GL):
        r0, r1 = offs[go + j], offs[go + j + 1]
        ref[j], ref_abs[j] = x[r0:r1].T @ y[r0:r1], np.abs(x[r0:r1].T) @ np.abs(y[r0:r1])
        terms[j] = r1 - r0
    if mod.TRANSPOSE_RHS:
        ref, ref_abs, terms = ref.swapaxes(1, 2), ref_abs.swapaxes(1, 2), terms.swapaxes(1, 2)
    if existing64 is not None:
        ref, ref_abs = ref + existing64, ref_abs + np.abs(existing64)
    bound = chk.unit(out_t) * np.abs(ref) + (terms + 2) * U * ref_abs
    empty = np.zeros(ref.shape, dtype=bool)
    if existing64 is None:
        for j in range(GL):
            empty[j] = sizes[go + j] == 0
    gs = jnp.asarray(np.array(sizes, dtype=np.int32))
    where = f"{mod.NAME} [{case.label}, M={m}]"
    entries = [("tgmm", jnp.swapaxes(lhs, 0, 1)), ("tgmm_mk", lhs)]
    if mod.LHS_LAYOUT != "km":
        entries.reverse()
    ok = True
    for name, arg in entries[:1 if ctx.quick else 2]:
        out = getattr(mod, name)(arg, rhs, gs, preferred_element_type=out_t, group_offset=go,
                                 existing_out=existing, interpret=ctx.interpret,
                                 lhs_scales=lhs_s, rhs_scales=rhs_s)
        ok &= chk.compare(f"{where} {name}", out, ref, bound, empty)
    return ok


# ---- tgmm modules -----------------------------------------------------------------------------


def check_tgmm_module(mod, case, ctx):
    np, jnp, jax, chk = ctx.np, ctx.jnp, ctx.jax, ctx.checker
    K, N, GL = mod.K, mod.N, mod.G_LOCAL
    m, sizes, go = case.m, case.sizes, case.offset
    offs = group_rows(sizes)
    lo, hi = offs[go], offs[go + GL]
    rng = np.random.default_rng(ctx.seed_for(case))
    lhs_t, rhs_t, out_t = mod.LHS_DTYPE, mod.RHS_DTYPE, mod.OUT_DTYPE
    km = mod.LHS_LAYOUT == "km"

    def cast(x, dtype):
        return np.asarray(jnp.asarray(x.astype(np.float32)).astype(dtype).astype(jnp.float32),
                          dtype=np.float64)

    x64 = cast(random_values(np, rng, (m, K), case.exact), lhs_t)  # [M, K] whatever the layout
    y64 = cast(random_values(np, rng, (m, N), case.exact), rhs_t)
    for a in (x64, y64):
        a[:lo], a[hi:] = np.nan, np.nan
    nan_at = None
    if case.nan:  # a NaN in one row of a non-empty active group
        full = [j for j in range(GL) if sizes[go + j] > 0]
        if full:
            j = full[len(full) // 2]
            r, kk = offs[go + j] + int(rng.integers(sizes[go + j])), int(rng.integers(K))
            x64[r, kk] = np.nan
            nan_at = (j, kk)
    lhs_mk = jnp.asarray(x64.astype(np.float32)).astype(lhs_t)
    lhs_km = jnp.swapaxes(lhs_mk, 0, 1)  # [K, M]: megablox's tgmm layout
    rhs = jnp.asarray(y64.astype(np.float32)).astype(rhs_t)
    gs = jnp.asarray(np.array(sizes, dtype=np.int32))
    oshape = (GL, N, K) if mod.TRANSPOSE_RHS else (GL, K, N)
    existing64, existing = None, None
    if mod.OUT_MODE == "accumulate":
        existing64 = cast(random_values(np, rng, oshape, case.exact), out_t)
        existing = jnp.asarray(existing64.astype(np.float32)).astype(out_t)

    ref, ref_abs, terms = np.zeros((GL, K, N)), np.zeros((GL, K, N)), np.zeros((GL, 1, 1))
    for j in range(GL):
        r0, r1 = offs[go + j], offs[go + j + 1]
        xs, ys = np.nan_to_num(x64[r0:r1]), y64[r0:r1]
        ref[j], ref_abs[j], terms[j] = xs.T @ ys, np.abs(xs.T) @ np.abs(ys), r1 - r0
        if nan_at is not None and nan_at[0] == j:
            ref[j, nan_at[1], :] = np.nan
    if mod.TRANSPOSE_RHS:
        ref, ref_abs, terms = ref.swapaxes(1, 2), ref_abs.swapaxes(1, 2), terms.swapaxes(1, 2)
    if existing64 is not None:
        ref, ref_abs = ref + existing64, ref_abs + np.abs(existing64)
    bound = chk.unit(out_t) * np.abs(np.nan_to_num(ref)) + (terms + 2) * U * ref_abs
    # Empty groups without existing_out must be exactly zero.
    empty = np.zeros(ref.shape, dtype=bool)
    if existing64 is None:
        for j in range(GL):
            empty[j] = sizes[go + j] == 0
    where = f"{mod.NAME} [{case.label}, M={m}]"
    # The entry point that reads the kernel's own layout in place, then (without --quick) the
    # other one, which transposes lhs first: the same bytes.
    entries = [("tgmm", lhs_km), ("tgmm_mk", lhs_mk)]
    if not km:
        entries.reverse()
    name, lhs = entries[0]
    out = getattr(mod, name)(lhs, rhs, gs, preferred_element_type=out_t, group_offset=go,
                             existing_out=existing, interpret=ctx.interpret)
    ok = chk.compare(f"{where} {name}", out, ref, bound, empty, out_t if case.exact else None)
    if not ctx.quick:
        name, lhs = entries[1]
        other = getattr(mod, name)(lhs, rhs, gs, preferred_element_type=out_t, group_offset=go,
                                   existing_out=existing, interpret=ctx.interpret)
        ok &= chk.compare(f"{where} {name} vs {entries[0][0]}", other,
                          np.asarray(jnp.asarray(out).astype(jnp.float32), dtype=np.float64),
                          0.0, np.ones(ref.shape, dtype=bool))
    if case.nan or m == 0 or not ctx.ragged:
        return ok
    dims = jax.lax.RaggedDotDimensionNumbers(
        dot_dimension_numbers=(([0], [0]), ([], [])), lhs_ragged_dimensions=[0],
        rhs_group_dimensions=[])
    common = jnp.promote_types(lhs_t, rhs_t)
    xc = jnp.asarray(np.nan_to_num(x64).astype(np.float32)).astype(lhs_t).astype(common)
    yc = jnp.asarray(np.nan_to_num(y64).astype(np.float32)).astype(rhs_t).astype(common)
    rd = jax.lax.ragged_dot_general(xc, yc, gs, dims, preferred_element_type=jnp.float32)
    rd64 = np.asarray(rd, dtype=np.float64)[go:go + GL]
    if mod.TRANSPOSE_RHS:
        rd64 = rd64.swapaxes(1, 2)
    if existing64 is not None:
        rd64 = rd64 + existing64
    ok &= chk.compare(f"{where} tgmm vs ragged_dot_general", out, rd64, 2 * bound, empty)
    return ok


# ---- Metadata ---------------------------------------------------------------------------------


def brute_force_metadata(sizes, m, tm, start, count, visit_empty):
    """megablox's metadata by its definition: group by group, the m-tiles each group touches."""
    groups = len(sizes)
    tiles_m = -(-m // tm)
    length = max(1, tiles_m + groups - 1)
    offsets = group_rows(sizes)
    steps = []
    for g in range(groups):
        s, e = offsets[g], offsets[g + 1]
        if s < e:
            steps += [(g, t) for t in range(s // tm, (e - 1) // tm + 1)]
        elif visit_empty:  # an empty group at row m has no tile of its own: the last one
            steps.append((g, min(s // tm, max(tiles_m - 1, 0))))
    group_ids = [g for g, _ in steps]
    tile_ids = [t for _, t in steps]
    # Tiles past the rows of every group follow once each; then padding to length.
    tile_ids += list(range(-(-offsets[-1] // tm), tiles_m))
    group_ids = (group_ids + [groups - 1] * length)[:length]
    tile_ids = (tile_ids + [max(tiles_m - 1, 0)] * length)[:length]
    first = min(sum(1 for g, _ in steps if g < start), length)
    num_tiles = sum(1 for g, _ in steps if start <= g < start + count)
    return (offsets, group_ids[first:] + group_ids[:first], tile_ids[first:] + tile_ids[:first],
            num_tiles)


def random_metadata_cases(seed, count=300, tms=(1, 2, 3, 7, 8, 16, 128, 512)):
    """(sizes, m, tm, start, count, visit_empty): tile counts from 1 to 5000 (4142 and more:
    where megablox's float histogram misbins), empty groups, sums below m, groups starting on and
    off tile boundaries, m = 0 and m < tm."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        tm = rng.choice(tms)
        tiles = rng.choice([1, 2, 3, 13, 21, 45, 257, 4142, 4999, 5000])
        m = max(0, tiles * tm - rng.randint(0, tm - 1)) if i % 50 else 0
        groups = rng.choice([1, 2, 3, 8, 64, 128])
        total = m if rng.random() < 0.6 else rng.randint(0, m)
        sizes = partition(rng, total, groups)
        if rng.random() < 0.5:  # empty groups first, last or anywhere
            for g in rng.sample(range(groups), k=rng.randint(0, groups)):
                sizes[g] = 0
            sizes[rng.randrange(groups)] += total - sum(sizes)
        if rng.random() < 0.3:  # every boundary on a tile boundary (the sentinel edge)
            sizes = [s // tm * tm for s in sizes]
        local = rng.randint(1, groups)
        out.append((sizes, m, tm, rng.randint(0, groups - local), local, rng.random() < 0.5))
    return out


def check_metadata(mod, ctx, cpp):
    """make_group_metadata (jax.numpy), the same code under numpy, and the brute force agree;
    with cpp = {tm: builder}, the C++ builders too."""
    np, jnp, jax, chk = ctx.np, ctx.jnp, ctx.jax, ctx.checker
    ok = True
    np_bincount = lambda x, n: np.bincount(x, minlength=n)  # noqa: E731
    # Traced as the kernels trace it: sizes and start_group are run-time values.
    traced = jax.jit(mod.make_group_metadata,
                     static_argnames=("m", "tm", "num_nonzero_groups", "visit_empty_groups"))
    cases = random_metadata_cases(ctx.seed, 12 if ctx.quick else 300)
    for tm in sorted(cpp):  # the C++ builders have their tm baked in
        cases += random_metadata_cases(ctx.seed + tm, 4 if ctx.quick else 60, (tm,))
    for sizes, m, tm, start, count, visit in cases:
        chk.checks += 1
        want = brute_force_metadata(sizes, m, tm, start, count, visit)
        arr = np.array(sizes, dtype=np.int32)
        (o, g, t), n = traced(group_sizes=jnp.asarray(arr), m=m, tm=tm,
                              start_group=jnp.int32(start), num_nonzero_groups=count,
                              visit_empty_groups=visit)
        as_lists = lambda *a: [np.asarray(x).tolist() for x in a]  # noqa: E731
        got = {"jax.numpy": (*as_lists(o, g, t), int(n))}
        (o, g, t), n = mod._group_metadata(np, np_bincount, arr, m, tm, start, count, visit)
        got["numpy"] = (*as_lists(o, g, t), int(n))
        if tm in cpp:
            got["C++"] = cpp[tm](sizes, m, start, count, visit)
        for who, value in got.items():
            if tuple(value) != tuple(want):
                chk.failures.append(
                    f"{mod.NAME} make_group_metadata ({who}) differs from megablox's definition "
                    f"for sizes={sizes[:16]}{'...' if len(sizes) > 16 else ''} m={m} tm={tm} "
                    f"start={start} count={count} visit_empty={visit}")
                ok = False
                break
        if not ok:
            break
    return ok


def cpp_builders(lib_path, manifest_path):
    """{tm: builder(sizes, m, start, count, visit) -> (offsets, group_ids, m_tile_ids, n)} from
    the C++ gmm kernels of a shared object (the first kernel of each tm)."""
    lib = ctypes.CDLL(lib_path)
    with open(manifest_path) as f:
        manifest = json.load(f)
    builders = {}
    i32p, i64p = ctypes.POINTER(ctypes.c_int32), ctypes.POINTER(ctypes.c_int64)
    for k in manifest["kernels"]:
        spec = k["spec_json"]
        if k["target"] != "cpp" or spec["tm"] in builders:
            continue
        fn = getattr(lib, k["name"] + "_make_group_metadata")
        fn.restype = ctypes.c_int
        fn.argtypes = [i32p, ctypes.c_int32, ctypes.c_int64, ctypes.c_int32, ctypes.c_int32,
                       ctypes.c_int, i32p, i32p, i32p, i64p]

        def build(sizes, m, start, count, visit, fn=fn, tm=spec["tm"]):
            groups = len(sizes)
            length = max(1, -(-m // tm) + groups - 1)
            arr = (ctypes.c_int32 * groups)(*sizes)
            offs, gids, tids = ((ctypes.c_int32 * n)() for n in (groups + 1, length, length))
            num = ctypes.c_int64()
            if fn(arr, groups, m, start, count, int(visit), offs, gids, tids, ctypes.byref(num)):
                raise RuntimeError("the C++ metadata builder refused its arguments")
            return list(offs), list(gids), list(tids), num.value

        builders[spec["tm"]] = build
    return builders


# ---- Driver -----------------------------------------------------------------------------------


class Context:
    pass


def release_jit_memory(jax, most=30000):
    """Drops JAX's compiled executables once this process holds more than `most` memory
    mappings. XLA's CPU JIT maps memory for every executable it compiles, and TPU interpret mode
    compiles many: a run of every case of a few modules reached Linux's limit of 65530 mappings
    (vm.max_map_count), where LLVM fails with "cannot allocate memory" and the process dies."""
    try:
        with open("/proc/self/maps", "rb") as f:
            mappings = sum(1 for _ in f)
    except OSError:
        return
    if mappings > most:
        jax.clear_caches()


def load_module_with_vjp3(path, jax):
    """A second copy of a module whose custom_vjp was created with jax_custom_vjp3 on (the flag
    is read when jax.custom_vjp is applied), or None where this JAX has no such flag."""
    if not hasattr(jax.config, "jax_custom_vjp3"):
        return None
    jax.config.update("jax_custom_vjp3", True)
    try:
        return load_module(path)
    finally:
        jax.config.update("jax_custom_vjp3", False)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dir")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="fewer cases per module")
    parser.add_argument("--only", help="PATTERN[,PATTERN...]: only the modules whose name (file "
                        "name without .py) matches one of these shell patterns; each must match")
    parser.add_argument("--shard", default="0/1", help="I/N: check modules I, I+N, I+2N, ...")
    parser.add_argument("--cpp-lib", help="shared object of C++ gmm kernels (metadata check)")
    parser.add_argument("--cpp-manifest", help="manifest.json listing the kernels of --cpp-lib")
    parser.add_argument("--python", help="run under this Python (with JAX) where it exists")
    parser.add_argument("--no-shared", action="store_true",
                        help="skip what every module shares word for word (make_group_metadata, "
                        "the custom VJP under jax_custom_vjp3): another set checks it")
    parser.add_argument("--interpret", choices=("tpu", "hlo"), default="tpu",
                        help="TPU interpret mode (default) or Pallas's generic interpreter")
    args = parser.parse_args(argv)
    if args.python and os.path.abspath(sys.executable) != os.path.abspath(args.python) and \
            os.access(args.python, os.X_OK):
        os.execv(args.python, [args.python, os.path.abspath(__file__)] + argv)
    try:
        shard, shards = (int(x) for x in args.shard.split("/"))
        if not 0 <= shard < shards:
            raise ValueError
    except ValueError:
        parser.error(f"--shard {args.shard}: must be I/N with 0 <= I < N")
    folder = os.path.join(args.dir, "pallas") if os.path.isdir(
        os.path.join(args.dir, "pallas")) else args.dir
    paths = sorted(glob.glob(os.path.join(folder, "*.py")))
    if not paths:
        print(f"check_pallas: no modules (*.py) in {folder}", file=sys.stderr)
        return 2
    names = [os.path.basename(path)[:-3] for path in paths]
    try:
        chosen = jax_env.select(names, args.only)
    except ValueError as e:
        parser.error(f"{e} in {folder}")
    paths = [path for path, name in zip(paths, names) if name in chosen]
    paths = paths[shard::shards]
    # Interpret mode runs on the host: never on an accelerator JAX would pick by default.
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    try:
        import numpy as np
        import jax
        import jax.numpy as jnp
        from jax.experimental.pallas import tpu as pltpu
    except ImportError as e:
        if os.environ.get("GMMGEN_REQUIRE_JAX") == "1":
            print(f"check_pallas: GMMGEN_REQUIRE_JAX=1 and no JAX here ({e}); .ci/deps "
                  "installs it", file=sys.stderr)
            return 1
        print(f"skipped: the Pallas checks need JAX ({e}); .ci/deps installs it")
        return EXIT_SKIPPED

    started = time.time()
    ctx = Context()
    ctx.np, ctx.jnp, ctx.jax = np, jnp, jax
    ctx.seed, ctx.quick = args.seed, args.quick
    ctx.checker = Checker(np, jnp)
    params = getattr(pltpu, "InterpretParams", None)
    if args.interpret == "hlo":
        ctx.interpret, mode = "hlo", "Pallas's generic interpreter (interpret=\"hlo\")"
    elif params is not None:
        ctx.interpret = params(uninitialized_memory="nan")
        mode = "TPU interpret mode, uninitialized memory = NaN"
    else:
        ctx.interpret, mode = True, "interpret=True (this JAX has no TPU interpret mode)"
    ctx.ragged = hasattr(jax.lax, "ragged_dot") and hasattr(jax.lax, "ragged_dot_general")
    print(f"JAX {jax.__version__} on {jax.devices()[0].device_kind}; {mode}"
          + ("" if ctx.ragged else "; no jax.lax.ragged_dot here: float64 reference only"))
    cpp = cpp_builders(args.cpp_lib, args.cpp_manifest) if args.cpp_lib else {}
    rng = random.Random(args.seed)
    failed_modules = cases_run = 0
    shared_done = set()  # the shared checks run (each once, in shard 0)
    for path in paths:
        t0 = time.time()
        ctx.checker.failures = []
        checks0 = ctx.checker.checks
        worst0, ctx.checker.worst = ctx.checker.worst, 0.0
        cases = []
        try:
            mod = load_module(path)
            tm = mod.TILING[0]
            covers = []
            if mod.K % mod.TILING[1]:
                covers.append("K % tk != 0")
            if mod.N % mod.TILING[2]:
                covers.append("N % tn != 0")
            if mod.G_LOCAL < mod.G:
                covers.append("sharded")
            if mod.OUT_MODE != "plain":
                covers.append(mod.OUT_MODE)
            cases = make_cases(mod, tm, rng, args.quick)
            quantized = any(spec_fields(mod)[p] not in ("f32", "bf16") for p in ("lhs", "rhs"))
            if quantized:
                covers.append(f"{spec_fields(mod)['lhs_quant']} x {spec_fields(mod)['rhs_quant']}")
            check = ((check_qgmm_module if mod.OP == "gmm" else check_qtgmm_module) if quantized
                     else check_gmm_module if mod.OP == "gmm" else check_tgmm_module)
            ctx.seed_for = lambda case, base=args.seed: zlib.crc32(
                f"{base} {mod.NAME} {case.label} {case.m}".encode())
            ok = True
            for case in cases:
                ok = check(mod, case, ctx)
                release_jit_memory(jax)
                if not ok:
                    break
            # The custom VJP again, created with jax_custom_vjp3 on (to become JAX's default).
            def shared(what):
                if args.no_shared or shard != 0 or what in shared_done:
                    return False
                shared_done.add(what)
                return True
            vjp3 = load_module_with_vjp3(path, jax) if ok and mod.OP == "gmm" and \
                not quantized and shared("vjp3") else None
            if vjp3 is not None:
                # TPU interpret mode's host callbacks are effects, which a custom VJP under
                # jax_custom_vjp3 rejects: this run uses Pallas's generic interpreter.
                jax.config.update("jax_custom_vjp3", True)
                saved, ctx.interpret = ctx.interpret, "hlo"
                try:
                    ok = check(mod, cases[0], ctx, diff_mod=vjp3)
                finally:
                    jax.config.update("jax_custom_vjp3", False)
                    ctx.interpret = saved
                covers.append("custom_vjp3 on and off")
            if ok and shared("metadata"):
                check_metadata(mod, ctx, cpp)
                covers.append("make_group_metadata")
        except Exception:  # an error is a failure of the module, reported with its trace
            ctx.checker.failures.append(f"{os.path.basename(path)}: error\n{traceback.format_exc()}")
            reset = getattr(pltpu, "reset_tpu_interpret_mode_state", None)
            if reset is not None:
                reset()
        status = "ok" if not ctx.checker.failures else "MISMATCH"
        print(f"{os.path.basename(path)[:-3]:<72} {len(cases):3d} cases "
              f"{ctx.checker.checks - checks0:5d} checks, worst {100 * ctx.checker.worst:5.1f}% "
              f"of bound {time.time() - t0:7.1f}s {status}"
              + (f"  ({', '.join(covers)})" if not ctx.checker.failures and covers else ""))
        for failure in ctx.checker.failures[:3]:
            print("  " + failure.replace("\n", "\n  "))
        failed_modules += bool(ctx.checker.failures)
        cases_run += len(cases)
        jax.clear_caches()  # nothing of one module serves the next (see release_jit_memory)
        ctx.checker.worst = max(worst0, ctx.checker.worst)
        sys.stdout.flush()
    print(f"{len(paths)} Pallas modules checked ({cases_run} cases, {ctx.checker.checks} checks) "
          f"in {time.time() - started:.1f} s, {failed_modules} mismatched; worst error "
          f"{100 * ctx.checker.worst:.1f}% of its bound")
    return 1 if failed_modules else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
