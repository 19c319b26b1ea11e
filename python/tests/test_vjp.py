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


if __name__ == "__main__":
    unittest.main()
