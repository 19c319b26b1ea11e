"""The torch MoE layer (moe.py) with its experts split over torch.distributed ranks (expert
parallelism), and a check that it equals the single-process layer.

Rank r holds experts [r * E_local, (r + 1) * E_local) (w_in_local [E_local, D, 2F], w_out_local
[E_local, F, D]) and its own tokens. ShardedMoE routes them, sends each (token, expert) pair's
row to the rank that holds the expert with all_to_all_single (dispatch; the per-expert counts
travel first, so every rank knows what it receives), runs its experts on the rows it received
with group_offset = r * E_local (moe.expert_ffn: gmmgen.differentiable_gmm), sends the rows
back the same way (combine) and sums each token's experts weighted by the routing. The row exchanges are
torch.distributed.nn.functional.all_to_all_single, which autograd differentiates (its backward
is the reverse exchange), so loss.backward() gives each rank the gradients of its experts in full
and its share of the router's (all-reduce it, as data parallelism would). Exchanges are ragged:
a rank sends exactly the rows routed to each peer.

    PYTHONPATH=build-main/python /usr/bin/python3 examples/torch_moe/distributed.py

runs the check on 2 and 4 ranks of this machine (gloo; `torchrun` or several hosts work the same:
only init_process_group's arguments change; NCCL where the tensors live on GPUs).
"""

import os
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.nn.functional import all_to_all_single as exchange

import gmmgen
from moe import expert_ffn, moe_layer, route


class ShardedMoE:
    """The MoE layer over the ranks of `group`, n_experts experts split evenly among them."""

    def __init__(self, n_experts, top_k=2, group=None):
        self.group = group
        self.world = dist.get_world_size(group)
        self.rank = dist.get_rank(group)
        every = [torch.zeros(1, dtype=torch.int64) for _ in range(self.world)]
        dist.all_gather(every, torch.tensor([n_experts]), group=group)
        every = [int(e) for e in every]
        if len(set(every)) != 1:
            said = ", ".join(f"E={e} on rank {r}" for r, e in enumerate(every))
            raise ValueError(f"the ranks disagree on the number of experts: {said}; every rank "
                             f"must build the layer with the same E")
        if n_experts % self.world != 0:
            raise ValueError(f"E={n_experts} experts cannot be split over {self.world} ranks: the "
                             f"number of experts must be a multiple of the world size")
        self.experts, self.top_k = n_experts, top_k
        self.e_local = n_experts // self.world
        self.first = self.rank * self.e_local

    def dispatch(self, x, w_router):
        """Routes this rank's tokens x [T, D] and exchanges the rows. Returns (rows received,
        sorted by local expert; group_sizes [E]; what combine needs)."""
        d = x.shape[1]
        experts, weights = route(x, w_router, self.top_k)
        flat = experts.reshape(-1)  # pair j: token j // top_k
        order = torch.argsort(flat, stable=True)
        counts = torch.bincount(flat, minlength=self.experts)
        incoming = torch.empty_like(counts)  # [source, local expert]: rows coming here
        dist.all_to_all_single(incoming, counts, group=self.group)
        send = counts.view(self.world, self.e_local).sum(1).tolist()
        recv = incoming.view(self.world, self.e_local).sum(1).tolist()
        rows = exchange(x.new_empty(sum(recv), d), x[order // self.top_k], recv, send,
                        group=self.group)
        ids = torch.arange(self.e_local).repeat(self.world).repeat_interleave(incoming)
        by_expert = torch.argsort(ids, stable=True)
        group_sizes = torch.zeros(self.experts, dtype=torch.int32)
        group_sizes[self.first:self.first + self.e_local] = incoming.view(self.world, -1).sum(0)
        return rows[by_expert], group_sizes, (by_expert, order, weights, send, recv)

    def compute(self, rows, group_sizes, w_in_local, w_out_local):
        if w_in_local.shape[0] != self.e_local or w_out_local.shape[0] != self.e_local:
            raise ValueError(f"rank {self.rank} holds E_local={self.e_local} experts; got w_in "
                             f"{tuple(w_in_local.shape)}, w_out {tuple(w_out_local.shape)}")
        return expert_ffn(rows, w_in_local, w_out_local, group_sizes, self.first)

    def combine(self, ys, state):
        by_expert, order, weights, send, recv = state
        back = exchange(ys.new_empty(sum(send), ys.shape[1]),
                        torch.empty_like(ys).index_copy(0, by_expert, ys), send, recv,
                        group=self.group)
        y_pairs = torch.empty_like(back).index_copy(0, order, back)
        return (y_pairs.view(weights.shape[0], self.top_k, -1) * weights.unsqueeze(-1)).sum(1)

    def __call__(self, x, w_router, w_in_local, w_out_local):
        """x [T_rank, D] -> [T_rank, D]; w_router [D, E] on every rank."""
        rows, group_sizes, state = self.dispatch(x, w_router)
        return self.combine(self.compute(rows, group_sizes, w_in_local, w_out_local), state)


def launch(world, fn, *args):
    """Runs fn(rank, world, *args) in `world` processes of a gloo group on this machine (the
    rendezvous through a file in a private temporary folder); re-raises a rank's exception."""
    with tempfile.TemporaryDirectory(prefix="torch-moe-") as tmp:
        mp.spawn(_rank_main, args=(world, f"file://{tmp}/rendezvous", fn, args), nprocs=world)


def _rank_main(rank, world, init, fn, args):
    threads = max(1, (os.cpu_count() or 1) // world)  # the ranks share this machine's cores
    torch.set_num_threads(threads)
    gmmgen.configure(num_threads=threads)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    try:
        fn(rank, world, *args)
    finally:
        dist.destroy_process_group()


def problem(tokens=96, d=64, f=48, experts=8, top_k=2, seed=7, empty=3):
    """The same random inputs on every rank: x, w_router, w_in, w_out, dout, top_k. Expert
    `empty` receives no token (every token's feature 0 is 1, its router weight there -100)."""
    g = torch.Generator().manual_seed(seed)
    rnd = lambda *shape: torch.randn(*shape, generator=g)
    x, w_router = rnd(tokens, d), rnd(d, experts) / d**0.5
    x[:, 0] = 1.0
    w_router[0, empty] = -100.0
    return (x, w_router, rnd(experts, d, 2 * f) / d**0.5, rnd(experts, f, d) / f**0.5,
            rnd(tokens, d), top_k)


# f32 against f32 with rows summed in another order (tgmm) and routing weights that reach the
# router through an all-reduce: ~34 units of f32 rounding (2^-24) of the largest result.
TOL = 2e-6
NAMES = ("out", "dx", "dw_router", "dw_in", "dw_out")


def single_and_sharded(rank, world, pr):
    """(single-process results, this rank's share of them, sharded results): out, dx, dw_router,
    dw_in, dw_out."""
    x, w_router, w_in, w_out, dout, top_k = pr
    full = [t.clone().requires_grad_() for t in (x, w_router, w_in, w_out)]
    out = moe_layer(*full, top_k)
    out.backward(dout)
    single = [out.detach()] + [t.grad for t in full]
    layer = ShardedMoE(w_in.shape[0], top_k)
    rows = slice(rank * x.shape[0] // world, (rank + 1) * x.shape[0] // world)
    mine = slice(layer.first, layer.first + layer.e_local)
    params = [t.clone().requires_grad_() for t in (x[rows], w_router, w_in[mine], w_out[mine])]
    out = layer(*params)
    out.backward(dout[rows])
    dist.all_reduce(params[1].grad)  # the router's gradient: the sum of every rank's share
    sharded = [out.detach()] + [t.grad for t in params]
    share = [single[0][rows], single[1][rows], single[2], single[3][mine], single[4][mine]]
    return single, share, sharded


def worst(got, want):
    """max|got - want| / (TOL * max|want|) of each result (1.0 is the bound)."""
    return [float((g - w).abs().max() / (TOL * w.abs().max())) for g, w in zip(got, want)]


def _check_rank(rank, world, pr, queue):
    _, share, sharded = single_and_sharded(rank, world, pr)
    queue.put((rank, worst(sharded, share)))


def check(world, pr):
    """The worst share of the bound of each result over the ranks, sharded vs single process."""
    queue = mp.get_context("spawn").SimpleQueue()
    launch(world, _check_rank, pr, queue)
    ratios = [queue.get()[1] for _ in range(world)]
    return [max(r[i] for r in ratios) for i in range(len(NAMES))]


def main(argv):
    ok = True
    pr = problem()
    for world in [int(w) for w in (argv[0] if argv else "2,4").split(",")]:
        ratios = check(world, pr)
        ok &= max(ratios) <= 1.0
        print(f"{world} ranks vs 1 process: worst {100 * max(ratios):.2f}% of the bound ("
              f"{', '.join(f'{n} {100 * r:.1f}%' for n, r in zip(NAMES, ratios))})"
              f"{'' if max(ratios) <= 1.0 else '  FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
