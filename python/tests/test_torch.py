"""torch tensors in and out of gmmgen, without copies (DLPack)."""

import unittest

import numpy as np
import torch

import gmmgen
from common import (G, G_LOCAL, K, M, N, OFFSET, SIZES, assert_close, ref_gmm, ref_tgmm, rng,
                    starts)


def t(a):
    return torch.from_numpy(np.ascontiguousarray(a))


class TorchTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        r = rng(41)
        cls.lhs = r.standard_normal((M, K)).astype(np.float32)
        cls.rhs = r.standard_normal((G, K, N)).astype(np.float32)
        cls.bound = ref_gmm(np.abs(cls.lhs), np.abs(cls.rhs), SIZES)

    def test_f32_zero_copy(self):
        lhs, rhs = t(self.lhs), t(self.rhs)
        # The call reads the tensors' own memory.
        self.assertEqual(gmmgen._view_of(lhs)[0], lhs.data_ptr())
        self.assertEqual(gmmgen._view_of(rhs)[0], rhs.data_ptr())
        out = gmmgen.gmm(lhs, rhs, torch.from_numpy(SIZES))
        self.assertIsInstance(out, torch.Tensor)
        self.assertEqual(out.dtype, torch.float32)
        assert_close(self, out, ref_gmm(self.lhs, self.rhs, SIZES), self.bound)

    def test_requires_grad_and_int64_sizes(self):
        lhs = t(self.lhs).requires_grad_()
        self.assertEqual(gmmgen._view_of(lhs)[0], lhs.data_ptr())
        out = gmmgen.gmm(lhs, t(self.rhs), torch.from_numpy(SIZES.astype(np.int64)))
        assert_close(self, out, ref_gmm(self.lhs, self.rhs, SIZES), self.bound)

    def test_bf16(self):
        lhs, rhs = t(self.lhs).bfloat16(), t(self.rhs).bfloat16()
        ref = ref_gmm(lhs.float().numpy(), rhs.float().numpy(), SIZES)
        out = gmmgen.gmm(lhs, rhs, SIZES, preferred_element_type=torch.bfloat16)
        self.assertEqual(out.dtype, torch.bfloat16)
        assert_close(self, out, ref, self.bound, "bf16")
        # Same bits as the numpy uint16 route.
        via_numpy = gmmgen.gmm(gmmgen.to_bf16(lhs.float().numpy()),
                               gmmgen.to_bf16(rhs.float().numpy()), SIZES,
                               preferred_element_type="bf16")
        np.testing.assert_array_equal(out.view(torch.int16).numpy().view(np.uint16), via_numpy)

    def test_existing_out_in_place(self):
        rhs = t(self.rhs[OFFSET:OFFSET + G_LOCAL])
        poison = torch.full((M, N), 1234.5)
        existing = poison.clone()
        ptr = existing.data_ptr()
        out = gmmgen.gmm(t(self.lhs), rhs, SIZES, group_offset=OFFSET, existing_out=existing)
        self.assertIs(out, existing)
        self.assertEqual(out.data_ptr(), ptr)
        s = starts(SIZES)
        self.assertTrue(bool((out[:s[OFFSET]] == 1234.5).all()))
        self.assertTrue(bool((out[s[OFFSET + G_LOCAL]:] == 1234.5).all()))
        ref = ref_gmm(self.lhs, rhs.numpy(), SIZES, group_offset=OFFSET,
                      existing=poison.numpy())
        assert_close(self, out, ref, self.bound)

    def test_tgmm_and_vjp(self):
        r = rng(42)
        dout = r.standard_normal((M, N)).astype(np.float32)
        drhs = gmmgen.tgmm(t(self.lhs), t(dout), SIZES)
        self.assertIsInstance(drhs, torch.Tensor)
        assert_close(self, drhs, ref_tgmm(self.lhs, dout, SIZES),
                     ref_tgmm(np.abs(self.lhs), np.abs(dout), SIZES))
        dlhs, drhs2 = gmmgen.gmm_vjp(t(dout), t(self.lhs), t(self.rhs), SIZES)
        self.assertIsInstance(dlhs, torch.Tensor)
        torch.testing.assert_close(drhs2, drhs, rtol=0, atol=0)
        assert_close(self, dlhs, ref_gmm(dout, self.rhs, SIZES, transpose_rhs=True),
                     ref_gmm(np.abs(dout), np.abs(self.rhs), SIZES, transpose_rhs=True))

    def test_differentiable_gmm_gradients(self):
        # The shard's groups (OFFSET..), rhs as stored and transposed; autograd against float64.
        dout = rng(43).standard_normal((M, N)).astype(np.float32)
        w = self.rhs[OFFSET:OFFSET + G_LOCAL]
        for tr in (False, True):
            stored = np.ascontiguousarray(w.transpose(0, 2, 1)) if tr else w
            lhs, rhs = t(self.lhs).requires_grad_(), t(stored).requires_grad_()
            out = gmmgen.differentiable_gmm(lhs, rhs, torch.from_numpy(SIZES), group_offset=OFFSET,
                                            transpose_rhs=tr)
            out.backward(t(dout))
            assert_close(self, out, ref_gmm(self.lhs, stored, SIZES, OFFSET, tr),
                         ref_gmm(np.abs(self.lhs), np.abs(stored), SIZES, OFFSET, tr), what="out")
            assert_close(self, lhs.grad, ref_gmm(dout, stored, SIZES, OFFSET, not tr),
                         ref_gmm(np.abs(dout), np.abs(stored), SIZES, OFFSET, not tr), what="dlhs")
            dw = ref_tgmm(self.lhs, dout, SIZES, OFFSET, G_LOCAL)
            dw_bound = ref_tgmm(np.abs(self.lhs), np.abs(dout), SIZES, OFFSET, G_LOCAL)
            if tr:
                dw, dw_bound = dw.transpose(0, 2, 1), dw_bound.transpose(0, 2, 1)
            assert_close(self, rhs.grad, dw, dw_bound, what="drhs")
        with self.assertRaisesRegex(TypeError, "differentiable_gmm takes torch tensors"):
            gmmgen.differentiable_gmm(self.lhs, self.rhs, SIZES)

    def test_non_contiguous_is_copied(self):
        lhs_t = t(np.ascontiguousarray(self.lhs.T)).t()  # [M, K] with column-major strides
        out = gmmgen.gmm(lhs_t, t(self.rhs), SIZES)
        assert_close(self, out, ref_gmm(self.lhs, self.rhs, SIZES), self.bound)

    def test_other_device_refused(self):
        lhs = torch.empty((M, K), device="meta")
        with self.assertRaisesRegex(ValueError, "lhs is on device meta"):
            gmmgen.gmm(lhs, t(self.rhs), SIZES)

        class OnGpu:  # a DLPack producer on CUDA (device type 2)
            def __dlpack_device__(self):
                return (2, 0)

            def __dlpack__(self, stream=None):
                raise AssertionError("must not be exported")

        with self.assertRaisesRegex(ValueError, "rhs is on device"):
            gmmgen.gmm(t(self.lhs), OnGpu(), SIZES)


if __name__ == "__main__":
    unittest.main()
