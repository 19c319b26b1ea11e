"""The GIL is released while kernels run: another Python thread makes progress during a call."""

import threading
import time
import unittest

import numpy as np

import gmmgen
from common import G, randn, rng

# Wider than the other tests' shapes so that one call lasts long enough on a fast core:
# 2 * 1024 * 1024 flops per row, 64k rows are 137 GFLOP.
K = N = 1024


class GilTest(unittest.TestCase):
    @staticmethod
    def ticks_during(lhs, rhs, sizes):
        """Seconds of one call and the ticks a 2 ms ticking thread made during it."""
        ticks, stop = [0], threading.Event()

        def tick():
            while not stop.is_set():
                time.sleep(0.002)
                ticks[0] += 1

        thread = threading.Thread(target=tick)
        thread.start()
        time.sleep(0.02)
        before = ticks[0]
        start = time.perf_counter()
        gmmgen.gmm(lhs, rhs, sizes)
        elapsed = time.perf_counter() - start
        during = ticks[0] - before
        stop.set()
        thread.join()
        return elapsed, during

    def test_other_thread_runs_during_a_kernel(self):
        gmmgen.configure(num_threads=1)  # the kernel on one core, the ticking thread on another
        try:
            rhs = randn(rng(61), G, K, N)
            # The values do not matter here: the call must only last long enough (>= 0.25 s,
            # growing M up to 64k rows on a fast machine).
            m = 2048
            # Compiled first: a call that compiles would end the calibration at once.
            gmmgen.gmm(np.full((m, K), 0.5, np.float32), rhs, np.full(G, m // G, np.int32))
            while True:
                lhs = np.full((m, K), 0.5, np.float32)
                sizes = np.full(G, m // G, np.int32)
                start = time.perf_counter()
                gmmgen.gmm(lhs, rhs, sizes)
                if time.perf_counter() - start >= 0.25 or m >= 65536:
                    break
                m *= 2
            # A thread that needs the GIL every 2 ms: while the kernel holds the GIL it gets at
            # most a tick or two (at the switch before the call); released, one per 2 ms. A call
            # that held the GIL would never show more, so a noisy host (a call much faster than
            # calibrated, or the ticking thread's core taken away for a while) gets three tries.
            tries = []
            for _ in range(3):
                elapsed, during = self.ticks_during(lhs, rhs, sizes)
                tries.append(f"{during} ticks in a {elapsed:.3f} s call")
                if elapsed >= 0.1 and during >= 10:
                    break
            else:
                self.fail("; ".join(tries))
        finally:
            gmmgen.configure()


if __name__ == "__main__":
    unittest.main()
