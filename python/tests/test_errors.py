"""Bad input raises a Python exception naming the parameter, before any output exists;
compile and cache failures are RuntimeErrors carrying the runtime's message."""

import os
import tempfile
import unittest

import numpy as np

import gmmgen
from common import G, K, M, N, SIZES, randn, rng


class ErrorsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        r = rng(51)
        cls.lhs, cls.rhs = randn(r, M, K), randn(r, G, K, N)

    def raises(self, exc, pattern, fn, *args, **kwargs):
        with self.assertRaisesRegex(exc, pattern):
            fn(*args, **kwargs)

    def test_wrong_dtype(self):
        self.raises(ValueError, "lhs has dtype float64", gmmgen.gmm, self.lhs.astype(np.float64),
                    self.rhs, SIZES)
        self.raises(ValueError, "rhs has dtype int32", gmmgen.gmm, self.lhs,
                    self.rhs.astype(np.int32), SIZES)
        self.raises(ValueError, "group_sizes must hold integers", gmmgen.gmm, self.lhs, self.rhs,
                    SIZES.astype(np.float32))
        self.raises(ValueError, "preferred_element_type", gmmgen.gmm, self.lhs, self.rhs, SIZES,
                    preferred_element_type=np.int8)
        self.raises(TypeError, "lhs must be a numpy array", gmmgen.gmm, [[1.0]], self.rhs, SIZES)

    def test_wrong_shape(self):
        self.raises(ValueError, r"rhs \[5, 199, 77\] does not match lhs \[150, 200\]", gmmgen.gmm,
                    self.lhs, self.rhs[:, 1:, :], SIZES)
        self.raises(ValueError, "lhs must be 2-D", gmmgen.gmm, self.lhs[None], self.rhs, SIZES)
        self.raises(ValueError, "group_sizes must be 1-D", gmmgen.gmm, self.lhs, self.rhs,
                    SIZES[None])
        self.raises(ValueError, r"existing_out has shape \(150, 76\)", gmmgen.gmm, self.lhs,
                    self.rhs, SIZES, existing_out=np.zeros((M, N - 1), np.float32))
        self.raises(ValueError, "tiling must have 3 values", gmmgen.gmm, self.lhs, self.rhs,
                    SIZES, tiling=(32, 32))
        self.raises(ValueError, r"rhs \[149, 77\] must have M=150 rows", gmmgen.tgmm, self.lhs,
                    randn(rng(52), M - 1, N), SIZES)
        self.raises(ValueError, r"dout has shape \(150, 78\), expected", gmmgen.gmm_vjp, randn(rng(53), M, N + 1), self.lhs,
                    self.rhs, SIZES)

    def test_bad_groups(self):
        bad = SIZES.copy()
        bad[2] = -1
        self.raises(ValueError, r"group_sizes\[2\]=-1 is negative", gmmgen.gmm, self.lhs,
                    self.rhs, bad)
        self.raises(ValueError, r"sum\(group_sizes\)=151 exceeds M=150", gmmgen.gmm, self.lhs,
                    self.rhs, np.array([151, 0, 0, 0, 0], np.int32))
        self.raises(ValueError, r"group_offset=1 must be in \[0, G - G_local\] = \[0, 0\]",
                    gmmgen.gmm, self.lhs, self.rhs, SIZES, group_offset=1)
        self.raises(ValueError, "group_sizes must have at least one entry", gmmgen.tgmm,
                    self.lhs, self.lhs, np.zeros(0, np.int32))

    def test_output_untouched(self):
        # A call refused by the runtime's own checks (the out dtype of the spec) leaves
        # existing_out as it was.
        existing = np.full((M, N), 7.0, np.float32)
        self.raises(ValueError, "accumulate=True needs existing_out", gmmgen.gmm, self.lhs,
                    self.rhs, SIZES, accumulate=True)
        self.raises(ValueError, "differs from existing_out dtype f32", gmmgen.gmm, self.lhs,
                    self.rhs, SIZES, preferred_element_type="bf16", existing_out=existing)
        frozen = existing.copy()
        frozen.flags.writeable = False
        self.raises(ValueError, "existing_out is read-only", gmmgen.gmm, self.lhs, self.rhs,
                    SIZES, existing_out=frozen)
        self.raises(ValueError, "no row stride", gmmgen.gmm, self.lhs, self.rhs, SIZES,
                    existing_out=np.asfortranarray(existing))
        self.assertTrue((existing == 7.0).all())

    def test_quantized_spec_rules(self):
        # Codes without scales, and scale rules, come from the runtime's spec validation.
        codes = np.zeros((G, K, N), np.uint8)
        self.raises(ValueError, "holds codes: pass a gmmgen.Quantized", gmmgen.gmm, self.lhs,
                    codes, SIZES)

    def test_runtime_errors(self):
        # No compiler allowed and an empty cache: a RuntimeError carrying the runtime's message.
        with tempfile.TemporaryDirectory() as d:
            gmmgen.configure(cache_dir=os.path.join(d, "cache"), jit=False)
            try:
                self.assertTrue(gmmgen.cache_dir().startswith(d))
                with self.assertRaisesRegex(gmmgen.JitDisabledError, "compiling is disabled"):
                    gmmgen.gmm(self.lhs, self.rhs, SIZES)
                self.assertTrue(issubclass(gmmgen.JitDisabledError, RuntimeError))
                self.assertTrue(issubclass(gmmgen.CompileError, RuntimeError))
            finally:
                gmmgen.configure()
        # A compiler that fails: CompileError with its command line.
        with tempfile.TemporaryDirectory() as d:
            os.environ["GMMGEN_CXX"] = "/bin/false"
            try:
                gmmgen.configure(cache_dir=os.path.join(d, "cache"))
                with self.assertRaisesRegex(gmmgen.CompileError, "/bin/false"):
                    gmmgen.gmm(self.lhs, self.rhs, SIZES)
            finally:
                del os.environ["GMMGEN_CXX"]
                gmmgen.configure()


if __name__ == "__main__":
    unittest.main()
