"""Argument validation shared by the Triton ops and their plain-PyTorch twins.

Every check raises ``TypeError`` (wrong type or dtype) or ``ValueError`` (wrong value, shape or
device) with a message that names the argument and what was expected; nothing here modifies the
data. The generic checks come first, then those of the Gram-matrix family (``x``, ``y``,
``out``, ``precision``; ``check_finite`` and the deferred :class:`FiniteCheck`, also used by
``kernel_attention`` for ``q``, ``k``, ``v``), then those of the attention family (``q``, ``k``,
``v``, ``scale``, ``eps``).
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import numbers

import torch

from kernelkit_gpu import _launch

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
PRECISIONS = ("accurate", "fast")
#: Dtypes the Triton attention kernels accept (the naive versions also take float64).
ATTN_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
#: Largest head dimension of the Triton attention kernels (D and Dv are padded to a power of two).
MAX_HEAD_DIM = 256


# ------------------------------------------------------------------------------------ generic
def check_tensor(t, name, shape_doc=None):
    """``t`` must be a torch tensor (``shape_doc``, e.g. "(B, H, T, D)", goes into the message)."""
    if not isinstance(t, torch.Tensor):
        shape = "" if shape_doc is None else f" of shape {shape_doc}"
        raise TypeError(f"{name} must be a torch.Tensor{shape}; got {type(t).__name__}")


def check_ndim(t, name, ndim, shape_doc):
    if t.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-D {shape_doc}; got shape {tuple(t.shape)}")


def check_dtype(t, name, dtypes, hint=""):
    """``t.dtype`` must be one of ``dtypes``; ``hint`` is appended to the message."""
    if t.dtype not in dtypes:
        allowed = ", ".join(str(d).replace("torch.", "") for d in dtypes)
        raise TypeError(f"{name} must have dtype {allowed}; got {t.dtype}{hint}")


def check_floating(t, name):
    if t.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{name} must be a floating tensor; got dtype {t.dtype}")


def check_flag(value, name):
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False; got {value!r}")


def triton_runs_on(t):
    """True where the Triton kernels can run on tensor ``t``: a CUDA tensor with triton
    installed, or any tensor under the interpreter (``TRITON_INTERPRET=1`` set before import)."""
    return (t.is_cuda and _launch.HAS_TRITON) or _launch.INTERPRET


def check_triton_device(t, names="x", fallback="the NumPy path (kernelkit_math / kernelkit) or "
                        "kernelkit_gpu.pairwise.naive"):
    """Triton runs on CUDA tensors, or on CPU tensors under the interpreter only.

    ``names``: the tensors the message speaks of ("x", "q", "q, k and v"); ``fallback``: what
    to use on the CPU instead.
    """
    if t.device.type == "cpu" and not _launch.INTERPRET:
        subject = f"{names} are CPU tensors" if " and " in names else f"{names} is a CPU tensor"
        raise ValueError(
            f"{subject} but the Triton interpreter is off: set the environment variable "
            "TRITON_INTERPRET=1 before importing kernelkit_gpu (slow; for tests), move the tensors "
            f"to a CUDA device, or use {fallback} on the CPU"
        )
    if t.device.type not in ("cpu", "cuda"):
        raise ValueError(
            f"{names} must be on a CUDA device (or the CPU under the interpreter); got {t.device}"
        )


# ------------------------------------------------------------------------------- Gram family
def check_matrix(t, name):
    """``t`` must be a 2-D floating torch tensor with at least one feature."""
    check_tensor(t, name, "(n_samples, n_features)")
    check_ndim(t, name, 2, "(n_samples, n_features)")
    if t.dtype not in FLOAT_DTYPES:
        raise TypeError(
            f"{name} must have dtype float32, float64, float16 or bfloat16; got {t.dtype}"
        )
    if t.shape[1] == 0:
        raise ValueError(f"{name} must have at least one feature; got shape {tuple(t.shape)}")


def check_finite(t, name):
    """``t`` must hold no NaN or infinity (one reduction over the tensor; an empty one passes).

    The Gram-family kernels centre and normalise their operands with means and norms over rows
    and columns, so one non-finite value would spread to (or, clamped, hide in) unrelated
    entries; like scikit-learn's ``check_array``, such input is refused.
    """
    if not bool(torch.isfinite(t).all()):
        raise ValueError(
            f"{name} contains NaN or infinity; kernelkit_gpu kernels take finite values only "
            f"(remove or impute the non-finite entries first)"
        )


_ASSUME_FINITE = contextvars.ContextVar("kernelkit_gpu_assume_finite", default=False)


@contextlib.contextmanager
def assume_finite(enabled=True):
    """Skip the data checks of the Gram-family and kernel-attention entry points: NaN /
    infinity, and for the Gram family values out of range (:func:`range_limit`).

    The checks (:class:`FiniteCheck`: a flag per input, set on the device by the preparation
    or by reductions, and one wait per call for the flags only) are the default. Code that has
    validated its data once and then calls a kernel many times (an iterative solver's products,
    blocks of one Gram matrix) skips them inside this block, as scikit-learn's
    ``assume_finite`` does: the calls then never wait for the GPU. Non-finite or out-of-range
    input inside the block gives undefined values, not an error (parameters are still checked).
    Per thread and per asyncio task.

    Parameters
    ----------
    enabled : bool, default=True
        False switches the checks back on inside the block.

    Examples
    --------
    >>> import os; os.environ.setdefault("TRITON_INTERPRET", "1")  # CPU: the Triton interpreter
    '1'
    >>> import torch, kernelkit_gpu
    >>> x, v = torch.randn(6, 3), torch.randn(6)
    >>> with kernelkit_gpu.assume_finite():
    ...     u = kernelkit_gpu.kernel_matvec(x, x, v, "rbf", gamma=0.5)
    >>> u.shape
    torch.Size([6])
    """
    check_flag(enabled, "enabled")
    token = _ASSUME_FINITE.set(enabled)
    try:
        yield
    finally:
        _ASSUME_FINITE.reset(token)


def range_limit(dtype):
    """Largest squared row norm (and |dot-product offset|) of the values a Gram-family kernel
    computes with, for input of ``dtype``: one eighth of the accumulation dtype's largest number
    (float32 for 16-bit input), so every squared distance (at most 4x that), every dot product
    and every intermediate of ||x||² + ||y||² - 2 x·y stays finite."""
    acc = torch.float64 if dtype == torch.float64 else torch.float32
    return torch.finfo(acc).max / 8


class FiniteCheck:
    """A check of named tensors, set on their device and read later with one wait.

    One int32 flag per name (in the given order) says that the tensor holds NaN or infinity or,
    for the Gram family, values out of range (:func:`range_limit`). ``FiniteCheck(a=a, b=b)``
    sets every flag at once with ``torch.isfinite`` reductions and starts reading them. With
    ``deferred=("a",)`` the flag of ``a`` is left for the caller to set (a kernel writing to
    :meth:`flag`, or :meth:`mark`), who then calls :meth:`start_read`.

    On a GPU the flags are copied to pinned host memory (non-blocking) and a CUDA event is
    recorded behind the copy, so :meth:`raise_if_not_finite` waits for the kernels queued before
    the flags were set, not for those queued after (the Gram tiles). On the CPU it reads them.
    Inside :func:`assume_finite` nothing is set or read (:attr:`active` is False).
    """

    def __init__(self, *, deferred=(), **tensors):
        self._tensors = tensors
        self._names = list(tensors)
        self.active = not _ASSUME_FINITE.get()
        self._host = self._event = None
        self.flags = None
        if not self.active:
            return
        device = next(iter(tensors.values())).device
        self.flags = torch.zeros(len(tensors), dtype=torch.int32, device=device)
        self.mark_non_finite(*(name for name in tensors if name not in deferred))
        if not deferred:
            self.start_read()

    def flag(self, name):
        """The flag of ``name`` as a one-element int32 tensor to write 1 into (None when not
        :attr:`active`)."""
        if not self.active:
            return None
        i = self._names.index(name)
        return self.flags[i : i + 1]

    def mark(self, name, bad):
        """Set the flag of ``name`` where the 0-dim boolean tensor ``bad`` is true (queued on
        the device, no wait)."""
        if self.active:
            self.flag(name).bitwise_or_(bad.to(torch.int32))

    def mark_non_finite(self, *names):
        """Set the flags of ``names`` by ``torch.isfinite`` reductions (queued, no wait)."""
        if not self.active:
            return
        for name in names:
            t = self._tensors[name]
            if t.numel():
                self.mark(name, ~torch.isfinite(t).all())

    def start_read(self):
        """Start copying the flags to the host (after every flag has been set)."""
        if self.active and self.flags.device.type == "cuda":
            self._host = torch.empty(self.flags.shape, dtype=torch.int32, pin_memory=True)
            self._host.copy_(self.flags, non_blocking=True)
            self._event = torch.cuda.Event()
            self._event.record(torch.cuda.current_stream(self.flags.device))

    def raise_if_not_finite(self):
        """ValueError for the first flagged tensor (in the given order) with a NaN or an
        infinity ("x contains NaN or infinity; ..."); if no flagged tensor has one, for the first
        flagged one that is out of range ("x is out of range for float32 arithmetic; ...")."""
        if not self.active:
            return
        if self._event is not None:
            self._event.synchronize()
            flags = self._host
        else:
            flags = self.flags.cpu()
        bad = [name for name, f in zip(self._names, flags.tolist()) if f]
        for name in bad:
            check_finite(self._tensors[name], name)
        if bad:
            name = bad[0]
            t = self._tensors[name]
            acc = "float64" if t.dtype == torch.float64 else "float32"
            raise ValueError(
                f"{name} is out of range for {acc} arithmetic: the values the kernel computes "
                f"with (rows centred, scaled or normalised as the kernel needs) have a squared row "
                f"norm or a dot-product offset above {range_limit(t.dtype):.3g}, so distances or "
                f"dot products would overflow; rescale the data (and the kernel's length scales "
                f"with it) or pass float64 input"
            )


def check_pair(x, y, y_name="y"):
    """``x`` (and ``y`` unless None) must be 2-D floating tensors that match in dtype, number of
    features and device (their values: :class:`FiniteCheck`)."""
    check_matrix(x, "x")
    if y is None:
        return
    if isinstance(y, str):
        raise TypeError(
            f"{y_name} must be a torch.Tensor or None; got the string {y!r} (pass the kernel by "
            f"keyword: kernel={y!r})"
        )
    check_matrix(y, y_name)
    if y.dtype != x.dtype:
        raise TypeError(f"x and {y_name} must have the same dtype; got {x.dtype} and {y.dtype}")
    if y.shape[1] != x.shape[1]:
        raise ValueError(
            f"x and {y_name} must have the same number of features; got {x.shape[1]} and {y.shape[1]}"
        )
    if y.device != x.device:
        raise ValueError(f"x and {y_name} must be on the same device; got {x.device} and {y.device}")


def check_precision(precision):
    if not isinstance(precision, str) or precision not in PRECISIONS:
        raise ValueError(f"precision must be 'accurate' or 'fast'; got {precision!r}")


def check_out(out, shape, dtype, device, name="out"):
    check_tensor(out, name)
    if tuple(out.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)}; got {tuple(out.shape)}")
    if out.dtype != dtype:
        raise TypeError(f"{name} must have dtype {dtype} for this input; got {out.dtype}")
    if out.device != device:
        raise ValueError(f"{name} must be on {device}; got {out.device}")


# -------------------------------------------------------------------------- attention family
def check_qkv(q, k, v, *, is_causal=False, enable_gqa=False, dtypes=ATTN_DTYPES,
              max_head_dim=None):
    """Validate attention operands; return ``(B, H, H_kv, T, S, D, Dv)``.

    q (B, H, T, D), k (B, H_kv, S, D), v (B, H_kv, S, Dv); one dtype, one device; H_kv == H, or
    H_kv divides H with ``enable_gqa=True``.

    Raises
    ------
    TypeError
        A non-tensor operand, an unsupported or mixed dtype, a non-bool flag.
    ValueError
        Wrong number of dimensions, mismatched batch / heads / lengths / head dims, tensors on
        different devices, a head dim outside 1..``max_head_dim``.
    """
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_tensor(t, name, "(B, H, T, D)")
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_ndim(t, name, 4, "(B, H, T, D)" if name == "q" else "(B, H_kv, S, D)")
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_dtype(t, name, dtypes)
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k and v must have the same dtype; got {q.dtype}, {k.dtype} and {v.dtype}")
    if not (q.device == k.device == v.device):
        raise ValueError(
            f"q, k and v must be on the same device; got {q.device}, {k.device} and {v.device}"
        )
    check_flag(is_causal, "is_causal")
    check_flag(enable_gqa, "enable_gqa")
    B, H, T, D = q.shape
    Bk, H_kv, S, Dk = k.shape
    Bv, H_v, S_v, Dv = v.shape
    if Bk != B or Bv != B:
        raise ValueError(f"q, k and v must have the same batch size; got {B}, {Bk} and {Bv}")
    if H_v != H_kv:
        raise ValueError(f"k and v must have the same number of heads; got {H_kv} and {H_v}")
    if S_v != S:
        raise ValueError(f"k and v must have the same length S; got {S} and {S_v}")
    if Dk != D:
        raise ValueError(f"q and k must have the same head dim; got {D} and {Dk}")
    if enable_gqa:
        if H_kv == 0 or H % H_kv != 0:
            raise ValueError(
                f"with enable_gqa=True the number of key/value heads must divide the number of "
                f"query heads; got H={H}, H_kv={H_kv}"
            )
    elif H_kv != H:
        raise ValueError(
            f"k and v must have as many heads as q (got H={H}, H_kv={H_kv}); pass enable_gqa=True "
            f"for grouped-query attention"
        )
    for name, d in (("q/k head dim D", D), ("v head dim Dv", Dv)):
        if d < 1:
            raise ValueError(f"{name} must be at least 1; got {d}")
        if max_head_dim is not None and d > max_head_dim:
            raise ValueError(f"{name} must be at most {max_head_dim}; got {d}")
    return B, H, H_kv, T, S, D, Dv


def check_scale(scale, d):
    """``None`` -> 1 / sqrt(D); otherwise a finite real number > 0 (returned as float)."""
    if scale is None:
        return 1.0 / math.sqrt(d)
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real):
        raise TypeError(f"scale must be a positive number or None; got {scale!r}")
    scale = float(scale)
    if not math.isfinite(scale) or scale <= 0:
        raise ValueError(f"scale must be a finite number > 0; got {scale!r}")
    return scale


def check_eps(eps, kind="a number >= 0"):
    """A denominator floor: a finite real number >= 0, not a bool (returned as float); ``kind``
    words the TypeError."""
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real):
        raise TypeError(f"eps must be {kind}; got {eps!r}")
    eps = float(eps)
    if not math.isfinite(eps) or eps < 0:
        raise ValueError(f"eps must be a finite number >= 0; got {eps!r}")
    return eps
