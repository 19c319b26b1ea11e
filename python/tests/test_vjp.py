"""gmmgen.gmm_vjp against the VJP written out in numpy: dlhs = dout @ rhs[g]^T per group,
drhs[g] = lhs[rows of g]^T @ dout[rows of g]."""

import unittest

import numpy as np

import gmmgen
from common import (G, G_LOCAL, K, M, N, OFFSET, SIZES, assert_close, randn, ref_gmm, ref_tgmm,
                    rng, starts)


def numpy_vjp(dout, lhs, rhs, sizes, offset):
    dout, lhs, rhs = (np.asarray(a, np.float64) for a in (dout, lhs, rhs))
    s = starts(sizes)
    dlhs, drhs = np.zeros_like(lhs), np.zeros_like(rhs)
    for j in range(rhs.shape[0]):
        a, b = s[offset + j], s[offset + j + 1]
        dlhs[a:b] = dout[a:b] @ rhs[j].T
        drhs[j] = lhs[a:b].T @ dout[a:b]
    return dlhs, drhs


class VjpTest(unittest.TestCase):
    def check(self, offset, g_local):
        r = rng(21 + offset)
        lhs, rhs, dout = randn(r, M, K), randn(r, g_local, K, N), randn(r, M, N)
        dlhs, drhs = gmmgen.gmm_vjp(dout, lhs, rhs, SIZES, group_offset=offset)
        self.assertEqual((dlhs.shape, drhs.shape), (lhs.shape, rhs.shape))
        self.assertEqual((dlhs.dtype, drhs.dtype), (np.float32, np.float32))
        ref_dlhs, ref_drhs = numpy_vjp(dout, lhs, rhs, SIZES, offset)
        assert_close(self, dlhs, ref_dlhs,
                     ref_gmm(np.abs(dout), np.abs(rhs), SIZES, offset, transpose_rhs=True),
                     what="dlhs")
        assert_close(self, drhs, ref_drhs,
                     ref_tgmm(np.abs(lhs), np.abs(dout), SIZES, offset, g_local), what="drhs")
        # Rows outside the active groups get no gradient.
        s = starts(SIZES)
        self.assertTrue((dlhs[:s[offset]] == 0).all() and (dlhs[s[offset + g_local]:] == 0).all())

    def test_vjp(self):
        self.check(0, G)

    def test_vjp_sharded(self):
        self.check(OFFSET, G_LOCAL)

    def test_vjp_is_the_gradient(self):
        # A directional derivative of sum(out * dout) by central differences in float64 agrees
        # with <dlhs, dl> + <drhs, dr> (the products are linear: the difference is exact up to
        # the kernels' f32 rounding).
        r = rng(25)
        lhs, rhs, dout = randn(r, M, K), randn(r, G, K, N), randn(r, M, N)
        dl, dr = randn(r, M, K), randn(r, G, K, N)
        dlhs, drhs = gmmgen.gmm_vjp(dout, lhs, rhs, SIZES)
        f = lambda l, w: float((ref_gmm(l, w, SIZES) * dout).sum())
        h = 0.5
        fd = (f(lhs + h * dl, rhs + h * dr) - f(lhs - h * dl, rhs - h * dr)) / (2 * h)
        got = float((dlhs.astype(np.float64) * dl).sum() + (drhs.astype(np.float64) * dr).sum())
        self.assertAlmostEqual(got / fd, 1.0, delta=1e-4)


class QuantVjpTest(unittest.TestCase):
    """gmm_vjp of a block-FP8 forward: x quantized along M in 128-row blocks (what tgmm reads),
    weights in 128x128 e4m3 blocks (K, N and M not multiples of 128; empty groups)."""

    def operands(self, seed):
        r = rng(seed)
        x, w, dout = randn(r, M, K), randn(r, G, K, N), randn(r, M, N)
        xq = gmmgen.quantize(x, "f8e4m3", "block:128", axis=0)
        wq = gmmgen.quantize(w, "f8e4m3", "block:128x128")
        return x, w, dout, xq, wq

    def test_f32_gradient_matches_the_dequantized_vjp(self):
        # dout kept f32: dlhs and drhs are the VJP of the dequantized operands, up to f32 sums.
        x, w, dout, xq, wq = self.operands(41)
        xd, wd = gmmgen.dequantize(xq), gmmgen.dequantize(wq)
        for offset, g_local in ((0, G), (OFFSET, G_LOCAL)):
            wq_shard = gmmgen.Quantized(wq.codes[offset:offset + g_local],
                                        wq.scales[offset:offset + g_local], wq.dtype, wq.scheme,
                                        wq.axis, (g_local, K, N))
            dlhs, drhs = gmmgen.gmm_vjp(dout, xq, wq_shard, SIZES, group_offset=offset,
                                        grad_dtype=None)
            self.assertEqual((dlhs.dtype, drhs.dtype), (np.float32, np.float32))
            w_local = wd[offset:offset + g_local]
            ref_dlhs, ref_drhs = numpy_vjp(dout, xd, w_local, SIZES, offset)
            assert_close(self, dlhs, ref_dlhs,
                         ref_gmm(np.abs(dout), np.abs(w_local), SIZES, offset,
                                 transpose_rhs=True), what=f"dlhs (offset {offset})")
            assert_close(self, drhs, ref_drhs,
                         ref_tgmm(np.abs(xd), np.abs(dout), SIZES, offset, g_local),
                         what=f"drhs (offset {offset})")

    def test_fp8_gradient_approximates_the_float_vjp(self):
        # dout in e5m2 (the default) 1x128 / 128x1 blocks: close to the unquantized VJP, within
        # what e4m3 operands and an e5m2 gradient allow (relative Frobenius error).
        x, w, dout, xq, wq = self.operands(42)
        dlhs, drhs = gmmgen.gmm_vjp(dout, xq, wq, SIZES)
        ref_dlhs, ref_drhs = numpy_vjp(dout, x, w, SIZES, 0)
        for got, ref, what in ((dlhs, ref_dlhs, "dlhs"), (drhs, ref_drhs, "drhs")):
            err = np.linalg.norm(got.astype(np.float64) - ref) / np.linalg.norm(ref)
            self.assertLess(err, 0.15, what)
            self.assertGreater(err, 0.0, what)  # the gradient really was quantized

    def test_quantized_forward_rules(self):
        x, w, dout, xq, wq = self.operands(43)
        x_along_k = gmmgen.quantize(x, "f8e4m3", "block:128")
        with self.assertRaisesRegex(ValueError, "quantized along M"):
            gmmgen.gmm_vjp(dout, x_along_k, wq, SIZES)
        with self.assertRaisesRegex(ValueError, "dout must be f32|dout's.*f32|must be f32"):
            gmmgen.gmm_vjp(gmmgen.to_bf16(dout), xq, wq, SIZES)
        with self.assertRaisesRegex(ValueError, "grad_dtype"):
            gmmgen.gmm_vjp(dout, xq, wq, SIZES, grad_dtype="i8")


if __name__ == "__main__":
    unittest.main()
