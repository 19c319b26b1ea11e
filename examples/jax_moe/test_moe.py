"""The JAX MoE layer's tests: one device against the dense float64 reference, 4 host devices
(experts split, tokens exchanged by all_to_all) against one device, forward and a training step,
with experts that receive no token; and the errors for a mesh that does not split the experts.
The gmm-gen to emit with: $GMM_GEN, else the one on PATH."""

import check  # first: it sets JAX_PLATFORMS and the 4 host devices before JAX loads

import os
import shutil
import tempfile
import unittest

import moe


class JaxMoeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        gmm_gen = os.environ.get("GMM_GEN") or shutil.which("gmm-gen")
        if not gmm_gen:
            raise unittest.SkipTest("no gmm-gen: set GMM_GEN")
        cls.dir = tempfile.TemporaryDirectory(prefix="jax-moe-test-")
        # Experts 3 and 6 get no token: on 4 devices, one of device 1's two and one of device 3's.
        cls.pr = check.problem(empty=(3, 6))
        cls.mods = moe.emit_modules(gmm_gen, cls.dir.name, cls.pr["d"], cls.pr["f"], cls.pr["e"],
                                    [1, 4])
        cls.one = check.results(check.single(cls.pr, cls.mods[1]), cls.pr)

    @classmethod
    def tearDownClass(cls):
        cls.dir.cleanup()

    def assert_within(self, got, want):
        for name, ratio in zip(check.NAMES, check.worst(got, want)):
            self.assertLessEqual(ratio, 1.0, f"{name}: {100 * ratio:.1f}% of the bound")

    def test_experts_without_tokens(self):
        experts, _ = moe.route(self.pr["x"], self.pr["p"]["gate"], self.pr["bias"],
                               self.pr["top_k"], 1.0)
        used = set(experts.ravel().tolist())
        self.assertTrue({3, 6}.isdisjoint(used) and len(used) == self.pr["e"] - 2, used)

    def test_one_device_matches_dense_float64(self):
        self.assert_within(self.one, check.reference(self.pr))

    def test_four_devices_match_one_device(self):
        got = check.results(check.sharded(self.pr, moe.make_mesh(4), self.mods[4]), self.pr)
        self.assert_within(got, self.one)

    def test_mesh_must_split_the_experts(self):
        with self.assertRaisesRegex(ValueError, r"E=6 experts cannot be split over 4 devices: "
                                    r"the number of experts must be a multiple"):
            moe.module_specs(64, 32, 6, [4])
        pr = self.pr
        with self.assertRaisesRegex(ValueError, r"G_local=8; the layer needs G=E=8 and "
                                    r"G_local=E/devices=2"):
            moe.moe_layer_ep(pr["p"], pr["x"], pr["bias"], mesh=moe.make_mesh(4),
                             mods=self.mods[1], top_k=pr["top_k"])
        with self.assertRaisesRegex(ValueError, r"T=62 tokens cannot be split over 4 devices"):
            moe.moe_layer_ep(pr["p"], pr["x"][:62], pr["bias"], mesh=moe.make_mesh(4),
                             mods=self.mods[4], top_k=pr["top_k"])


if __name__ == "__main__":
    unittest.main()
