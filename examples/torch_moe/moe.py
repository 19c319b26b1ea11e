"""A Mixture-of-Experts feed-forward layer in PyTorch on gmmgen's grouped matmuls (CPU).

    out = moe_layer(x, w_router, w_in, w_out, top_k)

Route: each token picks its top_k experts by router logit, weighted by the softmax of those
logits. Sort: the (token, expert) pairs are ordered by expert, so each expert's rows are
contiguous (group_sizes[e] rows for expert e). Experts (ExpertsFn, a torch.autograd.Function):
h = gmm(xs, w_in) with w_in [E, D, 2F] holding each expert's w0 | w1, a = silu(h0) * h1 (h1 is
the gate), y = gmm(a, w_out) with w_out [E, F, D]. Unsort and combine: each token sums its
experts' rows, times the routing weights. The backward of the experts is gmmgen.gmm_vjp (dlhs
by gmm against the transposed weights, dw by tgmm); routing, sorting and combining are plain
torch ops that autograd differentiates (so the router weights get their gradient too).
"""

import torch
import torch.nn.functional as F

import gmmgen


class ExpertsFn(torch.autograd.Function):
    """y = gmm(silu(h0) * h1, w_out), [h0 | h1] = gmm(xs, w_in), on rows sorted by expert."""

    @staticmethod
    def forward(ctx, xs, w_in, w_out, group_sizes, group_offset=0):
        # w_in, w_out hold the experts group_offset .. group_offset + G_local - 1 of the
        # len(group_sizes) experts (a shard's, under expert parallelism).
        h = gmmgen.gmm(xs, w_in, group_sizes, group_offset=group_offset)  # [rows, 2F]
        f = w_out.shape[1]
        h0, h1 = h[:, :f], h[:, f:]
        a = F.silu(h0) * h1  # [rows, F]
        ctx.save_for_backward(xs, w_in, w_out, group_sizes, h)
        ctx.group_offset = group_offset
        return gmmgen.gmm(a, w_out, group_sizes, group_offset=group_offset)

    @staticmethod
    def backward(ctx, dy):
        xs, w_in, w_out, group_sizes, h = ctx.saved_tensors
        f = w_out.shape[1]
        h0, h1 = h[:, :f], h[:, f:]
        s = torch.sigmoid(h0)
        silu = h0 * s
        a = silu * h1
        # da = dy @ w_out[e]^T per expert row, dw_out = tgmm(a, dy).
        da, dw_out = gmmgen.gmm_vjp(dy, a, w_out, group_sizes, group_offset=ctx.group_offset)
        dh = torch.cat([da * h1 * (s * (1 + h0 * (1 - s))), da * silu], dim=1)
        dxs, dw_in = gmmgen.gmm_vjp(dh, xs, w_in, group_sizes, group_offset=ctx.group_offset)
        return dxs, dw_in, dw_out, None, None


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
    ys = ExpertsFn.apply(xs, w_in, w_out, group_sizes)
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
