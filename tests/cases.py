"""Parameter settings and scikit-learn equivalents per registry kernel, from the registry.

Every registry entry carries its test examples (``KernelSpec.examples``) and declares where
scikit-learn computes the same kernel (``KernelSpec.sklearn``, names only: kernelkit_math never
imports scikit-learn). The tables here and the resolver below turn those into test cases and
scikit-learn objects, so a new kernel is tested without editing a test table; an entry without
examples fails ``test_every_kernel_has_cases``, one without a declared equivalent
``test_every_registry_kernel_declares_its_sklearn_equivalent``.
"""

import inspect

import numpy as np
from sklearn.gaussian_process import kernels as sk_gp
from sklearn.metrics import pairwise as skp

from kernelkit.kernels import KERNEL_CLASSES
from kernelkit_math.registry import REGISTRY, get_kernel

N_FEATURES = 3  # per-feature parameters get this many entries

PARAM_CASES = {
    name: [example.params(N_FEATURES) for example in spec.examples if example.math]
    for name, spec in REGISTRY.items()
}


def case_ids():
    """(kernel name, params) pairs with readable pytest ids."""
    out = []
    for name, cases in PARAM_CASES.items():
        for i, params in enumerate(cases):
            out.append((name, params, f"{name}-{i}"))
    return out


def example_id(name, example):
    """``rbf`` for rbf's "default" example, ``rbf-pf`` for its "pf" example."""
    return name if example.id == "default" else f"{name}-{example.id}"


def examples(name, offset=False):
    """Registry kernel ``name``'s examples for standard-normal data, or (``offset``) for data at
    offset 1000."""
    return [example for example in get_kernel(name).examples if example.offset == offset]


def is_per_feature(params):
    """Whether some parameter holds one value per feature."""
    return any(np.ndim(value) > 0 for value in params.values())


# ------------------------------------------------------------ kernelkit's sklearn-style classes
def class_params(name, params, n_features):
    """Constructor arguments of kernelkit's class for registry kernel ``name`` that give the
    registry parameters ``params``.

    Inverts the class's own parameter map (registry value = coef * value ** power), so the
    conversion has one copy, in ``kernelkit.kernels``. Defaults standing for a number
    (``gamma=None``: 1 / n_features) are made explicit, since a hyperparameter needs a value. A
    negative hyperparameter (``coef0 < 0``) gets ``<name>_bounds="fixed"``: the classes optimise
    in log space, which has no negative values.

    Parameters
    ----------
    name : str
        Registry name.
    params : dict
        Registry parameters (``Example.params(n_features)``).
    n_features : int
        Number of features of the data.

    Returns
    -------
    dict
        Keyword arguments for ``KERNEL_CLASSES[name]``.
    """
    spec = get_kernel(name)
    values = spec.explicit(n_features, spec.resolve(n_features, **params))
    out = {}
    for m in KERNEL_CLASSES[name]._param_map:
        value = values[m.registry]
        if (m.coef, m.power) != (1.0, 1.0):
            value = (np.asarray(value, dtype=np.float64) / m.coef) ** (1.0 / m.power)
        if isinstance(value, np.ndarray):  # per-feature values as a list, as users write them
            value = value.tolist()
        out[m.name] = value
        if spec.param(m.registry).hyperparameter and np.any(np.asarray(value) < 0):
            out[m.name + "_bounds"] = "fixed"
    return out


def make_class(name, params, n_features, **options):
    """kernelkit's kernel object for registry kernel ``name`` at registry ``params``;
    ``options`` are further constructor arguments (bounds, device)."""
    return KERNEL_CLASSES[name](**{**class_params(name, params, n_features), **options})


# ------------------------------------------------------------------ scikit-learn's equivalents
def sklearn_metric(name, params=None):
    """scikit-learn's pairwise-kernel name for registry kernel ``name`` (also its estimators'
    ``kernel=`` string), or None where it has none, or none for ``params`` (per-feature values).
    """
    if params is not None and is_per_feature(params):
        return None
    return get_kernel(name).sklearn.pairwise


def sklearn_function_name(name):
    """The name of scikit-learn's pairwise function (``polynomial_kernel``) for ``name``, or None."""
    metric = sklearn_metric(name)
    return None if metric is None else skp.PAIRWISE_KERNEL_FUNCTIONS[metric].__name__


def sklearn_gp_class(name):
    """The ``sklearn.gaussian_process.kernels`` class equal to registry kernel ``name``, or None."""
    gp_kernel = get_kernel(name).sklearn.gp_kernel
    return None if gp_kernel is None else getattr(sk_gp, gp_kernel)


def sklearn_gp_kernel(kernel):
    """scikit-learn's GP kernel equal to the kernelkit kernel object ``kernel``: its class from the
    registry, with ``kernel``'s constructor arguments (bounds included; the device dropped) and the
    declared fixed ones. None where scikit-learn has no such class, or it takes no per-feature
    values and ``kernel`` has some."""
    name = type(kernel)._registry_name
    spec = get_kernel(name)
    cls = sklearn_gp_class(name)
    per_feature = any(spec.param(m.registry).per_feature and np.size(getattr(kernel, m.name)) > 1
                      for m in kernel._param_map)
    if cls is None or (per_feature and not spec.sklearn.gp_per_feature):
        return None
    params = {k: v for k, v in kernel.get_params().items() if k != "device"}
    return cls(**params, **dict(spec.sklearn.gp_fixed))


def sklearn_gram(name, params, n_features):
    """A function ``(X, Y) -> K`` computed by scikit-learn for registry kernel ``name`` at
    registry ``params`` (data with ``n_features`` features): its pairwise function where it has
    one for these parameters, else its GP kernel. None where scikit-learn has neither."""
    metric = sklearn_metric(name, params)
    if metric is not None:
        return lambda X, Y: skp.pairwise_kernels(X, Y, metric=metric, **params)
    return sklearn_gp_kernel(make_class(name, params, n_features))


def check_declared_equivalent(name):
    """Assert that registry kernel ``name`` declares its scikit-learn equivalent (None names
    allowed, but explicitly) and that every declared name resolves in scikit-learn."""
    equivalent = get_kernel(name).sklearn
    assert equivalent is not None, f"{name}: no KernelSpec.sklearn declared"
    if equivalent.pairwise is not None:
        assert equivalent.pairwise in skp.PAIRWISE_KERNEL_FUNCTIONS, name
    cls = sklearn_gp_class(name)
    if cls is None:
        assert not equivalent.gp_fixed and not equivalent.gp_per_feature, name
        return
    assert issubclass(cls, sk_gp.Kernel), name
    takes = set(inspect.signature(cls).parameters)
    assert {key for key, _ in equivalent.gp_fixed} <= takes, name
    # kernelkit's class takes the GP-convention parameters, which the GP class must take too.
    assert {m.name for m in KERNEL_CLASSES[name]._param_map} <= takes, name
