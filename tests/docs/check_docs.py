#!/usr/bin/env python3
"""The README and docs/ cannot rot: every fenced block runs, every relative link resolves.

usage: check_docs.py links --source DIR
       check_docs.py page PAGE --source DIR --build DIR --cxx CXX --cc CC --runtime-lib LIB
                      --include DIR [--include DIR ...] [--jax-python PY]

`links` checks every Markdown file of the README and docs/: each relative link names a file or
folder of the repository, each #anchor a heading of its page, and each fenced block has an info
string this script knows (see docs/contributing.md, "The docs test").

`page` runs the blocks of one page, in order, in one scratch folder (<build>/docs-test/<page>),
whose build-main and build are the build folder and whose generated, examples, python, tests and
.venv link to the source tree; gmm-gen (--gmm-gen) is on PATH:
  sh                  bash -e -o pipefail
  cpp, c              compiled (-Wall -Wextra -Werror) against the build's headers and the
                      runtime's shared library, then run
  python              Debian's /usr/bin/python3 with PYTHONPATH=<build>/python
  python jax          the Python with JAX (--jax-python); skipped without JAX unless
                      GMMGEN_REQUIRE_JAX=1
  <lang> file=PATH    written to PATH for the blocks after it
  json                parsed
  text, console       not run (output, syntax)
  sh ci-runs-this     not run: CI itself runs it (the build from scratch, the test suite)
A block after the comment `<!-- docs-test: not run: REASON -->` is not run.

Exit status: 0 passed, 1 a block failed or a link is broken, 77 some block was skipped (no JAX
or no Python package) and none failed.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time

RUN_LANGS = {"sh", "cpp", "c", "python"}
FILE_LANGS = {"sh", "cpp", "c", "python", "json", "cmake"}
QUIET_LANGS = {"text", "console"}
NOT_RUN = re.compile(r"<!--\s*docs-test:\s*not run:\s*(.*?)\s*-->")
FENCE = re.compile(r"^(\s*)(`{3,})(.*)$")
LINK = re.compile(r"\[([^\]]*)\]\(([^)\s]+)\)")
SOURCE_LINKS = ("generated", "examples", "python", "tests")
BLOCK_SECONDS = 300  # a block that runs longer has hung


class Block:
    def __init__(self, page, line, info, text, not_run):
        self.page, self.line, self.text, self.not_run = page, line, text, not_run
        words = info.split()
        self.lang = words[0] if words else ""
        self.attrs = words[1:]
        self.file = next((w[5:] for w in self.attrs if w.startswith("file=")), None)

    def where(self):
        return f"{self.page}:{self.line}"


def parse(path, rel):
    """The fenced blocks of a Markdown file, and its text outside them."""
    blocks, prose = [], []
    lines = open(path, encoding="utf-8").read().split("\n")
    i = 0
    last_text = ""
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            prose.append(lines[i])
            if lines[i].strip():
                last_text = lines[i].strip()
            i += 1
            continue
        indent, ticks, info = m.group(1), m.group(2), m.group(3).strip()
        start = i + 1
        body = []
        i += 1
        while i < len(lines) and lines[i].strip() != ticks:
            line = lines[i]
            body.append(line[len(indent):] if line.startswith(indent) else line.lstrip())
            i += 1
        if i == len(lines):
            raise SystemExit(f"{rel}:{start}: a fenced block is never closed")
        i += 1
        nr = NOT_RUN.fullmatch(last_text)
        blocks.append(Block(rel, start, info, "\n".join(body) + "\n", nr.group(1) if nr else None))
        last_text = ""
        prose.append("")
    return blocks, "\n".join(prose)


def slug(heading):
    """GitHub's anchor of a heading."""
    text = re.sub(r"`", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(prose):
    seen, out = {}, set()
    for line in prose.split("\n"):
        m = re.match(r"^#{1,6}\s+(.*)$", line)
        if not m:
            continue
        s = slug(m.group(1))
        n = seen.get(s, 0)
        seen[s] = n + 1
        out.add(s if n == 0 else f"{s}-{n}")
    return out


def pages(source):
    out = [os.path.join(source, "README.md")]
    for root, _, files in os.walk(os.path.join(source, "docs")):
        out += [os.path.join(root, f) for f in sorted(files) if f.endswith(".md")]
    return sorted(out)


def check_links(source):
    errors = []
    parsed = {}
    for p in pages(source):
        parsed[os.path.realpath(p)] = parse(p, os.path.relpath(p, source))
    for p in pages(source):
        rel = os.path.relpath(p, source)
        blocks, prose = parsed[os.path.realpath(p)]
        for b in blocks:
            if b.lang not in RUN_LANGS | FILE_LANGS | QUIET_LANGS:
                errors.append(f"{b.where()}: info string '{b.lang}' is not one of "
                              f"{sorted(RUN_LANGS | FILE_LANGS | QUIET_LANGS)}")
            elif b.file and b.lang not in FILE_LANGS:
                errors.append(f"{b.where()}: file= goes with {sorted(FILE_LANGS)}")
            elif b.lang == "cmake" and not b.file and b.not_run is None:
                errors.append(f"{b.where()}: a cmake block needs file=PATH (or is text)")
            if b.not_run is not None and not b.not_run:
                errors.append(f"{b.where()}: 'not run' needs a reason")
        text = re.sub(r"`[^`\n]*`", "", prose)
        for n, line in enumerate(text.split("\n"), 1):
            for m in LINK.finditer(line):
                target = m.group(2)
                if re.match(r"^[a-z]+:", target):
                    continue
                path, _, anchor = target.partition("#")
                dest = os.path.normpath(os.path.join(os.path.dirname(p), path)) if path else p
                if not os.path.realpath(dest).startswith(os.path.realpath(source) + os.sep):
                    errors.append(f"{rel}:{n}: link '{target}' leaves the repository")
                    continue
                if not os.path.exists(dest):
                    errors.append(f"{rel}:{n}: link '{target}': {os.path.relpath(dest, source)} "
                                  f"does not exist")
                    continue
                if anchor:
                    if not dest.endswith(".md"):
                        errors.append(f"{rel}:{n}: link '{target}': an anchor into a non-page")
                    elif anchor not in anchors(parsed[os.path.realpath(dest)][1]):
                        errors.append(f"{rel}:{n}: link '{target}': no heading '#{anchor}' in "
                                      f"{os.path.relpath(dest, source)}")
    for e in errors:
        print(e)
    count = sum(len(b) for b, _ in parsed.values())
    print(f"{len(parsed)} pages, {count} blocks: "
          f"{'ok' if not errors else f'{len(errors)} problems'}")
    return 1 if errors else 0


def has_jax(python):
    if not python or not os.path.exists(python):
        return False
    return subprocess.run([python, "-c", "import jax, jax.experimental.pallas"],
                          capture_output=True).returncode == 0


def write_in(scratch, rel_path, text):
    dest = os.path.normpath(os.path.join(scratch, rel_path))
    if not dest.startswith(scratch + os.sep):
        raise SystemExit(f"file={rel_path} leaves the scratch folder")
    parent = os.path.dirname(dest)
    if os.path.realpath(parent) != parent and not os.path.realpath(parent).startswith(
            os.path.realpath(scratch) + os.sep):
        raise SystemExit(f"file={rel_path} would be written through a link out of the scratch folder")
    if os.path.islink(dest):
        raise SystemExit(f"file={rel_path} is a link into the source tree")
    os.makedirs(parent, exist_ok=True)
    with open(dest, "w", encoding="utf-8") as f:
        f.write(text)
    return dest


def run_page(a):
    source, build = os.path.realpath(a.source), os.path.realpath(a.build)
    page = os.path.join(source, a.page)
    blocks, _ = parse(page, a.page)
    name = re.sub(r"[^\w]+", "-", a.page.removesuffix(".md")).strip("-")
    scratch = os.path.join(build, "docs-test", name)
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(os.path.join(scratch, ".docs-test"))
    for link in ("build-main", "build"):
        os.symlink(build, os.path.join(scratch, link))
    for entry in SOURCE_LINKS:
        os.symlink(os.path.join(source, entry), os.path.join(scratch, entry))
    if os.path.isdir(os.path.join(source, ".venv")):
        os.symlink(os.path.join(source, ".venv"), os.path.join(scratch, ".venv"))

    env = dict(os.environ)
    env["PATH"] = os.path.dirname(os.path.abspath(a.gmm_gen)) + os.pathsep + env.get("PATH", "")
    env.setdefault("GMMGEN_CACHE_DIR", env.get("GMMGEN_TEST_CACHE_DIR") or
                   os.path.join(build, "test-cache"))
    env.setdefault("GMMGEN_PCH_DIR", os.path.join(build, "test-pch"))  # the tests' preludes
    env["JAX_PLATFORMS"] = env.get("JAX_PLATFORMS", "cpu")
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    have_package = os.path.isdir(os.path.join(build, "python", "gmmgen"))
    # Importing JAX takes ~1 s: asked only of pages that have a `python jax` block.
    wants_jax = any(b.lang == "python" and "jax" in b.attrs for b in blocks)
    jax_python = a.jax_python if wants_jax and has_jax(a.jax_python) else None
    require_jax = os.environ.get("GMMGEN_REQUIRE_JAX") == "1"

    failed = skipped = ran = 0
    for n, b in enumerate(blocks):
        t0 = time.time()
        if b.file:
            write_in(scratch, b.file, b.text)
            continue
        if b.lang in QUIET_LANGS or b.not_run is not None or "ci-runs-this" in b.attrs:
            continue
        if b.lang == "json":
            try:
                json.loads(b.text)
            except ValueError as e:
                print(f"{b.where()}: not JSON: {e}")
                failed += 1
            continue
        if b.lang == "python" and not have_package and "jax" not in b.attrs:
            print(f"{b.where()}: skipped: the build has no Python package")
            skipped += 1
            continue
        if b.lang == "python" and "jax" in b.attrs and not jax_python:
            print(f"{b.where()}: {'FAILED' if require_jax else 'skipped'}: no Python with JAX "
                  f"({a.jax_python or 'none given'})")
            failed, skipped = (failed + 1, skipped) if require_jax else (failed, skipped + 1)
            continue
        stem = os.path.join(scratch, ".docs-test", f"block{n}")
        run_env = dict(env)
        if b.lang == "sh":
            cmd = ["bash", "-e", "-o", "pipefail", write_in(scratch, f".docs-test/block{n}.sh",
                                                            b.text)]
        elif b.lang == "python":
            src = write_in(scratch, f".docs-test/block{n}.py", b.text)
            if "jax" in b.attrs:
                cmd = [jax_python, src]
            else:
                cmd = ["/usr/bin/python3", src]
                run_env["PYTHONPATH"] = os.path.join(build, "python")
        else:  # cpp, c: compile, then run
            ext, compiler, std = (".cpp", a.cxx, "-std=c++20") if b.lang == "cpp" else \
                (".c", a.cc, "-std=c11")
            src = write_in(scratch, f".docs-test/block{n}{ext}", b.text)
            compile_cmd = [compiler, std, "-O1", "-Wall", "-Wextra", "-Werror", src, "-o", stem]
            compile_cmd += [f"-I{d}" for d in a.include]
            compile_cmd += [a.runtime_lib, f"-Wl,-rpath,{os.path.dirname(a.runtime_lib)}"]
            c = subprocess.run(compile_cmd, cwd=scratch, capture_output=True, text=True)
            if c.returncode != 0:
                print(f"{b.where()}: does not compile:\n  {' '.join(compile_cmd)}\n{c.stderr}")
                failed += 1
                continue
            cmd = [stem]
        try:
            r = subprocess.run(cmd, cwd=scratch, env=run_env, capture_output=True, text=True,
                               timeout=BLOCK_SECONDS)
        except subprocess.TimeoutExpired as e:
            print(f"{b.where()}: {b.lang} FAILED: still running after {BLOCK_SECONDS} s\n"
                  f"---- block\n{b.text}---- stdout\n{e.stdout or ''}\n---- stderr\n"
                  f"{e.stderr or ''}")
            failed += 1
            continue
        ran += 1
        took = time.time() - t0
        status = "ok" if r.returncode == 0 else f"FAILED (exit status {r.returncode})"
        print(f"{b.where()}: {b.lang} {' '.join(b.attrs)} {status}, {took:.1f} s")
        if r.returncode == 0 and r.stdout.strip():
            out = r.stdout.rstrip("\n").split("\n")
            print("\n".join("    " + line for line in out[:12]) +
                  (f"\n    ... ({len(out) - 12} more lines)" if len(out) > 12 else ""))
        if r.returncode != 0:
            failed += 1
            print("---- block\n" + b.text + "---- stdout\n" + r.stdout + "---- stderr\n" + r.stderr)
    print(f"{a.page}: {ran} blocks run, {failed} failed, {skipped} skipped")
    if failed:
        return 1
    return 77 if skipped else 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("mode", choices=["links", "page"])
    p.add_argument("page", nargs="?")
    p.add_argument("--source", required=True)
    p.add_argument("--build")
    p.add_argument("--cxx", default="c++")
    p.add_argument("--cc", default="cc")
    p.add_argument("--runtime-lib")
    p.add_argument("--include", action="append", default=[])
    p.add_argument("--jax-python")
    p.add_argument("--gmm-gen", help="the gmm-gen binary the blocks run (its folder goes first "
                   "on PATH)")
    a = p.parse_args()
    if a.mode == "links":
        return check_links(os.path.realpath(a.source))
    if not a.page or not a.build or not a.runtime_lib or not a.gmm_gen:
        p.error("page needs PAGE, --build, --runtime-lib and --gmm-gen")
    return run_page(a)


if __name__ == "__main__":
    sys.exit(main())
