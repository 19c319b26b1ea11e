#!/usr/bin/env python3
"""Checks gmm-gen's Pallas modules without JAX: each compiles, and its public surface is
megablox's.

usage: check_static.py DIR [DIR ...]

DIR is a folder written by `gmm-gen emit` (manifest.json, pallas/*.py). For each module the
manifest lists: the file compiles (py_compile, bytecode kept out of DIR); it imports only jax,
jax.numpy, jax.experimental.pallas (and .tpu) and the standard library; it defines
make_group_metadata, gmm, tgmm, tgmm_mk and differentiable_gmm (tgmm modules:
make_group_metadata, tgmm and tgmm_mk; quantized gmm modules: make_group_metadata and gmm, and
with a float lhs differentiable_gmm, with whole-byte codes on both sides differentiable_gmm (of
float operands: megablox's parameters), quantize_lhs and quantize_rhs; quantized tgmm modules:
make_group_metadata, tgmm and tgmm_mk; the gmm and tgmm of quantized modules have lhs_scales and
rhs_scales last) with megablox's
parameters in megablox's order and megablox's defaults (preferred_element_type=jnp.float32); every pl.pallas_call passes a
cost_estimate; NAME, SPEC and HASH agree with the manifest. Exit status 0 or 1.
"""
import ast
import json
import os
import py_compile
import sys
import tempfile

# megablox's signatures (jax/experimental/pallas/ops/tpu/megablox): positional-or-keyword
# parameters in order, and the keyword-only ones of make_group_metadata.
SIGNATURES = {
    "gmm": (["lhs", "rhs", "group_sizes", "preferred_element_type", "tiling", "group_offset",
             "existing_out", "transpose_rhs", "interpret"], []),
    "tgmm": (["lhs", "rhs", "group_sizes", "preferred_element_type", "tiling", "group_offset",
              "num_actual_groups", "existing_out", "interpret"], []),
    # tgmm with lhs [M, K] instead of megablox's [K, M]: the same parameters.
    "tgmm_mk": (["lhs", "rhs", "group_sizes", "preferred_element_type", "tiling",
                 "group_offset", "num_actual_groups", "existing_out", "interpret"], []),
    "differentiable_gmm": (["lhs", "rhs", "group_sizes", "preferred_element_type", "tiling",
                            "group_offset", "existing_out", "transpose_rhs", "interpret"], []),
    "make_group_metadata": ([], ["group_sizes", "m", "tm", "start_group", "num_nonzero_groups",
                                 "visit_empty_groups"]),
}
# A quantized module's gmm (and differentiable_gmm, for frozen quantized weights) or tgmm and
# tgmm_mk: megablox's parameters, then the codes' scales.
QUANT_SIGNATURES = dict(SIGNATURES, **{
    name: (SIGNATURES[name][0] + ["lhs_scales", "rhs_scales"], [])
    for name in ("gmm", "differentiable_gmm", "tgmm", "tgmm_mk")})
# Parameters with these defaults (the others' defaults are the module's baked values).
DEFAULTS = {"group_offset": None, "existing_out": None, "num_actual_groups": None,
            "interpret": False, "visit_empty_groups": True, "lhs_scales": None,
            "rhs_scales": None}
# megablox's default output dtype, whatever the module writes.
DTYPE_DEFAULTS = {"preferred_element_type": "jnp.float32"}
EXPORTS = {"gmm": ["gmm", "tgmm", "tgmm_mk", "differentiable_gmm", "make_group_metadata"],
           "tgmm": ["tgmm", "tgmm_mk", "make_group_metadata"],
           "quantized gmm": ["gmm", "make_group_metadata"],
           "quantized tgmm": ["tgmm", "tgmm_mk", "make_group_metadata"],
           "quantized training gmm": ["gmm", "differentiable_gmm", "quantize_lhs",
                                      "quantize_rhs", "make_group_metadata"],
           "frozen-weight gmm": ["gmm", "differentiable_gmm", "make_group_metadata"]}
FLOAT_DTYPES = ("f32", "bf16")
# Codes a module quantizes float operands to (training: differentiable_gmm of float operands).
WHOLE_BYTE_CODES = ("i8", "f8e4m3", "f8e5m2")
ALLOWED_IMPORTS = {"jax", "jax.numpy", "jax.lax", "jax.experimental.pallas",
                   "jax.experimental.pallas.tpu", "dataclasses", "functools", "re", "typing"}


def check_function(fn, name, signatures):
    args, kwonly = signatures[name]
    problems = []
    got = [a.arg for a in fn.args.args]
    got_kw = [a.arg for a in fn.args.kwonlyargs]
    if got != args or got_kw != kwonly or fn.args.vararg or fn.args.kwarg:
        problems.append(f"{name} has parameters {got} (keyword-only {got_kw}); megablox's are "
                        f"{args} (keyword-only {kwonly})")
        return problems
    defaults = dict(zip(reversed(got), reversed(fn.args.defaults)))
    defaults.update({a.arg: d for a, d in zip(fn.args.kwonlyargs, fn.args.kw_defaults) if d})
    for param, want in DEFAULTS.items():
        if param in args + kwonly:
            node = defaults.get(param)
            if not isinstance(node, ast.Constant) or node.value is not want:
                problems.append(f"{name}: {param} must default to {want!r}")
    for param, want in DTYPE_DEFAULTS.items():
        if param in args and param in defaults and ast.unparse(defaults[param]) != want:
            problems.append(f"{name}: {param} must default to {want} (megablox's), not "
                            f"{ast.unparse(defaults[param])}")
    for param in args[3:]:  # everything after (lhs, rhs, group_sizes) has a default
        if param not in defaults:
            problems.append(f"{name}: {param} has no default")
    return problems


def check_module(path, entry):
    problems = []
    with tempfile.TemporaryDirectory() as tmp:
        try:
            py_compile.compile(path, cfile=os.path.join(tmp, "module.pyc"), doraise=True)
        except py_compile.PyCompileError as e:
            return [f"does not compile: {e.msg}"]
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), filename=path)
    functions, constants = {}, {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            functions[node.name] = node
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(
                node.targets[0], ast.Name):
            try:
                constants[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                pass
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):  # a submodule (from jax import lax) or a name
            names = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in ALLOWED_IMPORTS
                     else node.module for a in node.names]
        problems += [f"imports {n}: only jax, jax.numpy, jax.lax, jax.experimental.pallas[.tpu] "
                     "and the standard library" for n in names if n not in ALLOWED_IMPORTS]
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and (
                node.func.attr == "pallas_call"):
            if "cost_estimate" not in [k.arg for k in node.keywords]:
                problems.append(f"pl.pallas_call at line {node.lineno} has no cost_estimate")
    op = constants.get("OP")
    if op not in EXPORTS:
        return problems + [f"OP = {op!r} is not gmm or tgmm"]
    spec = entry["spec_json"]
    quantized = spec["lhs"] not in FLOAT_DTYPES or spec["rhs"] not in FLOAT_DTYPES
    kind = op if not quantized else f"quantized {op}" if spec["lhs"] not in FLOAT_DTYPES else \
        "frozen-weight gmm"
    if kind == "quantized gmm" and spec["lhs"] in WHOLE_BYTE_CODES and \
            spec["rhs"] in WHOLE_BYTE_CODES:
        kind = "quantized training gmm"
    signatures = QUANT_SIGNATURES if quantized else SIGNATURES
    if kind == "quantized training gmm":  # differentiable_gmm takes megablox's float operands
        signatures = dict(QUANT_SIGNATURES, differentiable_gmm=SIGNATURES["differentiable_gmm"])
    for name in EXPORTS[kind]:
        if name not in functions:
            problems.append(f"does not define {name}")
        elif name in signatures:
            problems += check_function(functions[name], name, signatures)
    if constants.get("__all__") != EXPORTS[kind]:
        problems.append(f"__all__ = {constants.get('__all__')}, expected {EXPORTS[kind]}")
    want = {"NAME": entry["name"], "SPEC": entry["spec"], "HASH": entry["hash"]}
    for key, value in want.items():
        if constants.get(key) != value:
            problems.append(f"{key} = {constants.get(key)!r}, the manifest says {value!r}")
    tiling = constants.get("TILING")
    # gmm modules: the forward's tiles, then dlhs's and drhs's (float, training) or dlhs's
    # (frozen weights)
    size = {"gmm": 9, "frozen-weight gmm": 6, "quantized training gmm": 9}.get(kind, 3)
    if not (isinstance(tiling, tuple) and len(tiling) == size):
        problems.append(f"TILING = {tiling!r} is not a {size}-tuple")
    return problems


def main(dirs):
    if not dirs:
        print(__doc__)
        return 2
    checked, failed = 0, 0
    for d in dirs:
        with open(os.path.join(d, "manifest.json"), encoding="utf-8") as f:
            manifest = json.load(f)
        entries = [k for k in manifest["kernels"] if k["target"] == "pallas"]
        on_disk = {os.path.join("pallas", p) for p in os.listdir(os.path.join(d, "pallas"))
                   if p.endswith(".py")}
        listed = {os.path.normpath(k["files"][0]) for k in entries}
        for extra in sorted(on_disk - listed):
            print(f"{d}/{extra}: not in the manifest")
            failed += 1
        for entry in entries:
            path = os.path.join(d, entry["files"][0])
            problems = check_module(path, entry) if os.path.exists(path) else ["missing"]
            checked += 1
            failed += bool(problems)
            print(f"{entry['name']:<72} {'ok' if not problems else 'FAILED'}")
            for p in problems:
                print(f"  {p}")
    print(f"{checked - failed} passed, {failed} failed")
    return 1 if failed or not checked else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
