"""Launch settings shared by every Triton launcher: interpreter flag, autotuning switch, config
choice, block sizes and output allocation.

Host-side only: nothing here launches a kernel.
"""

from __future__ import annotations

import os

import torch
import triton

#: Whether the Triton interpreter was on when this package's kernels were defined: Triton reads
#: TRITON_INTERPRET when a kernel is decorated, so setting it later has no effect on them.
INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"


def autotuning():
    """True only when KERNELKIT_GPU_AUTOTUNE=1: each new kernel variant then benchmarks a few
    candidate configs at its first launch instead of compiling one heuristic config (read at every
    first launch of a variant). Off by default: a first call compiles one config per kernel, and
    a new N or M never recompiles."""
    return os.environ.get("KERNELKIT_GPU_AUTOTUNE", "0") == "1"


def pick_configs(configs, default_index, keep=None):
    """An ``early_config_prune`` body: all configs passing ``keep`` (default: all), or only the
    default one when autotuning is switched off."""
    kept = [c for c in configs if keep is None or keep(c)] or list(configs)
    if not autotuning():
        d = configs[min(default_index, len(configs) - 1)]
        return [d] if d in kept else kept[:1]
    return kept


def block_size(n, lo=16, hi=None):
    """The block covering ``n`` elements of a dimension: the next power of two, at least ``lo``
    (the smallest ``tl.dot`` operand), at most ``hi`` when given."""
    b = max(lo, triton.next_power_of_2(int(n)))
    return b if hi is None else min(hi, b)


def alloc(shape, dtype, device):
    """Every output and scratch buffer of the attention launchers and of
    :func:`kernelkit_gpu.gram_log_gradient` comes from here (tests poison it with NaN so
    that elements a kernel leaves unwritten show up)."""
    return torch.empty(shape, dtype=dtype, device=device)


def unit_last_stride(t):
    """``t``, or a contiguous copy when its last dimension is strided (the kernels load rows as
    contiguous vectors)."""
    return t if t.stride(-1) == 1 else t.contiguous()
