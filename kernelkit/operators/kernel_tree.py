"""Which kernels the estimators accept, as a tree the operators evaluate.

KernelRidge and the Gaussian-process regressor take the same kernels: a registry kernel by name
(:func:`registry_kernel`: the one-leaf tree), or any kernel written with scikit-learn's kernel
algebra, built from:

- ``Sum`` and ``Product`` of any supported kernels, and ``Exponentiation`` (a fixed exponent);
- ``ConstantKernel`` and ``WhiteKernel`` anywhere (alone, as a factor or as a summand);
- every positive semi-definite kernel of the registry (:mod:`kernelkit_math.registry`, flag
  ``psd``), as kernelkit's class (:data:`kernelkit.kernels.KERNEL_CLASSES`) or as the
  scikit-learn class the registry names for it (``SklearnEquivalent.gp_kernel``: ``RBF``,
  ``Matern``, ``RationalQuadratic``...), per-feature parameters wherever the class takes them;
- scikit-learn's ``DotProduct`` (the registry's linear kernel plus the constant sigma_0^2);
- the periodic kernel (``ExpSineSquared``) on one feature, where it is positive semi-definite
  (the registry marks it not PSD because with several features it need not be).

A new PSD registry kernel therefore reaches both estimators with no edit here: its class's
parameter map (:class:`kernelkit._kernel_base._RegistryKernel`) gives the registry parameters, the
registry's epilogue table its formula. Anything else raises TypeError naming the kernel.

:func:`parse_kernel` returns a :class:`KernelStructure`: the tree of nodes plus the layout of
``theta``, which is exactly scikit-learn's ``kernel.theta`` (log space, fixed hyperparameters
left out, leaves left to right, each leaf's hyperparameters sorted by name), so gradients with
respect to it compare with scikit-learn's directly. :meth:`KernelStructure.params` turns a theta
tensor into the parameter dictionary the operator (:mod:`.covariance`) evaluates, differentiable
with respect to theta.

On the training set a WhiteKernel is non-zero only on the diagonal (scikit-learn's
``WhiteKernel(X)`` is ``noise_level * I``; ``WhiteKernel(X, Y)`` is 0 for ``Y`` given), so wherever
it sits in the tree, k(X, X) = k_c(X, X) + D exactly, with k_c the kernel with every WhiteKernel
set to 0 (the "kernel part", ``KernelStructure.root``, evaluated block by block; it is also
k(X, Y) for test points) and D diagonal: D_ii = k(x_i, x_i) - k_c(x_i, x_i). D is one number
(``params["noise"]``, which the operator adds to the diagonal and the preconditioner uses as its
shift) wherever the WhiteKernels only meet constants and kernels with k(x, x) = 1 (the registry's
``normalized``; RBF, Matérn...): ``C * (RBF + WhiteKernel)`` has the kernel part ``C * RBF`` and
the noise ``C * noise_level``, ``(RBF + WhiteKernel) ** p`` has ``RBF ** p`` and
``(1 + noise_level) ** p - 1``. Otherwise (``DotProduct() * WhiteKernel()``: noise that grows with
|x|) D varies from point to point: the WhiteKernels then stay in the kernel part, counted on the
pairs of a block that are the same training point, and ``KernelStructure.varying_noise`` names the
term, which the exact path takes and the iterative path refuses (its preconditioner needs the
noise as one number).
"""

from __future__ import annotations

import dataclasses

import numpy as np
from sklearn.gaussian_process import kernels as skk

from kernelkit import kernels as kkk
from kernelkit_math.registry import REGISTRY

__all__ = ["KernelStructure", "parse_kernel", "registry_kernel", "kernel_part", "SUPPORTED"]

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
        f"kernel {kernel!r} is not supported by kernelkit's estimators ({why}); "
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
    #: The scikit-learn kernel it was parsed from (named by error messages).
    source: object = dataclasses.field(default=None, compare=False, repr=False)


@dataclasses.dataclass(frozen=True)
class Power:
    k: object
    exponent: float
    source: object = dataclasses.field(default=None, compare=False, repr=False)


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
    """A parsed kernel: on the training set, ``kernel part + noise * I``.

    Attributes
    ----------
    kernel : sklearn.gaussian_process.kernels.Kernel
        The kernel parsed.
    root : node or None
        The kernel part (None when it is 0, e.g. for ``WhiteKernel()`` alone): the kernel with
        every WhiteKernel set to 0, or, where ``varying_noise`` is set, the whole kernel.
    noise_source : node or None
        The tree whose WhiteKernels give ``params(theta)["noise"]`` (its diagonal minus its
        kernel part's, :func:`_excess`), None when there is no such noise.
    n_theta : int
    varying_noise : sklearn.gaussian_process.kernels.Kernel or None
        The term of ``kernel`` whose WhiteKernel adds a diagonal that varies from training point
        to training point (``DotProduct() * WhiteKernel()``); None when the noise is one number.
    """

    kernel: object
    root: object
    noise_source: object
    n_theta: int
    varying_noise: object

    def params(self, theta):
        """The parameters at a log-hyperparameter tensor laid out as ``kernel.theta``.

        Parameters
        ----------
        theta : torch.Tensor of shape (n_theta,), float64

        Returns
        -------
        dict
            ``theta`` (the tensor itself, which the operator evaluates the tree at) and
            ``noise`` (0-d float64, what the WhiteKernels add to every diagonal entry of
            k(X, X)), differentiable with respect to ``theta``.
        """
        import torch

        if self.noise_source is None:
            noise = torch.zeros((), dtype=torch.float64, device=theta.device)
        else:
            noise = _excess(self.noise_source, theta)
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
        return (Sum(a, b) if isinstance(k, skk.Sum) else Product(a, b, k)), start
    if isinstance(k, skk.Exponentiation):
        a, start = _parse(k.kernel, start, kernel, n_features)
        exponent = float(k.exponent)
        if _has_white(a) and not exponent > 0:  # 0 ** exponent off the diagonal: 1 or inf
            raise ValueError(f"kernel: the exponent of {k!r} must be > 0 where the kernel "
                             f"raised contains a WhiteKernel; got {k.exponent!r}")
        return Power(a, exponent, k), start
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


def _has_white(node):
    if isinstance(node, (Sum, Product)):
        return _has_white(node.k1) or _has_white(node.k2)
    if isinstance(node, Power):
        return _has_white(node.k)
    return isinstance(node, Scalar) and node.white


def _constant_diagonal(node):
    """Whether k(x, x) is one number, with and without the node's WhiteKernels: constants,
    WhiteKernels and normalised registry kernels (k(x, x) = 1), combined."""
    if isinstance(node, (Sum, Product)):
        return _constant_diagonal(node.k1) and _constant_diagonal(node.k2)
    if isinstance(node, Power):
        return _constant_diagonal(node.k)
    return isinstance(node, Scalar) or node.spec.normalized


def _diagonal(node, theta, white):
    """k(x, x) of a node with :func:`_constant_diagonal`, a 0-d float64 tensor; ``white``:
    with its WhiteKernels (k(X) on the training set) or without them (the kernel part)."""
    import torch

    if isinstance(node, Sum):
        return _diagonal(node.k1, theta, white) + _diagonal(node.k2, theta, white)
    if isinstance(node, Product):
        return _diagonal(node.k1, theta, white) * _diagonal(node.k2, theta, white)
    if isinstance(node, Power):
        return _diagonal(node.k, theta, white) ** node.exponent
    if isinstance(node, Scalar):
        value = node.number(theta)
        return value if white or not node.white else torch.zeros_like(value)
    return torch.ones((), dtype=torch.float64, device=theta.device)  # a normalised leaf


def _constant_excess(node):
    """Whether :func:`_excess` is one number (the same at every training point)."""
    if not _has_white(node) or isinstance(node, Scalar):
        return True
    if isinstance(node, Sum):
        return _constant_excess(node.k1) and _constant_excess(node.k2)
    if isinstance(node, Product):  # e = e1 k2(x, x) + k1_c(x, x) e2
        a, b = node.k1, node.k2
        return all(not _has_white(u) or (_constant_excess(u) and _constant_diagonal(v))
                   for u, v in ((a, b), (b, a)))
    return _constant_diagonal(node.k)  # Power: k(x, x)^p - k_c(x, x)^p


def _excess(node, theta):
    """What the WhiteKernels of ``node`` (it has some) add to each diagonal entry of its k(X, X):
    k(x, x) - k_c(x, x), k_c the node without them (:func:`_strip`), where that is one number
    (:func:`_constant_excess`); a 0-d float64 tensor. A product's is e1 k2(x, x) + k1_c(x, x) e2,
    so a WhiteKernel factor's value is never the difference of two close numbers."""
    if isinstance(node, Scalar):
        return node.number(theta)
    if isinstance(node, (Sum, Product)):
        a, b = node.k1, node.k2
        if isinstance(node, Sum):
            terms = [_excess(k, theta) for k in (a, b) if _has_white(k)]
        else:
            terms = ([_excess(a, theta) * _diagonal(b, theta, True)] if _has_white(a) else []) \
                + ([_diagonal(a, theta, False) * _excess(b, theta)] if _has_white(b) else [])
        return terms[0] if len(terms) == 1 else terms[0] + terms[1]
    return (_diagonal(node.k, theta, True) ** node.exponent
            - _diagonal(node.k, theta, False) ** node.exponent)


def _strip(node):
    """The node with every WhiteKernel set to 0 (k(X, Y) for Y given; off the diagonal of
    k(X, X)), or None where that is 0."""
    if isinstance(node, Scalar):
        return None if node.white else node
    if isinstance(node, Sum):
        a, b = _strip(node.k1), _strip(node.k2)
        return b if a is None else a if b is None else Sum(a, b)
    if isinstance(node, Product):
        a, b = _strip(node.k1), _strip(node.k2)
        return None if a is None or b is None else Product(a, b, node.source)
    if isinstance(node, Power):
        a = _strip(node.k)
        return None if a is None else Power(a, node.exponent, node.source)
    return node


def _varying_term(node):
    """The smallest product or power of ``node`` whose WhiteKernels add a diagonal that varies
    from point to point (its scikit-learn kernel), or None."""
    if _constant_excess(node):
        return None
    children = (node.k1, node.k2) if isinstance(node, (Sum, Product)) else (node.k,)
    for child in children:
        inner = _varying_term(child)
        if inner is not None:
            return inner
    return node.source  # a product or power (a sum varies where one of its terms does)


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
        For a parameter value out of range (a Matérn nu other than 0.5, 1.5, 2.5...), or an
        exponent <= 0 of a kernel that contains a WhiteKernel.
    """
    if not isinstance(kernel, skk.Kernel):
        raise TypeError(f"kernel must be a scikit-learn Kernel object; got {kernel!r}. "
                        f"Supported: {SUPPORTED}")
    root, n_theta = _parse(kernel, 0, kernel, n_features)
    with np.errstate(divide="ignore"):
        expected = kernel.theta.shape[0]
    if n_theta != expected:  # a kernel class whose theta this parser does not know
        raise _unsupported(kernel, f"its theta has {expected} entries, the parser found {n_theta}")
    varying = _varying_term(root)
    if varying is not None or not _has_white(root):  # WhiteKernels, if any, in the kernel part
        return KernelStructure(kernel, root, None, n_theta, varying)
    return KernelStructure(kernel, _strip(root), root, n_theta, None)


class _NamedKernel:
    """A registry kernel given by name and resolved registry parameters: what a :class:`Leaf`
    reads of a kernel class (:class:`kernelkit._kernel_base._RegistryKernel`), every parameter fixed."""

    _param_map = ()

    def __init__(self, name, params):
        self._registry_name, self._params = name, dict(params)

    def _registry_params(self, n_features):
        return self._params


def registry_kernel(name, params):
    """The one-leaf tree of the registry kernel ``name`` at the resolved registry ``params``
    (:meth:`kernelkit_math.registry.KernelSpec.resolve`; no hyperparameter free, ``n_theta``
    0): a kernel given by name, as KernelRidge's ``kernel="rbf"``, ``gamma=...``."""
    return KernelStructure(name, Leaf(_NamedKernel(name, params), ()), None, 0, None)


def kernel_part(structure):
    """``structure`` with every WhiteKernel set to 0: scikit-learn's ``kernel(X, Y)`` for Y
    given, which is what its KernelRidge computes, at fit too (``pairwise_kernels`` passes
    Y = X), so a WhiteKernel adds nothing there. Its ``root`` is None where that is 0."""
    if structure.noise_source is None and structure.varying_noise is None:
        return structure
    return dataclasses.replace(structure, root=_strip(structure.root), noise_source=None,
                               varying_noise=None)
