"""Runs the JAX MoE layer (moe.py) and checks it: forward and one training step (loss, every
gradient, the updated parameters) on one device against a dense float64 reference, and with its
experts split over 2 and 4 devices against the one-device run. Prints the worst error of each
result as a share of its bound: max|got - want| <= TOL * max|want|.

    .venv/bin/python examples/jax_moe/check.py --gmm-gen build-main/bin/gmm-gen
"""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                               " --xla_force_host_platform_device_count=4").strip()

import argparse
import shutil
import sys
import tempfile

import jax
import jax.numpy as jnp
import numpy as np

import moe

# f32 against float64, as a share of the largest result: ~34 units of f32 rounding (2^-24), room
# for the few chained sums (over D, F, a token's experts) behind each result.
TOL = 2e-6
NAMES = ("out", "loss") + tuple(f"d{k}" for k in ("gate", "w_in", "w_out", "shared_in",
                                                 "shared_out")) + ("updated",)


def problem(t=64, d=64, f=32, e=8, f_shared=32, top_k=2, empty=(3,), seed=0):
    """Random parameters, tokens, target and a routing bias that sends no token to the experts
    in `empty`."""
    kp, kx, kt = jax.random.split(jax.random.PRNGKey(seed), 3)
    p = moe.init_params(kp, d, f, e, f_shared)
    x = jax.random.normal(kx, (t, d), jnp.float32)
    target = jax.random.normal(kt, (t, d), jnp.float32)
    bias = jnp.zeros(e, jnp.float32).at[jnp.array(empty, jnp.int32)].set(-10.0)
    return dict(p=p, x=x, bias=bias, target=target, top_k=top_k, d=d, f=f, e=e)


def results(layer, pr, lr=0.1):
    """(out, loss, gradients..., updated parameters) of a layer as float64 numpy arrays."""
    step = jax.jit(moe.sgd_step(layer, lr))
    out = jax.jit(layer)(pr["p"], pr["x"], pr["bias"])
    loss, grads, updated = step(pr["p"], pr["x"], pr["bias"], pr["target"])
    keys = sorted(pr["p"])
    flat = lambda tree: np.concatenate([np.asarray(tree[k], np.float64).ravel() for k in keys])
    return [np.asarray(out, np.float64), np.asarray(loss, np.float64)] + \
           [np.asarray(grads[k], np.float64) for k in ("gate", "w_in", "w_out", "shared_in",
                                                      "shared_out")] + [flat(updated)]


def reference(pr, lr=0.1):
    """results(...) of the dense layer in float64."""
    with jax.enable_x64(True):
        wide = dict(pr, **{k: jax.tree_util.tree_map(lambda a: jnp.asarray(a, jnp.float64), pr[k])
                           for k in ("p", "x", "bias", "target")})
        return results(lambda p, x, b: moe.dense_reference(p, x, b, top_k=pr["top_k"]), wide, lr)


def worst(got, want):
    """max|got - want| / (TOL * max|want|) of each result (1.0 is the bound)."""
    return [float(np.max(np.abs(g - w)) / (TOL * np.max(np.abs(w)))) for g, w in zip(got, want)]


def single(pr, mods):
    return lambda p, x, b: moe.moe_layer(p, x, b, mods=mods, top_k=pr["top_k"])


def sharded(pr, mesh, mods):
    return lambda p, x, b: moe.moe_layer_ep(p, x, b, mesh=mesh, mods=mods, top_k=pr["top_k"])


def report(what, ratios):
    ok = max(ratios) <= 1.0
    print(f"{what:<44} worst {100 * max(ratios):6.2f}% of the bound "
          f"({', '.join(f'{n} {100 * r:.1f}%' for n, r in zip(NAMES, ratios))})"
          f"{'' if ok else '  FAILED'}")
    return ok


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gmm-gen", default=shutil.which("gmm-gen"), help="the gmm-gen to emit with")
    ap.add_argument("--devices", default="2,4", help="device counts of the sharded runs")
    args = ap.parse_args(argv)
    if not args.gmm_gen:
        ap.error("no gmm-gen on PATH: give --gmm-gen")
    counts = [int(c) for c in args.devices.split(",")]
    pr = problem()
    with tempfile.TemporaryDirectory(prefix="jax-moe-") as kernels:
        mods = moe.emit_modules(args.gmm_gen, kernels, pr["d"], pr["f"], pr["e"], [1] + counts)
        one = results(single(pr, mods[1]), pr)
        ok = report("1 device vs dense float64", worst(one, reference(pr)))
        for n in counts:
            got = results(sharded(pr, moe.make_mesh(n), mods[n]), pr)
            ok &= report(f"{n} devices vs 1 device", worst(got, one))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
