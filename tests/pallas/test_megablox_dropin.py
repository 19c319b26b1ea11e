#!/usr/bin/env python3
"""gmm-gen's Pallas modules as drop-in replacements for megablox.

usage: test_megablox_dropin.py DIR [--python PY] [--only PATTERNS]

DIR is a folder written by `gmm-gen emit` from tests/pallas/megablox_specs.json. The function
`megablox_user` below is written as a megablox user writes it (megablox's argument names,
positions, defaults and layouts: `gmm`, `tgmm` with lhs [K, M], `ops.gmm` with its positional
nondiff arguments, `jax.grad` through the custom VJP, `jax.jit`, `group_offset` with
`num_actual_groups` for an expert shard), and it runs unmodified against each module and
against megablox itself (jax.experimental.pallas.ops.tpu.megablox, in interpret mode). Every
result of both is compared with a float64 numpy reference, within the bound of f32 summation
(plus one bf16 rounding of the inputs, which the reference sees too), on the rows of the
active groups (megablox leaves the others unwritten; the modules' own rules for them are
checked by check_pallas.py). A sharded module (G_local < G) also runs expert-parallel: jax.shard_map
over G / G_local host devices, each holding G_local experts and calling differentiable_gmm with
its group_offset, forward and jax.grad, against float64 over all G experts. --python PY re-runs
under PY (a Python with JAX) where it exists; --only checks the modules whose names match one
of its comma-separated shell patterns (a pattern that matches none is an error).

Exit status: 0 passed; 1 a mismatch or an error; 77 skipped (no JAX, or this JAX has no
megablox; with GMMGEN_REQUIRE_JAX=1 no JAX is an error).
"""
import argparse
import functools
import glob
import importlib.util
import os
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import jax_env  # noqa: E402

U = 2.0**-24  # unit roundoff of f32


def megablox_user(gmm, tgmm, ops_gmm, lhs, rhs, group_sizes, dout, group_offset, transpose_rhs):
    """The forward, the weight gradient and jax.grad through ops.gmm, as megablox documents
    them (interpret=True: no TPU here). rhs holds this shard's experts [G_local, K, N] (or
    [G_local, N, K] with transpose_rhs), starting at global expert group_offset."""
    import jax
    import jax.numpy as jnp

    g_local = rhs.shape[0]
    out = gmm(lhs, rhs, group_sizes, jnp.float32, (128, 128, 128), group_offset,
              transpose_rhs=transpose_rhs, interpret=True)
    # The weight gradient in rhs's dtype, as megablox's own backward pass asks for it.
    dw = tgmm(lhs.swapaxes(0, 1), dout, group_sizes, rhs.dtype, group_offset=group_offset,
              num_actual_groups=g_local, interpret=True)

    def loss(x, w):
        y = ops_gmm(x, w, group_sizes, jnp.float32, (128, 128, 128), group_offset, None,
                    transpose_rhs, True)
        return jnp.sum(y * dout)

    dlhs, drhs = jax.jit(jax.grad(loss, argnums=(0, 1)))(lhs, rhs)
    return out, dw, dlhs, drhs


def reference(np, x, w, sizes, dout, offset, transpose_rhs):
    """float64 out, dw ([G_local, K, N]), dlhs, drhs (rhs's layout), with the sums of |terms|
    for the bounds, and the mask of active rows."""
    g_local = w.shape[0]
    wk = w.swapaxes(1, 2) if transpose_rhs else w  # [G_local, K, N]
    m, k, n = x.shape[0], wk.shape[1], wk.shape[2]
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    out, out_abs = np.zeros((m, n)), np.zeros((m, n))
    dlhs, dlhs_abs = np.zeros((m, k)), np.zeros((m, k))
    dw, dw_abs = np.zeros((g_local, k, n)), np.zeros((g_local, k, n))
    active = np.zeros((m, 1), dtype=bool)
    for j in range(g_local):
        r0, r1 = bounds[offset + j], bounds[offset + j + 1]
        xs, dy = x[r0:r1], dout[r0:r1]
        out[r0:r1], out_abs[r0:r1] = xs @ wk[j], np.abs(xs) @ np.abs(wk[j])
        dlhs[r0:r1], dlhs_abs[r0:r1] = dy @ wk[j].T, np.abs(dy) @ np.abs(wk[j].T)
        dw[j], dw_abs[j] = xs.T @ dy, np.abs(xs.T) @ np.abs(dy)
        active[r0:r1] = True
    drhs, drhs_abs = (dw.swapaxes(1, 2), dw_abs.swapaxes(1, 2)) if transpose_rhs else (dw, dw_abs)
    return {"out": (out, out_abs, k), "dw": (dw, dw_abs, m), "dlhs": (dlhs, dlhs_abs, n),
            "drhs": (drhs, drhs_abs, m)}, active


def expert_parallel(jax, jnp, mod, devices, lhs, w_all, group_sizes, dout, transpose_rhs):
    """out, dlhs and drhs of sum(out * dout) with the experts sharded over `devices` CPU devices
    by jax.shard_map: every device holds G_local experts, from group_offset = its index *
    G_local, and sees every token; the rows of the other devices' experts are zero, so a psum
    over the devices gives the whole output. check_vma=False: the module's pallas_call does not
    say how its output varies over mesh axes."""
    import numpy as np
    from jax.sharding import Mesh, PartitionSpec as P

    shard_map = getattr(jax, "shard_map", None)
    if shard_map is None:  # JAX before 0.7
        from jax.experimental.shard_map import shard_map
    mesh = Mesh(np.array(jax.devices()[:devices]), ("expert",))

    @functools.partial(shard_map, mesh=mesh, in_specs=(P(), P("expert"), P()), out_specs=P(),
                       check_vma=False)
    def forward(x, w_local, gs):
        offset = jax.lax.axis_index("expert") * mod.G_LOCAL
        y = mod.differentiable_gmm(x, w_local, gs, jnp.float32, None, offset, None,
                                   transpose_rhs, True)
        return jax.lax.psum(y, "expert")

    out = jax.jit(forward)(lhs, w_all, group_sizes)
    loss = lambda x, w: jnp.sum(forward(x, w, group_sizes) * dout)  # noqa: E731
    dlhs, drhs = jax.jit(jax.grad(loss, argnums=(0, 1)))(lhs, w_all)
    return out, dlhs, drhs


def compare(np, jnp, name, who, results, refs, active, dtype):
    """(worst error as a share of its bound, number of results past it)."""
    worst, bad = 0.0, 0
    for what, value in results.items():
        ref, ref_abs, terms = refs[what]
        got = np.asarray(jnp.asarray(value).astype(jnp.float32), dtype=np.float64)
        rows = active if what in ("out", "dlhs") else np.ones((1,) * ref.ndim, bool)
        # f32 summation, plus one rounding of the gradients, written in the operands' dtype
        # (bf16: 2^-8).
        bf16_out = what in ("dw", "dlhs", "drhs") and dtype == jnp.bfloat16
        unit = 2.0**-8 if bf16_out else U
        bound = unit * np.abs(ref) + (terms + 2) * U * ref_abs
        if got.shape != ref.shape:
            print(f"  {name} ({who}) {what}: shape {got.shape}, expected {ref.shape}")
            bad += 1
            continue
        err = np.where(rows, np.abs(got - ref), 0.0)
        if not np.all(err <= bound):
            print(f"  {name} ({who}) {what}: {int(np.sum(err > bound))} elements past the "
                  f"bound, first {np.argwhere(err > bound)[:1].tolist()}")
            bad += 1
            continue
        with np.errstate(invalid="ignore", divide="ignore"):
            worst = max(worst, float(np.max(np.where(rows, err / bound, 0.0))))
    return worst, bad


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dir")
    parser.add_argument("--python", help="run under this Python (with JAX) where it exists")
    parser.add_argument("--only", help="comma-separated shell patterns of module names")
    args = parser.parse_args(argv)
    jax_env.run_under(args.python, __file__, argv)
    # Host devices for the expert-parallel run (set before JAX starts).
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                               " --xla_force_host_platform_device_count=8").strip()
    try:
        import numpy as np
        import jax
        import jax.numpy as jnp
        # The kernels' module (the package's own `gmm` is ops.gmm).
        mb_kernels = importlib.import_module("jax.experimental.pallas.ops.tpu.megablox.gmm")
        mb_ops = importlib.import_module("jax.experimental.pallas.ops.tpu.megablox.ops")
    except ImportError as e:
        return jax_env.missing_jax("test_megablox_dropin", e)

    paths = sorted(glob.glob(os.path.join(args.dir, "pallas", "*.py")))
    names = [os.path.splitext(os.path.basename(p))[0] for p in paths]
    try:
        chosen = jax_env.select(names, args.only)
    except ValueError as e:
        print(f"test_megablox_dropin: {e} of {args.dir}", file=sys.stderr)
        return 1
    paths = [p for p, n in zip(paths, names) if n in chosen]
    if not paths:
        print(f"test_megablox_dropin: no modules in {args.dir}/pallas", file=sys.stderr)
        return 1
    print(f"JAX {jax.__version__}; the same megablox user code against each module and megablox")
    failures = 0
    rng = np.random.default_rng(7)
    for path in paths:
        t0 = time.time()
        spec = importlib.util.spec_from_file_location("gmmgen_dropin", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        K, N, G, GL, tr = mod.K, mod.N, mod.G, mod.G_LOCAL, mod.TRANSPOSE_RHS
        m = 384  # megablox wants M a multiple of tm
        # Ragged sizes with an empty expert and sum(group_sizes) < M; the shard starts at the
        # last G_local experts (megablox's group_offset).
        sizes = [0, 150, 37, 101, 0, 60][:G]
        offset = G - GL
        dtype = mod.LHS_DTYPE

        def draw(shape):
            a = jnp.asarray(rng.standard_normal(shape), jnp.float32).astype(dtype)
            return a, np.asarray(a.astype(jnp.float32), dtype=np.float64)

        lhs, x64 = draw((m, K))
        rhs, w64 = draw((GL, N, K) if tr else (GL, K, N))
        dout, dy64 = draw((m, N))
        dout = dout.astype(jnp.float32)
        gs = jnp.asarray(sizes, jnp.int32)
        go = jnp.asarray(offset, jnp.int32)
        refs, active = reference(np, x64, w64, sizes, dy64, offset, tr)
        results = {}
        for who, fns in (("module", (mod.gmm, mod.tgmm, mod.differentiable_gmm)),
                         ("megablox", (mb_kernels.gmm, mb_kernels.tgmm, mb_ops.gmm))):
            try:
                got = megablox_user(*fns, lhs, rhs, gs, dout, go, tr)
            except Exception as e:  # the module must accept megablox's call as it is
                print(f"  {mod.NAME} ({who}): {type(e).__name__}: {e}")
                failures += 1
                continue
            results[who] = dict(zip(("out", "dw", "dlhs", "drhs"), got))
        worst, bad = 0.0, 0
        for who, res in results.items():
            w, b = compare(np, jnp, mod.NAME, who, res, refs, active, dtype)
            worst, bad = max(worst, w), bad + b
        # Expert parallelism: every expert's weights, G / G_local devices each holding G_local
        # of them and calling the module with its own group_offset, the sum over devices.
        if GL < G and G % GL == 0 and len(jax.devices()) >= G // GL:
            w_all, w_all64 = draw((G, N, K) if tr else (G, K, N))
            refs_all, active_all = reference(np, x64, w_all64, sizes, dy64, 0, tr)
            try:
                got = expert_parallel(jax, jnp, mod, G // GL, lhs, w_all, gs, dout, tr)
                w, b = compare(np, jnp, mod.NAME, f"shard_map over {G // GL} devices",
                               dict(zip(("out", "dlhs", "drhs"), got)), refs_all, active_all,
                               dtype)
            except Exception as e:
                print(f"  {mod.NAME} (shard_map): {type(e).__name__}: {e}")
                w, b = 0.0, 1
            worst, bad = max(worst, w), bad + b
        failures += bad
        print(f"{mod.NAME:<66} module and megablox within the bound (worst {100 * worst:.1f}%) "
              f"{time.time() - t0:6.1f}s" if len(results) == 2 and not bad else
              f"{mod.NAME}: FAILED")
    print(f"{len(paths)} modules, {failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
