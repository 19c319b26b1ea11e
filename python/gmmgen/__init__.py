"""gmmgen: grouped matrix multiplication (MoE) kernels from gmm-gen, on the CPU.

    import numpy as np, gmmgen
    out = gmmgen.gmm(lhs, rhs, group_sizes)          # lhs [M, K], rhs [G, K, N] -> [M, N]
    drhs = gmmgen.tgmm(lhs, dout, group_sizes)       # -> [G, K, N]
    dlhs, drhs = gmmgen.gmm_vjp(dout, lhs, rhs, group_sizes)
    out = gmmgen.differentiable_gmm(x, w, group_sizes)  # torch: autograd runs gmm_vjp

Arrays: numpy arrays, torch tensors (CPU) or any CPU object with __dlpack__, read in place (no
copy) when their layout has a row stride (see gmmgen._arrays); results are numpy arrays, or
torch tensors when lhs is one. bf16 is numpy uint16 bit patterns (to_bf16 / from_bf16) or
torch.bfloat16. Kernels are compiled on first use and cached on disk (cache_dir()); calls
release the GIL while kernels run. Bad arguments raise ValueError (TypeError for a non-array),
compile and cache failures RuntimeError (CompileError, CacheError, JitDisabledError), each
with the runtime's message. The semantics are docs/operations.md's (megablox's, stricter).
"""

import numpy as np

from . import _arrays
from ._arrays import DTYPE_BITS, DTYPE_CODES
from ._gmmgen import CacheError, CompileError, JitDisabledError
from ._gmmgen import __version__
from . import _gmmgen
from ._torch import differentiable_gmm
from ._tune import tune

__all__ = ["gmm", "tgmm", "gmm_vjp", "differentiable_gmm", "quantize", "dequantize", "Quantized", "tune", "cache_dir",
           "configure", "stats", "to_bf16", "from_bf16", "CompileError", "CacheError",
           "JitDisabledError", "__version__"]

_FLOAT_TYPES = ("f32", "bf16", "f16")
_OUT_TYPES = ("f32", "bf16", "f16")


# ---- Runtime -----------------------------------------------------------------------------------

def configure(cache_dir=None, num_threads=None, jit=None):
    """Replaces the process's runtime: kernel cache folder (default GMMGEN_CACHE_DIR, else
    $XDG_CACHE_HOME/gmm-gen, else ~/.cache/gmm-gen), worker threads (default GMMGEN_NUM_THREADS,
    else the cores) and whether kernels may be compiled (default: unless GMMGEN_DISABLE_JIT=1).
    Without a call, the runtime is made from the environment on first use."""
    _gmmgen.configure(None if cache_dir is None else str(cache_dir), int(num_threads or 0), jit)


def cache_dir():
    """The folder of the on-disk kernel cache."""
    return _gmmgen.cache_dir()


def stats():
    """The runtime's counters: lookups, hits per level, compiles, compile seconds, ..."""
    return _gmmgen.stats()


# ---- bf16 --------------------------------------------------------------------------------------

def to_bf16(x):
    """float values -> bf16: numpy uint16 bit patterns (round to nearest even, NaN kept NaN), or
    a torch.bfloat16 tensor for a torch tensor."""
    if _arrays.is_torch(x):
        return x.to(_arrays.torch_module().bfloat16)
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1)))
    out = (rounded >> np.uint32(16)).astype(np.uint16)
    nan = np.isnan(bits.view(np.float32))
    out[nan] = ((bits[nan] >> np.uint32(16)) | np.uint32(0x40)).astype(np.uint16)
    return out


def from_bf16(x):
    """bf16 (numpy uint16 bit patterns, or a torch.bfloat16 tensor) -> float32, exactly."""
    if _arrays.is_torch(x):
        return x.float()
    a = np.asarray(x)
    if a.dtype != np.uint16:
        raise ValueError(f"x must hold bf16 bit patterns (uint16), got dtype {a.dtype}")
    return (a.astype(np.uint32) << np.uint32(16)).view(np.float32)


# ---- Quantized operands ------------------------------------------------------------------------

class Quantized:
    """A quantized operand (docs/quantization.md): codes and f32 scales, as quantize() makes them.

    codes: [rows, bytes per row] (or [G, rows, ...]) of int8 (i8) or uint8 (other dtypes; i4/nf4
    two per byte, t2 four per byte, packed along the row); scales: the runtime's layout for
    `scheme` and `axis` (None for scheme "none"); shape: the logical shape; axis: the
    contraction axis of each matrix (0 rows, 1 columns)."""

    __slots__ = ("codes", "scales", "dtype", "scheme", "axis", "shape")

    def __init__(self, codes, scales, dtype, scheme, axis, shape):
        self.codes, self.scales, self.dtype = codes, scales, dtype
        self.scheme, self.axis, self.shape = scheme, axis, tuple(shape)

    def __repr__(self):
        return (f"Quantized(dtype={self.dtype}, scheme={self.scheme}, shape={self.shape}, "
                f"axis={'rows' if self.axis == 0 else 'cols'})")


def _matrix_axis(axis, ndim):
    """quantize's axis argument -> the contraction axis of each matrix (0 rows, 1 columns)."""
    if axis is None:
        return 1 if ndim == 2 else 0  # lhs [M, K] along K; rhs [G, K, N] along K
    if not isinstance(axis, (int, np.integer)) or not -2 <= axis < ndim or \
            (axis >= 0 and axis < ndim - 2):
        raise ValueError(f"axis={axis!r} must be one of the last two axes of a {ndim}-D x "
                         f"({ndim - 2}, {ndim - 1}, -2 or -1)")
    return axis % ndim - (ndim - 2)


def quantize(x, dtype="i8", scheme="tensor", axis=None, calibration="absmax"):
    """Quantizes f32 x [rows, cols] (or a stack [G, rows, cols] of expert weights) into a
    Quantized: codes of `dtype` (i8, i4, nf4, t2, f8e4m3, f8e5m2) and f32 scales by `scheme`
    (tensor, channel, block:B, block:BxC; none: fp8 cast), `calibration` absmax or
    fixed:LO:HI. `axis` is the contraction axis: by default the last one of a 2-D x (gmm lhs
    [M, K]) and axis 1 of a 3-D x (gmm rhs [G, K, N]); use 0 for tgmm operands and -1 for
    transposed weights [G, N, K]. A 3-D x is quantized matrix by matrix (scales stacked
    [G, ...], the layout gmm reads), except scheme tensor: one scale for all of x."""
    if dtype not in DTYPE_CODES or dtype in ("f32", "bf16", "f16"):
        raise ValueError(f"dtype={dtype!r} must be a quantized dtype: i8, i4, nf4, t2, f8e4m3 "
                         f"or f8e5m2")
    op = _arrays.describe(x, "x")
    if op.dtype != "f32":
        raise ValueError(f"x has dtype {op.dtype}: quantize reads float32")
    if len(op.shape) not in (2, 3):
        raise ValueError(f"x must be 2-D [rows, cols] or 3-D [G, rows, cols], got shape "
                         f"{op.shape}")
    if not isinstance(scheme, str) or not isinstance(calibration, str):
        raise ValueError("scheme and calibration must be strings, e.g. 'block:128', 'absmax'")
    mat_axis = _matrix_axis(axis, len(op.shape))
    rows, cols = op.shape[-2], op.shape[-1]
    batch = op.shape[0] if len(op.shape) == 3 else 1
    whole = len(op.shape) == 2 or scheme == "tensor"  # one call over every row of x
    q_rows = rows * batch if whole else rows
    srows, scols = _gmmgen.scale_shape(scheme, mat_axis, q_rows, cols)  # checks the scheme
    code = DTYPE_CODES[dtype]
    codes_ld = _gmmgen.packed_codes_ld(code, cols)
    row_bytes = codes_ld * DTYPE_BITS[dtype] // 8
    kind = _arrays.kind_of(x)
    codes = _arrays.codes_array(kind, (*op.shape[:-1], row_bytes), dtype)
    if srows * scols == 0:
        scales, scale_shape = None, None
    else:
        scale_shape = (srows, scols) if whole and len(op.shape) == 2 else \
            (1, 1) if whole else (batch, srows, scols)
        scales = _arrays.empty(kind, scale_shape, "f32")
    ld = _arrays.row_stride(op.shape, op.strides) or cols
    cbase = _arrays.address(codes)
    sbase = _arrays.address(scales) if scales is not None else 0
    if whole:
        _gmmgen.quantize(op.addr, q_rows, cols, ld, code, scheme, mat_axis, calibration,
                         cbase, codes_ld, sbase)
    else:
        for g in range(batch):
            _gmmgen.quantize(op.addr + 4 * g * rows * ld, rows, cols, ld, code, scheme, mat_axis,
                             calibration, cbase + g * rows * row_bytes, codes_ld,
                             sbase + 4 * g * srows * scols)
    return Quantized(codes, scales, dtype, scheme, mat_axis, op.shape)


def dequantize(q):
    """The f32 values decode(code) * scale of a Quantized, shaped like the quantized x."""
    if not isinstance(q, Quantized):
        raise TypeError(f"q must be a gmmgen.Quantized, got {type(q).__name__}")
    lay = _layout(q, "q")
    codes = _codes(q, lay, "q")
    scales = _scales(q, lay, "q")
    rows, cols = q.shape[-2], q.shape[-1]
    x = _arrays.empty(_arrays.kind_of(q.codes), q.shape, "f32")
    cbase, sbase = _arrays.address(codes), _arrays.address(scales) if scales is not None else 0
    if lay.whole:
        _gmmgen.dequantize(cbase, lay.codes_ld, sbase, lay.q_rows, cols, lay.code, q.scheme,
                           q.axis, _arrays.address(x))
    else:
        for g in range(lay.batch):
            _gmmgen.dequantize(cbase + g * rows * lay.row_bytes, lay.codes_ld,
                               sbase + 4 * g * lay.srows * lay.scols, rows, cols, lay.code,
                               q.scheme, q.axis, _arrays.address(x) + 4 * g * rows * cols)
    return x


class _Layout:
    """What a Quantized's fields imply: the codes' and the scales' shapes (scale_shape None for
    scheme none), and the per-call quantities dequantize and the kernels read them with."""
    __slots__ = ("code", "codes_ld", "row_bytes", "codes_shape", "whole", "batch", "q_rows",
                 "srows", "scols", "scale_shape")


def _layout(q, name):
    """Checks a Quantized's dtype, scheme, axis and shape (a ValueError naming the field) and
    returns its _Layout."""
    if not isinstance(q.dtype, str) or q.dtype not in DTYPE_CODES or \
            q.dtype in ("f32", "bf16", "f16"):
        raise ValueError(f"{name}.dtype={q.dtype!r} must be a quantized dtype: i8, i4, nf4, t2, "
                         f"f8e4m3 or f8e5m2")
    if not isinstance(q.scheme, str):
        raise ValueError(f"{name}.scheme={q.scheme!r} must be a string, e.g. 'block:128'")
    if q.axis not in (0, 1) or isinstance(q.axis, bool):
        raise ValueError(f"{name}.axis={q.axis!r} must be 0 (rows) or 1 (columns)")
    shape = q.shape
    if len(shape) not in (2, 3) or \
            not all(isinstance(d, (int, np.integer)) and d >= 0 for d in shape):
        raise ValueError(f"{name}.shape={shape!r} must be 2 or 3 sizes >= 0")
    lay = _Layout()
    rows, cols = int(shape[-2]), int(shape[-1])
    lay.batch = int(shape[0]) if len(shape) == 3 else 1
    lay.whole = len(shape) == 2 or q.scheme == "tensor"  # one call over every row
    lay.q_rows = rows * lay.batch if lay.whole else rows
    lay.srows, lay.scols = _gmmgen.scale_shape(q.scheme, q.axis, lay.q_rows, cols)
    lay.code = DTYPE_CODES[q.dtype]
    lay.codes_ld = _gmmgen.packed_codes_ld(lay.code, cols)
    lay.row_bytes = lay.codes_ld * DTYPE_BITS[q.dtype] // 8
    lay.codes_shape = (*shape[:-1], lay.row_bytes)
    lay.scale_shape = None if lay.srows * lay.scols == 0 else \
        (lay.srows, lay.scols) if lay.whole and len(shape) == 2 else \
        (1, 1) if lay.whole else (lay.batch, lay.srows, lay.scols)
    return lay


def _codes(q, lay, name):
    """A Quantized's codes, checked (shape, one byte per element) and made contiguous."""
    if not hasattr(q.codes, "shape") or not hasattr(q.codes, "dtype"):
        raise ValueError(f"{name}.codes must be a numpy array or torch tensor, got "
                         f"{type(q.codes).__name__}")
    codes = _contiguous(q.codes, lay.codes_shape, f"{name}.codes")
    if (codes.dtype not in (np.int8, np.uint8) if isinstance(codes, np.ndarray)
            else codes.dtype not in (_arrays.torch_module().int8, _arrays.torch_module().uint8)):
        raise ValueError(f"{name}.codes must be int8 or uint8 (one byte per element), got "
                         f"{codes.dtype}")
    return codes


def _scales(q, lay, name):
    """A Quantized's scales, checked against its scheme (shape as quantize makes it, float32)
    and made contiguous; None for scheme none."""
    if lay.scale_shape is None:
        if q.scales is not None:
            raise ValueError(f"{name}.scales must be None: scheme {q.scheme} has no scales")
        return None
    if q.scales is None:
        raise ValueError(f"{name}.scales is None: scheme {q.scheme} needs scales of shape "
                         f"{lay.scale_shape}")
    if not hasattr(q.scales, "shape") or not hasattr(q.scales, "dtype"):
        raise ValueError(f"{name}.scales must be a numpy array or torch tensor, got "
                         f"{type(q.scales).__name__}")
    scales = _contiguous(q.scales, lay.scale_shape, f"{name}.scales")
    if (scales.dtype != np.float32 if isinstance(scales, np.ndarray)
            else scales.dtype != _arrays.torch_module().float32):
        raise ValueError(f"{name}.scales must be float32, got {scales.dtype}")
    return scales


def _contiguous(a, shape, name):
    """A Quantized's array, checked against the shape its Quantized implies and made
    contiguous (codes and scales are read packed)."""
    if tuple(a.shape) != tuple(shape):
        raise ValueError(f"{name} has shape {tuple(a.shape)}, expected {tuple(shape)}")
    if _arrays.is_torch(a):
        if a.device.type != "cpu":
            raise ValueError(f"{name} is on device {a.device}: gmmgen runs on the CPU")
        return a.detach().contiguous()
    return np.ascontiguousarray(a)


class _Arg:
    """An operand of a kernel call: its view, the dtype it has for the spec and its scales."""

    def __init__(self, x, name, allowed, writable=False):
        self.keep = []
        if isinstance(x, Quantized):
            if writable:
                raise ValueError(f"{name} cannot be a Quantized")
            lay = _layout(x, name)
            codes = _codes(x, lay, name)
            scales = _scales(x, lay, name)
            self.keep += [codes, scales]
            self.dtype, self.shape, self.quant = x.dtype, x.shape, x
            self.view = (_arrays.address(codes), lay.code, list(x.shape), lay.codes_ld)
            self.scales = None if scales is None else \
                (x.scheme, _arrays.address(scales), 0)
            self.array = x.codes
            return
        op = _arrays.describe(x, name, writable=writable)
        self.keep.append(op)
        if op.dtype not in allowed:
            what = "holds codes: pass a gmmgen.Quantized" if op.dtype == "u8" else \
                f"must be one of {', '.join(allowed)}"
            raise ValueError(f"{name} has dtype {op.dtype}: {name} {what}")
        if len(op.shape) not in (2, 3):
            raise ValueError(f"{name} must be 2-D or 3-D, got shape {op.shape}")
        self.dtype, self.shape, self.quant, self.scales = op.dtype, op.shape, None, None
        self.view = op.view()
        self.array = op.array


def _tiling(t, count, name="tiling"):
    if t is None:
        return None
    try:
        values = [int(v) for v in t]
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a tuple of {count} ints, got {t!r}") from None
    if len(values) != count:
        raise ValueError(f"{name} must have {count} values, got {len(values)}")
    if any(v < 0 for v in values):
        raise ValueError(f"{name}={tuple(values)} must not be negative")
    return values


def _out_type(preferred, existing, existing_name="existing_out"):
    if existing is not None:
        if preferred is not None and _arrays.dtype_name(preferred, "preferred_element_type") \
                != existing.dtype:
            raise ValueError(f"preferred_element_type={preferred} differs from {existing_name} "
                             f"dtype {existing.dtype}")
        return existing.dtype
    out = "f32" if preferred is None else \
        _arrays.dtype_name(preferred, "preferred_element_type")
    if out not in _OUT_TYPES:
        raise ValueError(f"preferred_element_type={out} must be f32, bf16 or f16")
    return out


def _check_axis(arg, want, name, role):
    if arg.quant is not None and arg.quant.axis != want:
        raise ValueError(f"{name} was quantized along {'rows' if arg.quant.axis == 0 else 'cols'}"
                         f", but {role} contracts its {'rows' if want == 0 else 'cols'} "
                         f"(quantize(..., axis=...))")


_IN_TYPES = ("f32", "bf16", "f16", "i8")


# ---- Products ----------------------------------------------------------------------------------

def _check_gmm_ranks(l, r):
    """A gmm's lhs [M, K] and rhs [G_local, K, N] (or [G_local, N, K]): their ranks."""
    if len(l.shape) != 2:
        raise ValueError(f"lhs must be 2-D [M, K], got shape {tuple(l.shape)}")
    if len(r.shape) != 3:
        raise ValueError(f"rhs must be 3-D [G_local, K, N] (or [G_local, N, K] with "
                         f"transpose_rhs), got shape {tuple(r.shape)}")


def _lhs_quantization(q, lhs):
    """gmm's quantize_lhs as the module takes it: (dtype code, scheme, calibration), or None."""
    if q is None:
        return None
    if isinstance(q, str) or not isinstance(q, (tuple, list)) or not 2 <= len(q) <= 3:
        raise ValueError(f"quantize_lhs={q!r} must be (dtype, scheme) or (dtype, scheme, "
                         f"calibration), e.g. ('i8', 'block:32')")
    dtype, scheme, calibration = (tuple(q) + ("absmax",))[:3]
    if dtype not in DTYPE_CODES or dtype in ("f32", "bf16", "f16"):
        raise ValueError(f"quantize_lhs dtype={dtype!r} must be a quantized dtype: i8, i4, nf4, "
                         f"t2, f8e4m3 or f8e5m2")
    if lhs.quant is not None or lhs.dtype not in ("f32", "bf16"):
        raise ValueError("quantize_lhs: lhs must be f32 or bf16 activations (the call quantizes "
                         f"them), not {'a Quantized' if lhs.quant is not None else lhs.dtype}")
    return (DTYPE_CODES[dtype], str(scheme), str(calibration))


def gmm(lhs, rhs, group_sizes, preferred_element_type=None, tiling=None, group_offset=0,
        existing_out=None, transpose_rhs=False, *, accumulate=False, quantize_lhs=None):
    """out [M, N]: out[r] = lhs[r] @ rhs[g - group_offset] for the rows r of each active group
    g (rhs[j]^T with transpose_rhs), accumulated in f32 and rounded once to
    preferred_element_type (f32 by default; bf16, f16; numpy or torch dtypes too).

    lhs [M, K]; rhs [G_local, K, N] ([G_local, N, K] with transpose_rhs); group_sizes [G] ints
    >= 0 with sum <= M; the active groups are group_offset .. group_offset + G_local - 1. Rows
    outside them are zero, or, with existing_out [M, N], keep existing_out's values: the result
    is then written into existing_out in place and returned (accumulate=True adds the product
    to existing_out's active rows). lhs or rhs may be a Quantized. tiling: (tm, tk, tn) or
    None (the tuning tables, then the heuristic).

    quantize_lhs=(dtype, scheme[, calibration]) takes f32 or bf16 activations as lhs and
    quantizes them along K in the call (absmax by default), exactly as quantize(lhs, dtype,
    scheme, calibration=...) would (of from_bf16(lhs) for bf16), then runs the kernel of those
    codes: one pass over lhs, no Quantized made."""
    l = _Arg(lhs, "lhs", _IN_TYPES)
    r = _Arg(rhs, "rhs", _IN_TYPES)
    lq = _lhs_quantization(quantize_lhs, l)
    sizes = _arrays.group_sizes_array(group_sizes)
    tiling = _tiling(tiling, 3)
    _check_gmm_ranks(l, r)
    _check_axis(l, 1, "lhs", "gmm")
    _check_axis(r, 1 if transpose_rhs else 0, "rhs", "gmm")
    e = None if existing_out is None else _Arg(existing_out, "existing_out", _OUT_TYPES, True)
    if accumulate and e is None:
        raise ValueError("accumulate=True needs existing_out")
    out_type = _out_type(preferred_element_type, e)
    m = l.shape[0]
    n = r.shape[1] if transpose_rhs else r.shape[2]
    _arrays.check_groups(sizes, m, group_offset, r.shape[0])
    if e is not None and tuple(e.shape) != (m, n):
        raise ValueError(f"existing_out has shape {tuple(e.shape)}, expected [M, N] = [{m}, {n}]")
    out_view = e.view if e is not None else (0, DTYPE_CODES[out_type], [m, n], 0)
    # The runtime checks shapes, dtypes and the spec before the output exists.
    _gmmgen.gmm_spec(l.view, r.view, sizes.ctypes.data, sizes.shape[0], out_view,
                     bool(transpose_rhs), int(group_offset), tiling, e is not None,
                     bool(accumulate), l.scales, r.scales, lq)
    if e is not None:
        out = e.array
    else:
        out = _arrays.empty(_arrays.kind_of(lhs if l.quant is None else l.array), (m, n),
                            out_type)
        out_view = (_arrays.address(out), DTYPE_CODES[out_type], [m, n], 0)
    _gmmgen.gmm(l.view, r.view, sizes.ctypes.data, sizes.shape[0], out_view,
                bool(transpose_rhs), int(group_offset), tiling,
                e.view if e is not None else None, bool(accumulate), l.scales, r.scales, lq)
    return out


def tgmm(lhs, rhs, group_sizes, preferred_element_type=None, tiling=None, group_offset=0,
         num_actual_groups=None, existing_out=None, *, lhs_transposed=False,
         transpose_out=False):
    """out [G_local, K, N]: out[j] = lhs[rows of g]^T @ rhs[rows of g], g = group_offset + j (the
    weight gradient of gmm; an empty group gives zeros).

    lhs [M, K] (or [K, M] with lhs_transposed, read in place); rhs [M, N]; G_local =
    num_actual_groups, default G - group_offset (or existing_out's first dimension). With
    existing_out, the product is added to it in place and existing_out is returned (gradient
    accumulation). transpose_out gives [G_local, N, K]. lhs or rhs may be a Quantized
    (quantized along M: axis 0)."""
    l = _Arg(lhs, "lhs", _IN_TYPES)
    r = _Arg(rhs, "rhs", _IN_TYPES)
    sizes = _arrays.group_sizes_array(group_sizes)
    tiling = _tiling(tiling, 3)
    if len(l.shape) != 2:
        raise ValueError(f"lhs must be 2-D [M, K] (or [K, M] with lhs_transposed), got shape "
                         f"{tuple(l.shape)}")
    if len(r.shape) != 2:
        raise ValueError(f"rhs must be 2-D [M, N], got shape {tuple(r.shape)}")
    _check_axis(l, 1 if lhs_transposed else 0, "lhs", "tgmm")
    _check_axis(r, 0, "rhs", "tgmm")
    e = None if existing_out is None else _Arg(existing_out, "existing_out", _OUT_TYPES, True)
    out_type = _out_type(preferred_element_type, e)
    m, k = (l.shape[1], l.shape[0]) if lhs_transposed else (l.shape[0], l.shape[1])
    n = r.shape[1]
    g = int(sizes.shape[0])
    if e is not None:
        if len(e.shape) != 3:
            raise ValueError(f"existing_out must be 3-D [G_local, K, N], got shape {e.shape}")
        g_local = e.shape[0]
        if num_actual_groups is not None and num_actual_groups != g_local:
            raise ValueError(f"num_actual_groups={num_actual_groups} differs from existing_out's "
                             f"G_local={g_local}")
    elif num_actual_groups is None:
        g_local = g - group_offset if isinstance(group_offset, (int, np.integer)) else g
    else:
        g_local = num_actual_groups
    if not isinstance(g_local, (int, np.integer)) or g_local < 1:
        raise ValueError(f"num_actual_groups={g_local} must be an int >= 1")
    _arrays.check_groups(sizes, m, group_offset, int(g_local))
    shape = [int(g_local), n, k] if transpose_out else [int(g_local), k, n]
    out_view = e.view if e is not None else (0, DTYPE_CODES[out_type], shape, 0)
    _gmmgen.tgmm_spec(l.view, r.view, sizes.ctypes.data, g, out_view, bool(lhs_transposed),
                      bool(transpose_out), int(group_offset), tiling, e is not None, l.scales,
                      r.scales)
    if e is not None:
        out = e.array
    else:
        out = _arrays.empty(_arrays.kind_of(lhs if l.quant is None else l.array), shape,
                            out_type)
        out_view = (_arrays.address(out), DTYPE_CODES[out_type], shape, 0)
    _gmmgen.tgmm(l.view, r.view, sizes.ctypes.data, g, out_view, bool(lhs_transposed),
                 bool(transpose_out), int(group_offset), tiling,
                 out_view if e is not None else None, l.scales, r.scales)
    return out


def gmm_vjp(dout, lhs, rhs, group_sizes, tiling=None, group_offset=0, transpose_rhs=False,
            grad_dtype="f8e5m2", grad_block=128):
    """The backward of out = gmm(lhs, rhs, group_sizes, ...): returns (dlhs, drhs) with
    dlhs [M, K] = gmm(dout, rhs, transpose_rhs=not transpose_rhs) in lhs's dtype and drhs
    (rhs's shape) = tgmm(lhs, dout) in rhs's dtype, with no transposed copy of any operand.
    tiling: 9 ints, (tm, tk, tn) of the forward, dlhs and drhs products (0s: heuristic).

    A quantized forward (docs/quantization.md): rhs is the forward's Quantized weights and lhs, when
    quantized, a Quantized of the activation along M (quantize(x, dtype, "block:B", axis=0):
    the column-wise half of dual quantization, what tgmm reads). dout must be float32; it is
    quantized to grad_dtype ("f8e5m2", "f8e4m3", or None to keep it f32) in 1 x grad_block
    blocks for dlhs and grad_block x 1 blocks for drhs; dlhs and drhs are float32."""
    quant = isinstance(lhs, Quantized) or isinstance(rhs, Quantized)
    d = _Arg(dout, "dout", _FLOAT_TYPES)
    l = _Arg(lhs, "lhs", _FLOAT_TYPES)
    r = _Arg(rhs, "rhs", _FLOAT_TYPES)
    sizes = _arrays.group_sizes_array(group_sizes)
    tiling = _tiling(tiling, 9)
    _check_gmm_ranks(l, r)
    if len(d.shape) != 2:
        raise ValueError(f"dout must be 2-D [M, N], got shape {tuple(d.shape)}")
    m, k = l.shape
    t = bool(transpose_rhs)
    n = r.shape[1] if t else r.shape[2]
    if tuple(d.shape) != (m, n):
        raise ValueError(f"dout has shape {tuple(d.shape)}, expected the forward's [M, N] = "
                         f"[{m}, {n}]")
    _arrays.check_groups(sizes, m, group_offset, r.shape[0])
    g = int(sizes.shape[0])
    grad_code = -1
    if quant:
        if d.dtype != "f32":
            raise ValueError(f"dout has dtype {d.dtype}: a quantized forward's dout must be f32")
        if grad_dtype is not None and grad_dtype not in ("f8e5m2", "f8e4m3"):
            raise ValueError(f"grad_dtype={grad_dtype!r} must be 'f8e5m2', 'f8e4m3' or None")
        if isinstance(lhs, Quantized) and lhs.axis != 0:
            raise ValueError("lhs: a quantized forward's lhs must be quantized along M "
                             "(quantize(x, dtype, 'block:B', axis=0)), as tgmm reads it")
        if not isinstance(grad_block, int) or grad_block < 1:
            raise ValueError(f"grad_block={grad_block!r} must be a positive int")
        grad_code = -1 if grad_dtype is None else DTYPE_CODES[grad_dtype]
        out_dtype = "f32"
    else:
        out_dtype = None
        # Shapes and dtypes of the forward (dout is its output) and of both products, checked
        # before dlhs and drhs exist (the runtime checks a quantized call's before it writes).
        _gmmgen.gmm_spec(l.view, r.view, sizes.ctypes.data, g, d.view, t, int(group_offset),
                         None, False, False, None, None)
        dlhs_view = (0, DTYPE_CODES[l.dtype], [m, k], 0)
        drhs_view = (0, DTYPE_CODES[r.dtype], list(r.shape), 0)
        _gmmgen.gmm_spec(d.view, r.view, sizes.ctypes.data, g, dlhs_view, not t,
                         int(group_offset), None if tiling is None else tiling[3:6], False, False,
                         None, None)
        _gmmgen.tgmm_spec(l.view, d.view, sizes.ctypes.data, g, drhs_view, False, t,
                          int(group_offset), None if tiling is None else tiling[6:9], False, None,
                          None)
    dl_type, dr_type = out_dtype or l.dtype, out_dtype or r.dtype
    kind = _arrays.kind_of(dout)
    dlhs = _arrays.empty(kind, (m, k), dl_type)
    drhs = _arrays.empty(kind, tuple(r.shape), dr_type)
    dlhs_view = (_arrays.address(dlhs), DTYPE_CODES[dl_type], [m, k], 0)
    drhs_view = (_arrays.address(drhs), DTYPE_CODES[dr_type], list(r.shape), 0)
    _gmmgen.gmm_vjp(d.view, l.view, r.view, sizes.ctypes.data, g, dlhs_view, drhs_view, t,
                    int(group_offset), tiling, quant, l.scales, r.scales, grad_code,
                    int(grad_block))
    return dlhs, drhs


def _view_of(x, name="x"):
    """(address, dtype, shape, ld) with which a call reads x: for tests and debugging (a torch
    tensor's address equals its data_ptr() when nothing is copied)."""
    return _Arg(x, name, _IN_TYPES).view
