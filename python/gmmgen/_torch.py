"""gmm as a torch.autograd.Function (differentiable_gmm). torch is imported only when called."""

from . import _arrays

_function = None


def differentiable_gmm(lhs, rhs, group_sizes, preferred_element_type=None, tiling=None,
                       group_offset=0, transpose_rhs=False):
    """gmm(lhs, rhs, group_sizes, ...) on float torch tensors, differentiable in lhs and rhs:
    autograd runs gmm_vjp backward (dlhs by gmm against rhs read transposed, zero outside the
    active groups; drhs by tgmm), with no transposed copy. tiling: None, (tm, tk, tn) of the
    forward, or 9 ints (forward, dlhs, drhs). group_sizes is not differentiated."""
    if not (_arrays.is_torch(lhs) and _arrays.is_torch(rhs)):
        raise TypeError("differentiable_gmm takes torch tensors lhs and rhs, got "
                        f"{type(lhs).__name__} and {type(rhs).__name__} (numpy: gmm and gmm_vjp)")
    if tiling is not None and len(tiling) not in (3, 9):
        raise ValueError(f"tiling must be None, 3 ints (forward) or 9 (forward, dlhs, drhs), got "
                         f"{len(tiling)}")
    return _autograd_function().apply(lhs, rhs, group_sizes, preferred_element_type, tiling,
                                      group_offset, transpose_rhs)


def _autograd_function():
    global _function
    if _function is None:
        import torch

        from . import gmm, gmm_vjp

        class DifferentiableGmm(torch.autograd.Function):
            @staticmethod
            def forward(ctx, lhs, rhs, group_sizes, preferred, tiling, group_offset, transpose):
                ctx.save_for_backward(lhs, rhs)
                ctx.args = (group_sizes, tiling, group_offset, transpose)
                return gmm(lhs, rhs, group_sizes, preferred,
                           None if tiling is None else tuple(tiling[:3]), group_offset,
                           transpose_rhs=transpose)

            @staticmethod
            def backward(ctx, dout):
                lhs, rhs = ctx.saved_tensors
                group_sizes, tiling, group_offset, transpose = ctx.args
                full = None if tiling is None or len(tiling) != 9 else tuple(tiling)
                dlhs, drhs = gmm_vjp(dout.contiguous(), lhs, rhs, group_sizes, full,
                                     group_offset, transpose)
                return dlhs, drhs, None, None, None, None, None

        _function = DifferentiableGmm
    return _function
