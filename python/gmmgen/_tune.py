"""gmmgen.tune: the autotuner, run as the `gmm-gen tune` command.

The tuner (sweep, parallel compiles, timing, tuning table) lives in the CLI only, so tune() runs
that binary in a subprocess with the same options instead of duplicating it: the binary next to
this package's build (or the installed one), $GMMGEN_CLI when set, else gmm-gen on PATH.
"""

import json
import os
import shutil
import subprocess


def _cli():
    given = os.environ.get("GMMGEN_CLI")
    if given:
        return given
    try:
        from ._paths import GMM_GEN
        if os.path.exists(GMM_GEN):
            return GMM_GEN
    except ImportError:
        pass
    found = shutil.which("gmm-gen")
    if not found:
        raise RuntimeError("gmm-gen (the CLI that tunes) was not found: set GMMGEN_CLI to its "
                           "path or put it on PATH")
    return found


def _spec_text(spec):
    if isinstance(spec, str):
        return spec
    if isinstance(spec, dict):
        return ",".join(f"{k}={v}" for k, v in spec.items())
    raise ValueError(f"spec must be a spec text ('op=gmm,lhs=f32,...,k=512,n=256,g=8') or a dict "
                     f"of spec fields, got {type(spec).__name__}")


def tune(spec, *, m=None, dist=None, space=None, isa=None, jobs=None, budget=None, threads=None,
         reps=None, table=None, csv=None, svg=None, timeout=None):
    """Sweeps tilings of `spec` (text or dict of spec fields) on a group-size distribution and
    writes the fastest into a tuning table, as `gmm-gen tune --spec SPEC ...` (see
    `gmm-gen tune --help`): m rows [4096], dist uniform | zipf | tiny | decode | sizes:a,b,...,
    space "tm=16,32;tk=128;tn=64", isa families "avx2,avx512", jobs parallel compiles, budget
    seconds, threads per timed run, reps timed runs, table (default: the cache's
    tuning/<cpu>.json, which the runtime reads), csv and svg extra outputs.

    Returns the tuning table written (a dict) when `table` is given, else the CLI's output
    text. Raises RuntimeError with the CLI's output when it fails (exit code != 0)."""
    args = [_cli(), "tune", "--spec", _spec_text(spec)]
    for flag, value in (("--m", m), ("--dist", dist), ("--space", space), ("--isa", isa),
                        ("--jobs", jobs), ("--budget", budget), ("--threads", threads),
                        ("--reps", reps), ("--table", table), ("--csv", csv), ("--svg", svg)):
        if value is not None:
            if isinstance(value, (list, tuple)):
                value = ",".join(str(v) for v in value)
            args += [flag, os.fspath(value) if isinstance(value, os.PathLike) else str(value)]
    run = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         timeout=timeout, check=False)
    if run.returncode != 0:
        raise RuntimeError(f"gmm-gen tune failed (exit code {run.returncode}):\n{run.stdout}")
    if table is not None:
        with open(table, encoding="utf-8") as f:
            return json.load(f)
    return run.stdout
