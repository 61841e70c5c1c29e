"""Launch configs of the Gram kernels (:mod:`kernelkit_gpu.pairwise.gram_fused`): block shapes, the heuristic
defaults and the opt-in autotuning cache.

Measurements behind the heuristic configs: ``benchmarks/results/gram-tuning-notes.md``.
"""

from __future__ import annotations

from dataclasses import dataclass

import triton

from kernelkit_gpu import _launch
from kernelkit_gpu import prepare as P

__all__ = ["GramConfig", "mma_configs", "mma_default_config", "direct_configs",
           "direct_default_config", "autotuned"]


@dataclass(frozen=True)
class GramConfig:
    """Block shape and launch settings of one Gram launch (square blocks: the triangle needs them)."""

    block: int
    block_k: int
    num_warps: int
    num_stages: int
    maxnreg: int = 0  # > 0: cap registers per thread (more programs per multiprocessor)

    def kwargs(self):
        kw = dict(BLOCK_M=self.block, BLOCK_N=self.block, num_warps=self.num_warps,
                  num_stages=self.num_stages)
        if self.maxnreg and not _launch.INTERPRET:
            kw["maxnreg"] = self.maxnreg
        return kw


_INTERP_CONFIG = GramConfig(64, 16, 4, 1)


def _pow2_divisor(kd, cap):
    """Largest power of two <= cap dividing kd (kd a multiple of PAD_K)."""
    b = cap
    while kd % b:
        b //= 2
    return b


def mma_configs(kd, split, elem_size, sliced=False):
    """Candidate configs of the tensor-core kernel for KD padded features (autotuning and tests).

    ``sliced`` (accurate dot-product kernels): a second accumulator per tile, 16-feature slices.
    """
    if _launch.INTERPRET:
        return [_INTERP_CONFIG]
    bk = _pow2_divisor(kd, 32 if split else 64)
    if elem_size == 8:
        return [GramConfig(64, min(bk, 32), 4, 2), GramConfig(64, min(bk, 16), 4, 3)]
    if sliced:
        return [GramConfig(64, 16, 4, 3), GramConfig(128, 16, 8, 2)]
    return [
        GramConfig(128, bk, 8, 2 if kd <= bk else 3),
        GramConfig(128, bk, 8, 1),
        GramConfig(64, bk, 4, 3),
    ]


def mma_default_config(kd, split, elem_size, sliced=False):
    """The heuristic config (KERNELKIT_GPU_AUTOTUNE unset): see benchmarks/results/gram-tuning-notes.md."""
    return mma_configs(kd, split, elem_size, sliced)[0]


def direct_configs(d, pairwise):
    if _launch.INTERPRET:
        return [_INTERP_CONFIG]
    if d > P.DIRECT_MAX_D:  # the L1 distance over many features: ALU-bound
        return [GramConfig(64, 16, 4, 1, 72), GramConfig(64, 16, 4, 1), GramConfig(128, 16, 8, 1)]
    return [GramConfig(64, 16, 4, 1), GramConfig(128, 16, 8, 1)]


def direct_default_config(d, pairwise):
    # 64 x 64 tiles with 4 warps: few registers, many programs per multiprocessor (measured
    # faster than 128 x 128 with 8 or 16 warps both for D <= 16, write-bound, and for the L1
    # distance at D = 64, ALU-bound, where a cap of 72 registers fits 7 programs per
    # multiprocessor instead of 6: benchmarks/results/gram-tuning-notes.md)
    return direct_configs(d, pairwise)[0]


# ------------------------------------------------------------------ opt-in autotuning (cached)
_TUNED = {}


def _bench(fn):
    return triton.testing.do_bench(fn, warmup=5, rep=20, return_mode="median")


def autotuned(key, candidates, run):
    """Benchmark each candidate config once per key (KERNELKIT_GPU_AUTOTUNE=1); cache the best."""
    best = _TUNED.get(key)
    if best is None:
        if len(candidates) == 1:
            best = candidates[0]
        else:
            times = []
            for c in candidates:
                try:
                    times.append((_bench(lambda c=c: run(c)), c))
                except Exception:  # noqa: BLE001 - a config that does not fit is skipped
                    continue
            best = min(times, key=lambda tc: tc[0])[1] if times else candidates[-1]
        _TUNED[key] = best
    return best
