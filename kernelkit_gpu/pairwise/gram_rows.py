"""Row blocks K(X[rows], X) of one point set X for many sets of rows: the fused Gram kernels
(:mod:`kernelkit_gpu.pairwise.gram_fused`) on operands prepared once.

A solver that asks for kernel rows over and over (the SVMs' SMO solver: a few hundred rows of
K(X, X) per outer step, for hundreds of steps) would pay, through :func:`kernelkit_gpu.gram`,
the argument checks, a data check that waits for the device, and the preparation of every point
(column mean, centring, padding, norms) at every call. :class:`GramRows` checks and prepares the
points once. A call gathers the requested rows, prepares only them (the row-wise preparation
kernel with the points' mean and scales: the values of the points' own prepared rows) and
launches the Gram kernels; it never waits for the device.

Where the points do not fit in device memory, ``chunk_rows`` leaves them where they are (host
memory, pinned for a CUDA device) and every call streams them to the device ``chunk_rows``
points at a time, prepares each chunk with the same mean and scales and computes that block of
columns into the output. The chunks give the same prepared values and the same tiles as the
resident points, so both modes give the same bits; except where torch reductions take part
(the dot-product kernels' float64 row offsets, cosine's row normalisation), whose rounding may
depend on how many rows are reduced at once: there the two agree to rounding. On a GPU the
copies are on the compute stream: a streamed call is bound by the host-to-device transfer of X
(8 N D bytes for float64), not by the Gram arithmetic, which the copies do not overlap.
"""

from __future__ import annotations

import numbers
from typing import NamedTuple

import numpy as np
import torch

from kernelkit_gpu import _launch, checks
from kernelkit_gpu import epilogues as E
from kernelkit_gpu import prepare as P
from kernelkit_gpu.pairwise import gram_fused as G

__all__ = ["GramRows"]


class _Prepared(NamedTuple):
    """Rows ready for the Gram kernels: the padded operand (``_gram_prep_kernel``), its squared
    norms or dot-product offsets, and the rows the fix-up kernel recomputes from."""

    buf: torch.Tensor
    nrm: torch.Tensor
    raw: torch.Tensor


def _round_up(v, q):
    return -(-v // q) * q


def _to_device(t, device):
    """Host tensor ``t`` on ``device``; to a GPU through pinned memory, without a wait."""
    if device.type == "cuda" and t.device.type == "cpu":
        return t.pin_memory().to(device, non_blocking=True)
    return t.to(device)


def _check_device(device, x):
    """Where the kernels run: ``x``'s device (None), else ``device``; ValueError where Triton
    cannot run there."""
    if device is None:
        checks.check_triton_device(x)
        return x.device
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"device must be a torch.device or a device string such as 'cuda'; "
                         f"got {device!r}") from None
    if (device.type == "cuda" and _launch.HAS_TRITON) or (device.type == "cpu"
                                                          and _launch.INTERPRET):
        return device
    raise ValueError(f"device must be a CUDA device, or the CPU with the Triton interpreter on "
                     f"(TRITON_INTERPRET=1 set before importing kernelkit_gpu); got {device}")


class GramRows:
    r"""K(X[rows], X) of a registry kernel for many sets of ``rows`` of one point set X.

    ``GramRows(x, kernel, **params)(rows)`` is ``kernelkit_gpu.gram(x[rows], x, kernel,
    **params)`` up to dtype tolerance: the same kernels and the same accuracy (the Notes of
    :func:`kernelkit_gpu.gram`), with the operands centred on the column mean of all of x where
    ``gram`` centres on that of x[rows]. The checks and the preparation of x run once, here
    (module docstring).

    Parameters
    ----------
    x : torch.Tensor, shape (N, D)
        The points: float32, float64, float16 or bfloat16, any strides; not modified.
    kernel : str
        A registry kernel name: one of ``kernelkit_math.kernel_names()``.
    precision : {"accurate", "fast"}
        As :func:`kernelkit_gpu.gram`.
    device : torch.device or str, optional
        Where the kernels run and the rows are returned: a CUDA device, or the CPU with the
        Triton interpreter on. Default: x's device.
    chunk_rows : int, optional
        None (default): x (copied to ``device`` where it is elsewhere) and its prepared copy
        stay on ``device``. An int: x stays where it is (copied once to pinned memory if it is
        a CPU tensor in pageable memory and ``device`` is a GPU) and every call streams it to
        ``device`` in chunks of ``chunk_rows`` points (rounded up to a multiple of 128): for
        point sets larger than device memory. The column mean is taken where x is given, so an
        x given on the host gives the same operands in both modes.
    **params
        Kernel parameters, as :func:`kernelkit_gpu.gram`.

    Attributes
    ----------
    n : int
        N, the number of points (the columns of every block).
    device : torch.device
        Where the blocks are computed.
    chunk_rows : int or None
        Points per streamed chunk (a multiple of 128); None where x is kept on ``device``.

    Raises
    ------
    TypeError, ValueError
        As :func:`kernelkit_gpu.gram` for ``x``, ``kernel``, ``precision`` and the parameters,
        x holding NaN or infinity or values out of range included (checked once, here, with one
        wait for the device; skipped inside :func:`kernelkit_gpu.assume_finite`); ``device``
        where Triton cannot run; ``chunk_rows`` not an integer >= 1.

    Examples
    --------
    >>> import os; os.environ.setdefault("TRITON_INTERPRET", "1")  # CPU: the Triton interpreter
    '1'
    >>> import torch, kernelkit_gpu
    >>> x = torch.randn(300, 5, dtype=torch.float64)
    >>> rows = kernelkit_gpu.GramRows(x, "rbf", gamma=0.5)
    >>> K = rows([7, 3, 250])
    >>> K.shape, bool(torch.allclose(K, kernelkit_gpu.gram(x[[7, 3, 250]], x, "rbf", gamma=0.5)))
    (torch.Size([3, 300]), True)
    """

    def __init__(self, x, kernel="rbf", *, precision="accurate", device=None, chunk_rows=None,
                 **params):
        checks.check_pair(x, None)
        checks.check_precision(precision)
        self.device = _check_device(device, x)
        if chunk_rows is not None and (isinstance(chunk_rows, bool) or not isinstance(
                chunk_rows, numbers.Integral) or chunk_rows < 1):
            raise ValueError(f"chunk_rows must be None or an integer >= 1; got {chunk_rows!r}")
        self._plan = plan = P.kernel_plan(kernel, x.shape[1], params)
        P.check_params_range(plan, x.dtype)
        self.n, self._d = x.shape
        r = self._recipe = P.recipe(plan, x.dtype, self._d, precision)
        # the mean where x lies: x given on the host gives the same operands in both modes
        self._mean = P.column_mean(x).to(self.device) if r.centre and self.n else None
        if chunk_rows is None:
            x = x.to(self.device)
        elif self.device.type == "cuda" and x.device.type == "cpu" and not x.is_pinned():
            x = x.pin_memory()
        self._x = x
        self.chunk_rows = None if chunk_rows is None else _round_up(int(chunk_rows), G.PAD_ROWS)
        self._scale = P.feature_scales(plan, self.device) if r.scale else None
        self._kd = _round_up(self._d, G.PAD_K)
        self._prm = P._params_tensor(plan.prm, r.acc, self.device)
        self._points = self._chunk = None
        if self.n == 0:
            return
        check = checks.FiniteCheck(x=x, deferred=("x",))
        flag = torch.zeros(1, dtype=torch.int32, device=self.device) if check.active else None
        if self.chunk_rows is None:
            self._points = self._prepare(x, flag)
        else:
            self._chunk = torch.empty((min(self.chunk_rows, self.n), self._d), dtype=x.dtype,
                                      device=self.device)
            if flag is not None:  # one pass over the chunks, only to check them
                for lo in range(0, self.n, self.chunk_rows):
                    self._prepare(self._load(lo), flag)
        if check.active:
            check.mark("x", (flag[0] != 0).to(check.flags.device))
            check.raise_if_not_finite()

    def __call__(self, rows):
        """K(x[rows], x).

        Parameters
        ----------
        rows : 1-D array-like of int
            Indices of points, in [0, N), duplicates allowed: a NumPy array, a sequence or a
            CPU tensor (read on the host, so a call does not wait for the device).

        Returns
        -------
        torch.Tensor, shape (len(rows), N)
            float32, or float64 for float64 x; on :attr:`device`.

        Raises
        ------
        TypeError, ValueError
            ``rows`` not 1-D integers on the host, or out of range.
        """
        index = self._rows(rows)
        out = torch.empty((len(index), self.n), dtype=self._recipe.acc, device=self.device)
        if len(index) == 0:
            return out
        if self.chunk_rows is None:
            raw = self._x.index_select(0, _to_device(torch.from_numpy(index), self.device))
            return self._launch(self._prepare(raw), self._points, out)
        raw = _to_device(self._x.index_select(0, torch.from_numpy(index).to(self._x.device)),
                         self.device)
        mine = self._prepare(raw)
        for lo in range(0, self.n, self.chunk_rows):
            self._launch(mine, self._prepare(self._load(lo)),
                         out[:, lo:lo + self.chunk_rows])
        return out

    def _rows(self, rows):
        """``rows`` as a host int64 array, checked."""
        if isinstance(rows, torch.Tensor):
            if rows.device.type != "cpu":
                raise ValueError(f"rows must be on the host (a NumPy array, a sequence or a CPU "
                                 f"tensor), so that checking it does not wait for the device; "
                                 f"got a tensor on {rows.device}")
            rows = rows.numpy()
        index = np.asarray(rows)
        if index.ndim != 1 or not (index.dtype.kind in "iu" or index.size == 0):
            raise TypeError(f"rows must be a 1-D array of integers; got an array of dtype "
                            f"{index.dtype} and shape {index.shape}")
        index = index.astype(np.int64, copy=False)
        if index.size and (index.min() < 0 or index.max() >= self.n):
            raise ValueError(f"rows must be in [0, {self.n}); got values from {index.min()} to "
                             f"{index.max()}")
        return index

    def _load(self, lo):
        """Points [lo, lo + chunk_rows) of x in the device chunk buffer (the copy queued behind
        the kernels that read the buffer's previous chunk)."""
        part = self._x[lo:lo + self.chunk_rows]
        chunk = self._chunk[:len(part)]
        chunk.copy_(part, non_blocking=True)
        return chunk

    def _prepare(self, raw, flag=None):
        """:class:`_Prepared` rows ``raw`` (on the device): cosine rows normalised, then centred
        and scaled with the points' mean and scales, padded, split and normed by
        ``_gram_prep_kernel`` (as :func:`~kernelkit_gpu.pairwise.gram_fused.prepare_mma` and
        ``prepare_direct`` prepare one operand). ``flag``: a one-element int32 tensor set to 1
        where the rows are not finite or out of range."""
        r = self._recipe
        if r.normalize:
            raw = P.normalize_rows(raw.to(r.acc))[0]
        if r.mode == E.MODE_DIRECT.value:
            buf, nrm = G._prep_launch(raw, self._mean, self._scale, self._d, False, r.dtype,
                                      r.acc, feature_major=True, flag=flag)
            return _Prepared(buf, nrm, raw)
        buf, nrm = G._prep_launch(raw, self._mean, self._scale, self._kd,
                                  r.dot_prec == "tf32x3", r.dtype, r.acc, flag=flag)
        if r.bias:
            nrm = G._padded_like(nrm, P.dot_offsets(raw, self._mean, self._mean))
            if flag is not None:
                flag.bitwise_or_(P.out_of_range(nrm, r.acc).to(torch.int32))
        return _Prepared(buf, nrm, raw)

    def _launch(self, mine, points, out):
        """The Gram kernels of prepared rows ``mine`` against prepared points into ``out``."""
        r, plan = self._recipe, self._plan
        n, m = mine.raw.shape[0], points.raw.shape[0]
        if r.mode == E.MODE_DIRECT.value:
            ops = G.DirectOperands(x=mine.buf, y=points.buf, nx=mine.nrm, prm=self._prm, n=n,
                                   m=m, d=self._d,
                                   dk=self._d if self._d <= P.DIRECT_MAX_D else 0)
        else:
            split = r.dot_prec == "tf32x3"
            ops = G.MMAOperands(
                x=mine.buf, y=points.buf, nx=mine.nrm, ny=points.nrm, dg=mine.nrm, prm=self._prm,
                kd=self._kd, split=split, dot_prec="ieee" if r.dot_prec == "ieee" else "tf32",
                raw_x=mine.raw, raw_y=points.raw,
                mean=self._mean if self._mean is not None else mine.nrm, scale=self._scale,
                n=n, m=m, d=self._d, bias=r.bias,
                sliced=split and plan.pairwise == E.PW_DOT.value)
        return G.launch_prepared(ops, plan, out)
