"""Gram matrices of any registry kernel, computed in row blocks, in memory or streamed to disk.

:func:`gram` is the large-scale entry point: it never holds more than one block of temporaries,
so ``out="K.npy"`` can write a Gram matrix larger than memory, front to back (row block after
row block), so the disk, not the page cache, sets the pace. The block loop in
:func:`_fill_blocks` is where this module computes kernel values (on the GPU through
``kernelkit_gpu.gram``, on the CPU through the float64 reference); the pairwise functions and the
kernel classes go through :mod:`kernelkit._compute` instead.
"""

from __future__ import annotations

import math
import os
import sys

import numpy as np

from kernelkit import distributed
from kernelkit._util.device import resolve_device, to_cuda
from kernelkit._util.atomic import check_npy_path, open_npy_memmap_atomic
from kernelkit._util.validation import check_pair, result_dtype
from kernelkit_math.registry import get_kernel, kernel_names

__all__ = ["gram", "default_block_size", "MEMORY_BUDGET_BYTES"]

#: Memory the temporaries of one block may use when ``block_size=None``.
MEMORY_BUDGET_BYTES = 256 * 2**20
#: GPU memory one block's output may use on "cuda" when ``block_size=None`` (at most a quarter
#: of the GPU memory free when the job starts).
GPU_MEMORY_BUDGET_BYTES = 2**30
#: GPU bytes per entry of an off-diagonal block: the output and its transpose, float64 at most.
_GPU_BYTES_PER_ENTRY = 16
#: float64 temporaries per Gram entry in the reference kernels (distances, exp, products...).
_BYTES_PER_ENTRY = 6 * 8
#: ``progress=None`` shows a bar when the job has at least this many blocks and entries.
_LONG_JOB_BLOCKS = 8
_LONG_JOB_ENTRIES = 2**24
#: Largest square tile on the CPU when K(X, X) is streamed to a file.
CPU_TILE_ROWS = 256


def default_block_size(n_rows, n_cols, memory_budget=MEMORY_BUDGET_BYTES, device="cpu", *,
                       tiled=False):
    """Rows per block so that one block's temporaries fit in ``memory_budget`` bytes.

    On "cuda" a block holds only its output (and its transpose) on the GPU, so the budget is
    :data:`GPU_MEMORY_BUDGET_BYTES` or a quarter of the free GPU memory, whichever is smaller, at
    16 bytes per entry. With ``tiled=True`` (K(X, X) streamed to a file) a block is a square
    tile of that many rows and columns (on the CPU at most :data:`CPU_TILE_ROWS`, small tiles
    being faster in cache). Returns an int in ``[1, n_rows]``.
    """
    if device == "cuda":
        memory_budget = min(GPU_MEMORY_BUDGET_BYTES, _free_gpu_bytes() // 4)
        per_entry = _GPU_BYTES_PER_ENTRY
    else:
        per_entry = _BYTES_PER_ENTRY
    if tiled:
        rows = math.isqrt(memory_budget // per_entry)
        if device != "cuda":
            rows = min(rows, CPU_TILE_ROWS)
    else:
        rows = memory_budget // (per_entry * max(int(n_cols), 1))
    return int(min(max(rows, 1), max(int(n_rows), 1)))


def _free_gpu_bytes():
    import torch

    free, _total = torch.cuda.mem_get_info()
    return int(free)


def _is_out_of_memory(exc):
    """A host ``MemoryError`` or a CUDA out-of-memory error (torch is only looked up if loaded)."""
    if isinstance(exc, MemoryError):
        return True
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(exc, torch.cuda.OutOfMemoryError)


def _check_kernel(kernel):
    if not isinstance(kernel, str):
        raise TypeError(
            f"kernel must be a kernel name (str), one of {', '.join(kernel_names())}; "
            f"got {kernel!r}"
        )
    return get_kernel(kernel)  # ValueError listing the known names


def _check_block_size(block_size, n_rows, n_cols, device, tiled):
    if block_size is None:
        return default_block_size(n_rows, n_cols, device=device, tiled=tiled)
    if isinstance(block_size, bool) or not isinstance(block_size, (int, np.integer)):
        raise TypeError(f"block_size must be a positive integer or None; got {block_size!r}")
    if block_size < 1:
        raise ValueError(f"block_size must be a positive integer or None; got {block_size!r}")
    return int(min(block_size, n_rows))


def _check_progress(progress):
    if progress is not None and not isinstance(progress, (bool, np.bool_)):
        raise TypeError(f"progress must be True, False or None; got {progress!r}")
    return progress


def _block_entries(i0, i1, n_cols, upper_only):
    """Entries a row block ``[i0, i1)`` writes (the upper block triangle when ``upper_only``)."""
    return (i1 - i0) * ((n_cols - i0) if upper_only else n_cols)


def _block_value(spec, A, B, params, device, transposed=False):
    """K(A, B) for one block as a NumPy array of shape (len(A), len(B)); ``B=None`` means K(A, A).

    ``K(A, None)`` is exactly symmetric, float64, with the kernel's exact float64 diagonal
    (``spec.diag_fn``) on either device. The only function that evaluates a kernel. On "cpu",
    ``A`` and ``B`` are NumPy arrays and the float64 registry reference runs; on "cuda" they are
    CUDA tensors and the Triton Gram kernel runs (float64 for float64 data, the accurate float32
    mode otherwise). With ``transposed=True`` it returns K(A, B).T, of shape (len(B), len(A)),
    with the same bits (made contiguous on the GPU so the host writes rows, not columns). Equal
    arguments give equal bits.
    """
    if device == "cuda":
        import kernelkit_gpu

        with kernelkit_gpu.assume_finite():  # the arrays passed check_pair (finite)
            K = kernelkit_gpu.gram(A, B, kernel=spec.name, **params)
        K = (K.T.contiguous() if transposed else K).cpu().numpy()
        if B is not None:
            return K
        # the GPU's diagonal is only as exact as its arithmetic (the dot-product kernels)
        K, A = K.astype(np.float64, copy=False), A.cpu().numpy().astype(np.float64, copy=False)
    else:
        K = spec.value_fn(A, B, **params)
        if B is not None:
            return K.T if transposed else K
    np.fill_diagonal(K, spec.diag_fn(A, **params))
    return K


def _fill_block_mirrored(K, spec, X, Y, params, i0, i1, device):
    """Rows ``[i0, i1)`` of K; for K(X, X) also their mirror image below the diagonal (a strip
    across all later rows: cheap in memory, ruinous in a file larger than memory)."""
    A = X[i0:i1]
    if Y is not None:
        K[i0:i1] = _block_value(spec, A, Y, params, device)
        return
    K[i0:i1, i0:i1] = _block_value(spec, A, None, params, device)
    if i1 < X.shape[0]:
        right = _block_value(spec, A, X[i1:], params, device)
        K[i0:i1, i1:] = right
        K[i1:, i0:i1] = right.T


def _fill_rows_sequential(K, spec, X, params, i0, i1, width, done, device):
    """Rows ``[i0, i1)`` of K(X, X), writing no other row.

    Right of the diagonal tile the rows are computed in tiles ``K(X[i0:i1], X[c0:c1])`` of
    ``width`` columns from ``i1``. Left of it, each entry is the transpose of the tile call that
    an earlier row block made for its own right part, recomputed with the same arguments, so
    K[i, j] and K[j, i] hold the same bits. ``done`` lists ``(j0, j1, w)`` for every earlier row
    block (its rows and tile width).
    """
    n = X.shape[0]
    A = X[i0:i1]
    for j0, j1, w in done:
        for t in range((i0 - j1) // w, (i1 - 1 - j1) // w + 1):  # tiles of block j meeting i
            c0, c1 = j1 + t * w, min(j1 + (t + 1) * w, n)
            lo, hi = max(c0, i0), min(c1, i1)
            below = _block_value(spec, X[j0:j1], X[c0:c1], params, device, transposed=True)
            K[lo:hi, j0:j1] = below[lo - c0:hi - c0]
    K[i0:i1, i0:i1] = _block_value(spec, A, None, params, device)
    for c0 in range(i1, n, width):
        c1 = min(c0 + width, n)
        K[i0:i1, c0:c1] = _block_value(spec, A, X[c0:c1], params, device)


def _fill_blocks(K, spec, X, Y, params, block_size, progress, device, sequential=False):
    """Write K(X, Y) (or K(X, X) when ``Y`` is None) into ``K`` row block by row block.

    For ``Y=None`` each row block computes its diagonal tile with ``K(A, None)`` (exactly
    symmetric, exact diagonal). With ``sequential=False`` (an array in memory) it computes the
    tiles right of the diagonal and mirrors them below it, so only the upper block triangle is
    computed. With ``sequential=True`` (a memory-mapped file) each row block writes only its own
    rows, left of the diagonal by recomputing the mirrored tiles
    (:func:`_fill_rows_sequential`): every entry is computed twice, but the file is written
    front to back, so a file larger than memory is written at disk speed. Either way ``K`` is
    exactly symmetric. A block that runs out of memory (host or GPU) is retried with half as
    many rows, down to a single row, so a size that fits on disk never ends in an out-of-memory
    crash; every entry of a retried block is rewritten, so symmetry stays exact.
    """
    symmetric = Y is None
    upper_only = symmetric and not sequential
    n_rows = X.shape[0]
    n_cols = n_rows if symmetric else Y.shape[0]
    total = sum(_block_entries(i0, min(i0 + block_size, n_rows), n_cols, upper_only)
                for i0 in range(0, n_rows, block_size))
    if progress is None:
        progress = -(-n_rows // block_size) >= _LONG_JOB_BLOCKS and total >= _LONG_JOB_ENTRIES
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(
            total=total, desc=f"gram {spec.name}", unit=" entries", unit_scale=True,
            file=sys.stderr, dynamic_ncols=True,
        )
    done = []
    try:
        i0 = 0
        while i0 < n_rows:
            i1 = min(i0 + block_size, n_rows)
            try:
                if symmetric and sequential:
                    _fill_rows_sequential(K, spec, X, params, i0, i1, block_size, done, device)
                else:
                    _fill_block_mirrored(K, spec, X, Y, params, i0, i1, device)
            except Exception as exc:  # noqa: BLE001 - only out-of-memory is retried
                if not _is_out_of_memory(exc) or i1 - i0 == 1:
                    raise
                block_size = (i1 - i0) // 2
                if device == "cuda":
                    sys.modules["torch"].cuda.empty_cache()
                continue
            done.append((i0, i1, block_size))
            if bar is not None:
                bar.update(_block_entries(i0, i1, n_cols, upper_only))
            i0 = i1
    finally:
        if bar is not None:
            bar.close()
    return K


def gram(X, Y=None, kernel="rbf", *, out=None, block_size=None, progress=None, device="auto",
         **params):
    """The Gram matrix K(X, Y) of a registry kernel, computed in row blocks.

    .. math::

        K_{ij} = k(x_i, y_j), \\qquad K \\in \\mathbb{R}^{n_X \\times n_Y}

    On the CPU every block is evaluated with the kernel's float64 reference from
    :mod:`kernelkit_math` (direct differences, no cancellation), so the result agrees with
    ``kernelkit_math.registry.get_kernel(kernel).value(X, Y, **params)`` to float64 rounding
    (the dot-product kernels may differ in the last bits because BLAS sums blocks in another
    order). With ``Y=None`` in memory only the upper block triangle is computed and mirrored
    (written to ``out``: see there); either way K(X, X) is exactly symmetric and its diagonal is
    the kernel's exact diagonal (``spec.diag_fn``). On the GPU the data move to the device once
    and each block runs the Triton Gram kernel (``kernelkit_gpu.gram``: float64 for float64
    data, the accurate float32 mode otherwise), then comes back to the host, so N is limited by
    disk, not GPU memory.

    Under an initialised ``torch.distributed`` process group of several ranks, every rank passes
    the same arguments and gets the same result; each computes its share of the row blocks
    (:mod:`kernelkit._gram_sharded`; to a file: rank 0 creates and renames it, so ``out``
    must be on storage every rank sees). docs/distributed.md.

    Parameters
    ----------
    X : array-like of shape (n_X, n_features)
        Real data; float32 stays float32 (it matters only for the dtype of an ``out`` file).
    Y : array-like of shape (n_Y, n_features), default=None
        ``None`` means ``Y = X``.
    kernel : str, default="rbf"
        A registry kernel name: one of ``kernelkit_math.kernel_names()``.
    out : None or str or os.PathLike, default=None
        ``None`` returns the matrix as a float64 ndarray. A path ending in ``.npy`` streams the
        blocks into a memory-mapped ``.npy`` file (float32 if every input is float32, else
        float64) written to a temporary file beside it and renamed onto ``out`` only when
        complete: an error or interruption (Ctrl-C, or in the main thread SIGTERM, SIGHUP,
        SIGQUIT and the other terminating signals left at their default action) never leaves a
        partial or temporary file. A missing directory is created (parents included; removed
        again if the write fails). The free disk space is checked and the file's blocks
        allocated before the first block is computed. ``out`` must not be the file behind X or
        Y (a memory-mapped input) and, if it exists, must be a regular file (not a FIFO or a
        device); a symbolic link is followed (its target is replaced, the link kept) and a
        replaced file keeps its permission bits. K(X, X) is written front to back
        in square tiles, each row block computing its own part left of the diagonal again
        (twice the kernel evaluations, but a file larger than memory goes at disk speed).
    block_size : int, default=None
        Rows per block. ``None`` picks it so that one block's temporaries stay within
        :data:`MEMORY_BUDGET_BYTES` (256 MiB; on the GPU :data:`GPU_MEMORY_BUDGET_BYTES`, 1 GiB, or
        a quarter of the free GPU memory if less); for K(X, X) written to ``out``, blocks are
        square tiles of at most :data:`CPU_TILE_ROWS` (256) rows on the CPU. A block that runs
        out of memory is retried with half as many rows. On the CPU the result does not depend
        on it beyond float64 rounding of the dot-product kernels (on the GPU, within the float32
        accuracy).
    progress : bool or None, default=None
        Show a tqdm progress bar on stderr. ``None`` shows one only for long jobs (at least 8
        blocks and 2**24 entries).
    device : {"auto", "cpu", "cuda"}, default="auto"
        Where the blocks are computed: "auto" is the GPU when one is present; "cuda" without a
        GPU raises ValueError.
    **params
        Kernel parameters with scikit-learn's names, validated by the registry
        (``gamma=None`` means 1 / n_features; ``gamma`` of rbf and laplacian and
        ``length_scale`` of matern and rational_quadratic may be per-feature arrays;
        gamma = 1 / (2 length_scale**2)).

    Returns
    -------
    K : ndarray of shape (n_X, n_Y), float64
        When ``out`` is None.
    path : str
        When ``out`` is a path: ``out`` itself, now a complete ``.npy`` file.

    Raises
    ------
    ValueError
        For an unknown kernel, an out-of-range parameter, X and Y with different numbers of
        features, empty / non-2-D / non-finite data, ``block_size < 1``, an ``out`` path not
        ending in ``.npy``, naming the memory-mapped file of X or Y, naming an existing file
        that is not a regular file, or in a directory on a file system without storage (such
        as /proc), or an unavailable ``device``.
    TypeError
        For an unknown parameter name, a non-numeric parameter or data, a non-integer
        ``block_size``, a ``kernel`` or ``out`` of the wrong type.
    PermissionError
        If the directory of ``out`` (or the nearest one that exists) is not writable.
    OSError
        errno ENOSPC when the disk of ``out`` has too little free space for the file (the
        message names the path, the bytes needed and available); nothing is written.

    Examples
    --------
    >>> import numpy as np
    >>> from kernelkit import gram
    >>> X = np.arange(6.0).reshape(3, 2)
    >>> K = gram(X, kernel="rbf", gamma=0.5, block_size=2)
    >>> K.shape, bool((K == K.T).all()), K[0, 0]
    ((3, 3), True, np.float64(1.0))
    >>> round(float(K[0, 1]), 6)  # exp(-0.5 * ||(0, 1) - (2, 3)||**2) = exp(-4)
    0.018316
    """
    if distributed.active():  # a process group: row blocks shared out (kernelkit.distributed)
        from kernelkit import _gram_sharded

        return _gram_sharded.gram(sys.modules[__name__], X, Y, kernel, out=out, block_size=block_size,
                          progress=progress, device=device, **params)
    spec, X, Y, resolved, where, block_size, dtype, path = _validated(
        X, Y, kernel, out, block_size, device, params)
    progress = _check_progress(progress)
    n_rows = X.shape[0]
    n_cols = n_rows if Y is None else Y.shape[0]
    if where == "cuda":  # move the data once; blocks come back to the host one at a time
        if Y is not None and Y.dtype != X.dtype:
            X, Y = X.astype(np.float64), Y.astype(np.float64)
        X = to_cuda(X)
        Y = None if Y is None else to_cuda(Y)
    if out is None:
        K = np.empty((n_rows, n_cols), dtype=np.float64)
        return _fill_blocks(K, spec, X, Y, resolved, block_size, progress, where)
    with open_npy_memmap_atomic(path, (n_rows, n_cols), dtype) as K:
        _fill_blocks(K, spec, X, Y, resolved, block_size, progress, where, sequential=True)
    return path


def _validated(X, Y, kernel, out, block_size, device, params):
    """The checked arguments of :func:`gram`: ``(spec, X, Y, resolved params, device, block
    size, output dtype, out path or None)``."""
    spec = _check_kernel(kernel)
    inputs = _mapped_inputs(X, Y)  # before check_pair, which may copy the arrays
    X, Y = check_pair(X, Y)
    resolved = spec.resolve(X.shape[1], **params)
    n_rows = X.shape[0]
    n_cols = n_rows if Y is None else Y.shape[0]
    where = resolve_device(device)
    sequential = out is not None and Y is None
    block_size = _check_block_size(block_size, n_rows, n_cols, where, tiled=sequential)
    dtype = result_dtype(X, Y)
    path = None
    if out is not None:
        if isinstance(out, np.ndarray) or not isinstance(out, (str, os.PathLike)):
            raise TypeError(f"out must be None or a path ending in .npy; got {type(out).__name__}")
        path = check_npy_path(out, "out", inputs=inputs)
    return spec, X, Y, resolved, where, block_size, dtype, path


def _mapped_inputs(X, Y):
    """``(name, file)`` of each of X and Y that is a view of a memory-mapped file
    (``np.load(..., mmap_mode="r")``), for the check that ``out`` is not an input."""
    found = []
    for name, a in (("X", X), ("Y", Y)):
        while isinstance(a, np.ndarray):
            if isinstance(a, np.memmap) and getattr(a, "filename", None):
                found.append((name, a.filename))
                break
            a = a.base
    return found
