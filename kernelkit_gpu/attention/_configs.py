"""Launch settings of the softmax-attention kernels (:mod:`kernelkit_gpu.attention.softmax`,
:mod:`kernelkit_gpu.attention.softmax_bwd`): dot precision, config sets and their pruning, the
launch helper, and the ``AUTOTUNE`` switch shared with :mod:`kernelkit_gpu.attention.smoother`.
"""

from __future__ import annotations

import os

import torch
import triton

from kernelkit_gpu import _launch

#: Shared memory budget used to prune configs (bytes; sm_90 allows 227 KiB per block).
_SMEM_BUDGET = 227 * 1024

#: Autotune the attention kernels (softmax and kernel smoother) over their small config sets.
#: False (or KERNELKIT_ATTN_AUTOTUNE=0 at import): the first config that fits, no benchmarking;
#: the GPU test suite uses this to bound compilation time and checks every config separately.
AUTOTUNE = os.environ.get("KERNELKIT_ATTN_AUTOTUNE", "1") != "0"


def dot_precision(dtype):
    """float32 operands: IEEE float32 products (FMA units). Split-TF32 ("tf32x3") would run on
    tensor cores, but each of its products carries ~2^-21 relative error, 2-3x the error of eager
    float32 attention at small head dims: outside the 2x FlashAttention rule the tests enforce.
    16-bit operands: native tensor-core products with float32 accumulation."""
    return "ieee" if dtype == torch.float32 else "tf32"


def upcast(dtype):
    """The interpreter's tl.dot mis-multiplies bfloat16 operands (it multiplies bit patterns):
    there the kernels round to bfloat16 as on the GPU and multiply in float32."""
    return bool(_launch.INTERPRET and dtype == torch.bfloat16)


def constexprs(d, dv, causal, dtype):
    """The ``tl.constexpr`` settings the forward and backward kernels share (head dims padded
    to ``BLOCK_D`` / ``BLOCK_DV``; ``EVEN_*``: no masking of the head dim needed)."""
    block_d, block_dv = _launch.block_size(d), _launch.block_size(dv)
    return dict(BLOCK_D=block_d, BLOCK_DV=block_dv, EVEN_D=block_d == d, EVEN_DV=block_dv == dv,
                CAUSAL=causal, PREC=dot_precision(dtype), UPCAST=upcast(dtype))


def diagonal_arg(diagonal, t, s):
    """The kernels' int32 argument of a band diagonal (j <= i + d or j >= i + d; None: 0, unused):
    clamped to [-T, S], where it bounds every row of queries i < T and keys j < S as any
    value beyond does (a window of 2^40 keys stays in int32)."""
    return 0 if diagonal is None else min(max(int(diagonal), -int(t)), int(s))


def alloc_like(t, shape, dtype):
    """An output of ``shape`` (B, H, T, X) laid out as ``t``: (B, T, H, X) in memory when t's heads
    are inner to its positions (the (B, T, H, D) layout seen through ``transpose(1, 2)``)."""
    if t.stride(1) < t.stride(2):
        B, H, T, X = shape
        return _launch.alloc((B, T, H, X), dtype, t.device).transpose(1, 2)
    return _launch.alloc(shape, dtype, t.device)


# ------------------------------------------------------------------------------------- configs
#: Configs tagged ``fallback`` are tried only when every regular config is pruned (head dims
#: above 128, float32 operands): fewer compilations during autotuning of the common cases.
_FALLBACK = set()


def _sig(c):
    return tuple(sorted(c.kwargs.items())) + (c.num_warps, c.num_stages)


def _cfg(bm_key, bn_key, bm, bn, warps, stages, fallback=False):
    c = triton.Config({bm_key: bm, bn_key: bn}, num_warps=warps, num_stages=stages)
    if fallback:
        _FALLBACK.add(_sig(c))
    return c


def fwd_configs():
    if _launch.INTERPRET:
        return [_cfg("BLOCK_M", "BLOCK_N", 32, 16, 4, 1)]
    return [
        # first: the default without autotuning (sm_90, D = 128: 165 registers, no spills)
        _cfg("BLOCK_M", "BLOCK_N", 128, 64, 8, 3),
        _cfg("BLOCK_M", "BLOCK_N", 128, 128, 8, 3),  # 224 KiB of shared memory at D = 128
        _cfg("BLOCK_M", "BLOCK_N", 128, 64, 4, 3),
        _cfg("BLOCK_M", "BLOCK_N", 64, 64, 4, 3),
        _cfg("BLOCK_M", "BLOCK_N", 64, 32, 4, 2, fallback=True),
    ]


def dkdv_configs():
    if _launch.INTERPRET:
        return [_cfg("BLOCK_M1", "BLOCK_N1", 16, 32, 4, 1)]
    return [
        # sm_90, bf16, D = 128 (ptxas): 64 x 128 spills ~300 B, 32 x 128 (2 stages) ~0-160 B,
        # 16 x 128 none; the autotuner measures which costs least.
        _cfg("BLOCK_M1", "BLOCK_N1", 32, 128, 8, 2),
        _cfg("BLOCK_M1", "BLOCK_N1", 64, 128, 8, 2),
        _cfg("BLOCK_M1", "BLOCK_N1", 16, 128, 8, 3),
        _cfg("BLOCK_M1", "BLOCK_N1", 16, 64, 8, 2, fallback=True),  # D = 256: spills ~0.3 KiB
    ]


def dq_configs():
    if _launch.INTERPRET:
        return [_cfg("BLOCK_M2", "BLOCK_N2", 32, 16, 4, 1)]
    return [
        _cfg("BLOCK_M2", "BLOCK_N2", 128, 64, 8, 2),
        _cfg("BLOCK_M2", "BLOCK_N2", 128, 32, 8, 3),
        _cfg("BLOCK_M2", "BLOCK_N2", 64, 64, 4, 2),
        _cfg("BLOCK_M2", "BLOCK_N2", 64, 32, 4, 3, fallback=True),
    ]


#: float32 operands use IEEE products on the FMA units, which keep whole operand fragments in
#: registers: larger tiles spill kilobytes (ptxas, sm_90, D = 128). These compile without spills
#: for D <= 128; float32 is accurate, not fast (cast to bfloat16 for speed).
_FP32_CONFIGS = {
    "fwd": _cfg("BLOCK_M", "BLOCK_N", 32, 16, 4, 2),
    "dkdv": _cfg("BLOCK_M1", "BLOCK_N1", 16, 32, 4, 2),
    "dq": _cfg("BLOCK_M2", "BLOCK_N2", 32, 16, 4, 2),
}


def _elsize(args):
    t = args.get("q_ptr")
    return t.element_size() if hasattr(t, "element_size") else 2


def _prune(configs, args, m_key, n_key, streamed_bytes, register_words, which):
    """Drop configs whose pipelined tiles overflow shared memory, or whose live tiles would need
    far more than the 255 registers a thread has (head dims above 128). Keeps at least the
    smallest config. Estimates only: the autotuner measures the survivors. float32: one fixed
    FMA-friendly config (``_FP32_CONFIGS``)."""
    if _launch.INTERPRET:
        return configs[:1]
    es = _elsize(args)
    if es == 4:
        return [_FP32_CONFIGS[which]]
    bd, bdv = args["BLOCK_D"], args["BLOCK_DV"]
    kept = []
    for c in configs:
        bm, bn = c.kwargs[m_key], c.kwargs[n_key]
        streamed, resident = streamed_bytes(bm, bn, bd, bdv, es)
        smem = streamed * max(1, c.num_stages) + resident
        regs = register_words(bm, bn, bd, bdv, es) / (32 * c.num_warps)
        if smem <= _SMEM_BUDGET and regs <= 320:
            kept.append(c)
    regular = [c for c in kept if _sig(c) not in _FALLBACK]
    kept = regular or kept
    if not kept:  # nothing fits the estimates: the smallest tile, fewest stages, most warps
        kept = [min(configs, key=lambda c: (c.kwargs[m_key] * c.kwargs[n_key], c.num_stages,
                                             -c.num_warps))]
    return kept if AUTOTUNE else kept[:1]


def prune_fwd(configs, named_args, **kwargs):
    # shared memory: pipelined K and V tiles, Q staged once (matches ptxas for sm_90);
    # registers: Q, the float32 output and score tiles.
    return _prune(configs, dict(named_args, **kwargs), "BLOCK_M", "BLOCK_N",
                  lambda m, n, d, dv, es: (n * (d + dv) * es, m * d * es),
                  lambda m, n, d, dv, es: m * (d * es / 4 + dv + n), "fwd")


def prune_dkdv(configs, named_args, **kwargs):
    # shared memory: pipelined Q and dO tiles, K and V resident; registers: the float32 dK, dV
    # and two (BLOCK_N1, BLOCK_M1) tiles.
    return _prune(configs, dict(named_args, **kwargs), "BLOCK_M1", "BLOCK_N1",
                  lambda m, n, d, dv, es: (m * (d + dv) * es, n * (d + dv) * es),
                  lambda m, n, d, dv, es: n * ((d + dv) * es / 4 + d + dv + 2 * m), "dkdv")


def prune_dq(configs, named_args, **kwargs):
    # shared memory: pipelined K and V tiles, Q and dO resident; registers: the float32 dQ and
    # two (BLOCK_M2, BLOCK_N2) tiles.
    return _prune(configs, dict(named_args, **kwargs), "BLOCK_M2", "BLOCK_N2",
                  lambda m, n, d, dv, es: (n * (d + dv) * es, m * (d + dv) * es),
                  lambda m, n, d, dv, es: m * ((d + dv) * es / 4 + d + 2 * n), "dq")


def candidate_configs(dtype, d, dv):
    """The configs the autotuner would try for (dtype, D, Dv): {"fwd": [...], "dkdv": [...], "dq": [...]}."""
    args = dict(q_ptr=torch.empty(0, dtype=dtype), BLOCK_D=_launch.block_size(d),
                BLOCK_DV=_launch.block_size(dv))
    saved = globals()["AUTOTUNE"]
    globals()["AUTOTUNE"] = True
    try:
        return {"fwd": prune_fwd(fwd_configs(), args), "dkdv": prune_dkdv(dkdv_configs(), args),
                "dq": prune_dq(dq_configs(), args)}
    finally:
        globals()["AUTOTUNE"] = saved


def launch(kernel, grid, args, kwargs, config):
    """Launch through the autotuner, or (``config`` given) the plain jit function with that config."""
    if config is None:
        kernel[grid](*args, **kwargs)
    else:
        kernel.fn[grid](*args, **kwargs, **config.all_kwargs())
