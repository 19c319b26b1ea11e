"""gmmgen.gmm on numpy arrays against the float64 reference (docs/operations.md)."""

import unittest

import numpy as np

import gmmgen
from common import G, G_LOCAL, K, M, N, OFFSET, SIZES, assert_close, randn, ref_gmm, rng, starts


class GmmTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        r = rng(1)
        cls.lhs, cls.rhs = randn(r, M, K), randn(r, G, K, N)
        cls.bound = ref_gmm(np.abs(cls.lhs), np.abs(cls.rhs), SIZES)

    def test_f32(self):
        out = gmmgen.gmm(self.lhs, self.rhs, SIZES)
        self.assertIsInstance(out, np.ndarray)
        self.assertEqual(out.dtype, np.float32)
        assert_close(self, out, ref_gmm(self.lhs, self.rhs, SIZES), self.bound)
        # Rows of the empty group and past sum(group_sizes) are zero, not garbage.
        self.assertTrue((out[SIZES.sum():] == 0).all())

    def test_transpose_rhs(self):
        rhs_t = np.ascontiguousarray(self.rhs.transpose(0, 2, 1))  # [G, N, K]
        out = gmmgen.gmm(self.lhs, rhs_t, SIZES, transpose_rhs=True)
        assert_close(self, out, ref_gmm(self.lhs, rhs_t, SIZES, transpose_rhs=True), self.bound)

    def test_bf16(self):
        lhs, rhs = gmmgen.to_bf16(self.lhs), gmmgen.to_bf16(self.rhs)
        self.assertEqual(lhs.dtype, np.uint16)
        # The reference multiplies the bf16 values themselves (exact in float64).
        ref = ref_gmm(gmmgen.from_bf16(lhs), gmmgen.from_bf16(rhs), SIZES)
        out = gmmgen.gmm(lhs, rhs, SIZES)
        self.assertEqual(out.dtype, np.float32)
        assert_close(self, out, ref, self.bound)
        out16 = gmmgen.gmm(lhs, rhs, SIZES, preferred_element_type="bf16")
        self.assertEqual(out16.dtype, np.uint16)
        assert_close(self, out16, ref, self.bound, "bf16")
        # numpy's uint16 names bf16 too, and rounds the same f32 sums once.
        again = gmmgen.gmm(lhs, rhs, SIZES, preferred_element_type=np.uint16)
        np.testing.assert_array_equal(again, out16)

    def test_sharded(self):
        rhs = self.rhs[OFFSET:OFFSET + G_LOCAL]
        out = gmmgen.gmm(self.lhs, rhs, SIZES, group_offset=OFFSET)
        ref = ref_gmm(self.lhs, rhs, SIZES, group_offset=OFFSET)
        assert_close(self, out, ref, self.bound)
        s = starts(SIZES)
        self.assertTrue((out[:s[OFFSET]] == 0).all())
        self.assertTrue((out[s[OFFSET + G_LOCAL]:] == 0).all())

    def test_existing_out(self):
        rhs = self.rhs[OFFSET:OFFSET + G_LOCAL]
        poison = randn(rng(2), M, N) * 1e3
        poison[-1, :] = np.nan  # a row no group owns keeps even NaN
        existing = poison.copy()
        out = gmmgen.gmm(self.lhs, rhs, SIZES, group_offset=OFFSET, existing_out=existing)
        self.assertIs(out, existing)  # written in place
        ref = ref_gmm(self.lhs, rhs, SIZES, group_offset=OFFSET, existing=np.nan_to_num(poison))
        s = starts(SIZES)
        inactive = np.r_[0:s[OFFSET], s[OFFSET + G_LOCAL]:M]
        np.testing.assert_array_equal(out[inactive], poison[inactive])
        active = np.r_[s[OFFSET]:s[OFFSET + G_LOCAL]]
        assert_close(self, out[active], ref[active], self.bound[active])

    def test_accumulate(self):
        rhs = self.rhs[OFFSET:OFFSET + G_LOCAL]
        base = randn(rng(3), M, N)
        out = gmmgen.gmm(self.lhs, rhs, SIZES, group_offset=OFFSET, existing_out=base.copy(),
                         accumulate=True)
        ref = ref_gmm(self.lhs, rhs, SIZES, group_offset=OFFSET, existing=base, accumulate=True)
        assert_close(self, out, ref, self.bound + np.abs(base))

    def test_tiling_override(self):
        # K=200 is not a multiple of tk=64, N=77 not one of tn=32, M=150 not one of tm=32.
        out = gmmgen.gmm(self.lhs, self.rhs, SIZES, tiling=(32, 64, 32))
        assert_close(self, out, ref_gmm(self.lhs, self.rhs, SIZES), self.bound)

    def test_strided_inputs(self):
        # A row stride is read in place: the call sees the slice's own address.
        wide = randn(rng(4), M, K + 9)
        lhs = wide[:, :K]
        self.assertEqual(gmmgen._view_of(lhs)[0], lhs.__array_interface__["data"][0])
        self.assertEqual(gmmgen._view_of(lhs)[3], K + 9)
        out = gmmgen.gmm(lhs, self.rhs, SIZES)
        assert_close(self, out, ref_gmm(lhs, self.rhs, SIZES),
                     ref_gmm(np.abs(lhs), np.abs(self.rhs), SIZES))
        # A column-major lhs has no row stride: it is copied, with the same result.
        fortran = np.asfortranarray(self.lhs)
        np.testing.assert_array_equal(gmmgen.gmm(fortran, self.rhs, SIZES),
                                      gmmgen.gmm(self.lhs, self.rhs, SIZES))

    def test_inputs_past_a_line_and_outputs_on_one(self):
        # numpy starts large arrays 16 bytes past a 64-byte line; the package's own outputs start
        # on one (as torch's do), whatever its inputs' placement, and the product is the same.
        def past_a_line(a):
            raw = np.empty(a.nbytes + 80, np.uint8)
            start = -raw.ctypes.data % 64 + 16
            b = raw[start:start + a.nbytes].view(a.dtype).reshape(a.shape)
            b[...] = a
            return b
        lhs, rhs = past_a_line(gmmgen.to_bf16(self.lhs)), past_a_line(gmmgen.to_bf16(self.rhs))
        self.assertEqual((lhs.ctypes.data % 64, rhs.ctypes.data % 64), (16, 16))
        out = gmmgen.gmm(lhs, rhs, SIZES)
        self.assertEqual(out.ctypes.data % 64, 0)
        self.assertEqual((out.shape, out.dtype), ((M, N), np.float32))
        self.assertTrue(out.flags.c_contiguous and out.flags.writeable)
        assert_close(self, out, ref_gmm(gmmgen.from_bf16(lhs), gmmgen.from_bf16(rhs), SIZES),
                     self.bound)

    def test_group_sizes_kinds(self):
        # Lists and int64 arrays are converted; the result does not change.
        a = gmmgen.gmm(self.lhs, self.rhs, SIZES)
        b = gmmgen.gmm(self.lhs, self.rhs, [int(v) for v in SIZES])
        c = gmmgen.gmm(self.lhs, self.rhs, SIZES.astype(np.int64))
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, c)

    def test_bf16_helpers(self):
        x = np.array([1.0, -2.5, 1 + 2**-8, 1 + 3 * 2**-8, 3.4e38, np.inf, np.nan, 0.0, -0.0],
                     dtype=np.float32)
        b = gmmgen.to_bf16(x)
        # Ties go to even: 1 + 2^-8 -> 1, 1 + 3 * 2^-8 -> 1 + 2^-6; huge values round to inf.
        np.testing.assert_array_equal(b[:4], [0x3F80, 0xC020, 0x3F80, 0x3F82])
        self.assertEqual(b[4], 0x7F80)
        back = gmmgen.from_bf16(b)
        self.assertTrue(np.isinf(back[5]) and np.isnan(back[6]))
        self.assertEqual(np.signbit(back[8]), True)


if __name__ == "__main__":
    unittest.main()
