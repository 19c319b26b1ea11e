#!/usr/bin/env python3
"""The Pallas modules' metadata builder under numpy, without JAX.

usage: test_metadata_numpy.py DIR --cpp-lib LIB --cpp-manifest MANIFEST

The builder of every module in DIR (an emitted folder) is written once, in _spread and
_group_metadata, against an array namespace (`xp`) and a bincount; make_group_metadata passes
jax.numpy. This test takes those two functions from the module's source (the same text, unchanged,
through `ast`), runs them with numpy, and compares the result with megablox's definition
(a brute-force builder, group by group) and with the C++ builders of LIB (gmm-gen C++ kernels,
through ctypes) on random partitions with up to ~5000 m-tiles, empty groups anywhere, sums below
M, tile-aligned boundaries (the "not partial" sentinel) and sharded ranges. Exit status 0 or 1.
"""
import argparse
import ast
import glob
import os
import sys

import numpy as np

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_pallas  # noqa: E402  (its helpers need no JAX)

BUILDER = ("_spread", "_group_metadata")


def builder_source(path):
    """The source of the builder's functions in a module, exactly as emitted."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    tree = ast.parse(text)
    parts = {n.name: ast.get_source_segment(text, n) for n in tree.body
             if isinstance(n, ast.FunctionDef) and n.name in BUILDER}
    missing = [name for name in BUILDER if name not in parts]
    if missing:
        raise SystemExit(f"{path}: no {', '.join(missing)}")
    return "\n\n".join(parts[name] for name in BUILDER)


def main(argv):
    parser = argparse.ArgumentParser()
    parser.add_argument("dir")
    parser.add_argument("--cpp-lib", required=True)
    parser.add_argument("--cpp-manifest", required=True)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    paths = sorted(glob.glob(os.path.join(args.dir, "pallas", "*.py")))
    if not paths:
        print(f"no modules in {args.dir}/pallas")
        return 1
    sources = {builder_source(p) for p in paths}
    if len(sources) != 1:  # every module renders the same builder
        print(f"the modules of {args.dir} carry {len(sources)} different builders")
        return 1
    namespace = {}
    exec(compile(sources.pop(), paths[0], "exec"), namespace)  # noqa: S102
    build = namespace["_group_metadata"]
    bincount = lambda x, n: np.bincount(x, minlength=n)  # noqa: E731
    cpp = check_pallas.cpp_builders(args.cpp_lib, args.cpp_manifest)
    if len(cpp) < 2:
        print(f"{args.cpp_lib}: expected C++ builders for several tm, found {sorted(cpp)}")
        return 1

    cases = check_pallas.random_metadata_cases(args.seed)
    # The C++ builders have their tm baked in: the same partitions again for each of them.
    for tm in sorted(cpp):
        cases += check_pallas.random_metadata_cases(args.seed + tm, 300 // len(cpp), (tm,))
    passed = failed = 0
    biggest = 0
    for sizes, m, tm, start, count, visit in cases:
        want = check_pallas.brute_force_metadata(sizes, m, tm, start, count, visit)
        (o, g, t), n = build(np, bincount, np.array(sizes, dtype=np.int32), m, tm, start, count,
                             visit)
        got = {"numpy": (o.tolist(), g.tolist(), t.tolist(), int(n))}
        if tm in cpp:
            got["C++"] = cpp[tm](sizes, m, start, count, visit)
        ok = True
        for who, value in got.items():
            if tuple(value) != tuple(want):
                ok = False
                print(f"FAILED ({who}): sizes={sizes[:16]}{'...' if len(sizes) > 16 else ''} "
                      f"m={m} tm={tm} start={start} count={count} visit_empty={visit}")
        passed += ok
        failed += not ok
        biggest = max(biggest, -(-m // tm))
    print(f"metadata builder of {len(paths)} modules (numpy) and C++ builders for tm in "
          f"{sorted(cpp)}: {len(cases)} partitions, up to {biggest} m-tiles")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
