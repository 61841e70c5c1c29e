"""K(X, X) and its gradient with respect to the log hyperparameters, in float64 torch on any device.

What scikit-learn's Gaussian-process code asks of a kernel (``kernel(X, eval_gradient=True)``),
computed where the data are (the GPU) instead of by the NumPy reference on the CPU. The float64
twin is :meth:`kernelkit_math.registry.KernelSpec.gradient`: same values, same column layout.

The kernel is the plain-PyTorch Gram matrix of :func:`kernelkit_gpu.pairwise.naive.symmetric_gram`
(distances by direct differences, as the reference: exact for near-duplicate points), with the
epilogue parameters and per-feature scales computed from the hyperparameters by the very function
the Triton launchers use (the row's ``pack`` in :data:`kernelkit_gpu.epilogues.EPILOGUES`); each
gradient column is one forward-mode derivative (``torch.func.jvp``) along that hyperparameter,
scaled by its value
(d/dlog p = p d/dp, which also holds at p = 0 and for negative ``coef0``). Exact derivatives, no
finite differences, and no (n, n, d) tensor of per-feature differences.

Cost: one Gram matrix per gradient column plus one, each O(n^2 d) elementwise work on the device;
memory :func:`log_gradient_bytes`.
"""

from __future__ import annotations

import dataclasses
import threading

import numpy as np
import torch

from kernelkit_gpu import _launch
from kernelkit_gpu import checks
from kernelkit_gpu import epilogues as E
from kernelkit_gpu import prepare as P
from kernelkit_gpu.pairwise.naive import symmetric_gram
from kernelkit_math.registry import get_kernel

__all__ = ["gram_log_gradient", "log_gradient_bytes"]

#: Forward-mode AD levels are process-wide state in torch: concurrent jvp calls from several
#: threads corrupt each other's levels, so gradient evaluations take turns.
_FORWARD_AD_LOCK = threading.Lock()

#: n x n float64 temporaries alive at once besides the result: the primal and tangent of the
#: row blocks, their concatenation, the triangle, its transpose and the sum.
_TEMPORARIES = 8


def log_gradient_bytes(n_samples, n_columns):
    """Peak device memory of :func:`gram_log_gradient` in bytes (K, dK and temporaries)."""
    return 8 * n_samples * n_samples * (1 + n_columns + _TEMPORARIES)


def gram_log_gradient(x, kernel="rbf", **params):
    """K(X, X) and dK / dlog(theta) for a registry kernel, float64, on ``x``'s device.

    Parameters
    ----------
    x : torch.Tensor of shape (n, d)
        Floating data, finite; computed in float64 whatever its dtype.
    kernel : str, default="rbf"
        Registry kernel name.
    **params
        Registry parameters (scalars, or per-feature vectors where the kernel allows them).

    Returns
    -------
    K : torch.Tensor of shape (n, n), float64
        Exactly symmetric, with the exact diagonal.
    dK : torch.Tensor of shape (n, n, n_columns), float64
        Derivatives with respect to the log of each hyperparameter of the registry entry, in
        its order, a per-feature parameter taking one column per feature: the layout of
        ``get_kernel(kernel).gradient(X, **params)``.

    Raises
    ------
    ValueError
        Non-finite or empty ``x``, an unknown kernel, or a parameter out of range.
    TypeError
        ``x`` not a floating tensor, or a parameter of the wrong type.
    """
    checks.check_pair(x, None)
    checks.check_finite(x, "x")
    x = x.detach().to(torch.float64)
    n, d = x.shape
    spec = get_kernel(kernel)
    plan = P.kernel_plan(kernel, d, params)
    resolved = spec.explicit(d, plan.params)  # gamma=None -> 1/d ...: differentiable values
    names = [p.name for p in spec.hyperparameters]
    values = {name: torch.as_tensor(np.asarray(resolved[name], dtype=np.float64), device=x.device)
              for name in names}

    def as_tensor(v):
        return torch.as_tensor(v, dtype=torch.float64, device=x.device)

    def gram_of(*hyper):
        """K(X, X) as a function of the hyperparameter tensors (what jvp differentiates)."""
        prm, scale = E.EPILOGUES[spec.name].pack(dict(resolved, **dict(zip(names, hyper))))
        p = dataclasses.replace(plan, prm=tuple(as_tensor(v) for v in prm),
                                scale=None if scale is None else as_tensor(scale))
        return symmetric_gram(x, p, direct=True)

    primals = tuple(values[name] for name in names)
    n_columns = sum(v.numel() for v in primals)
    if n_columns == 0:
        return symmetric_gram(x, plan, direct=True), _launch.alloc((n, n, 0), torch.float64, x.device)
    dK = _launch.alloc((n, n, n_columns), torch.float64, x.device)
    column = 0
    with _FORWARD_AD_LOCK:
        for i, value in enumerate(primals):
            for j in range(value.numel()):
                tangent = [torch.zeros_like(v) for v in primals]
                tangent[i].view(-1)[j] = value.view(-1)[j]  # d/dlog p = p d/dp
                K, dK[:, :, column] = torch.func.jvp(gram_of, primals, tuple(tangent))
                column += 1
    return K, dK

