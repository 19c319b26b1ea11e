"""A Mixture-of-Experts feed-forward layer in PyTorch on gmmgen's grouped matmuls (CPU).

    out = moe_layer(x, w_router, w_in, w_out, top_k)

Route: each token picks its top_k experts by router logit, weighted by the softmax of those
logits. Sort: the (token, expert) pairs are ordered by expert, so each expert's rows are
contiguous (group_sizes[e] rows for expert e). Experts (expert_ffn):
h = gmm(xs, w_in) with w_in [E, D, 2F] holding each expert's w0 | w1, a = silu(h0) * h1 (h1 is
the gate), y = gmm(a, w_out) with w_out [E, F, D], both gmmgen.differentiable_gmm, whose
backward is gmmgen.gmm_vjp (dlhs by gmm against the transposed weights, dw by tgmm). Unsort and
combine: each token sums its experts' rows, times the routing weights. Routing, sorting, the
activation and combining are plain torch ops that autograd differentiates (so the router
weights get their gradient too).
"""

import torch
import torch.nn.functional as F

import gmmgen


def expert_ffn(xs, w_in, w_out, group_sizes, group_offset=0):
    """y = gmm(silu(h0) * h1, w_out), [h0 | h1] = gmm(xs, w_in), on rows sorted by expert.
    w_in, w_out hold the experts group_offset .. group_offset + G_local - 1 of the
    len(group_sizes) experts (a shard's, under expert parallelism)."""
    h = gmmgen.differentiable_gmm(xs, w_in, group_sizes, group_offset=group_offset)  # [rows, 2F]
    f = w_out.shape[1]
    a = F.silu(h[:, :f]) * h[:, f:]  # [rows, F]
    return gmmgen.differentiable_gmm(a, w_out, group_sizes, group_offset=group_offset)


def route(x, w_router, top_k):
    """(expert ids [T, k], routing weights [T, k]) of each token: its top_k experts and the
    softmax of their logits."""
    logits = x @ w_router
    top, experts = torch.topk(logits, top_k, dim=1)
    return experts, torch.softmax(top, dim=1)


def moe_layer(x, w_router, w_in, w_out, top_k=2):
    """x [T, D] -> [T, D]. w_router [D, E], w_in [E, D, 2F] (w0 | w1), w_out [E, F, D]."""
    tokens, experts_n = x.shape[0], w_router.shape[1]
    experts, weights = route(x, w_router, top_k)
    flat = experts.reshape(-1)  # pair p = token p // top_k, expert flat[p]
    order = torch.argsort(flat, stable=True)  # pairs sorted by expert
    group_sizes = torch.bincount(flat, minlength=experts_n).to(torch.int32)
    xs = x[order // top_k]  # [T * k, D], expert-contiguous
    ys = expert_ffn(xs, w_in, w_out, group_sizes)
    y_pairs = torch.empty_like(ys).index_copy(0, order, ys)  # unsort: back to pair order
    y_pairs = y_pairs.view(tokens, top_k, -1)
    return (y_pairs * weights.unsqueeze(-1)).sum(dim=1)


def dense_reference(x, w_router, w_in, w_out, top_k=2):
    """The same layer computed densely, every expert on every token, in x's dtype (float64 for
    the test): out[t] = sum over t's top_k experts e of p[t, e] * (silu(x w0_e) * (x w1_e)) wo_e."""
    f = w_out.shape[1]
    experts, weights = route(x, w_router, top_k)
    p = torch.zeros(x.shape[0], w_router.shape[1], dtype=x.dtype).scatter(1, experts, weights)
    h = torch.einsum("td,edf->etf", x, w_in)
    a = F.silu(h[..., :f]) * h[..., f:]
    y = torch.einsum("etf,efd->etd", a, w_out)
    return torch.einsum("te,etd->td", p, y)


if __name__ == "__main__":
    import time

    torch.manual_seed(0)
    T, D, FF, E, K = 2048, 512, 768, 8, 2
    x = torch.randn(T, D, requires_grad=True)
    w_router = (torch.randn(D, E) / D**0.5).requires_grad_()
    w_in = (torch.randn(E, D, 2 * FF) / D**0.5).requires_grad_()
    w_out = (torch.randn(E, FF, D) / FF**0.5).requires_grad_()
    for step in range(3):
        start = time.perf_counter()
        out = moe_layer(x, w_router, w_in, w_out, K)
        out.square().mean().backward()
        print(f"step {step}: forward + backward {time.perf_counter() - start:.3f} s "
              f"(T={T}, D={D}, F={FF}, E={E}, top_k={K})")
