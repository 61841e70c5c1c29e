"""Memory planning for the solvers: estimate before allocating, refuse clearly, size the blocks.

A fit keeps a few arrays for its whole duration (the data in operand form, the CG vectors, the
M x M landmark matrices) and streams kernel values in row blocks. :func:`plan_blocks` adds up
the former, compares the total with the memory available (free GPU memory on CUDA, available
RAM on the CPU), raises a ``ValueError`` that lists the parts when it does not fit, and returns
the bytes one kernel block may use.
"""

from __future__ import annotations

from kernelkit._util import host_memory
from kernelkit.operators import kernel_operator

__all__ = ["available_bytes", "plan_blocks", "auto_components", "GPU_BLOCK_SHARE",
           "GPU_BLOCK_BYTES_MAX"]

GIB = 2**30
#: Share of the GPU memory left after the persistent arrays that one kernel block may take.
GPU_BLOCK_SHARE = 0.5
#: Largest kernel block on the GPU (larger blocks are no faster).
GPU_BLOCK_BYTES_MAX = 4 * GIB
#: Largest share of the available memory the persistent arrays and one block may take.
USABLE_SHARE = 0.9
#: Float64 vectors of the CG length the solvers keep at once (solution, residual, preconditioned
#: residual, direction, product, right-hand side and the preconditioner's temporaries).
CG_VECTORS = 10


def available_bytes(where):
    """Memory available on ``where`` in bytes: free GPU memory on "cuda"; on "cpu" the host
    memory a new allocation can get (:func:`kernelkit._util.host_memory.available_bytes`, None when
    it cannot be read)."""
    if where == "cuda":
        import torch

        return int(torch.cuda.mem_get_info()[0])
    return host_memory.available_bytes()


def _round16(d):
    return -(-d // 16) * 16


def persistent_bytes(*, n, d, k, m, solver, triton, n_alphas=1):
    """Named byte counts of what a fit keeps for its whole duration.

    ``solver`` is "cg" (m = 0 without a preconditioner) or "nystrom"; ``n_alphas`` is the number
    of distinct alpha values (one M x M preconditioner factor each).
    """
    parts = {}
    if triton:
        parts["data (float32)"] = 4 * n * d
        parts["data (float64, for the exact residual)"] = 8 * n * d
        if solver == "cg":
            # kernel_matvec's prepared operands: centred, padded, split copies of X twice
            parts["matrix-free product workspace"] = 16 * n * _round16(d)
    else:
        parts["data (float64)"] = 8 * n * d
    length = n if solver == "cg" else m
    parts[f"CG vectors ({CG_VECTORS} x {length} x {k} float64)"] = CG_VECTORS * 8 * length * k
    if solver == "nystrom":
        parts["targets and K_Mn y (float64)"] = 8 * (n + m) * k
    if m and solver == "cg":
        parts[f"preconditioner factor and basis (2 x {n} x {m} float64)"] = 16 * n * m
    if m:
        count = _landmark_matrices(solver, n_alphas)
        parts[f"landmark matrices ({count} x {m} x {m} float64)"] = count * 8 * m * m
    return parts


#: ``n_components="auto"`` never takes more landmarks than this. On the GPU the CG steps grow
#: with M (float32 products resolve the small eigen-directions of a larger system less well, so
#: refinement restarts more often), and past 1e4 the time grows much faster than the accuracy
#: (docs/benchmarks.md, figures behind choices in the code).
AUTO_M_MAX = {"cuda": 10_000, "cpu": 4_000}
#: Share of the memory left after the data and CG vectors that the landmark arrays may take.
AUTO_MEMORY_SHARE = 0.25


def _landmark_matrices(solver, n_alphas):
    """How many float64 M x M matrices a fit holds at its peak. "nystrom": K_MM, L, the Falkon
    inner matrix, the ridge metric, one shifted copy being factored and the factors so far
    (``FalkonSystem``); "cg": K_MM, its shifted copy and L while factoring, then the
    preconditioner's small matrices."""
    return (5 if solver == "nystrom" else 3) + n_alphas


def _landmark_bytes(n, m, solver, n_alphas):
    """Bytes that grow with M: the M x M matrices, and the n x M factor of "cg"."""
    return (_landmark_matrices(solver, n_alphas) * 8 * m * m
            + (16 * n * m if solver == "cg" else 0))


def auto_components(wanted, *, n, d, k, solver, where, triton, n_alphas=1):
    """M for ``n_components="auto"``: ``wanted`` landmarks (:mod:`kernelkit.estimators._ridge_auto`)
    at most n and :data:`AUTO_M_MAX`, and cut so that the landmark arrays take at most
    :data:`AUTO_MEMORY_SHARE` of the memory left once the data (n x d) and the CG vectors are
    held.
    """
    m = min(n, AUTO_M_MAX[where], wanted)
    avail = available_bytes(where)
    if avail is None:
        return max(1, m)
    fixed = sum(persistent_bytes(n=n, d=d, k=k, m=0, solver=solver, triton=triton).values())
    budget = AUTO_MEMORY_SHARE * (avail - fixed)
    while m > 1 and _landmark_bytes(n, m, solver, n_alphas) > budget:
        m = int(m * 0.9)
    return max(1, m)


def _gib(b):
    return f"{b / GIB:.3g} GiB"


def plan_blocks(op, *, n, d, k, m, solver, n_alphas=1):
    """Check that a fit with operator ``op`` fits in memory; return the bytes of one row block.

    Raises
    ------
    ValueError
        When the persistent arrays plus one block row need more than 90% of the available
        memory; the message lists each part and what to reduce.
    """
    where = op.device.type
    parts = persistent_bytes(n=n, d=d, k=k, m=m, solver=solver, triton=op.triton,
                             n_alphas=n_alphas)
    min_block = op.bytes_per_value * (m if m else n)
    need = sum(parts.values()) + min_block
    avail = available_bytes(where)
    if avail is not None and need > USABLE_SHARE * avail:
        listing = "; ".join(f"{name}: {_gib(b)}" for name, b in parts.items())
        raise ValueError(
            f"KernelRidge: this fit needs about {_gib(need)} of {where} memory ({listing}; one "
            f"kernel block row: {_gib(min_block)}) but {_gib(avail)} is available (at most "
            f"{USABLE_SHARE:.0%} is used). Reduce n_components (M x M matrices), use "
            f"solver='nystrom' (CG vectors of length M instead of n), or fit on fewer samples."
        )
    if where == "cuda":
        spare = (avail - sum(parts.values())) if avail is not None else GPU_BLOCK_BYTES_MAX
        return int(max(min_block, min(GPU_BLOCK_BYTES_MAX, GPU_BLOCK_SHARE * spare)))
    return max(min_block, kernel_operator.CPU_BLOCK_BYTES)
