"""Arrays in and out of the runtime: numpy arrays, torch tensors and other DLPack producers.

An operand becomes a view (address, dtype code, shape, ld) the runtime reads in place: the
runtime's layouts are row-major with a row stride `ld` (docs/runtime.md, gmmgen::TensorView), so a
2-D operand with unit column stride and any row stride >= its row length is used without a
copy, and so is a 3-D one whose matrices also follow each other at rows * ld. Any other layout
of an input (transposed, strided columns, negative strides) is copied into a contiguous array
first; an existing_out in such a layout is refused, since it is written in place.
"""

import numpy as np

from . import _gmmgen

# The runtime's dtype codes (GMMGEN_DTYPES in gmmgen/kernel_abi.h).
DTYPE_CODES = {"f32": 0, "bf16": 1, "f16": 2, "f8e4m3": 3, "f8e5m2": 4, "i8": 5, "i4": 6,
               "nf4": 7, "t2": 8}
DTYPE_NAMES = {v: k for k, v in DTYPE_CODES.items()}
DTYPE_BITS = {"f32": 32, "bf16": 16, "f16": 16, "f8e4m3": 8, "f8e5m2": 8, "i8": 8, "i4": 4,
              "nf4": 4, "t2": 2}
# Storage of each dtype in numpy: bf16 as its uint16 bit patterns, codes as bytes.
NUMPY_STORAGE = {"f32": np.float32, "bf16": np.uint16, "f16": np.float16, "i8": np.int8,
                 "f8e4m3": np.uint8, "f8e5m2": np.uint8, "i4": np.uint8, "nf4": np.uint8,
                 "t2": np.uint8}
# Element types an array of this storage holds when nothing else says (quantized codes come
# in a gmmgen.Quantized, which names its dtype).
_NUMPY_DTYPES = {np.dtype(np.float32): "f32", np.dtype(np.uint16): "bf16",
                 np.dtype(np.float16): "f16", np.dtype(np.int8): "i8",
                 np.dtype(np.uint8): "u8"}
# DLPack (type code, bits, lanes) -> dtype: kDLInt 0, kDLUInt 1, kDLFloat 2, kDLBfloat 4.
_DLPACK_DTYPES = {(2, 32, 1): "f32", (4, 16, 1): "bf16", (2, 16, 1): "f16", (0, 8, 1): "i8",
                  (1, 16, 1): "bf16", (1, 8, 1): "u8"}
_DL_CPU = 1


def torch_module():
    """torch if it is already imported (a torch tensor cannot exist otherwise), else None."""
    import sys
    return sys.modules.get("torch")


def is_torch(x):
    torch = torch_module()
    return torch is not None and isinstance(x, torch.Tensor)


def kind_of(x):
    """'torch' or 'numpy': the kind of array a result takes after this operand."""
    return "torch" if is_torch(x) else "numpy"


def _torch_dtypes():
    torch = torch_module()
    return {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16,
            "i8": torch.int8, "u8": torch.uint8}


def dtype_name(d, param):
    """A dtype argument (preferred_element_type): 'f32', 'bf16', 'f16', numpy or torch dtypes
    (numpy uint16 means bf16 bit patterns)."""
    if isinstance(d, str):
        if d in DTYPE_CODES:
            return d
        aliases = {"float32": "f32", "bfloat16": "bf16", "float16": "f16", "int8": "i8"}
        if d in aliases:
            return aliases[d]
        raise ValueError(f"{param}={d!r} is not a dtype (f32, bf16, f16, ...)")
    if is_torch_dtype(d):
        for name, td in _torch_dtypes().items():
            if d == td and name != "u8":
                return name
        raise ValueError(f"{param}={d} is not supported (torch.float32, bfloat16 or float16)")
    try:
        nd = np.dtype(d)
    except TypeError:
        raise ValueError(f"{param}={d!r} is not a dtype") from None
    if nd in _NUMPY_DTYPES and _NUMPY_DTYPES[nd] != "u8":
        return _NUMPY_DTYPES[nd]
    raise ValueError(f"{param}={d!r} is not supported (float32, uint16 for bf16 bits, float16)")


def is_torch_dtype(d):
    torch = torch_module()
    return torch is not None and isinstance(d, torch.dtype)


class Operand:
    """One array as the runtime reads it. `keep` holds everything the address depends on
    (the array, a contiguous copy, the DLPack capsule) until the call returns."""

    __slots__ = ("array", "dtype", "shape", "strides", "addr", "keep", "copied")

    def view(self, dtype=None, shape=None):
        """(address, dtype code, shape, ld): the runtime's TensorView. Raises if the layout has
        no row stride (only possible for an operand that was not allowed to be copied)."""
        ld = row_stride(self.shape, self.strides)
        if ld is None:
            raise AssertionError("view of an operand without a row stride")
        return (self.addr, DTYPE_CODES[dtype or self.dtype], list(shape or self.shape), ld)


def row_stride(shape, strides):
    """The row stride (in elements) with which the runtime reads this layout, or None if it
    cannot: unit column stride, rows >= a row apart, and 3-D matrices rows * ld apart."""
    if any(s == 0 for s in shape):
        return 0
    if len(shape) not in (2, 3):
        return None
    rows, cols = shape[-2], shape[-1]
    sr, sc = strides[-2], strides[-1]
    if cols > 1 and sc != 1:
        return None
    ld = cols if rows == 1 else sr
    if len(shape) == 3 and shape[0] > 1:
        if rows == 1:
            ld = strides[0]  # one-row matrices: the batch stride is the row stride
        elif strides[0] != rows * ld:
            return None
    if ld < cols:
        return None
    return ld


def _describe_numpy(a, name):
    if a.dtype not in _NUMPY_DTYPES:
        raise ValueError(f"{name} has dtype {a.dtype}: expected float32, uint16 (bf16 bits), "
                         f"float16 or int8")
    op = Operand()
    op.array, op.dtype, op.shape = a, _NUMPY_DTYPES[a.dtype], tuple(a.shape)
    op.strides = tuple(s // a.itemsize for s in a.strides)
    if any(s % a.itemsize for s in a.strides):
        op.strides = (-1,) * a.ndim  # not a whole number of elements apart: never in place
    op.addr = a.__array_interface__["data"][0]
    op.keep, op.copied = a, False
    return op


def _describe_dlpack(x, name):
    if hasattr(x, "__dlpack_device__"):
        device = x.__dlpack_device__()
        if int(device[0]) != _DL_CPU:
            raise ValueError(f"{name} is on device {device} (DLPack device type): gmmgen runs "
                             f"on the CPU; move it to host memory first (e.g. .cpu())")
    cap = x.__dlpack__()
    addr, dl_dtype, shape, strides, device = _gmmgen.dlpack_info(cap)
    if device[0] != _DL_CPU:
        raise ValueError(f"{name} is on DLPack device type {device[0]}: gmmgen runs on the CPU")
    if tuple(dl_dtype) not in _DLPACK_DTYPES:
        raise ValueError(f"{name} has DLPack dtype (code, bits, lanes) = {tuple(dl_dtype)}: "
                         f"expected float32, bfloat16, float16 or int8")
    if strides is None:  # compact row-major
        strides, acc = [], 1
        for s in reversed(shape):
            strides.insert(0, acc)
            acc *= s
    op = Operand()
    op.array, op.dtype, op.shape = x, _DLPACK_DTYPES[tuple(dl_dtype)], tuple(shape)
    op.strides, op.addr, op.keep, op.copied = tuple(strides), addr, (x, cap), False
    return op


def describe(x, name, writable=False):
    """The Operand of x (numpy array, torch tensor, or any CPU __dlpack__ producer), copied into
    a contiguous array when the runtime cannot read its layout in place (never for a writable
    operand: that is an error naming it)."""
    if isinstance(x, np.ndarray):
        if writable and not x.flags.writeable:
            raise ValueError(f"{name} is read-only: it is written in place")
        op = _describe_numpy(x, name)
    elif is_torch(x):
        if x.device.type != "cpu":
            raise ValueError(f"{name} is on device {x.device}: gmmgen runs on the CPU; move it "
                             f"with .cpu()")
        # detach(): same memory, but exportable through DLPack when it requires grad.
        op = _describe_dlpack(x.detach(), name)
        op.array = x
    elif hasattr(x, "__dlpack__"):
        op = _describe_dlpack(x, name)
    else:
        raise TypeError(f"{name} must be a numpy array, a torch tensor or an object with "
                        f"__dlpack__, got {type(x).__name__}")
    if len(op.shape) in (2, 3) and row_stride(op.shape, op.strides) is None:
        if writable:
            raise ValueError(f"{name} with shape {op.shape} and strides {op.strides} (elements) "
                             f"has no row stride the runtime can write in place: pass a "
                             f"contiguous array")
        if is_torch(op.array):
            copy = op.array.detach().contiguous()
            op = _describe_dlpack(copy, name)
        elif isinstance(op.array, np.ndarray):
            op = _describe_numpy(np.ascontiguousarray(op.array), name)
        else:
            op = _describe_numpy(np.ascontiguousarray(np.from_dlpack(op.array)), name)
        op.copied = True
    return op


def _aligned_numpy(shape, dtype):
    """An uninitialized numpy array that starts on a 64-byte boundary, as torch's do (numpy puts
    large arrays 16 bytes past one): the kernels write whole lines of it, and stream f32 outputs
    that start on a line."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(nbytes + 64, dtype=np.uint8)
    start = -raw.ctypes.data % 64
    return raw[start:start + nbytes].view(dtype).reshape(tuple(shape))


def empty(kind, shape, dtype):
    """An uninitialized array of `kind` ('numpy' or 'torch') holding `dtype` elements."""
    if kind == "torch":
        torch = torch_module()
        return torch.empty(tuple(shape), dtype=_torch_dtypes()[dtype])
    return _aligned_numpy(shape, NUMPY_STORAGE.get(dtype, np.uint8))


def codes_array(kind, shape, dtype):
    """Codes storage: int8 for i8, bytes for the others (packed along the row when sub-byte)."""
    if kind == "torch":
        torch = torch_module()
        return torch.empty(tuple(shape), dtype=torch.int8 if dtype == "i8" else torch.uint8)
    return _aligned_numpy(shape, np.int8 if dtype == "i8" else np.uint8)


def address(x):
    """The address of a contiguous numpy array or torch tensor this package allocated."""
    if isinstance(x, np.ndarray):
        return x.__array_interface__["data"][0]
    return x.data_ptr()


def group_sizes_array(group_sizes):
    """group_sizes as a contiguous int32 numpy array (a copy of at most G values), checked."""
    if is_torch(group_sizes):
        if group_sizes.device.type != "cpu":
            raise ValueError(f"group_sizes is on device {group_sizes.device}: gmmgen runs on "
                             f"the CPU")
        group_sizes = group_sizes.detach().numpy()
    elif not isinstance(group_sizes, np.ndarray) and hasattr(group_sizes, "__dlpack__"):
        group_sizes = np.from_dlpack(group_sizes)
    g = np.asarray(group_sizes)
    if g.ndim != 1:
        raise ValueError(f"group_sizes must be 1-D [G], got shape {g.shape}")
    if g.size == 0:
        raise ValueError("group_sizes must have at least one entry")
    if not np.issubdtype(g.dtype, np.integer):
        raise ValueError(f"group_sizes must hold integers (int32), got dtype {g.dtype}")
    if (g < 0).any():
        i = int(np.argmax(g < 0))
        raise ValueError(f"group_sizes[{i}]={int(g[i])} is negative")
    if (g > np.iinfo(np.int32).max).any():
        i = int(np.argmax(g > np.iinfo(np.int32).max))
        raise ValueError(f"group_sizes[{i}]={int(g[i])} does not fit in int32")
    return np.ascontiguousarray(g, dtype=np.int32)


def check_groups(sizes, m, group_offset, g_local, m_name="M"):
    """docs/operations.md's rules on group_sizes and group_offset, before anything is allocated."""
    g = int(sizes.shape[0])
    if not isinstance(group_offset, (int, np.integer)) or isinstance(group_offset, bool):
        raise ValueError(f"group_offset must be an int, got {type(group_offset).__name__}")
    if group_offset < 0 or group_offset + g_local > g:
        raise ValueError(f"group_offset={group_offset} must be in [0, G - G_local] = "
                         f"[0, {g - g_local}] (G={g}, G_local={g_local})")
    total = int(sizes.sum(dtype=np.int64))
    if total > m:
        raise ValueError(f"sum(group_sizes)={total} exceeds {m_name}={m}")
