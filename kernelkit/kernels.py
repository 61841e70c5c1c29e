"""Scikit-learn-native kernel classes built on the :mod:`kernelkit_math` registry.

Every class here is a :class:`sklearn.gaussian_process.kernels.Kernel`: it has ``theta`` and
``bounds`` in log space, analytic gradients for Gaussian-process hyperparameter optimisation,
``diag``, ``clone_with_theta``, ``get_params`` / ``set_params``, and it combines with scikit-learn's
own kernels through ``+``, ``*`` and ``**``. It is also a callable ``kernel(X, Y)``, so it can be
passed wherever scikit-learn takes a callable kernel: ``SVC(kernel=RBF(2.0))``,
``KernelRidge(kernel=...)``, ``KernelPCA``, ``Nystroem``, ``pairwise_kernels(X, metric=...)``.

The math lives in the registry; each class here only says how its scikit-learn parameter names
map onto the registry's (for example ``gamma = 1 / (2 length_scale**2)`` for :class:`RBF`), and
the shared base (:mod:`kernelkit._kernel_base`) checks the values and converts the gradients
accordingly. :data:`KERNEL_CLASSES` maps each registry name to its class.

Examples
--------
>>> import numpy as np
>>> from sklearn.gaussian_process.kernels import WhiteKernel
>>> from kernelkit.kernels import RBF
>>> X = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 2.0]])
>>> k = RBF(length_scale=1.5) + WhiteKernel(noise_level=0.1)
>>> K, dK = k(X, eval_gradient=True)
>>> K.shape, dK.shape
((3, 3), (3, 3, 2))
"""

from kernelkit._kernel_base import _LengthScaleKernel, _ParamMap, _RegistryKernel

__all__ = [
    "Linear",
    "Polynomial",
    "RBF",
    "Laplacian",
    "Matern",
    "RationalQuadratic",
    "ExpSineSquared",
    "Cosine",
    "Sigmoid",
    "Exponential",
    "KERNEL_CLASSES",
]


class Linear(_RegistryKernel):
    r"""Linear (dot-product) kernel.

    .. math::

        k(x, y) = x \cdot y

    Equal to scikit-learn's ``DotProduct(sigma_0=0, sigma_0_bounds="fixed")`` and to
    :func:`sklearn.metrics.pairwise.linear_kernel`. Not stationary; no hyperparameters, so
    ``theta`` is empty.

    Parameters
    ----------
    device : {"auto", "cpu", "cuda"}, default="auto"
        Where the Gram matrix is computed: "auto" is the GPU when one is present (float64 there
        too), else the CPU. ``eval_gradient=True`` runs on the GPU too (float64) when K and its
        gradient fit in GPU memory, else on the CPU; ``diag`` always uses the CPU reference.

    Attributes
    ----------
    theta : ndarray of shape (0,)
        Empty.

    Examples
    --------
    >>> import numpy as np
    >>> from kernelkit.kernels import Linear
    >>> X = np.array([[1.0, 2.0], [3.0, 4.0]])
    >>> Linear()(X)
    array([[ 5., 11.],
           [11., 25.]])
    """

    _registry_name = "linear"
    _param_map = ()

    def __init__(self, *, device="auto"):
        self.device = device


class Polynomial(_RegistryKernel):
    r"""Polynomial kernel.

    .. math::

        k(x, y) = (\gamma\, x \cdot y + c_0)^{d}

    Equal to :func:`sklearn.metrics.pairwise.polynomial_kernel` with the same ``degree``,
    ``gamma`` and ``coef0``, and to
    ``ConstantKernel(gamma**degree) * DotProduct(sigma_0=sqrt(coef0 / gamma)) ** degree``.
    Not stationary. Positive semi-definite for ``coef0 >= 0``.

    Parameters
    ----------
    degree : int, default=3
        The exponent d, an integer >= 0; a plain parameter, not a hyperparameter.
    gamma : float, default=1.0
        Scale of the dot product, > 0. Unlike ``polynomial_kernel``, None (1 / n_features) is
        not accepted: a hyperparameter needs a value to take the log of.
    coef0 : float, default=1.0
        The additive constant c0. Zero is allowed (``theta`` then holds ``-inf``, as
        ``DotProduct(sigma_0=0)``); a negative value needs ``coef0_bounds="fixed"``.
    gamma_bounds, coef0_bounds : pair of floats >= 0 or "fixed", default=(1e-5, 1e5)
        Bounds for hyperparameter optimisation, or "fixed" to keep the value.
    device : {"auto", "cpu", "cuda"}, default="auto"
        Where the Gram matrix is computed.

    Attributes
    ----------
    hyperparameter_coef0, hyperparameter_gamma : Hyperparameter
        ``theta`` is ``[log coef0, log gamma]`` (scikit-learn orders hyperparameters by name).

    Examples
    --------
    >>> import numpy as np
    >>> from kernelkit.kernels import Polynomial
    >>> X = np.array([[1.0, 0.0], [1.0, 1.0]])
    >>> Polynomial(degree=2, gamma=0.5, coef0=1.0)(X)
    array([[2.25, 2.25],
           [2.25, 4.  ]])
    """

    _registry_name = "polynomial"
    _param_map = (_ParamMap("degree", "degree"), _ParamMap("gamma", "gamma"),
                  _ParamMap("coef0", "coef0"))

    def __init__(self, degree=3, gamma=1.0, coef0=1.0, gamma_bounds=(1e-5, 1e5),
                 coef0_bounds=(1e-5, 1e5), *, device="auto"):
        self.degree = degree
        self.gamma = gamma
        self.coef0 = coef0
        self.gamma_bounds = gamma_bounds
        self.coef0_bounds = coef0_bounds
        self.device = device


class RBF(_LengthScaleKernel):
    r"""Gaussian (squared-exponential) kernel with a scalar or per-feature length scale.

    .. math::

        k(x, y) = \exp\Big(-\tfrac12 \sum_k (x_k - y_k)^2 / \ell_k^2\Big)
                = \exp\Big(-\sum_k \gamma_k (x_k - y_k)^2\Big),
        \qquad \gamma_k = \frac{1}{2 \ell_k^2}

    Equal in value and gradient to :class:`sklearn.gaussian_process.kernels.RBF` and to
    ``rbf_kernel(X, Y, gamma=1 / (2 * length_scale**2))``. Stationary. The gradient with respect
    to log l is -2 times the registry's gradient with respect to log gamma.

    Parameters
    ----------
    length_scale : float or ndarray of shape (n_features,), default=1.0
        Length scale l > 0; one value per feature makes the kernel anisotropic.
    length_scale_bounds : pair of floats >= 0 or "fixed", default=(1e-5, 1e5)
        Bounds on ``length_scale``, or "fixed".
    device : {"auto", "cpu", "cuda"}, default="auto"
        Where the Gram matrix is computed.

    Attributes
    ----------
    hyperparameter_length_scale : Hyperparameter
        With ``n_elements == n_features`` when anisotropic.
    anisotropic : bool

    Examples
    --------
    >>> import numpy as np
    >>> from kernelkit.kernels import RBF
    >>> X = np.array([[0.0], [1.0]])
    >>> K = RBF(length_scale=1.0)(X)
    >>> bool(np.isclose(K[0, 1], np.exp(-0.5)))
    True
    >>> RBF(length_scale=[1.0, 2.0])
    RBF(length_scale=[1, 2])
    """

    _registry_name = "rbf"
    _param_map = (_ParamMap("length_scale", "gamma", coef=0.5, power=-2.0),)

    def __init__(self, length_scale=1.0, length_scale_bounds=(1e-5, 1e5), *, device="auto"):
        self.length_scale = length_scale
        self.length_scale_bounds = length_scale_bounds
        self.device = device


class Laplacian(_LengthScaleKernel):
    r"""Laplacian kernel (exponential of the L1 distance), scalar or per-feature length scale.

    .. math::

        k(x, y) = \exp\Big(-\sum_k |x_k - y_k| / \ell_k\Big),
        \qquad \gamma_k = 1 / \ell_k

    Equal to ``laplacian_kernel(X, Y, gamma=1 / length_scale)`` (isotropic). Stationary. Not to
    be confused with ``Matern(nu=0.5)``, which is the exponential of the L2 distance.

    Parameters
    ----------
    length_scale : float or ndarray of shape (n_features,), default=1.0
        Length scale l > 0; one value per feature makes the kernel anisotropic.
    length_scale_bounds : pair of floats >= 0 or "fixed", default=(1e-5, 1e5)
        Bounds on ``length_scale``, or "fixed".
    device : {"auto", "cpu", "cuda"}, default="auto"
        Where the Gram matrix is computed.

    Attributes
    ----------
    hyperparameter_length_scale : Hyperparameter
    anisotropic : bool

    Examples
    --------
    >>> import numpy as np
    >>> from kernelkit.kernels import Laplacian
    >>> X = np.array([[0.0, 0.0], [1.0, 1.0]])
    >>> K = Laplacian(length_scale=2.0)(X)
    >>> bool(np.isclose(K[0, 1], np.exp(-1.0)))
    True
    """

    _registry_name = "laplacian"
    _param_map = (_ParamMap("length_scale", "gamma", coef=1.0, power=-1.0),)

    def __init__(self, length_scale=1.0, length_scale_bounds=(1e-5, 1e5), *, device="auto"):
        self.length_scale = length_scale
        self.length_scale_bounds = length_scale_bounds
        self.device = device


class Matern(_LengthScaleKernel):
    r"""Matérn kernel for nu in {0.5, 1.5, 2.5}, scalar or per-feature length scale.

    With :math:`r = \lVert (x - y) / \ell \rVert_2`:

    .. math::

        k_{1/2} = e^{-r}, \qquad
        k_{3/2} = (1 + \sqrt3\, r)\, e^{-\sqrt3\, r}, \qquad
        k_{5/2} = (1 + \sqrt5\, r + \tfrac53 r^2)\, e^{-\sqrt5\, r}

    Equal in value and gradient to :class:`sklearn.gaussian_process.kernels.Matern` with the
    same ``nu``. Stationary. For any other nu (including inf, the RBF limit) use scikit-learn's
    ``Matern``, which evaluates the general Bessel-function form.

    Parameters
    ----------
    length_scale : float or ndarray of shape (n_features,), default=1.0
        Length scale l > 0; one value per feature makes the kernel anisotropic.
    length_scale_bounds : pair of floats >= 0 or "fixed", default=(1e-5, 1e5)
        Bounds on ``length_scale``, or "fixed".
    nu : {0.5, 1.5, 2.5}, default=1.5
        Smoothness; a plain parameter, not a hyperparameter.
    device : {"auto", "cpu", "cuda"}, default="auto"
        Where the Gram matrix is computed.

    Attributes
    ----------
    hyperparameter_length_scale : Hyperparameter
    anisotropic : bool

    Examples
    --------
    >>> import numpy as np
    >>> from kernelkit.kernels import Matern
    >>> X = np.array([[0.0], [1.0]])
    >>> K = Matern(length_scale=1.0, nu=0.5)(X)
    >>> bool(np.isclose(K[0, 1], np.exp(-1.0)))
    True
    """

    _registry_name = "matern"
    _param_map = (_ParamMap("length_scale", "length_scale"), _ParamMap("nu", "nu"))
    _hints = {"nu": "kernelkit has the closed forms of these three only (in kernelkit.Matern and "
                    "in kernelkit's estimators, which convert scikit-learn's Matern to it): pick "
                    "one, use RBF for nu=inf, or for another nu give scikit-learn's Matern to a "
                    "scikit-learn estimator such as "
                    "sklearn.gaussian_process.GaussianProcessRegressor"}

    def __init__(self, length_scale=1.0, length_scale_bounds=(1e-5, 1e5), nu=1.5, *,
                 device="auto"):
        self.length_scale = length_scale
        self.length_scale_bounds = length_scale_bounds
        self.nu = nu
        self.device = device


class RationalQuadratic(_LengthScaleKernel):
    r"""Rational quadratic kernel: a scale mixture of RBF kernels.

    With :math:`r = \lVert (x - y) / \ell \rVert_2`:

    .. math::

        k(x, y) = \Big(1 + \frac{r^2}{2 \alpha}\Big)^{-\alpha}

    Equal in value and gradient to :class:`sklearn.gaussian_process.kernels.RationalQuadratic`
    (isotropic). Unlike scikit-learn's, this one also accepts a per-feature length scale.
    Stationary.

    Parameters
    ----------
    length_scale : float or ndarray of shape (n_features,), default=1.0
        Length scale l > 0.
    alpha : float, default=1.0
        Scale-mixture parameter, > 0; alpha -> inf gives the RBF kernel.
    length_scale_bounds, alpha_bounds : pair of floats >= 0 or "fixed", default=(1e-5, 1e5)
        Bounds for hyperparameter optimisation, or "fixed".
    device : {"auto", "cpu", "cuda"}, default="auto"
        Where the Gram matrix is computed.

    Attributes
    ----------
    hyperparameter_alpha, hyperparameter_length_scale : Hyperparameter
        ``theta`` is ``[log alpha, log length_scale...]``, as in scikit-learn.
    anisotropic : bool

    Examples
    --------
    >>> import numpy as np
    >>> from kernelkit.kernels import RationalQuadratic
    >>> X = np.array([[0.0], [2.0]])
    >>> RationalQuadratic(length_scale=1.0, alpha=1.0)(X)
    array([[1.        , 0.33333333],
           [0.33333333, 1.        ]])
    """

    _registry_name = "rational_quadratic"
    _param_map = (_ParamMap("length_scale", "length_scale"), _ParamMap("alpha", "alpha"))

    def __init__(self, length_scale=1.0, alpha=1.0, length_scale_bounds=(1e-5, 1e5),
                 alpha_bounds=(1e-5, 1e5), *, device="auto"):
        self.length_scale = length_scale
        self.alpha = alpha
        self.length_scale_bounds = length_scale_bounds
        self.alpha_bounds = alpha_bounds
        self.device = device


class ExpSineSquared(_RegistryKernel):
    r"""Periodic (exp-sine-squared) kernel.

    With :math:`d = \lVert x - y \rVert_2`:

    .. math::

        k(x, y) = \exp\Big(-\frac{2 \sin^2(\pi d / p)}{\ell^2}\Big)

    Equal in value and gradient to :class:`sklearn.gaussian_process.kernels.ExpSineSquared`
    (registry name ``"periodic"``). Stationary.

    Parameters
    ----------
    length_scale : float, default=1.0
        Length scale l > 0.
    periodicity : float, default=1.0
        Period p > 0.
    length_scale_bounds, periodicity_bounds : pair of floats >= 0 or "fixed", default=(1e-5, 1e5)
        Bounds for hyperparameter optimisation, or "fixed".
    device : {"auto", "cpu", "cuda"}, default="auto"
        Where the Gram matrix is computed.

    Attributes
    ----------
    hyperparameter_length_scale, hyperparameter_periodicity : Hyperparameter
        ``theta`` is ``[log length_scale, log periodicity]``, as in scikit-learn.

    Examples
    --------
    >>> import numpy as np
    >>> from kernelkit.kernels import ExpSineSquared
    >>> X = np.array([[0.0], [0.5], [2.0]])
    >>> ExpSineSquared(length_scale=1.0, periodicity=2.0)(X).round(4)
    array([[1.    , 0.3679, 1.    ],
           [0.3679, 1.    , 0.3679],
           [1.    , 0.3679, 1.    ]])
    """

    _registry_name = "periodic"
    _param_map = (_ParamMap("length_scale", "length_scale"), _ParamMap("periodicity", "periodicity"))

    def __init__(self, length_scale=1.0, periodicity=1.0, length_scale_bounds=(1e-5, 1e5),
                 periodicity_bounds=(1e-5, 1e5), *, device="auto"):
        self.length_scale = length_scale
        self.periodicity = periodicity
        self.length_scale_bounds = length_scale_bounds
        self.periodicity_bounds = periodicity_bounds
        self.device = device


class Cosine(_RegistryKernel):
    r"""Cosine-similarity kernel.

    .. math::

        k(x, y) = \frac{x \cdot y}{\lVert x \rVert\, \lVert y \rVert}

    Equal to :func:`sklearn.metrics.pairwise.cosine_similarity`; a zero row has similarity 0
    with everything (itself included). Not stationary; no hyperparameters.

    Parameters
    ----------
    device : {"auto", "cpu", "cuda"}, default="auto"
        Where the Gram matrix is computed.

    Examples
    --------
    >>> import numpy as np
    >>> from kernelkit.kernels import Cosine
    >>> X = np.array([[1.0, 0.0], [1.0, 1.0]])
    >>> bool(np.isclose(Cosine()(X)[0, 1], 1 / np.sqrt(2)))
    True
    """

    _registry_name = "cosine"
    _param_map = ()

    def __init__(self, *, device="auto"):
        self.device = device


class Sigmoid(_RegistryKernel):
    r"""Sigmoid (hyperbolic tangent) kernel. **Not positive semi-definite.**

    .. math::

        k(x, y) = \tanh(\gamma\, x \cdot y + c_0)

    Equal to :func:`sklearn.metrics.pairwise.sigmoid_kernel`. Because it is not positive
    semi-definite, it is not a valid covariance for Gaussian processes (the Cholesky
    factorisation may fail) and the SVM problem it gives may be non-convex; it is offered for
    compatibility with ``SVC(kernel="sigmoid")``. Not stationary.

    Parameters
    ----------
    gamma : float, default=1.0
        Scale of the dot product, > 0 (None is not accepted, see :class:`Polynomial`).
    coef0 : float, default=1.0
        Additive constant; zero gives ``theta = -inf``, a negative value needs
        ``coef0_bounds="fixed"``.
    gamma_bounds, coef0_bounds : pair of floats >= 0 or "fixed", default=(1e-5, 1e5)
        Bounds for hyperparameter optimisation, or "fixed".
    device : {"auto", "cpu", "cuda"}, default="auto"
        Where the Gram matrix is computed.

    Attributes
    ----------
    hyperparameter_coef0, hyperparameter_gamma : Hyperparameter
        ``theta`` is ``[log coef0, log gamma]``.

    Examples
    --------
    >>> import numpy as np
    >>> from kernelkit.kernels import Sigmoid
    >>> X = np.array([[1.0, 0.0], [0.0, 1.0]])
    >>> bool(np.isclose(Sigmoid(gamma=0.5, coef0=0.0)(X)[0, 0], np.tanh(0.5)))
    True
    """

    _registry_name = "sigmoid"
    _param_map = (_ParamMap("gamma", "gamma"), _ParamMap("coef0", "coef0"))

    def __init__(self, gamma=1.0, coef0=1.0, gamma_bounds=(1e-5, 1e5), coef0_bounds=(1e-5, 1e5),
                 *, device="auto"):
        self.gamma = gamma
        self.coef0 = coef0
        self.gamma_bounds = gamma_bounds
        self.coef0_bounds = coef0_bounds
        self.device = device


class Exponential(_RegistryKernel):
    r"""Exponential dot-product kernel: the unnormalised weight of softmax attention.

    .. math::

        k(x, y) = \exp(s\, x \cdot y)

    Softmax attention with queries X and keys Y is the kernel smoother with this kernel and
    ``scale = 1 / sqrt(head_dim)``. Positive semi-definite, not stationary. Values grow
    quickly with ``scale * x·y``; overflow to inf is not checked.

    Parameters
    ----------
    scale : float, default=1.0
        The scale s > 0.
    scale_bounds : pair of floats >= 0 or "fixed", default=(1e-5, 1e5)
        Bounds on ``scale``, or "fixed".
    device : {"auto", "cpu", "cuda"}, default="auto"
        Where the Gram matrix is computed.

    Attributes
    ----------
    hyperparameter_scale : Hyperparameter

    Examples
    --------
    >>> import numpy as np
    >>> from kernelkit.kernels import Exponential
    >>> X = np.array([[1.0, 0.0], [0.0, 1.0]])
    >>> bool(Exponential(scale=0.5)(X)[0, 0] == np.exp(0.5))
    True
    """

    _registry_name = "exponential"
    _param_map = (_ParamMap("scale", "scale"),)

    def __init__(self, scale=1.0, scale_bounds=(1e-5, 1e5), *, device="auto"):
        self.scale = scale
        self.scale_bounds = scale_bounds
        self.device = device


#: Registry name -> kernel class, one per entry of :data:`kernelkit_math.registry.REGISTRY`.
KERNEL_CLASSES = {
    cls._registry_name: cls
    for cls in (globals()[name] for name in __all__ if name != "KERNEL_CLASSES")
}
