"""Launch settings shared by every Triton launcher: interpreter flag, autotuning switch, config
choice, block sizes and output allocation.

Host-side only: nothing here launches a kernel.
"""

from __future__ import annotations

import os

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # no triton wheel for this platform (macOS, Windows, Linux on ARM)
    triton = tl = None

#: Whether triton is installed. Without it the plain-PyTorch twins still run, and each Triton
#: entry point raises the ImportError of :func:`needs_triton`.
HAS_TRITON = triton is not None

#: Whether the Triton interpreter was on when this package's kernels were defined: Triton reads
#: TRITON_INTERPRET when a kernel is decorated, so setting it later has no effect on them.
INTERPRET = HAS_TRITON and os.environ.get("TRITON_INTERPRET") == "1"


class _NoTriton:
    """What ``_epilogues`` sees as ``triton`` and ``triton.language`` where triton is missing.

    That module defines ``@triton.jit`` helpers and ``tl.constexpr`` ids beside the host-side
    epilogue table that the plain-PyTorch twins read. Without triton the helpers stay plain,
    never-called functions (every kernel that calls them lives in a module that imports triton
    itself) and an id keeps its number in ``.value``, as ``tl.constexpr`` does.
    """

    @staticmethod
    def jit(fn=None, **options):
        """``@triton.jit`` and ``@triton.jit(do_not_specialize=...)``: the function, unchanged."""
        return fn if fn is not None else (lambda f: f)

    class constexpr:  # noqa: N801 - the name of triton.language.constexpr
        def __init__(self, value):
            self.value = value


if not HAS_TRITON:
    triton = tl = _NoTriton


def needs_triton(name):
    """A stand-in for the Triton entry point ``name`` where triton is not installed: calling it
    raises an ImportError that says what is missing and what still runs."""

    def missing(*args, **kwargs):
        raise ImportError(
            f"kernelkit_gpu.{name} runs a Triton kernel, and triton is not installed (triton "
            f"wheels exist for Linux x86-64: pip install triton). Without it kernelkit runs on "
            f"the CPU: the scikit-learn kernels, pairwise functions and estimators with "
            f"device='cpu', and the attention API's plain-PyTorch path."
        )

    missing.__name__ = missing.__qualname__ = name
    return missing


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
    b = max(lo, 1 << (int(n) - 1).bit_length())
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
