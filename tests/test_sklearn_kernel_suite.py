"""scikit-learn's own kernel tests (``sklearn/gaussian_process/tests/test_kernels.py``, every test
that takes a kernel) on scikit-learn's own list of kernels, with each RBF, Matern,
RationalQuadratic and ExpSineSquared in it replaced by kernelkit's class of the same name and
parameters (sums and products kept), beside the original: the periodic kernel passes them next to
scikit-learn's ExpSineSquared, and so do the other GP-convention classes."""

import inspect

import pytest
import sklearn.gaussian_process.kernels as sk
import sklearn.gaussian_process.tests.test_kernels as sklearn_tests

import kernelkit

SKLEARN_TESTS = [
    fn for name, fn in inspect.getmembers(sklearn_tests, inspect.isfunction)
    if name.startswith("test_") and list(inspect.signature(fn).parameters) == ["kernel"]
]
OURS = {name: getattr(kernelkit, name) for name in ("RBF", "Matern", "RationalQuadratic",
                                                   "ExpSineSquared")}


def substitute(kernel):
    """The kernel with every scikit-learn class in OURS replaced by kernelkit's (same params);
    sums, products and powers rebuilt around them."""
    if isinstance(kernel, (sk.Sum, sk.Product)):
        return type(kernel)(substitute(kernel.k1), substitute(kernel.k2))
    if isinstance(kernel, sk.Exponentiation):
        return sk.Exponentiation(substitute(kernel.kernel), kernel.exponent)
    ours = OURS.get(type(kernel).__name__)
    return kernel if ours is None else ours(**kernel.get_params())


def _their_kernels(fn):
    """The kernels scikit-learn parametrizes ``fn`` with (its own @pytest.mark.parametrize)."""
    for mark in getattr(fn, "pytestmark", []):
        if mark.name == "parametrize" and mark.args[0] == "kernel":
            return list(mark.args[1])
    return []


def _changed(kernel):
    return repr(substitute(kernel)) != repr(kernel) or substitute(kernel) != kernel


def _special_cased(fn, kernel):
    """test_kernel_versus_pairwise skips k(X) for its own RBF + WhiteKernel object (WhiteKernel's
    k(X) != k(X, X)); a rebuilt copy is not that object, so the pair is left out."""
    return fn is sklearn_tests.test_kernel_versus_pairwise and kernel == sklearn_tests.kernel_rbf_plus_white


CASES = [(fn, kernel) for fn in SKLEARN_TESTS for kernel in _their_kernels(fn)
         if _changed(kernel) and not _special_cased(fn, kernel)]


@pytest.mark.parametrize("which", ["kernelkit", "sklearn"])
@pytest.mark.parametrize("sklearn_test, kernel", CASES,
                         ids=[f"{fn.__name__}-{kernel!r}" for fn, kernel in CASES])
def test_sklearn_kernel_test(sklearn_test, kernel, which):
    sklearn_test(substitute(kernel) if which == "kernelkit" else kernel)


def test_the_suite_covers_the_periodic_kernel():
    assert len(SKLEARN_TESTS) >= 10 and len(CASES) >= 100
    periodic = {fn.__name__ for fn, k in CASES if isinstance(substitute(k), kernelkit.ExpSineSquared)}
    assert periodic == {fn.__name__ for fn in SKLEARN_TESTS if _their_kernels(fn)}
