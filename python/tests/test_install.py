"""`cmake --install` gives a package that imports and runs from the install prefix alone
(its module finds libgmmgen_runtime.so through its RPATH)."""

import os
import subprocess
import sys
import tempfile
import unittest

BUILD = os.environ.get("GMMGEN_TEST_BUILD_DIR")
PY_DIR = os.environ.get("GMMGEN_TEST_PYTHON_INSTALL_DIR", "")

CHECK = r"""
import os, sys
import numpy as np
import gmmgen
prefix = sys.argv[1]
assert gmmgen.__file__.startswith(prefix), gmmgen.__file__
maps = open("/proc/self/maps").read()
libs = {line.split()[-1] for line in maps.splitlines() if "libgmmgen_runtime" in line}
assert libs and all(p.startswith(prefix) for p in libs), libs
out = gmmgen.gmm(np.ones((4, 8), np.float32), np.ones((2, 8, 3), np.float32), [1, 2])
assert (out[:3] == 8).all() and (out[3] == 0).all(), out
print("ok")
"""


@unittest.skipUnless(BUILD and PY_DIR and not os.path.isabs(PY_DIR),
                     "needs the build folder and a relative GMMGEN_PYTHON_INSTALL_DIR")
class InstallTest(unittest.TestCase):
    def test_installed_package(self):
        with tempfile.TemporaryDirectory() as destdir:
            # Installed for prefix /gmmgen-test under DESTDIR: every file, even one a rule might
            # install to an absolute path, lands in the temporary folder, never in the system.
            subprocess.run(["cmake", "--install", BUILD, "--prefix", "/gmmgen-test"], check=True,
                           stdout=subprocess.DEVNULL, env=dict(os.environ, DESTDIR=destdir))
            self.assertEqual(os.listdir(destdir), ["gmmgen-test"], "files outside the prefix")
            prefix = os.path.join(destdir, "gmmgen-test")
            env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "GMMGEN_CLI")}
            env["PYTHONPATH"] = os.path.join(prefix, PY_DIR)
            run = subprocess.run([sys.executable, "-c", CHECK, prefix], env=env, cwd=prefix,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            self.assertEqual(run.returncode, 0, run.stdout)
            self.assertIn("ok", run.stdout)


if __name__ == "__main__":
    unittest.main()
