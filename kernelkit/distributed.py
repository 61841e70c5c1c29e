"""kernelkit over ``torch.distributed``: one process per GPU, rows of X sharded over the ranks.

Detection, not an argument: when a process group of more than one rank is initialised
(``torchrun`` plus ``torch.distributed.init_process_group``, or :func:`init_from_env`),
:func:`kernelkit.gram`, :func:`kernelkit_gpu.kernel_matvec`, :class:`kernelkit.KernelRidge`,
:class:`kernelkit.GaussianProcessRegressor` and the fits of :class:`kernelkit.SVC`,
:class:`kernelkit.SVR` and :class:`kernelkit.OneClassSVM` run distributed. Every rank makes the same call
with the same full arguments (the whole X and y: scikit-learn's ``fit(X, y)`` contract is
unchanged) and gets the same full result; each rank computes its contiguous block of rows.
``with kernelkit_gpu.distributed.local():`` runs a call on this rank alone. See
docs/distributed.md.

Every entry point starts with one agreement: its argument checks run on every rank inside
:func:`kernelkit_gpu.distributed.agree` (an error on any rank is raised on every rank), then the
arguments are compared by digest (:func:`kernelkit_gpu.distributed.check_same`); the
estimators do both through :func:`checked`. Decisions that depend on the free memory are rank
0's (:func:`rank0_decision`).

This module does not import torch: without it loaded no process group can exist.
"""

from __future__ import annotations

import os
import sys

__all__ = ["active", "init_from_env", "finish"]

#: Estimator parameters :func:`checked` does not compare: every rank uses rank 0's random draws,
#: and a progress bar may show on one rank only.
UNCHECKED_PARAMS = ("random_state", "verbose")


def active():
    """True when a ``torch.distributed`` process group of more than one rank is initialised
    (and not inside ``kernelkit_gpu.distributed.local()``)."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.distributed.is_available():
        return False
    if not torch.distributed.is_initialized():
        return False
    from kernelkit_gpu import distributed

    return distributed.active()


def init_from_env(device="auto", timeout_s=600):
    """Initialise the default process group from torchrun's environment (``env://``).

    Does nothing (returns False) when ``WORLD_SIZE`` is unset or 1, or a group already exists.
    Otherwise picks NCCL when this rank computes on a GPU (and selects GPU ``LOCAL_RANK``),
    gloo on the CPU, and returns True (call :func:`finish` at the end).

    Parameters
    ----------
    device : {"auto", "cpu", "cuda"}
        Where this process computes (as the ``device`` arguments of kernelkit).
    timeout_s : float
        Most seconds a collective waits for the other ranks (a rank that died).
    """
    import datetime

    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return False
    import torch

    if torch.distributed.is_initialized():
        return False
    from kernelkit._util.device import resolve_device

    gpu = resolve_device(device) == "cuda"
    if gpu:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    torch.distributed.init_process_group(
        backend="nccl" if gpu else "gloo", init_method="env://",
        timeout=datetime.timedelta(seconds=timeout_s))
    return True


def finish():
    """Destroy the default process group (after :func:`init_from_env` returned True)."""
    import torch

    torch.distributed.destroy_process_group()


def checked(name, estimator, validate, **arguments):
    """``validate(**arguments)``: the argument checks of ``estimator``'s entry point ``name``.

    Alone, just that. Under a process group it is the entry point's first collective:
    ``validate`` runs on every rank inside :func:`kernelkit_gpu.distributed.agree` (an error on
    any rank is raised on every rank as ``rank R of W: ...``), then
    :func:`kernelkit_gpu.distributed.check_same` raises ValueError on every rank unless every
    rank passed the same ``arguments`` and estimator parameters (but
    :data:`UNCHECKED_PARAMS`) and resolved the same device.

    Returns
    -------
    What ``validate`` returned.
    """
    if not active():
        return validate(**arguments)
    from kernelkit._util.device import resolve_device
    from kernelkit_gpu import distributed as D

    def run():
        return validate(**arguments), resolve_device(estimator.device)

    result, device = D.agree(run)
    params = {k: v for k, v in estimator.get_params(deep=False).items()
              if k not in UNCHECKED_PARAMS}
    D.check_same(name, **arguments, parameters=params, device=device)
    return result


def rank0_decision(fn, *args):
    """``fn(*args)``, a decision that may differ between processes (it depends on this
    process's free memory, or on unseeded random draws).

    Alone, just that. Under a process group ``fn`` runs on rank 0 only and its (picklable)
    result is broadcast, so every rank takes the same decision; an error in ``fn`` is raised on
    every rank (``rank 0 of W: ...``).
    """
    if not active():
        return fn(*args)
    from kernelkit_gpu import distributed as D

    rank, _ = D.world()
    return D.broadcast_object(D.agree(lambda: fn(*args) if rank == 0 else None))
