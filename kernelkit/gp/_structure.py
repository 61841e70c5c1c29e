"""Which kernels the large-N regressor accepts, and how ``kernel.theta`` maps onto them.

The regressor supports the compositions users write with scikit-learn's kernel algebra::

    [ConstantKernel *] base [+ WhiteKernel]

(the factors and terms in either order), where ``base`` is a stationary kernel with a closed form
in the scaled distance r = ||(x - x') / length_scale|| (scalar or per-feature length scale):

- :class:`kernelkit.RBF` or scikit-learn's ``RBF``: exp(-r^2 / 2);
- :class:`kernelkit.Matern` or scikit-learn's ``Matern`` with nu in {0.5, 1.5, 2.5};
- :class:`kernelkit.RationalQuadratic` or scikit-learn's: (1 + r^2 / (2 alpha))^(-alpha).

:func:`parse_kernel` checks the structure once and returns a :class:`KernelStructure`, whose
:meth:`KernelStructure.params` turns a log-hyperparameter vector laid out exactly as
``kernel.theta`` (scikit-learn's order: the leaves left to right, each leaf's non-fixed
hyperparameters sorted by name) into torch tensors, so that torch.autograd differentiates with
respect to ``theta`` itself.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from sklearn.gaussian_process import kernels as skk

from kernelkit import kernels as kkk

__all__ = ["KernelStructure", "parse_kernel", "SUPPORTED"]

SUPPORTED = (
    "[ConstantKernel *] base [+ WhiteKernel], with base one of kernelkit.RBF, kernelkit.Matern "
    "(nu in {0.5, 1.5, 2.5}), kernelkit.RationalQuadratic or scikit-learn's RBF, Matern, "
    "RationalQuadratic; ConstantKernel and WhiteKernel from sklearn.gaussian_process.kernels"
)

_BASES = {
    kkk.RBF: "rbf", skk.RBF: "rbf",
    kkk.Matern: "matern", skk.Matern: "matern",
    kkk.RationalQuadratic: "rq", skk.RationalQuadratic: "rq",
}

#: (leaf role, hyperparameter name) -> name of the parameter in :meth:`KernelStructure.params`.
_PARAM_NAMES = {
    ("constant", "constant_value"): "outputscale",
    ("white", "noise_level"): "noise",
    ("base", "length_scale"): "length_scale",
    ("base", "alpha"): "rq_alpha",
}


def _unsupported(kernel, why):
    return TypeError(
        f"kernel {kernel!r} is not supported by kernelkit.GaussianProcessRegressor ({why}); "
        f"supported: {SUPPORTED}"
    )


def _base_kind(k):
    return _BASES.get(type(k))


def _split_product(term, kernel):
    """A non-white term -> (constant leaf or None, base leaf), checking the structure."""
    if _base_kind(term) is not None:
        return None, term
    if isinstance(term, skk.Product):
        a, b = term.k1, term.k2
        if isinstance(a, skk.ConstantKernel) and _base_kind(b) is not None:
            return a, b
        if isinstance(b, skk.ConstantKernel) and _base_kind(a) is not None:
            return b, a
    raise _unsupported(kernel, f"cannot use the term {term!r}")


def _leaves_in_order(k):
    """The leaves of a Sum/Product tree, left to right (the order of ``kernel.theta``)."""
    if isinstance(k, (skk.Sum, skk.Product)):
        return _leaves_in_order(k.k1) + _leaves_in_order(k.k2)
    return [k]


@dataclasses.dataclass(frozen=True)
class KernelStructure:
    """A parsed kernel ``outputscale * base(r) + noise * I``.

    Attributes
    ----------
    kind : {"rbf", "matern", "rq"}
    nu : float or None
        Matérn smoothness (0.5, 1.5 or 2.5); None for the other kinds.
    layout : tuple of (str, int, int)
        For each non-fixed hyperparameter in ``theta`` order: the parameter name
        ("outputscale", "noise", "length_scale", "rq_alpha"), its start in ``theta`` and size.
    fixed : dict of str to ndarray
        The values of the parameters not in ``theta`` (outputscale 1 and noise 0 when the
        kernel has no ConstantKernel / WhiteKernel).
    n_theta : int
    """

    kind: str
    nu: float | None
    layout: tuple
    fixed: dict
    n_theta: int

    @property
    def n_length_scales(self):
        """1 for an isotropic length scale, else the number of features it covers."""
        for name, _, size in self.layout:
            if name == "length_scale":
                return size
        return int(np.size(self.fixed["length_scale"]))

    def params(self, theta):
        """Kernel parameters from a log-hyperparameter tensor laid out as ``kernel.theta``.

        Parameters
        ----------
        theta : torch.Tensor of shape (n_theta,), float64

        Returns
        -------
        dict of str to torch.Tensor
            ``outputscale``, ``noise`` (0-d), ``length_scale`` (0-d or (d,)), and ``rq_alpha``
            (0-d) for the rational quadratic; float64, on ``theta``'s device, differentiable
            with respect to ``theta``.
        """
        import torch

        out = {}
        for name, start, size in self.layout:
            value = torch.exp(theta[start:start + size])
            out[name] = value.reshape(()) if size == 1 and name != "length_scale" else value
        for name, value in self.fixed.items():
            out[name] = torch.as_tensor(value, dtype=torch.float64, device=theta.device)
        if out["length_scale"].numel() == 1:
            out["length_scale"] = out["length_scale"].reshape(())
        return out


def parse_kernel(kernel):
    """Check that ``kernel`` has a supported structure and describe it.

    Parameters
    ----------
    kernel : sklearn.gaussian_process.kernels.Kernel

    Returns
    -------
    KernelStructure

    Raises
    ------
    TypeError
        For any other structure or base kernel; the message lists what is supported.
    ValueError
        For a Matérn nu other than 0.5, 1.5 or 2.5, or a non-positive parameter value.
    """
    if not isinstance(kernel, skk.Kernel):
        raise TypeError(f"kernel must be a scikit-learn Kernel object; got {kernel!r}. "
                        f"Supported: {SUPPORTED}")
    terms = []
    stack = [kernel]
    while stack:
        k = stack.pop()
        if isinstance(k, skk.Sum):
            stack.extend([k.k2, k.k1])
        else:
            terms.append(k)
    whites = [t for t in terms if isinstance(t, skk.WhiteKernel)]
    others = [t for t in terms if not isinstance(t, skk.WhiteKernel)]
    if len(whites) > 1 or len(others) != 1:
        raise _unsupported(kernel, "it needs exactly one base term and at most one WhiteKernel")
    constant, base = _split_product(others[0], kernel)
    kind = _base_kind(base)
    nu = None
    if kind == "matern":
        nu = float(base.nu)
        if nu not in (0.5, 1.5, 2.5):
            raise ValueError(f"kernel: Matern nu must be 0.5, 1.5 or 2.5; got {base.nu!r}")
    roles = {id(base): "base"}
    if constant is not None:
        roles[id(constant)] = "constant"
    if whites:
        roles[id(whites[0])] = "white"

    layout, fixed, start = [], {"outputscale": np.array(1.0), "noise": np.array(0.0)}, 0
    for leaf in _leaves_in_order(kernel):
        role = roles[id(leaf)]
        for hp in leaf.hyperparameters:
            name = _PARAM_NAMES.get((role, hp.name))
            if name is None:
                continue
            value = np.asarray(getattr(leaf, hp.name), dtype=np.float64)
            if not (np.all(np.isfinite(value)) and np.all(value > 0)) and not (
                    name == "noise" and hp.fixed and np.all(value == 0)):
                raise ValueError(f"kernel: {hp.name} must be finite and > 0; got {value!r}")
            if hp.fixed:
                fixed[name] = value.reshape(-1) if name == "length_scale" and value.ndim else value
            else:
                size = int(value.size)
                layout.append((name, start, size))
                fixed.pop(name, None)
                start += size
    return KernelStructure(kind, nu, tuple(layout), fixed, start)
