"""gmmgen.tgmm (the weight gradient) on numpy arrays against the float64 reference."""

import unittest

import numpy as np

import gmmgen
from common import G, G_LOCAL, K, M, N, OFFSET, SIZES, assert_close, randn, ref_tgmm, rng


class TgmmTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        r = rng(11)
        cls.lhs, cls.rhs = randn(r, M, K), randn(r, M, N)

    def bound(self, offset=0, g_local=None):
        return ref_tgmm(np.abs(self.lhs), np.abs(self.rhs), SIZES, offset, g_local)

    def test_f32(self):
        out = gmmgen.tgmm(self.lhs, self.rhs, SIZES)
        self.assertEqual(out.shape, (G, K, N))
        assert_close(self, out, ref_tgmm(self.lhs, self.rhs, SIZES), self.bound())
        self.assertTrue((out[1] == 0).all())  # the empty group
        self.assertEqual(out.ctypes.data % 64, 0)  # on a line: f32 rows can be streamed

    def test_sharded(self):
        out = gmmgen.tgmm(self.lhs, self.rhs, SIZES, group_offset=OFFSET,
                          num_actual_groups=G_LOCAL)
        self.assertEqual(out.shape, (G_LOCAL, K, N))
        ref = ref_tgmm(self.lhs, self.rhs, SIZES, OFFSET, G_LOCAL)
        assert_close(self, out, ref, self.bound(OFFSET, G_LOCAL))

    def test_existing_out_accumulates(self):
        base = randn(rng(12), G_LOCAL, K, N) * 100
        acc = base.copy()
        out = gmmgen.tgmm(self.lhs, self.rhs, SIZES, group_offset=OFFSET, existing_out=acc)
        self.assertIs(out, acc)  # gradient accumulation in place
        ref = ref_tgmm(self.lhs, self.rhs, SIZES, OFFSET, G_LOCAL, existing=base)
        assert_close(self, out, ref, self.bound(OFFSET, G_LOCAL) + np.abs(base))

    def test_lhs_transposed(self):
        lhs_km = np.ascontiguousarray(self.lhs.T)  # [K, M], read in place
        out = gmmgen.tgmm(lhs_km, self.rhs, SIZES, lhs_transposed=True)
        assert_close(self, out, ref_tgmm(self.lhs, self.rhs, SIZES), self.bound())


if __name__ == "__main__":
    unittest.main()
