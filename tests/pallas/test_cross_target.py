#!/usr/bin/env python3
"""The Pallas modules and the C++ kernels of the same specs agree on the same inputs.

usage: test_cross_target.py DIR --gmm-gen GMM_GEN [--cxx CXX] [--python PY] [--interpret tpu]
                            [--only PATTERNS]

DIR is a folder written by `gmm-gen emit` (manifest.json, pallas/*.py). For every Pallas module
the C++ target supports too (every one today: the modules' dtypes and layouts are a subset of
the C++ kernels'), the spec with target=cpp and the C++ target's own tiles is emitted with
GMM_GEN into a private temporary folder, compiled by CXX (default c++) into one shared object,
and called through the C ABI (ctypes); the module runs in Pallas's generic interpreter (or TPU
interpret mode with --interpret tpu). Both get the same inputs: random values of the operands'
dtypes, ragged group sizes with empty experts and sum(group_sizes) < M, the shard at both ends
of the groups (G_local < G), existing_out where the output mode takes it, lhs [K, M] where the
spec says lhs_layout=km; for quantized modules random codes (packed ones as packed bytes) and
f32 scales in the layouts both targets take, the reference being the float64 product of the
dequantized operands. Each result is compared with a float64 reference within its own bound
(f32 summation plus one rounding to the output dtype; rows outside the active groups exactly),
and the two with each other within the sum of both bounds. --python PY re-runs under PY (a
Python with JAX) where it exists. --only checks the modules whose names match one of its
comma-separated shell patterns (a pattern that matches none is an error).

Exit status: 0 agreed; 1 a disagreement or an error; 77 skipped (no JAX; with
GMMGEN_REQUIRE_JAX=1 that is an error).
"""
import argparse
import ctypes
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import check_pallas  # noqa: E402  (the codes and scales of quantized operands)
import jax_env  # noqa: E402

U = 2.0**-24  # unit roundoff of f32
PALLAS_ONLY = ("tm", "tk", "tn", "dlhs_tiling", "drhs_tiling", "tpu")


class Args(ctypes.Structure):  # gmmgen_args (gmmgen/kernel_abi.h), GMMGEN_ABI_VERSION 4
    _fields_ = [("abi_version", ctypes.c_uint32), ("m", ctypes.c_int64),
                ("lhs", ctypes.c_void_p), ("lhs_ld", ctypes.c_int64),
                ("rhs", ctypes.c_void_p), ("rhs_ld", ctypes.c_int64),
                ("group_sizes", ctypes.c_void_p), ("group_offset", ctypes.c_int32),
                ("reserved0", ctypes.c_int32), ("out", ctypes.c_void_p),
                ("out_ld", ctypes.c_int64), ("existing_out", ctypes.c_void_p),
                ("existing_out_ld", ctypes.c_int64), ("lhs_scale", ctypes.c_void_p),
                ("lhs_scale_ld", ctypes.c_int64), ("rhs_scale", ctypes.c_void_p),
                ("rhs_scale_ld", ctypes.c_int64)]


def load_module(path):
    spec = importlib.util.spec_from_file_location("gmmgen_cross", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build_cpp(specs, gmm_gen, cxx, work):
    """{cpp spec dict's index: kernel name}, and the loaded shared object."""
    with open(os.path.join(work, "specs.json"), "w") as f:
        json.dump({"kernels": specs}, f)
    out = os.path.join(work, "cpp_kernels")
    subprocess.run([gmm_gen, "emit", "--spec-file", os.path.join(work, "specs.json"), "--out",
                    out, "--bundle", "cross"], check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(out, "manifest.json")) as f:
        manifest = json.load(f)
    flags = manifest["bundle"]["compile_flags"]
    lib = os.path.join(work, "libcross.so")
    subprocess.run([cxx, "-std=c++17", "-O1", "-shared", "-fPIC", *flags, "-I",
                    os.path.join(out, "cpp"), os.path.join(out, "cpp", "cross.cpp"), "-o", lib],
                   check=True)
    names = [k["name"] for k in manifest["kernels"]]
    return names, ctypes.CDLL(lib)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dir")
    parser.add_argument("--gmm-gen", required=True)
    parser.add_argument("--cxx", default=os.environ.get("CXX", "c++"))
    parser.add_argument("--python", help="run under this Python (with JAX) where it exists")
    parser.add_argument("--interpret", choices=("tpu", "hlo"), default="hlo")
    parser.add_argument("--only", help="comma-separated shell patterns of module names")
    args = parser.parse_args(argv)
    jax_env.run_under(args.python, __file__, argv)
    try:
        import numpy as np
        import jax
        import jax.numpy as jnp
        from jax.experimental.pallas import tpu as pltpu
    except ImportError as e:
        return jax_env.missing_jax("test_cross_target", e)
    interpret = pltpu.InterpretParams() if args.interpret == "tpu" else "hlo"

    with open(os.path.join(args.dir, "manifest.json")) as f:
        entries = [k for k in json.load(f)["kernels"] if k["target"] == "pallas"]
    if not entries:
        print(f"test_cross_target: no Pallas modules in {args.dir}", file=sys.stderr)
        return 1
    try:
        chosen = jax_env.select([e["name"] for e in entries], args.only)
    except ValueError as e:
        print(f"test_cross_target: {e} of {args.dir}", file=sys.stderr)
        return 1
    entries = [e for e in entries if e["name"] in chosen]
    specs = []
    for e in entries:
        spec = {k: v for k, v in e["spec_json"].items() if k not in PALLAS_ONLY}
        spec["target"] = "cpp"
        specs.append(spec)
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="gmmgen-cross-") as work:
        names, lib = build_cpp(specs, args.gmm_gen, args.cxx, work)
        print(f"JAX {jax.__version__}; {len(names)} C++ kernels emitted and compiled "
              f"({args.cxx}) in {time.time() - t0:.1f} s; Pallas in "
              f"{'TPU interpret mode' if args.interpret == 'tpu' else 'the generic interpreter'}")
        failures = 0
        rng = np.random.default_rng(11)
        for entry, name in zip(entries, names):
            t1 = time.time()
            try:
                worst = check_pair(np, jnp, rng, load_module(os.path.join(args.dir,
                                   entry["files"][0])), getattr(lib, name), interpret)
                print(f"{entry['name']:<66} agrees with {name} (worst {100 * worst:.1f}% of "
                      f"the bounds) {time.time() - t1:5.1f}s")
            except AssertionError as e:
                print(f"{entry['name']:<66} DISAGREES with {name}: {e}")
                failures += 1
    print(f"{len(entries)} pairs, {failures} disagreed, {time.time() - t0:.1f} s")
    return 1 if failures else 0


def check_pair(np, jnp, rng, mod, kernel, interpret):
    """One module and its C++ kernel on the same ragged inputs, at both ends of the shard
    range; returns the worst |pallas - cpp| as a share of the sum of their bounds."""
    K, N, G, GL = mod.K, mod.N, mod.G, mod.G_LOCAL
    lhs_t, rhs_t, out_t = mod.LHS_DTYPE, mod.RHS_DTYPE, mod.OUT_DTYPE
    m = 397
    worst = 0.0
    for offset in sorted({0, G - GL}):
        sizes = rng.multinomial(m - 29, np.ones(G) / G).astype(np.int32)
        sizes[[0, G // 2]] = 0  # empty experts; sum(group_sizes) < M
        bounds = np.concatenate([[0], np.cumsum(sizes)])
        lo, hi = bounds[offset], bounds[offset + GL]

        def draw(shape, dtype):
            a = jnp.asarray(rng.standard_normal(shape), jnp.float32).astype(dtype)
            return a, np.asarray(a.astype(jnp.float32), dtype=np.float64)

        def raw(a):  # the bytes the C ABI reads (bf16 as its 16-bit patterns)
            return np.ascontiguousarray(np.asarray(a))

        fields = check_pallas.spec_fields(mod)
        scales = [None, None]
        if mod.OP == "gmm" and (fields["lhs"] not in ("f32", "bf16") or
                                fields["rhs"] not in ("f32", "bf16")):
            x, x64 = check_pallas.random_codes(np, jnp, rng, fields["lhs"], (m, K))
            w, wk = check_pallas.random_codes(np, jnp, rng, fields["rhs"], (GL, N, K)
                                              if mod.TRANSPOSE_RHS else (GL, K, N))
            if mod.TRANSPOSE_RHS:
                wk = wk.swapaxes(1, 2)
            for i, (operand, rows) in enumerate((("lhs", m), ("rhs", m))):
                shape, expand = check_pallas.scale_layout(np, fields[operand + "_quant"], rows, K,
                                                          N, GL, mod.TRANSPOSE_RHS, i == 1)
                if shape is None:
                    continue
                s = check_pallas.random_scales(np, rng, shape)
                scales[i] = s
                if i == 0:
                    x64 = x64 * expand(s.astype(np.float64))
                else:
                    wk = wk * expand(s.astype(np.float64))
        elif mod.OP == "gmm":
            x, x64 = draw((m, K), lhs_t)
            w, w64 = draw((GL, N, K) if mod.TRANSPOSE_RHS else (GL, K, N), rhs_t)
            wk = w64.swapaxes(1, 2) if mod.TRANSPOSE_RHS else w64
        if mod.OP == "gmm":
            out_shape = (m, N)
            ref, ref_abs = np.zeros(out_shape), np.zeros(out_shape)
            for j in range(GL):
                r0, r1 = bounds[offset + j], bounds[offset + j + 1]
                ref[r0:r1], ref_abs[r0:r1] = x64[r0:r1] @ wk[j], np.abs(x64[r0:r1]) @ np.abs(wk[j])
            terms = K
            exact = np.ones((m, 1), dtype=bool)
            exact[lo:hi] = False
            a, b = x, w
        elif fields["lhs"] not in ("f32", "bf16"):  # quantized tgmm: codes [M, K], [M, N]
            operands = []
            for i, (side, width) in enumerate((("lhs", K), ("rhs", N))):
                codes, v = check_pallas.random_codes(np, jnp, rng, fields[side], (m, width))
                shape, expand = check_pallas.tgmm_scale_layout(np, fields[side + "_quant"], m,
                                                               width)
                s = check_pallas.random_scales(np, rng, shape)
                scales[i] = s
                operands += [codes, v * expand(s.astype(np.float64))]
            x, x64, y, y64 = operands
        else:
            x, x64 = draw((m, K), lhs_t)  # [M, K]; the kernels may read it as [K, M]
            y, y64 = draw((m, N), rhs_t)
        if mod.OP == "tgmm":
            out_shape = (GL, N, K) if mod.TRANSPOSE_RHS else (GL, K, N)
            ref, ref_abs = np.zeros((GL, K, N)), np.zeros((GL, K, N))
            for j in range(GL):
                r0, r1 = bounds[offset + j], bounds[offset + j + 1]
                ref[j] = x64[r0:r1].T @ y64[r0:r1]
                ref_abs[j] = np.abs(x64[r0:r1].T) @ np.abs(y64[r0:r1])
            if mod.TRANSPOSE_RHS:
                ref, ref_abs = ref.swapaxes(1, 2), ref_abs.swapaxes(1, 2)
            terms = m
            exact = np.zeros(out_shape, dtype=bool)
            a, b = (jnp.swapaxes(x, 0, 1) if mod.LHS_LAYOUT == "km" else x), y
        existing = None
        if mod.OUT_MODE != "plain":
            existing, e64 = draw(out_shape, out_t)
            if mod.OUT_MODE == "accumulate":
                ref, ref_abs = ref + e64, ref_abs + np.abs(e64)
            else:
                ref = np.where(exact, e64, ref)
        gs = jnp.asarray(sizes)
        go = jnp.int32(offset)
        quant = {} if all(s is None for s in scales) else {
            "lhs_scales": None if scales[0] is None else jnp.asarray(scales[0]),
            "rhs_scales": None if scales[1] is None else jnp.asarray(scales[1])}
        if mod.OP == "gmm":
            got_pallas = mod.gmm(a, b, gs, preferred_element_type=out_t, group_offset=go,
                                 existing_out=existing, interpret=interpret, **quant)
        else:
            entry = mod.tgmm if mod.LHS_LAYOUT == "km" else mod.tgmm_mk
            got_pallas = entry(a, b, gs, preferred_element_type=out_t, group_offset=go,
                               existing_out=existing, interpret=interpret, **quant)
        out = np.full(out_shape, np.nan, dtype=np.asarray(jnp.zeros((), out_t)).dtype)
        keep = [raw(a), raw(b), raw(sizes)] + ([raw(existing)] if existing is not None else [])
        c_args = Args(abi_version=4, m=m, lhs=keep[0].ctypes.data, rhs=keep[1].ctypes.data,
                      group_sizes=keep[2].ctypes.data, group_offset=offset,
                      out=out.ctypes.data,
                      existing_out=keep[3].ctypes.data if existing is not None else None,
                      lhs_scale=None if scales[0] is None else scales[0].ctypes.data,
                      rhs_scale=None if scales[1] is None else scales[1].ctypes.data)
        err = ctypes.create_string_buffer(512)
        kernel.restype = ctypes.c_int
        rc = kernel(ctypes.byref(c_args), err, ctypes.c_size_t(len(err)))
        assert rc == 0, f"the C++ kernel returned {rc}: {err.value.decode()}"
        unit = 2.0**-8 if jnp.dtype(out_t) == jnp.bfloat16 else U
        bound = unit * np.abs(ref) + (terms + 2) * U * ref_abs
        results = {}
        for who, value in (("pallas", got_pallas), ("C++", jnp.asarray(out))):
            got = np.asarray(jnp.asarray(value).astype(jnp.float32), dtype=np.float64)
            assert got.shape == ref.shape, f"{who}: shape {got.shape}, expected {ref.shape}"
            err_abs = np.abs(got - ref)
            bad = np.where(exact, err_abs != 0, err_abs > bound)
            assert not bad.any(), (f"{who} at offset {offset}: {int(bad.sum())} elements off the "
                                   f"float64 reference, first {np.argwhere(bad)[0].tolist()}")
            results[who] = got
        diff = np.abs(results["pallas"] - results["C++"])
        assert np.all(diff <= 2 * bound), "the two targets differ by more than both bounds"
        with np.errstate(invalid="ignore", divide="ignore"):
            worst = max(worst, float(np.max(np.where(exact, 0.0, diff / (2 * bound)))))
    return worst


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
