"""The expert-parallel torch MoE layer (distributed.py) on 2 gloo ranks of this machine against
the single-process layer: the output and the gradients of the input, the router and both expert
weights, within max|got - want| <= TOL * max|want| each, with an expert that receives no token;
and the errors for ranks that disagree on E or an E the ranks do not divide."""

import unittest

import torch
import torch.distributed as dist

import distributed
from moe import route


def _bad_layers(rank, world, queue):
    messages = []
    for experts in ([5, 5], [8, 4]):
        try:
            distributed.ShardedMoE(experts[rank])
            messages.append(None)
        except ValueError as e:
            messages.append(str(e))
    queue.put(messages)


class DistributedMoeTest(unittest.TestCase):
    def test_two_ranks_match_one_process(self):
        pr = distributed.problem()
        experts, _ = route(pr[0], pr[1], pr[5])
        self.assertEqual(set(range(8)) - set(experts.ravel().tolist()), {3})
        for name, ratio in zip(distributed.NAMES, distributed.check(2, pr)):
            self.assertLessEqual(ratio, 1.0, f"{name}: {100 * ratio:.1f}% of the bound")

    def test_ranks_must_agree_on_the_experts_and_divide_them(self):
        queue = torch.multiprocessing.get_context("spawn").SimpleQueue()
        distributed.launch(2, _bad_layers, queue)
        for messages in (queue.get(), queue.get()):
            self.assertEqual(messages[0], "E=5 experts cannot be split over 2 ranks: the number "
                             "of experts must be a multiple of the world size")
            self.assertEqual(messages[1], "the ranks disagree on the number of experts: E=8 on "
                             "rank 0, E=4 on rank 1; every rank must build the layer with the "
                             "same E")


if __name__ == "__main__":
    unittest.main()
