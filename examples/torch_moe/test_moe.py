"""The torch MoE layer (moe.py) against the dense float64 reference: the output and the
gradients of the input and of both expert weights (and the router) agree within
max|got - ref| <= 1e-5 * max|ref| each (the kernels accumulate in f32)."""

import unittest

import torch

from moe import dense_reference, moe_layer


class TorchMoeTest(unittest.TestCase):
    def test_forward_backward_match_dense_float64(self):
        torch.manual_seed(7)
        T, D, FF, E, K = 96, 64, 48, 8, 2
        x = torch.randn(T, D)
        w_router = torch.randn(D, E) / D**0.5
        w_in = torch.randn(E, D, 2 * FF) / D**0.5
        w_out = torch.randn(E, FF, D) / FF**0.5
        dout = torch.randn(T, D)

        def run(dtype, layer):
            params = [t.detach().to(dtype).clone().requires_grad_() for t in (x, w_router, w_in, w_out)]
            out = layer(*params, K)
            out.backward(dout.to(dtype))
            return [out.detach()] + [p.grad for p in params]

        got = run(torch.float32, moe_layer)
        ref = run(torch.float64, dense_reference)
        for name, g, r in zip(("out", "dx", "dw_router", "dw_in", "dw_out"), got, ref):
            self.assertEqual(g.shape, r.shape, name)
            self.assertEqual(g.dtype, torch.float32, name)
            err = (g.double() - r).abs().max().item()
            scale = r.abs().max().item()
            self.assertGreater(scale, 0, name)
            self.assertLessEqual(err, 1e-5 * scale, f"{name}: max error {err} vs max {scale}")


if __name__ == "__main__":
    unittest.main()
