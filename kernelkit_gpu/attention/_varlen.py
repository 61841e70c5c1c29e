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
Rows run in reverse order of the packing (each sequence's last tiles first), the order the dense
causal kernels get from reversing the query blocks, for the tail balance of causal calls. Built
by one small Triton launch (a few microseconds; a version in torch ops took ~100 small kernels).

The table is safe for any ``cu_seqlens`` (starts and lengths are clamped into [0, total]): the
same launch checks the values and sets a flag that the caller reads after the attention kernels
are queued, as the finiteness gate does (:mod:`kernelkit_gpu.attention.gate`).
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
    if block not in TABLE_BLOCKS:  # a config outside the table's sizes (a new config set)
        raise RuntimeError(f"varlen attention: block size {block} has no tile table "
                           f"(sizes {TABLE_BLOCKS}); add it to _varlen.TABLE_BLOCKS")
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


@triton.jit
def _tile_table_kernel(cu_ptr, tab_ptr, ok_ptr, TOTAL, NSEQ, MAXLEN, BLOCK_R: tl.constexpr,
                       BLOCK_S: tl.constexpr):
    """Rows [pid * BLOCK_R, +BLOCK_R) of the table of block size TABLE_BLOCKS[program_id(1)].

    Tile p of that table is tile p' = n_tiles - 1 - p of the packing in sequence order (the
    last tiles first: the longest causal rows of each sequence before its short ones); its
    sequence s is the one whose tiles [excl_s, incl_s) contain p'. The sequences are scanned in
    chunks of BLOCK_S (a prefix sum per chunk), twice: once for n_tiles, once to match.
    Program (0, 0) also writes ok: cu_seqlens starts at 0, ends at TOTAL, never decreases and
    has no length above MAXLEN (1, else 0)."""
    pid = tl.program_id(0)
    j = tl.program_id(1)
    b = tl.where(j == 0, 128, tl.where(j == 1, 64, tl.where(j == 2, 32, 16)))  # TABLE_BLOCKS[j]
    off = tl.where(j > 0, tl.cdiv(TOTAL, 128) + NSEQ, 0)
    off += tl.where(j > 1, tl.cdiv(TOTAL, 64) + NSEQ, 0)
    off += tl.where(j > 2, tl.cdiv(TOTAL, 32) + NSEQ, 0)
    cap = tl.cdiv(TOTAL, b) + NSEQ
    p = pid * BLOCK_R + tl.arange(0, BLOCK_R)
    n_tiles = tl.full([], 0, tl.int64)
    bad = tl.full([], 0, tl.int32)
    for s0 in range(0, NSEQ, BLOCK_S):
        s = s0 + tl.arange(0, BLOCK_S)
        raw_lo = tl.load(cu_ptr + s, mask=s < NSEQ, other=0).to(tl.int64)
        raw_hi = tl.load(cu_ptr + s + 1, mask=s < NSEQ, other=0).to(tl.int64)
        bad += tl.sum(((raw_hi < raw_lo) | (raw_hi - raw_lo > MAXLEN)).to(tl.int32), 0)
        lo = tl.minimum(tl.maximum(raw_lo, 0), TOTAL)
        hi = tl.minimum(tl.maximum(raw_hi, lo), TOTAL)
        n_tiles += tl.sum((hi - lo + b - 1) // b, 0)
    first_cu = tl.load(cu_ptr).to(tl.int64)
    last_cu = tl.load(cu_ptr + NSEQ).to(tl.int64)
    ok = (bad == 0) & (first_cu == 0) & (last_cu == TOTAL)
    tl.store(ok_ptr, ok.to(tl.int32), mask=(pid == 0) & (j == 0))
    target = n_tiles - 1 - p  # < 0 past the real tiles: matches nothing, the row stays (0, 0, 0)
    start = tl.zeros((BLOCK_R,), tl.int64)
    length = tl.zeros((BLOCK_R,), tl.int64)
    first = tl.zeros((BLOCK_R,), tl.int64)
    before = tl.full([], 0, tl.int64)
    for s0 in range(0, NSEQ, BLOCK_S):
        s = s0 + tl.arange(0, BLOCK_S)
        lo = tl.minimum(tl.maximum(tl.load(cu_ptr + s, mask=s < NSEQ, other=0).to(tl.int64), 0), TOTAL)
        hi = tl.minimum(tl.maximum(tl.load(cu_ptr + s + 1, mask=s < NSEQ, other=0).to(tl.int64), lo), TOTAL)
        t = (hi - lo + b - 1) // b
        incl = tl.cumsum(t, 0) + before
        excl = incl - t
        hit = (excl[None, :] <= target[:, None]) & (target[:, None] < incl[None, :])
        start += tl.sum(tl.where(hit, lo[None, :], 0), 1)
        length += tl.sum(tl.where(hit, (hi - lo)[None, :], 0), 1)
        first += tl.sum(tl.where(hit, (target[:, None] - excl[None, :]) * b, 0), 1)
        before += tl.sum(t, 0)
    row = tab_ptr + (off + p.to(tl.int64)) * 3
    keep = p < cap
    tl.store(row, start.to(tl.int32), mask=keep)
    tl.store(row + 1, length.to(tl.int32), mask=keep)
    tl.store(row + 2, first.to(tl.int32), mask=keep)


def tile_table(cu_seqlens, total, max_seqlen=None):
    """``(table, ok)``: the int32 (rows, 3) table of every block size in :data:`TABLE_BLOCKS`,
    concatenated, and an int32 () flag, 1 if ``cu_seqlens`` is valid (starts at 0, ends at
    ``total``, non-decreasing, no length above ``max_seqlen``). One launch of
    ``_tile_table_kernel``; nothing is read on the host."""
    n = cu_seqlens.numel() - 1
    rows = sum(table_rows(total, n, b) for b in TABLE_BLOCKS)
    table = torch.empty((rows, 3), dtype=torch.int32, device=cu_seqlens.device)
    ok = torch.empty((), dtype=torch.int32, device=cu_seqlens.device)
    block_r = 64
    grid = (triton.cdiv(table_rows(total, n, TABLE_BLOCKS[-1]), block_r), len(TABLE_BLOCKS))
    _tile_table_kernel[grid](cu_seqlens.contiguous(), table, ok, total, n,
                             total if max_seqlen is None else min(max_seqlen, total + 1),
                             BLOCK_R=block_r, BLOCK_S=32)
    return table, ok
