"""Which kernels the Gaussian-process regressor accepts, as a tree it can evaluate.

Any kernel written with scikit-learn's kernel algebra, built from:

- ``Sum`` and ``Product`` of any supported kernels, and ``Exponentiation`` (a fixed exponent);
- ``ConstantKernel`` and ``WhiteKernel`` anywhere (alone, as a factor or as a summand);
- every positive semi-definite kernel of the registry (:mod:`kernelkit_math.registry`, flag
  ``psd``), as kernelkit's class (:data:`kernelkit.kernels.KERNEL_CLASSES`) or as the
  scikit-learn class the registry names for it (``SklearnEquivalent.gp_kernel``: ``RBF``,
  ``Matern``, ``RationalQuadratic``...), per-feature parameters wherever the class takes them;
- scikit-learn's ``DotProduct`` (the registry's linear kernel plus the constant sigma_0^2);
- the periodic kernel (``ExpSineSquared``) on one feature, where it is positive semi-definite
  (the registry marks it not PSD because with several features it need not be).

A new PSD registry kernel therefore reaches the regressor with no edit here: its class's
parameter map (:class:`kernelkit.kernels._RegistryKernel`) gives the registry parameters, the
registry's epilogue table its formula. Anything else raises TypeError naming the kernel.

:func:`parse_kernel` returns a :class:`KernelStructure`: the tree of nodes plus the layout of
``theta``, which is exactly scikit-learn's ``kernel.theta`` (log space, fixed hyperparameters
left out, leaves left to right, each leaf's hyperparameters sorted by name), so gradients with
respect to it compare with scikit-learn's directly. :meth:`KernelStructure.params` turns a theta
tensor into the parameter dictionary the operator (:mod:`._operator`) evaluates, differentiable
with respect to theta.

The top-level summands that are pure noise (a ``WhiteKernel``, possibly times constants) are
collected into one number, ``params["noise"]``: the operator adds it to the diagonal and the
preconditioner uses it as its shift. Every other summand is the "kernel part", evaluated block
by block; a WhiteKernel inside it (``RBF() * WhiteKernel()``) contributes on the pairs of a
block that are the same training point, and nowhere in a block against test points, as
scikit-learn's ``WhiteKernel(X, Y)`` is zero for ``Y`` given.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from sklearn.gaussian_process import kernels as skk

from kernelkit import kernels as kkk
from kernelkit_math.registry import REGISTRY

__all__ = ["KernelStructure", "parse_kernel", "SUPPORTED"]

#: Registry kernels that are PSD on one feature only (the registry's ``psd`` flag is False).
_PSD_ON_ONE_FEATURE = ("periodic",)

SUPPORTED = (
    "Sum, Product and Exponentiation of ConstantKernel, WhiteKernel, DotProduct and the positive "
    "semi-definite registry kernels: kernelkit's classes "
    + ", ".join(sorted(cls.__name__ for name, cls in kkk.KERNEL_CLASSES.items()
                       if REGISTRY[name].psd or name in _PSD_ON_ONE_FEATURE))
    + " (ExpSineSquared on one feature only) and scikit-learn's classes of the same kernels ("
    + ", ".join(sorted({spec.sklearn.gp_kernel for spec in REGISTRY.values()
                        if spec.sklearn.gp_kernel and not spec.sklearn.gp_fixed
                        and (spec.psd or spec.name in _PSD_ON_ONE_FEATURE)}))
    + ")"
)


def _unsupported(kernel, why):
    return TypeError(
        f"kernel {kernel!r} is not supported by kernelkit.GaussianProcessRegressor ({why}); "
        f"supported: {SUPPORTED}"
    )


# ------------------------------------------------------------------------------------ nodes
@dataclasses.dataclass(frozen=True)
class Sum:
    k1: object
    k2: object


@dataclasses.dataclass(frozen=True)
class Product:
    k1: object
    k2: object


@dataclasses.dataclass(frozen=True)
class Power:
    k: object
    exponent: float


@dataclasses.dataclass(frozen=True)
class Scalar:
    """A constant c (``ConstantKernel``) or c I on identical pairs (``white=True``).

    ``start`` is its position in theta (None when fixed, then ``value`` is used); the number is
    exp(``power`` * theta[start]) (``power`` 2 for DotProduct's sigma_0, 1 otherwise).
    """

    white: bool
    start: int | None
    value: float
    power: float = 1.0

    def number(self, theta):
        import torch

        if self.start is None:
            return torch.tensor(self.value, dtype=torch.float64, device=theta.device)
        return torch.exp(self.power * theta[self.start])


@dataclasses.dataclass(frozen=True, eq=False)
class Leaf:
    """A registry kernel, described by an instance of its kernelkit class.

    ``free``: for each non-fixed hyperparameter, (class parameter name, start in theta, size,
    scalar?). The registry parameters are the class's parameter map applied to the values.
    """

    kernel: object
    free: tuple

    @property
    def spec(self):
        return REGISTRY[self.kernel._registry_name]

    def fixed_numbers(self, n_features):
        """The registry parameters at the kernel's own values (validated, defaults explicit)."""
        return self.spec.explicit(n_features, self.kernel._registry_params(n_features))

    def numbers(self, theta, n_features):
        """Registry parameters, the free ones as float64 tensors differentiable in theta."""
        import torch

        out = dict(self.fixed_numbers(n_features))
        maps = {m.name: m for m in self.kernel._param_map}
        for name, start, size, scalar in self.free:
            m = maps[name]
            value = m.coef * torch.exp(m.power * theta[start:start + size])
            out[m.registry] = value.reshape(()) if scalar else value
        return out


# ----------------------------------------------------------------------------- the structure
@dataclasses.dataclass(frozen=True)
class KernelStructure:
    """A parsed kernel: ``kernel part + noise * I``.

    Attributes
    ----------
    kernel : sklearn.gaussian_process.kernels.Kernel
        The kernel parsed.
    root : node or None
        The kernel part (None when the kernel is pure noise, e.g. ``WhiteKernel()`` alone).
    noise_terms : tuple of tuple of Scalar
        The pure-noise summands, each a product of :class:`Scalar` factors.
    n_theta : int
    stationary : bool
        The kernel part depends on x - y only (its diagonal is then one number).
    """

    kernel: object
    root: object
    noise_terms: tuple
    n_theta: int
    stationary: bool

    def params(self, theta):
        """The parameters at a log-hyperparameter tensor laid out as ``kernel.theta``.

        Parameters
        ----------
        theta : torch.Tensor of shape (n_theta,), float64

        Returns
        -------
        dict
            ``theta`` (the tensor itself, which the operator evaluates the tree at) and
            ``noise`` (0-d float64, the sum of the pure-noise summands), differentiable with
            respect to ``theta``.
        """
        import torch

        noise = torch.zeros((), dtype=torch.float64, device=theta.device)
        for term in self.noise_terms:
            value = torch.ones((), dtype=torch.float64, device=theta.device)
            for factor in term:
                value = value * factor.number(theta)
            noise = noise + value
        return {"theta": theta, "noise": noise}


def _leaf(k, start, kernel, n_features):
    """A registry kernel object (kernelkit's or scikit-learn's class) -> Leaf."""
    if isinstance(k, kkk._RegistryKernel):
        kk = k
    else:
        name = type(k).__name__
        matches = [spec for spec in REGISTRY.values()
                   if spec.sklearn.gp_kernel == name and not spec.sklearn.gp_fixed]
        if not (type(k).__module__.startswith("sklearn.") and matches):
            raise _unsupported(kernel, f"{name} is not a kernel of the kernelkit registry")
        cls = kkk.KERNEL_CLASSES[matches[0].name]
        args = {}
        for m in cls._param_map:
            args[m.name] = getattr(k, m.name)
            if hasattr(k, m.name + "_bounds"):
                args[m.name + "_bounds"] = getattr(k, m.name + "_bounds")
        kk = cls(**args, device="cpu")
    spec = REGISTRY[kk._registry_name]
    if not spec.psd and not (spec.name in _PSD_ON_ONE_FEATURE and n_features in (None, 1)):
        where = " with more than one feature" if spec.name in _PSD_ON_ONE_FEATURE else ""
        raise _unsupported(kernel, f"{type(k).__name__} is not positive semi-definite{where}")
    if n_features is not None:
        kk._registry_params(n_features)  # validates values (and per-feature lengths) now
    free = []
    for hp in kk.hyperparameters:
        if hp.fixed:
            continue
        free.append((hp.name, start, int(hp.n_elements), np.ndim(getattr(kk, hp.name)) == 0
                     or np.size(getattr(kk, hp.name)) == 1))
        start += int(hp.n_elements)
    return Leaf(kk, tuple(free)), start


def _scalar(value, bounds, start, white, name, kernel):
    value = np.asarray(value, dtype=np.float64)
    if value.size != 1 or not np.isfinite(value).all() or value.reshape(()) < 0:
        raise ValueError(f"kernel: {name} must be a finite number >= 0; got {value!r}")
    fixed = isinstance(bounds, str) and bounds == "fixed"
    return Scalar(white, None if fixed else start, float(value.reshape(()))), start + (not fixed)


def _parse(k, start, kernel, n_features):
    """One node of the tree, and the next free position in theta."""
    if isinstance(k, (skk.Sum, skk.Product)):
        a, start = _parse(k.k1, start, kernel, n_features)
        b, start = _parse(k.k2, start, kernel, n_features)
        return (Sum(a, b) if isinstance(k, skk.Sum) else Product(a, b)), start
    if isinstance(k, skk.Exponentiation):
        a, start = _parse(k.kernel, start, kernel, n_features)
        return Power(a, float(k.exponent)), start
    if isinstance(k, skk.ConstantKernel):
        return _scalar(k.constant_value, k.constant_value_bounds, start, False,
                       "ConstantKernel constant_value", kernel)
    if isinstance(k, skk.WhiteKernel):
        return _scalar(k.noise_level, k.noise_level_bounds, start, True,
                       "WhiteKernel noise_level", kernel)
    if type(k) is skk.DotProduct:
        linear = kkk.KERNEL_CLASSES["linear"](device="cpu")
        sigma = np.asarray(k.sigma_0, dtype=np.float64)
        if sigma.size != 1 or not np.isfinite(sigma).all():
            raise ValueError(f"kernel: DotProduct sigma_0 must be a finite number; got {sigma!r}")
        fixed = isinstance(k.sigma_0_bounds, str) and k.sigma_0_bounds == "fixed"
        constant = Scalar(False, None if fixed else start, float(sigma.reshape(())) ** 2, 2.0)
        return Sum(Leaf(linear, ()), constant), start + (not fixed)
    if isinstance(k, (kkk._RegistryKernel, skk.Kernel)) and not isinstance(
            k, (skk.KernelOperator, skk.CompoundKernel)):
        return _leaf(k, start, kernel, n_features)
    raise _unsupported(kernel, f"cannot use {type(k).__name__}")


def _summands(node):
    return _summands(node.k1) + _summands(node.k2) if isinstance(node, Sum) else [node]


def _noise_factors(node):
    """The Scalar factors of a pure-noise product (exactly one white factor), else None."""
    factors = []
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, Product):
            stack += [n.k2, n.k1]
        elif isinstance(n, Scalar):
            factors.append(n)
        else:
            return None
    return tuple(factors) if sum(f.white for f in factors) == 1 else None


def _stationary(node):
    if isinstance(node, (Sum, Product)):
        return _stationary(node.k1) and _stationary(node.k2)
    if isinstance(node, Power):
        return _stationary(node.k)
    if isinstance(node, Leaf):
        return node.spec.stationary
    return True


def parse_kernel(kernel, n_features=None):
    """Check that ``kernel`` is supported and describe it.

    Parameters
    ----------
    kernel : sklearn.gaussian_process.kernels.Kernel
    n_features : int, optional
        When given, the parameter values are validated against it now (per-feature lengths,
        ranges) and the periodic kernel is refused for more than one feature.

    Returns
    -------
    KernelStructure

    Raises
    ------
    TypeError
        For a kernel outside the registry, a non-PSD one or any other kernel class; the message
        names it and lists what is supported.
    ValueError
        For a parameter value out of range (a Matérn nu other than 0.5, 1.5, 2.5...).
    """
    if not isinstance(kernel, skk.Kernel):
        raise TypeError(f"kernel must be a scikit-learn Kernel object; got {kernel!r}. "
                        f"Supported: {SUPPORTED}")
    root, n_theta = _parse(kernel, 0, kernel, n_features)
    with np.errstate(divide="ignore"):
        expected = kernel.theta.shape[0]
    if n_theta != expected:  # a kernel class whose theta this parser does not know
        raise _unsupported(kernel, f"its theta has {expected} entries, the parser found {n_theta}")
    noise_terms, kernel_terms = [], []
    for term in _summands(root):
        factors = _noise_factors(term)
        (noise_terms if factors is not None else kernel_terms).append(
            factors if factors is not None else term)
    part = None
    for term in kernel_terms:
        part = term if part is None else Sum(part, term)
    return KernelStructure(kernel, part, tuple(noise_terms), n_theta,
                           part is None or _stationary(part))
