"""gmmgen.quantize / dequantize (the runtime's quantizers, docs/quantization.md) and quantized
operands in gmm."""

import unittest

import numpy as np

import gmmgen
from common import G, K, M, N, SIZES, assert_close, randn, ref_gmm, rng


class QuantizeTest(unittest.TestCase):
    def test_i8_tensor_round_trip(self):
        x = randn(rng(31), M, K)
        q = gmmgen.quantize(x, "i8", "tensor")
        self.assertEqual((q.codes.dtype, q.codes.shape, q.scales.shape), (np.int8, (M, K), (1, 1)))
        s = np.float32(np.abs(x).max() / 127)
        self.assertEqual(q.scales[0, 0], s)
        np.testing.assert_array_equal(q.codes, np.clip(np.rint(x / np.float64(s)), -127, 127))
        back = gmmgen.dequantize(q)
        self.assertEqual((back.dtype, back.shape), (np.float32, x.shape))
        self.assertLessEqual(np.abs(back - x).max(), s / 2 * (1 + 1e-5))

    def test_i4_block_round_trip(self):
        # [M, K] quantized along K in blocks of 32 (the last one partial: K = 200), two codes
        # per byte.
        x = randn(rng(32), M, K)
        q = gmmgen.quantize(x, "i4", "block:32")
        self.assertEqual(q.codes.shape, (M, K // 2))
        self.assertEqual(q.scales.shape, (M, (K + 31) // 32))
        self.assertEqual(q.codes.ctypes.data % 64, 0)  # codes start on a line, as torch's do
        blocks = [np.abs(x[:, b:b + 32]).max(axis=1) / 7 for b in range(0, K, 32)]
        np.testing.assert_allclose(q.scales, np.stack(blocks, axis=1).astype(np.float32),
                                   rtol=1e-7)
        err = np.abs(gmmgen.dequantize(q) - x)
        per_elem = np.repeat(q.scales, 32, axis=1)[:, :K]
        self.assertTrue((err <= per_elem / 2 * (1 + 1e-5)).all())

    def test_weights_channel_round_trip(self):
        # Expert weights [G, K, N]: one scale per expert and output column, contracting K.
        w = randn(rng(33), G, K, N)
        q = gmmgen.quantize(w, "i8", "channel")
        self.assertEqual(q.scales.shape, (G, 1, N))
        np.testing.assert_allclose(q.scales[:, 0, :],
                                   (np.abs(w).max(axis=1) / 127).astype(np.float32), rtol=1e-7)
        err = np.abs(gmmgen.dequantize(q) - w)
        self.assertTrue((err <= q.scales / 2 * (1 + 1e-5)).all())

    def test_fixed_calibration_clips(self):
        x = randn(rng(34), 16, 64) * 4
        q = gmmgen.quantize(x, "i8", "channel", calibration="fixed:-1:2")
        # One scale per row, stored as one row of scales (the runtime's vector layout).
        np.testing.assert_array_equal(q.scales, np.full((1, 16), np.float32(2 / 127)))
        # Clipped to [-1, 2] first, then rounded to a code: within half a step of the range.
        back = gmmgen.dequantize(q)
        step = 2 / 127
        self.assertLessEqual(back.max(), 2 + 1e-6)
        self.assertGreaterEqual(back.min(), -1 - step / 2 - 1e-6)
        self.assertLessEqual(np.abs(back - np.clip(x, -1, 2)).max(), step / 2 * (1 + 1e-5))

    def test_bad_arguments(self):
        x = randn(rng(35), 8, 64)
        with self.assertRaisesRegex(ValueError, "dtype='bf16' must be a quantized dtype"):
            gmmgen.quantize(x, "bf16")
        with self.assertRaisesRegex(ValueError, "x has dtype"):
            gmmgen.quantize(x.astype(np.float16), "i8")
        with self.assertRaisesRegex(ValueError, "block"):
            gmmgen.quantize(x, "i8", "block:24")
        bad = x.copy()
        bad[3, 5] = np.inf
        with self.assertRaisesRegex(ValueError, "finite"):
            gmmgen.quantize(bad, "i8")
        # x is read once, its values checked as they are encoded into arrays of the call's own:
        # the first value that is not finite is still named, in a stack of experts large enough
        # to be split over threads, under either calibration.
        big = randn(rng(36), 4, 256, 160)
        big[2, 200, 7] = np.nan
        big[2, 230, 1] = np.inf
        big[3, 1, 1] = np.inf
        for scheme, calibration in (("block:32", "absmax"), ("channel", "fixed:-1:1")):
            with self.assertRaisesRegex(ValueError, r"x\[200, 7\]=nan is not finite"):
                gmmgen.quantize(big, "i4", scheme, calibration=calibration)

    def test_tampered_quantized_is_refused(self):
        """A Quantized whose fields were changed after quantize: every field checked against
        the others before a byte is read (too few scales once read out of bounds)."""
        r = rng(38)
        lhs = randn(r, M, K)
        good = gmmgen.quantize(randn(r, G, K, N), "i8", "channel")

        def tampered(**fields):
            q = gmmgen.quantize(randn(rng(39), G, K, N), "i8", "channel")
            for name, value in fields.items():
                setattr(q, name, value)
            return q

        cases = [
            (dict(scales=np.ones(1, np.float32)), r"rhs.scales has shape \(1,\), expected"),
            (dict(scales=good.scales.astype(np.float16)), "rhs.scales must be float32"),
            (dict(scales=None), "rhs.scales is None: scheme channel needs scales"),
            (dict(scales=good.scales[:, :, :-1]), "rhs.scales has shape"),
            (dict(scales=[1.0] * 5), "rhs.scales must be a numpy array"),
            (dict(codes=good.codes[:, :-1]), "rhs.codes has shape"),
            (dict(codes=good.codes.astype(np.int16)), "rhs.codes must be int8 or uint8"),
            (dict(dtype="i9"), "rhs.dtype='i9' must be a quantized dtype"),
            (dict(dtype="bf16"), "rhs.dtype='bf16' must be a quantized dtype"),
            (dict(dtype=None), "rhs.dtype=None must be a quantized dtype"),
            (dict(scheme=3), "rhs.scheme=3 must be a string"),
            (dict(axis=2), "rhs.axis=2 must be 0"),
            (dict(shape=(G, K)), "rhs.codes has shape"),
            (dict(shape=(G, -K, N)), "rhs.shape=.* must be 2 or 3 sizes >= 0"),
        ]
        for fields, pattern in cases:
            with self.subTest(fields=list(fields)):
                with self.assertRaisesRegex(ValueError, pattern):
                    gmmgen.gmm(lhs, tampered(**fields), SIZES)
                with self.assertRaisesRegex(ValueError, pattern.replace("rhs", "q")):
                    gmmgen.dequantize(tampered(**fields))
        # scheme none (an fp8 cast) has no scales: passing some is an error too.
        cast = gmmgen.quantize(randn(r, G, K, N), "f8e4m3", "none")
        cast.scales = np.ones((G, 1, N), np.float32)
        with self.assertRaisesRegex(ValueError, "q.scales must be None: scheme none"):
            gmmgen.dequantize(cast)

    def test_gmm_with_quantized_weights(self):
        r = rng(36)
        lhs, w = randn(r, M, K), randn(r, G, K, N)
        q = gmmgen.quantize(w, "i8", "channel")
        out = gmmgen.gmm(lhs, q, SIZES)
        deq = gmmgen.dequantize(q)
        assert_close(self, out, ref_gmm(lhs, deq, SIZES), ref_gmm(np.abs(lhs), np.abs(deq), SIZES))

    def test_gmm_int8_by_int8(self):
        r = rng(37)
        ql = gmmgen.quantize(randn(r, M, K), "i8", "block:32")  # lhs along K
        qw = gmmgen.quantize(randn(r, G, K, N), "i8", "channel")  # weights along K
        out = gmmgen.gmm(ql, qw, SIZES)
        dl, dw = gmmgen.dequantize(ql), gmmgen.dequantize(qw)
        assert_close(self, out, ref_gmm(dl, dw, SIZES), ref_gmm(np.abs(dl), np.abs(dw), SIZES))
        # Quantized along the wrong axis for its role: refused before anything runs.
        wrong = gmmgen.quantize(randn(r, M, K), "i8", "channel", axis=0)
        with self.assertRaisesRegex(ValueError, "lhs was quantized along rows"):
            gmmgen.gmm(wrong, qw, SIZES)

    def test_gmm_quantizes_f32_and_bf16_activations_in_the_call(self):
        # quantize_lhs: the call quantizes f32 or bf16 lhs itself, bit for bit as quantize() (of
        # the f32 values) + gmm.
        r = rng(38)
        x = randn(r, M, K)
        xb = gmmgen.to_bf16(x)
        qw = gmmgen.quantize(randn(r, G, K, N), "i8", "channel")
        for q in [("i8", "block:32"), ("i8", "channel", "fixed:-1.5:2"), ("i8", "tensor")]:
            for lhs, values in [(x, x), (xb, gmmgen.from_bf16(xb))]:
                want = gmmgen.gmm(gmmgen.quantize(values, q[0], q[1],
                                                  calibration=(q + ("absmax",))[2]), qw, SIZES)
                np.testing.assert_array_equal(gmmgen.gmm(lhs, qw, SIZES, quantize_lhs=q), want)
        # Refused: a value that is not finite (named; existing_out untouched), lhs that is not
        # f32 activations, a quantize_lhs that is not (dtype, scheme[, calibration]).
        bad = x.copy()
        bad[3, 5] = np.inf
        keep = np.full((M, N), -3.0, np.float32)
        with self.assertRaisesRegex(ValueError, r"x\[3, 5\]=inf is not finite"):
            gmmgen.gmm(bad, qw, SIZES, existing_out=keep, quantize_lhs=("i8", "block:32"))
        np.testing.assert_array_equal(keep, np.full((M, N), -3.0, np.float32))
        bad_b = xb.copy()
        bad_b[7, 1] = 0x7fc0  # NaN
        with self.assertRaisesRegex(ValueError, r"x\[7, 1\]=nan is not finite"):
            gmmgen.gmm(bad_b, qw, SIZES, existing_out=keep, quantize_lhs=("i8", "channel"))
        np.testing.assert_array_equal(keep, np.full((M, N), -3.0, np.float32))
        with self.assertRaisesRegex(ValueError, "lhs must be f32 or bf16 activations"):
            gmmgen.gmm(gmmgen.quantize(x, "i8", "block:32"), qw, SIZES,
                       quantize_lhs=("i8", "block:32"))
        with self.assertRaisesRegex(ValueError, "must be \\(dtype, scheme\\)"):
            gmmgen.gmm(x, qw, SIZES, quantize_lhs="i8@block:32")
        with self.assertRaisesRegex(ValueError, "must be \\(dtype, scheme\\)"):
            gmmgen.gmm(x, qw, SIZES, quantize_lhs=8)
        with self.assertRaisesRegex(ValueError, "must be a quantized dtype"):
            gmmgen.gmm(x, qw, SIZES, quantize_lhs=("bf16", "block:32"))


if __name__ == "__main__":
    unittest.main()
