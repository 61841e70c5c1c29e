""":func:`kernelkit.gram` over a process group: each rank computes its row blocks.

The arguments are validated on every rank inside :func:`kernelkit_gpu.distributed.agree` (an
error on any rank is raised on every rank), then compared by digest
(:func:`kernelkit_gpu.distributed.check_same`: the data, kernel, parameters, device, block size
and ``out`` path must be the same on every rank). The row blocks are those of the single-process
run, dealt out in contiguous runs. To a file they are exactly the single process's: the same
block size (``block_size=None``: the smallest any rank picks, which on the CPU is the single
process's), so the file is bit for bit the single-process file of that block size. K(X, X) is
computed as the single process writes a file (:func:`kernelkit.blocked_gram._fill_rows_sequential`):
a rank computes only its own rows, left of the diagonal by recomputing the earlier blocks' tiles
with the same arguments, so the matrix is exactly symmetric. In memory (``out=None``) the blocks
have at most ceil(n / world) rows, so that every rank gets some, and the rows are then
all-gathered, so every rank returns the whole matrix.

To a file, rank 0 creates and sizes the temporary file beside ``out`` (the free space check and
allocation of :func:`kernelkit._util.atomic.open_npy_memmap_atomic`), every rank opens it and writes its
rows, and after a collective check that every rank finished, rank 0 renames it into place. An
error on any rank removes the temporary file and raises on every rank. The file must be on a
file system every rank sees (the one shared-storage assumption).
"""

from __future__ import annotations

import contextlib
import sys

import numpy as np

from kernelkit._util.device import to_cuda

__all__ = ["gram"]


def _blocks(n_rows, block_size):
    return [(i0, min(i0 + block_size, n_rows)) for i0 in range(0, n_rows, block_size)]


def gram(B, X, Y=None, kernel="rbf", *, out=None, block_size=None, progress=None,
         device="auto", **params):
    """:func:`kernelkit.gram` with the row blocks shared out over the process group (module
    docstring); same arguments, same result on every rank (``progress`` is checked, not shown).
    ``B`` is the module :mod:`kernelkit.blocked_gram`, whose checks and block loops run here
    (passed in, so that imports go one way)."""
    import torch

    from kernelkit_gpu import distributed as D

    rank, size = D.world()

    def validate():
        B._check_progress(progress)
        return B._validated(X, Y, kernel, out, block_size, device, params)

    spec, Xc, Yc, resolved, where, bs, dtype, path = D.agree(validate)
    D.check_same("gram", X=Xc, Y=Yc, kernel=spec.name, params=resolved, device=where,
                 block_size=block_size, out=path)  # the same call on every rank
    n_rows = Xc.shape[0]
    n_cols = n_rows if Yc is None else Yc.shape[0]
    if path is None:  # in memory: every rank gets rows
        bs = min(bs, -(-n_rows // size))
    # one block layout everywhere (block_size=None on a GPU depends on its free memory)
    bs = int(D.all_reduce(torch.tensor([float(bs)]), "min")[0])
    blocks = _blocks(n_rows, bs)
    first, last = D.shard(len(blocks), rank, size)
    mine = blocks[first:last]
    row_bounds = []
    for r in range(size):
        f, la = D.shard(len(blocks), r, size)
        row_bounds.append((blocks[f][0], blocks[la - 1][1]) if la > f else (0, 0))
    lo, hi = row_bounds[rank]

    def operands():
        if where != "cuda":
            return Xc, Yc
        A, C = Xc, Yc
        if C is not None and C.dtype != A.dtype:
            A, C = A.astype(np.float64), C.astype(np.float64)
        return to_cuda(A), None if C is None else to_cuda(C)

    Xd, Yd = D.agree(operands)

    def fill(K):
        for b, (i0, i1) in enumerate(mine):
            if Yd is None:
                done = [(j0, j1, bs) for j0, j1 in blocks[:first + b]]
                B._fill_rows_sequential(K, spec, Xd, resolved, i0, i1, bs, done, where)
            else:
                B._fill_block_mirrored(K, spec, Xd, Yd, resolved, i0, i1, where)

    if path is None:
        K = np.empty((n_rows, n_cols), dtype=np.float64)
        D.agree(fill, K)
        rows = torch.from_numpy(K[lo:hi])
        gathered = D.all_gather_rows(rows, n_rows, bounds=row_bounds)
        return gathered.numpy()
    return _to_file(path, (n_rows, n_cols), dtype, fill, rank)


def _to_file(path, shape, dtype, fill, rank):
    """Rank 0 creates the temporary file, every rank fills its rows, rank 0 renames it."""
    from kernelkit._util.atomic import open_npy_memmap_atomic
    from kernelkit_gpu import distributed as D

    stack = contextlib.ExitStack()
    try:
        def create():
            if rank == 0:
                return stack.enter_context(open_npy_memmap_atomic(path, shape, dtype)).filename
            return ""

        tmp = D.broadcast_text(D.agree(create), 0)

        def write():
            K = np.lib.format.open_memmap(tmp, mode="r+")
            if K.shape != tuple(shape) or K.dtype != np.dtype(dtype):
                raise OSError(f"{tmp}: the temporary Gram file does not have the expected shape")
            fill(K)
            K.flush()
            del K

        try:
            D.agree(write)
        except FileNotFoundError as exc:
            raise FileNotFoundError(
                f"{exc} (the output file must be on a file system shared by every rank)") from exc
    except BaseException:
        if not stack.__exit__(*sys.exc_info()):
            raise
    D.agree(stack.close)  # rank 0 renames the complete file onto ``path``
    return path
