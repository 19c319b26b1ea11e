"""gmmgen.tune runs `gmm-gen tune` and returns the tuning table it wrote."""

import os
import tempfile
import unittest

import gmmgen
from common import G, K, N, SIZES

SPEC = f"op=gmm,lhs=f32,rhs=f32,out=f32,k={K},n={N},g={G}"


class TuneTest(unittest.TestCase):
    def test_tune_writes_a_table(self):
        # One candidate: the tiling the other tests use (already in the test cache).
        from gmmgen import _gmmgen
        spec = _gmmgen.gmm_spec((0, 0, [150, K], 0), (0, 0, [G, K, N], 0), SIZES.ctypes.data, G,
                                (0, 0, [150, N], 0), False, 0, None, False, False, None, None)
        tiling = dict(kv.split("=") for kv in spec.split(","))
        space = f"tm={tiling['tm']};tk={tiling['tk']};tn={tiling['tn']}"
        with tempfile.TemporaryDirectory() as d:
            table = os.path.join(d, "table.json")
            got = gmmgen.tune(SPEC, m=150, dist="sizes:" + ",".join(str(v) for v in SIZES),
                              space=space, jobs=1, reps=1, threads=1, table=table)
            self.assertIn("entries", got)
            entry = got["entries"][0]
            self.assertEqual(entry["problem"]["k"], K)
            self.assertEqual(entry["tiling"]["tm"] if isinstance(entry["tiling"], dict)
                             else entry["tiling"][0], int(tiling["tm"]))
            self.assertGreater(entry["gflops"], 0)

    def test_tune_failure_is_a_runtime_error(self):
        with self.assertRaisesRegex(RuntimeError, "k=0"):
            gmmgen.tune("op=gmm,lhs=f32,rhs=f32,out=f32,k=0,n=8,g=2", m=16)
        with self.assertRaisesRegex(ValueError, "spec must be"):
            gmmgen.tune(42)


if __name__ == "__main__":
    unittest.main()
