"""gmmgen.tune: the autotuner (gmm-gen's tuning library), run in this process.

It sweeps the tilings of a problem through the package's kernel cache, times each variant with
its output checked against a float64 reference, and merges the fastest into a tuning table that
later calls of the problem use (docs/tuning.md).
"""

import json
import os


def _spec_text(spec):
    if isinstance(spec, str):
        return spec
    if isinstance(spec, dict):
        return ",".join(f"{k}={v}" for k, v in spec.items())
    raise ValueError(f"spec must be a spec text ('op=gmm,lhs=f32,...,k=512,n=256,g=8') or a dict "
                     f"of spec fields, got {type(spec).__name__}")


def _int_in(name, value, lo, hi):
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ValueError(f"{name}={value!r} must be an integer in [{lo}, {hi}]")
    return value


def _list_text(value):
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


def tune(spec, *, m=4096, dist="uniform", space=None, isa=None, jobs=None, budget=None,
         threads=None, reps=5, table=None, csv=None, svg=None, progress=None):
    """Sweeps tilings of `spec` (a spec text or a dict of spec fields, or a list of them) on a
    group-size distribution and merges the fastest into a tuning table, as `gmm-gen tune` does:
    m rows, dist uniform | zipf | tiny | decode | sizes:a,b,..., space "tm=16,32;tk=128;tn=64"
    (default: powers of two around the heuristic's tiling), isa families "avx2,avx512" (or a
    list), jobs parallel compiles [cores], budget seconds [none], threads per timed run [the
    runtime's default], reps timed runs, table (default: the cache's tuning/<cpu>.json, which the
    runtime reads), csv and svg extra reports.

    progress: None, or a callable given a dict per variant done (problem, tiling, isa, heuristic,
    state, gflops, speedup, best_gflops, seconds_left, failure); `print` shows them.
    Ctrl-C stops the sweep and raises KeyboardInterrupt; nothing is written then.

    Returns the tuning table written (a dict). Raises ValueError for bad arguments and
    RuntimeError when a variant computed wrong results or no variant of a problem ran."""
    from . import _gmmgen
    specs = [_spec_text(s) for s in spec] if isinstance(spec, (list, tuple)) else [_spec_text(spec)]
    _int_in("m", m, 1, 2**31 - 1)
    _int_in("reps", reps, 1, 1000)
    if jobs is not None:
        _int_in("jobs", jobs, 1, 256)
    if threads is not None:
        _int_in("threads", threads, 1, 4096)
    if budget is not None and not (isinstance(budget, (int, float)) and budget > 0
                                   and budget != float("inf")):
        raise ValueError(f"budget={budget!r} must be a number of seconds > 0")
    if progress is not None and not callable(progress):
        raise ValueError(f"progress must be a callable or None, got {type(progress).__name__}")
    path = lambda p: os.fspath(p) if p is not None else ""
    result = _gmmgen.tune(specs, m, str(dist), "" if space is None else str(space),
                          "" if isa is None else _list_text(isa), jobs or 0, budget or 0.0,
                          threads or 0, reps, path(table), path(csv), path(svg), progress)
    if result["mismatches"]:
        raise RuntimeError(f"{result['mismatches']} variant(s) computed wrong results: a bug; "
                           f"please report it ({result})")
    if result["unresolved"]:
        raise RuntimeError(f"no variant of {result['unresolved']} problem(s) ran correctly: no "
                           f"table entry ({result})")
    with open(result["table"], encoding="utf-8") as f:
        return json.load(f)
