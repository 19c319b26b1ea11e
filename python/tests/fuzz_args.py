"""Fuzzes the argument checking of the gmmgen package: random shapes, dtypes, strides, group
sizes, options and quantized operands (some tampered with after quantize), each call in a child
process of its own. A call may return or raise the package's documented errors (ValueError,
TypeError, or a RuntimeError from the runtime); a signal (a crash) or any other exception in the
child is a finding, printed with the call and its seed.

    python3 fuzz_args.py [SECONDS=60] [SEED=1]

The sizes are drawn from a few values each, so that the kernels valid calls need are few and
compiled once into the cache ($GMMGEN_CACHE_DIR); most calls are wrong somewhere and never get
that far. Exits 0 with the number of calls and of each outcome, 1 on a finding.
"""

import os
import sys
import time
import traceback

import numpy as np

import gmmgen

DTYPES = [np.float32, np.float16, np.float64, np.int8, np.uint8, np.int32]
OUT_TYPES = [None, "f32", "bf16", "f16", np.float32, np.float16, "i8", "f64", 3]
SCHEMES = ["tensor", "channel", "block:16", "block:32", "block:16x16", "none", "block:24", ""]
QDTYPES = ["i8", "i4", "nf4", "t2", "f8e4m3", "f8e5m2", "bf16", "x"]


def pick(r, values):
    return values[int(r.integers(len(values)))]


def array(r, shape, dtype=None):
    """A random array of `shape` (entries may be negative sizes: then an empty list), its dtype
    random unless given, sometimes a strided or transposed view, sometimes not an array."""
    kind = int(r.integers(20))
    if kind == 0:
        return [[1.0, 2.0]]
    if kind == 1:
        return None
    shape = tuple(max(int(s), 0) for s in shape)
    dt = dtype if dtype is not None else pick(r, DTYPES)
    if kind == 2 and len(shape) >= 2:  # a transposed view of the right shape
        a = r.standard_normal(shape[::-1]).astype(dt).T
    elif kind == 3 and len(shape) >= 1:  # every other column of a wider array
        wide = r.standard_normal((*shape[:-1], 2 * shape[-1] + 1)).astype(dt)
        a = wide[..., ::2][..., : shape[-1]]
    else:
        a = r.standard_normal(shape).astype(dt)
    return a


def sizes_of(r, g, m):
    kind = int(r.integers(8))
    if kind == 0:
        return r.integers(-3, m + 3, g).astype(np.int32)
    if kind == 1:
        return r.integers(0, m + 1, g + int(r.integers(-1, 2))).astype(np.int64)
    if kind == 2:
        return [m] + [0] * (g - 1)
    if kind == 3:
        return np.zeros(g, np.float32)
    parts = np.sort(r.integers(0, m + 1, g - 1)) if g > 1 else np.array([], np.int64)
    return np.diff(np.concatenate([[0], parts, [int(r.integers(0, m + 1))]])).clip(0).astype(
        np.int32)


def quantized(r, g, k, n):
    """A Quantized rhs, made by quantize and then (sometimes) tampered with."""
    w = r.standard_normal((g, k, n)).astype(np.float32)
    q = gmmgen.quantize(w, pick(r, QDTYPES[:6]), pick(r, SCHEMES[:5]))
    what = int(r.integers(10))
    if what == 0 and q.scales is not None:
        q.scales = q.scales.reshape(-1)[: max(q.scales.size - int(r.integers(1, 3)), 0)]
    elif what == 1 and q.scales is not None:
        q.scales = q.scales.astype(pick(r, [np.float16, np.float64, np.int32]))
    elif what == 2:
        q.codes = q.codes[..., : max(q.codes.shape[-1] - 1, 0)]
    elif what == 3:
        q.dtype = pick(r, QDTYPES)
    elif what == 4:
        q.scheme = pick(r, SCHEMES + [None, 7])
    elif what == 5:
        q.shape = (g, k + int(r.integers(-2, 3)), n)
    elif what == 6:
        q.axis = pick(r, [0, 1, 2, -1, None])
    return q


def one_call(r):
    """A random call: (description, thunk)."""
    m = pick(r, [0, 1, 7, 33, -1])
    k, n, g = pick(r, [16, 24]), pick(r, [16, 9]), pick(r, [2, 3])
    op = int(r.integers(6))
    out_type = pick(r, OUT_TYPES)
    offset = pick(r, [0, 0, 1, -1, g])
    tiling = pick(r, [None, None, (8, 16, 8), (0, 16, 8), (8, 16), "x", (3, 5, 7)])
    if op == 0:
        lhs = array(r, (m, k + pick(r, [0, 0, 1])))
        rhs = quantized(r, g, k, n) if r.integers(3) == 0 else array(r, (g, k, n))
        gs = sizes_of(r, g, max(m, 0))
        return "gmm", lambda: gmmgen.gmm(lhs, rhs, gs, preferred_element_type=out_type,
                                         tiling=tiling, group_offset=offset)
    if op == 1:
        lhs, dy = array(r, (m, k)), array(r, (m, n + pick(r, [0, 0, -1])))
        gs = sizes_of(r, g, max(m, 0))
        return "tgmm", lambda: gmmgen.tgmm(lhs, dy, gs, preferred_element_type=out_type,
                                           tiling=tiling, group_offset=offset)
    if op == 2:
        dout, lhs, rhs = array(r, (m, n)), array(r, (m, k)), array(r, (g, k, n))
        gs = sizes_of(r, g, max(m, 0))
        return "gmm_vjp", lambda: gmmgen.gmm_vjp(dout, lhs, rhs, gs, group_offset=offset)
    if op == 3:
        x = array(r, pick(r, [(m, k), (g, k, n), (k,)]), pick(r, [np.float32, None]))
        dt, sc = pick(r, QDTYPES), pick(r, SCHEMES)
        axis = pick(r, [None, 0, 1, -1, 2, "x"])
        cal = pick(r, ["absmax", "fixed:-1:1", "fixed:1:-1", "fixed", 5])
        return "quantize", lambda: gmmgen.quantize(x, dt, sc, axis=axis, calibration=cal)
    if op == 4:
        q = quantized(r, g, k, n)
        return "dequantize", lambda: gmmgen.dequantize(q)
    lhs, rhs = array(r, (m, k)), array(r, (g, k, n))
    existing = array(r, (m, n + pick(r, [0, 0, 1])), pick(r, [np.float32, np.float16, None]))
    gs = sizes_of(r, g, max(m, 0))
    return "gmm existing_out", lambda: gmmgen.gmm(lhs, rhs, gs, existing_out=existing,
                                                  accumulate=bool(r.integers(2)))


def main():
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 60
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    counts = {"returned": 0, "rejected": 0}
    deadline = time.monotonic() + seconds
    calls = 0
    while time.monotonic() < deadline:
        call_seed = seed * 1_000_003 + calls
        calls += 1
        pid = os.fork()
        if pid == 0:  # the child makes the call and reports through its exit status
            status = 0
            try:
                what, thunk = one_call(np.random.default_rng(call_seed))
                thunk()
            except (ValueError, TypeError, RuntimeError):
                status = 10
            except BaseException:  # anything else is a finding: say what
                traceback.print_exc()
                status = 20
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(status)
        _, status = os.waitpid(pid, 0)
        if os.WIFEXITED(status) and os.WEXITSTATUS(status) in (0, 10):
            counts["returned" if os.WEXITSTATUS(status) == 0 else "rejected"] += 1
            continue
        what = "signal %d" % os.WTERMSIG(status) if os.WIFSIGNALED(status) else \
            "exit %d" % os.WEXITSTATUS(status)
        print(f"fuzz_args: FINDING ({what}) at seed {seed}, call {calls - 1} "
              f"(np.random.default_rng({call_seed}))")
        return 1
    print(f"fuzz_args: {calls} calls in {seconds:.0f} s, {counts['returned']} returned, "
          f"{counts['rejected']} rejected, no finding")
    return 0


if __name__ == "__main__":
    sys.exit(main())
