"""Packed variable-length batches (``cu_seqlens``): the tile table and its checks.

Sequence i of a packed batch holds the tokens ``cu_seqlens[i]:cu_seqlens[i + 1]`` of q, k and v
(each of shape (total, H, D)). A varlen kernel launch has one program per (tile, head); program
``p`` reads row ``p`` of the table of its block size: ``(start, length, offset)``, the first token
and length of its sequence and the first position of its tile inside it. It then runs the dense
tile code with T = S = length on the sequence's rows only, so no row sees another sequence.

The table is built on the device with torch ops (no host read), once per call, for every block
size in :data:`TABLE_BLOCKS`, so that whichever config the autotuner picks finds its rows: the
kernels locate their part with :func:`_table_row` from the constexpr block size. A table of block
size b has ``cdiv(total, b) + n_seqs`` rows (each sequence adds at most one partial tile); rows past
the real tiles are ``(0, 0, 0)``: length 0, so their loops are empty and their stores masked.
Rows are ordered heaviest first (longest sequences; with ``causal``, the latest tiles), for the
tail balance the dense causal kernels get from reversing the query-block order.

The table is safe for any ``cu_seqlens`` (starts and lengths are clamped into [0, total]): the
values are checked on the device by :func:`kernelkit_gpu.attention.varlen_naive.start_check`
and the flag is read after the kernels are queued, as the finiteness gate does
(:mod:`kernelkit_gpu.attention._gate`).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


__all__ = ["TABLE_BLOCKS", "table_rows", "tile_table"]

#: Block sizes with a table (every BLOCK_M / BLOCK_N1 / BLOCK_M2 of the configs is one of them).
TABLE_BLOCKS = (128, 64, 32, 16)


def table_rows(total, n_seqs, block):
    """Rows of the table of one block size: an upper bound on the tiles of any packing."""
    return triton.cdiv(total, block) + n_seqs


@triton.jit
def _table_row(tab_ptr, pid, TOTAL, NSEQ, BLOCK: tl.constexpr):
    """(start, length, offset) of program ``pid`` in the table of block size BLOCK."""
    off = pid.to(tl.int64)
    if BLOCK < 128:
        off += tl.cdiv(TOTAL, 128) + NSEQ
    if BLOCK < 64:
        off += tl.cdiv(TOTAL, 64) + NSEQ
    if BLOCK < 32:
        off += tl.cdiv(TOTAL, 32) + NSEQ
    row = tab_ptr + off * 3
    return tl.load(row), tl.load(row + 1), tl.load(row + 2)


def tile_table(cu_seqlens, total, causal):
    """int32 (rows, 3) table of every block size in :data:`TABLE_BLOCKS`, concatenated."""
    cu = cu_seqlens.to(torch.int64).clamp(0, total)
    n = cu.numel() - 1
    starts = cu[:-1]
    lens = (cu[1:] - starts).clamp(min=0)
    lens = torch.minimum(lens, total - starts)
    parts = []
    for block in TABLE_BLOCKS:
        tiles = (lens + block - 1) // block
        ends = torch.cumsum(tiles, 0)
        pid = torch.arange(table_rows(total, n, block), device=cu.device)
        seq = torch.searchsorted(ends, pid, right=True)
        real = seq < n
        seq = seq.clamp(max=n - 1)
        offset = (pid - (ends[seq] - tiles[seq])) * block
        rows = torch.stack([starts[seq], lens[seq], offset], 1)
        rows = torch.where(real[:, None], rows, 0)
        weight = torch.where(real, offset if causal else lens[seq], -1)
        parts.append(rows[torch.argsort(weight, descending=True, stable=True)])
    return torch.cat(parts).to(torch.int32).contiguous()
