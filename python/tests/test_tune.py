"""gmmgen.tune runs the tuner in this process: it returns the tuning table it wrote, reports each
variant to a progress callable, stops on Ctrl-C writing nothing, and names bad arguments."""

import os
import signal
import tempfile
import unittest

import gmmgen
from common import G, K, N, SIZES

SPEC = f"op=gmm,lhs=f32,rhs=f32,out=f32,k={K},n={N},g={G}"
DIST = "sizes:" + ",".join(str(v) for v in SIZES)


class TuneTest(unittest.TestCase):
    def heuristic_space(self):
        # The tiling the other tests use (already in the test cache): one candidate.
        from gmmgen import _gmmgen
        spec = _gmmgen.gmm_spec((0, 0, [150, K], 0), (0, 0, [G, K, N], 0), SIZES.ctypes.data, G,
                                (0, 0, [150, N], 0), False, 0, None, False, False, None, None)
        tiling = dict(kv.split("=") for kv in spec.split(","))
        return tiling, f"tm={tiling['tm']};tk={tiling['tk']};tn={tiling['tn']}"

    def test_tune_writes_a_table_and_reports_progress(self):
        tiling, space = self.heuristic_space()
        seen = []
        with tempfile.TemporaryDirectory() as d:
            table = os.path.join(d, "table.json")
            got = gmmgen.tune(SPEC, m=150, dist=DIST, space=space, jobs=1, reps=1, threads=1,
                              table=table, progress=seen.append)
            self.assertTrue(os.path.exists(table))
        self.assertIn("entries", got)
        entry = got["entries"][0]
        self.assertEqual(entry["problem"]["k"], K)
        self.assertEqual(entry["tiling"]["tm"], int(tiling["tm"]))
        self.assertGreater(entry["gflops"], 0)
        # One candidate (the heuristic's tiling) timed, then timed again as the reference only
        # when there are others: one report.
        self.assertEqual(len(seen), 1, seen)
        self.assertEqual(seen[0]["state"], "ok")
        self.assertTrue(seen[0]["heuristic"])
        self.assertEqual(seen[0]["tiling"], tuple(int(tiling[k]) for k in ("tm", "tk", "tn")))
        self.assertGreater(seen[0]["gflops"], 0)

    def test_ctrl_c_stops_the_sweep_and_writes_nothing(self):
        _, space = self.heuristic_space()
        space = space.split(";tk=")[0] + ",8,16;tk=" + space.split(";tk=")[1]  # three tm values
        for how in ("signal", "raise"):
            seen = []

            def progress(v):
                seen.append(v)
                if how == "signal":
                    os.kill(os.getpid(), signal.SIGINT)  # as Ctrl-C would
                else:
                    raise KeyboardInterrupt

            with tempfile.TemporaryDirectory() as d:
                table = os.path.join(d, "table.json")
                with self.assertRaises(KeyboardInterrupt):
                    gmmgen.tune(SPEC, m=150, dist=DIST, space=space, jobs=1, reps=1, threads=1,
                                table=table, progress=progress)
                self.assertFalse(os.path.exists(table), how)
            self.assertEqual(len(seen), 1, (how, seen))

    def test_bad_arguments_name_the_argument(self):
        cases = [({"m": 0}, "m=0"), ({"reps": 0}, "reps=0"), ({"jobs": 0}, "jobs=0"),
                 ({"threads": -1}, "threads=-1"), ({"budget": 0}, "budget=0"),
                 ({"space": "tm=0"}, "space 'tm=0': tm value '0'"),
                 ({"isa": "sse9"}, "sse9"), ({"dist": "pareto"}, "--dist pareto"),
                 ({"progress": 3}, "progress must be a callable")]
        for kwargs, message in cases:
            with self.assertRaisesRegex(ValueError, message):
                gmmgen.tune(SPEC, **kwargs)
        with self.assertRaisesRegex(ValueError, "k=0"):
            gmmgen.tune("op=gmm,lhs=f32,rhs=f32,out=f32,k=0,n=8,g=2", m=16)
        with self.assertRaisesRegex(ValueError, "spec must be"):
            gmmgen.tune(42)
        with self.assertRaisesRegex(ValueError, "target=pallas: tune times C\\+\\+ kernels"):
            gmmgen.tune("op=gmm,lhs=f32,rhs=f32,out=f32,k=32,n=128,g=4,target=pallas")


if __name__ == "__main__":
    unittest.main()
