"""Times the expert-parallel torch MoE layer (distributed.py) on 1, 2 and 4 gloo ranks of this
machine: tokens per second (all ranks' tokens over the slowest rank's step) of the forward pass
and of forward + backward, the forward split into dispatch (routing, sorting, the exchange),
expert matmuls and combine, and the bytes each rank sends per step (forward: the rows routed to
other ranks and back, plus the per-expert counts) against the analytic all-to-all volume for
uniform routing, T_rank * top_k * (n - 1) / n rows each way.

    PYTHONPATH=build-main/python /usr/bin/python3 examples/torch_moe/bench_distributed.py

The ranks share the machine's cores (each gets cores / ranks threads): the figures show the cost
of the exchange and that every world size runs, not a speed-up.
"""

import argparse
import statistics
import sys
import time

import torch
import torch.distributed as dist

import distributed


def _timed(fn, reps):
    fn()  # warm up: compiles the kernels
    times = []
    for _ in range(reps):
        dist.barrier()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _bench_rank(rank, world, args, queue):
    x, w_router, w_in, w_out, dout, top_k = distributed.problem(
        args.tokens, args.d, args.f, args.experts, args.top_k, empty=0)
    x[:, 0] = torch.randn(x.shape[0])  # no empty expert here: routing as random as it comes
    layer = distributed.ShardedMoE(args.experts, top_k)
    rows = slice(rank * args.tokens // world, (rank + 1) * args.tokens // world)
    mine = slice(layer.first, layer.first + layer.e_local)
    params = [t.clone().requires_grad_() for t in (x[rows], w_router, w_in[mine], w_out[mine])]
    state = {}

    def dispatch():
        with torch.no_grad():
            state["d"] = layer.dispatch(params[0], params[1])

    def compute():
        with torch.no_grad():
            state["c"] = layer.compute(state["d"][0], state["d"][1], params[2], params[3])

    def combine():
        with torch.no_grad():
            layer.combine(state["c"], state["d"][2])

    def forward():
        with torch.no_grad():
            layer(*params)

    def step():
        for p in params:
            p.grad = None
        layer(*params).backward(dout[rows])

    dispatch(), compute()
    t = [_timed(f, args.reps) for f in (forward, step, dispatch, compute, combine)]
    send = state["d"][2][3]
    sent = 2 * (sum(send) - send[rank]) * args.d * 4 + (world - 1) * layer.e_local * 8
    all_t = [torch.zeros(len(t), dtype=torch.float64) for _ in range(world)]
    dist.all_gather(all_t, torch.tensor(t, dtype=torch.float64))
    all_sent = [torch.zeros(1, dtype=torch.float64) for _ in range(world)]
    dist.all_gather(all_sent, torch.tensor([float(sent)], dtype=torch.float64))
    if rank == 0:
        queue.put((torch.stack(all_t).max(0).values.tolist(),
                   statistics.mean(float(s) for s in all_sent)))


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--d", type=int, default=512)
    ap.add_argument("--f", type=int, default=256)
    ap.add_argument("--experts", type=int, default=8)
    ap.add_argument("--top-k", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--ranks", default="1,2,4")
    args = ap.parse_args(argv)
    print(f"T={args.tokens}, D={args.d}, F={args.f}, E={args.experts}, top_k={args.top_k}, f32, "
          f"median of {args.reps} (slowest rank), torch {torch.__version__}, gloo")
    print("| ranks | fwd tokens/s | fwd+bwd tokens/s | dispatch ms | experts ms | combine ms "
          "| sent/rank fwd KiB | analytic KiB | sent/analytic |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for world in [int(w) for w in args.ranks.split(",")]:
        queue = torch.multiprocessing.get_context("spawn").SimpleQueue()
        distributed.launch(world, _bench_rank, args, queue)
        (fwd, step, dispatch, compute, combine), sent = queue.get()
        analytic = 2 * args.tokens // world * args.top_k * (world - 1) / world * args.d * 4
        ratio = f"{sent / analytic:.2f}" if analytic else "-"
        print(f"| {world} | {args.tokens / fwd:,.0f} | {args.tokens / step:,.0f} | "
              f"{1e3 * dispatch:.1f} | {1e3 * compute:.1f} | {1e3 * combine:.1f} | "
              f"{sent / 1024:,.0f} | {analytic / 1024:,.0f} | {ratio} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
