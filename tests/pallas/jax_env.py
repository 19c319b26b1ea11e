"""What the Pallas tests under JAX share: running under the project's Python with JAX, on the
host, and reporting a missing JAX as skipped (exit 77), or as an error under
GMMGEN_REQUIRE_JAX=1 (.ci/test sets it, so that CI cannot pass without running them)."""
import fnmatch
import os
import sys

EXIT_SKIPPED = 77


def run_under(python, script, argv):
    """Re-runs `script argv` under `python` (a Python with JAX) where it exists and is not this
    interpreter already; returns otherwise. Interpret mode runs on the host: JAX_PLATFORMS
    defaults to cpu, never an accelerator JAX would pick by default."""
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    if python and os.path.abspath(sys.executable) != os.path.abspath(python) and \
            os.access(python, os.X_OK):
        os.execv(python, [python, os.path.abspath(script)] + argv)


def missing_jax(who, error):
    """The exit status of a test that could not import JAX: 77 (skipped), or 1 with
    GMMGEN_REQUIRE_JAX=1."""
    if os.environ.get("GMMGEN_REQUIRE_JAX") == "1":
        print(f"{who}: GMMGEN_REQUIRE_JAX=1 and no JAX here ({error}); .ci/deps installs it",
              file=sys.stderr)
        return 1
    print(f"skipped: {who} needs JAX ({error}); .ci/deps installs it")
    return EXIT_SKIPPED


def select(names, only):
    """The names that match one of `only`'s comma-separated shell patterns (--only; all of them
    when `only` is None). Raises ValueError naming the patterns that match no name, so that a
    subset cannot pass empty."""
    if only is None:
        return list(names)
    patterns = [p for p in only.split(",") if p]
    unmatched = [p for p in patterns if not any(fnmatch.fnmatchcase(n, p) for n in names)]
    if not patterns or unmatched:
        raise ValueError(f"--only: {', '.join(unmatched) or 'no pattern'} matches no module")
    return [n for n in names if any(fnmatch.fnmatchcase(n, p) for p in patterns)]
