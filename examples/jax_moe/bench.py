"""Times the JAX MoE layer (moe.py) with its experts on 1, 2 and 4 devices: tokens per second of
the forward pass and of forward + backward (jax.grad of a loss), the forward split into dispatch,
expert matmuls and combine (each stage jitted apart), and the bytes each device sends per step:
read from the compiled program's all-to-all operands, against the rows a ragged all-to-all would
send for the same routing (the pairs whose expert lies on another device, there and back).

    .venv/bin/python examples/jax_moe/bench.py --gmm-gen build-main/bin/gmm-gen

On the CPU the kernels run in Pallas's generic interpreter and the "devices" share the host's
cores: the figures show the cost of the exchange and that every mesh runs, not a speed-up.
"""

import check  # first: it sets JAX_PLATFORMS and the 4 host devices before JAX loads

import argparse
import os
import re
import shutil
import statistics
import sys
import tempfile
import time

import jax
import numpy as np

import moe

_SHAPE = re.compile(r"(f32|s32|bf16)\[([0-9,]*)\]")
_BYTES = {"f32": 4, "s32": 4, "bf16": 2}


def median_seconds(fn, reps):
    jax.block_until_ready(fn())  # compile and warm up
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def all_to_all_bytes(jitted, *args):
    """Bytes of the all-to-all results in the compiled (per-device) program, summed."""
    total = 0
    for line in jitted.lower(*args).compile().as_text().splitlines():
        if " all-to-all(" not in line:
            continue
        result = line.split("=", 1)[1].split("all-to-all(", 1)[0]
        for dtype, dims in _SHAPE.findall(result):
            total += _BYTES[dtype] * int(np.prod([int(d) for d in dims.split(",") if d]))
    return total


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gmm-gen", default=shutil.which("gmm-gen"))
    ap.add_argument("--tokens", type=int, default=1024)
    ap.add_argument("--d", type=int, default=256)
    ap.add_argument("--f", type=int, default=128)
    ap.add_argument("--experts", type=int, default=8)
    ap.add_argument("--top-k", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args(argv)
    if not args.gmm_gen:
        ap.error("no gmm-gen on PATH: give --gmm-gen")
    counts = [1, 2, 4]
    pr = check.problem(t=args.tokens, d=args.d, f=args.f, e=args.experts, f_shared=args.f,
                       top_k=args.top_k, empty=())
    p, x, bias, target = pr["p"], pr["x"], pr["bias"], pr["target"]
    experts, _ = moe.route(x, p["gate"], bias, args.top_k, 1.0)
    print(f"T={args.tokens}, D={args.d}, F={args.f}, E={args.experts}, top_k={args.top_k}, "
          f"f32, median of {args.reps}, JAX {jax.__version__} on {jax.default_backend()} "
          f"({os.cpu_count()} cores), interpret={moe.default_interpret()!r}")
    print("| devices | fwd tokens/s | fwd+bwd tokens/s | dispatch ms | experts ms | combine ms "
          "| sent/device fwd KiB | fwd+bwd KiB | ragged KiB | padded/ragged |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory(prefix="jax-moe-bench-") as kernels:
        mods = moe.emit_modules(args.gmm_gen, kernels, args.d, args.f, args.experts, counts)
        for n in counts:
            mesh = moe.make_mesh(n)
            layer = check.sharded(pr, mesh, mods[n])
            fwd = jax.jit(layer)
            grad = jax.jit(jax.value_and_grad(moe.loss_fn(layer)))
            t_fwd = median_seconds(lambda: fwd(p, x, bias), args.reps)
            t_bwd = median_seconds(lambda: grad(p, x, bias, target), args.reps)
            kw = dict(mesh=mesh, mods=mods[n])
            dispatch = jax.jit(lambda p, x, b: moe.dispatch_ep(p, x, b, top_k=args.top_k, **kw))
            compute = jax.jit(lambda r, i, w, g, p: moe.compute_ep(r, i, w, g, p, **kw))
            combine = jax.jit(lambda r, w, g, p, x: moe.combine_ep(r, w, g, p, x, mesh=mesh))
            staged = dispatch(p, x, bias)
            computed = compute(*staged, p)
            stages = [median_seconds(lambda: dispatch(p, x, bias), args.reps),
                      median_seconds(lambda: compute(*staged, p), args.reps),
                      median_seconds(lambda: combine(*computed, p, x), args.reps)]
            # The program is per device; of its all-to-all buffers a device keeps 1/n. A ragged
            # exchange would send the rows of the pairs routed elsewhere, there and back.
            keep = (n - 1) / n
            sent_fwd = keep * all_to_all_bytes(fwd, p, x, bias)
            sent_bwd = keep * all_to_all_bytes(grad, p, x, bias, target)
            home = np.repeat(np.arange(args.tokens) // (args.tokens // n), args.top_k)
            away = np.sum(np.asarray(experts).ravel() // (args.experts // n) != home)
            ragged = 2 * away * args.d * 4 / n
            ratio = f"{sent_fwd / ragged:.1f}" if ragged else "-"
            print(f"| {n} | {args.tokens / t_fwd:,.0f} | {args.tokens / t_bwd:,.0f} | "
                  f"{1e3 * stages[0]:.1f} | {1e3 * stages[1]:.1f} | {1e3 * stages[2]:.1f} | "
                  f"{sent_fwd / 1024:,.0f} | {sent_bwd / 1024:,.0f} | {ragged / 1024:,.0f} | "
                  f"{ratio} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
