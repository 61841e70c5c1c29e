"""The SVMs' kernel rows (:meth:`KernelOperator.rows_of`: the training points prepared once,
kept on the device, or streamed to it where they and the solver's row cache do not fit) and
the work of the SMO solver's outer step.

A streamed fit computes the same kernel rows bit for bit (the RBF kernel: the same preparation
kernel row by row, the same tiles; tests/test_gpu_gram_rows.py), so the solver takes the same
steps and the fit is the same to the last bit.

The fits run the Triton kernels under the interpreter on the CPU, and unchanged on a GPU with
``pytest --device cuda``.
"""

import collections

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from kernelkit import SVC, SVR, OneClassSVM
from kernelkit.linalg import smo
from kernelkit.operators import kernel_operator
from tests.gpu_cases import spy_gram_rows


def _fit(Model, X, y, device, **params):
    model = Model(kernel="rbf", gamma=0.05, tol=1e-6, device=device, **params)
    return model.fit(X) if Model is OneClassSVM else model.fit(X, y)


@pytest.mark.usefixtures("triton_can_run")
@pytest.mark.parametrize("Model", [SVC, SVR, OneClassSVM])
def test_streamed_fit_equals_the_resident_fit(rng, device, monkeypatch, Model):
    """200 training points of D = 20 take 8 * 86 * 200 = 137600 bytes. With 4 MiB of free
    memory, 80 % of it holds them beside a row cache of 0.01 MB (the solver then holds a few
    hundred kB of rows) but not beside the default 200 MB: that fit streams the points in
    chunks (of 128), and ends with the same support, dual coefficients and intercept, bit for
    bit."""
    if device == "cpu":
        monkeypatch.setattr(kernel_operator, "TRITON_ON_CPU", True)
    monkeypatch.setattr(kernel_operator, "_free_bytes", lambda where: 4 * 2**20)
    monkeypatch.setattr(kernel_operator, "ROWS_CHUNK_BYTES", 100 * 8 * 86)
    chunks = spy_gram_rows(monkeypatch)
    X = rng.normal(size=(200, 20))
    y = np.where(X[:, 0] + X[:, 1] * X[:, 2] + 0.3 * rng.normal(size=200) > 0, 1, -1)
    if Model is SVR:
        y = np.sin(X[:, 0]) + 0.5 * X[:, 1]
    resident = _fit(Model, X, y, device, cache_size=0.01)
    streamed = _fit(Model, X, y, device)
    assert chunks == [None, 100]
    np.testing.assert_array_equal(streamed.support_, resident.support_)
    np.testing.assert_array_equal(streamed.dual_coef_, resident.dual_coef_)
    np.testing.assert_array_equal(streamed.intercept_, resident.intercept_)
    assert streamed.n_iter_ == resident.n_iter_ and len(resident.support_) > 20


class _CountOps(TorchDispatchMode):
    """Counts the torch operations run inside it that compute (each a kernel launch on a GPU):
    not views, nor the host's wrapping of a Python number or reading of a value."""

    def __init__(self):
        super().__init__()
        self.count = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not func.is_view and func.__name__.split(".")[0] not in ("scalar_tensor",
                                                                      "_local_scalar_dense"):
            self.count[func] += 1
        return func(*args, **(kwargs or {}))


def test_outer_step_launches_few_operations(rng, monkeypatch):
    """An outer step of the solver (the rows cached, the subproblem aside) runs at most 45
    torch operations, and one sort: the masks of I_up and I_low and the two orders of the
    working set come as two-row tensors, the working set's four vectors as one gather (before:
    90 operations and two sorts a step on this problem; each is a launch on a GPU)."""
    n = 300
    X = rng.normal(size=(n, 4))
    K = torch.exp(-0.5 * torch.cdist(torch.tensor(X), torch.tensor(X)) ** 2)
    y = torch.tensor(np.where(X[:, 0] + 0.7 * rng.normal(size=n) > 0, 1.0, -1.0))
    outer = []
    subproblem = smo._subproblem

    def aside(*args):
        outer.append(1)
        with torch.utils._python_dispatch._disable_current_modes():
            return subproblem(*args)

    monkeypatch.setattr(smo, "_subproblem", aside)
    ones = torch.ones(n, dtype=torch.float64)
    with _CountOps() as ops:
        result = smo.solve(lambda i: K[i], -ones, y, ones, 0 * ones, tol=1e-3, working_set=16,
                           cache_bytes=n * n * 8)
    assert result.converged and len(outer) > 20
    sorts = sum(c for f, c in ops.count.items() if "sort" in str(f))
    assert sorts <= len(outer) + 5  # one per outer step, a few for the reconstructions
    assert sum(ops.count.values()) <= 45 * len(outer)
