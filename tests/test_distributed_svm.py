"""SVC, SVR and OneClassSVM over torch.distributed (gloo): 2 and 3 ranks give the single-process
fit, bit for bit.

Each world size is one spawn of tests/distributed_worker.py per rank with the ``svm`` scenario
(tests/test_distributed.py's launcher); the expected values are the same fits made here, in a
process without a process group. The sharded solver (kernelkit.linalg.smo_sharded) computes
every number as the single process does: maxima, minima and counts of the gradient, copies of
kernel values, the gradient's products over kernel rows summed column by column in the order of
the rows, and the same subproblem on every rank. So support_, dual_coef_, intercept_, n_iter_
(and Platt's probA_, probB_) are equal to the last bit, on the CPU's registry kernels (each
kernel value computed on its own) and a precomputed matrix. The fits cover a working set smaller
than the problem (700 points, 600 SVR variables: candidates from every rank), several classes
with class and zero sample weights, and 2 points (on 3 ranks one rank owns none).

The ranks of those checks run on the CPU under every ``--device``: on a GPU the Triton kernel
values of a pair depend on the operands' centring and on the rest of its tile (a tile with a near
pair is recomputed by direct differences), which differ between one process and a rank's shard,
so the fits agree only to the solver's tolerance there (on an H200, 7% of an SVC's dual
coefficients differed from the third digit on), and bit-for-bit equality is a claim about the
CPU's kernel values. What holds on every device is checked on the device's own sharded fit:
the SVC's dual meets libsvm's stopping rule on the float64 kernel matrix, with what one process
gets on the same device.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

from tests.distributed_worker import svm_fits, svm_inputs
from tests.test_distributed import _errors, _result, _shares, spawn_and_read


@functools.lru_cache(maxsize=None)
def _spawned(world, device, root):
    """``(world, [(results, errors) per rank], outdir)`` of one spawn of the SVM checks on
    ``device`` under the directory ``root`` (each world size and device spawned once)."""
    import pathlib

    outdir = pathlib.Path(root) / f"svm{world}{device}"
    outdir.mkdir()
    return spawn_and_read(world, outdir, scenario="svm", device=device)


@pytest.fixture(scope="module")
def spawn_root(tmp_path_factory):
    return str(tmp_path_factory.mktemp("svm"))


@pytest.fixture(scope="module", params=[2, 3], ids=["2-ranks", "3-ranks"])
def svm_ranks(request, spawn_root):
    """The SVM checks with the ranks on the CPU (module docstring)."""
    return _spawned(request.param, "cpu", spawn_root)


@pytest.fixture(scope="module", params=[2, 3], ids=["2-ranks", "3-ranks"])
def svm_ranks_on_device(request, spawn_root, device):
    """The SVM checks with the ranks' kernel rows on ``device`` (the CPU's spawn on the CPU)."""
    return _spawned(request.param, device, spawn_root)


def svc_violation(summary, X, y, C, tol):
    """libsvm's stopping quantity m(a) - M(a) (Fan, Chen and Lin 2005) of a binary SVC's dual,
    given as :func:`tests.distributed_worker.svm_summary`, on the float64 RBF kernel matrix
    (gamma="scale"), and a bound on its rounding error there."""
    from kernelkit_math import get_kernel

    n_sv = int(summary[0])
    support = summary[1:1 + n_sv].astype(int)
    coef = summary[3 + n_sv:3 + 2 * n_sv]  # after n_support_'s two entries: y_i alpha_i
    positive = y[support][coef > 0][0]  # the label libsvm's +1 stands for
    sign = np.where(y == positive, 1.0, -1.0)
    assert np.array_equal(np.sign(coef), sign[support]), "dual signs are not the labels'"
    alpha = np.zeros(len(y))
    alpha[support] = np.abs(coef)
    assert np.all(alpha <= C * (1 + 1e-12)) and abs(coef.sum()) <= 1e-9 * C * len(y)
    K = get_kernel("rbf").value(X, X[support], gamma=1.0 / (X.shape[1] * X.var()))
    f = K @ coef  # sum_j y_j alpha_j K_ij; the gradient G_i = y_i f_i - 1, so -y_i G_i is:
    score = sign - f
    below, above = alpha < C * (1 - 1e-12), alpha > 0
    up = ((sign > 0) & below) | ((sign < 0) & above)
    low = ((sign > 0) & above) | ((sign < 0) & below)
    # |f_i| <= sum |coef| <= n C: float64 sums of n terms err by at most n eps of that
    rounding = 2 * len(y) * np.finfo(np.float64).eps * np.abs(coef).sum()
    return score[up].max() - score[low].min(), rounding


@pytest.mark.subprocess
def test_sharded_svc_meets_the_stopping_rule_on_the_device(svm_ranks_on_device, device):
    """The sharded SVC (700 points, C = 10, tol = 1e-3) on the device of the run: its dual meets
    the stopping rule m(a) - M(a) <= tol on the exact float64 kernel matrix, as the one-process
    fit on that device does (rounding of the kernel values and of the check allowed)."""
    data = svm_inputs()
    X, y = data["X"], data["y"]
    for fit in (_result(svm_ranks_on_device, "svc"), _single("svc", device)):
        gap, rounding = svc_violation(fit, X, y, C=10.0, tol=1e-3)
        assert gap <= 1e-3 + rounding + 1e-9, gap  # 1e-9: float64 kernel values' rounding


def test_stopping_rule_check_catches_a_perturbed_dual():
    """A planted fault: the one-process SVC's dual with 0.1 moved between two free support
    vectors of one class (still feasible) breaks the stopping rule the check above tests."""
    data = svm_inputs()
    fit = _single("svc", "cpu").copy()
    n_sv = int(fit[0])
    coef = fit[3 + n_sv:3 + 2 * n_sv]  # a view: edits change fit
    free = np.flatnonzero((coef > 0.2) & (coef < 9.8))
    assert len(free) >= 2
    coef[free[0]] += 0.1
    coef[free[1]] -= 0.1
    gap, rounding = svc_violation(fit, data["X"], data["y"], C=10.0, tol=1e-3)
    assert gap > 1e-3 + rounding + 1e-9


@functools.lru_cache(maxsize=None)
def _single(name, device):
    """The one-process fit of check ``name`` (computed once for both world sizes)."""
    return svm_fits(svm_inputs(), device)[name]()


@pytest.mark.subprocess
@pytest.mark.parametrize("name", ["svc", "svc_multiclass", "svc_precomputed", "svc_probability",
                                  "svr", "one_class", "svc_tiny", "one_class_tiny"])
def test_svm_equals_one_process(svm_ranks, name):
    """The same fitted attributes on every rank as one process, bit for bit (module
    docstring)."""
    np.testing.assert_array_equal(_result(svm_ranks, name), _single(name, "cpu"))


@pytest.mark.subprocess
def test_svm_kernel_columns_are_sharded(svm_ranks):
    """Every kernel block an SVC fit on 700 points computed held only this rank's columns."""
    world, found, _ = svm_ranks
    for share, (results, errors) in zip(_shares(world, 700), found):
        assert "svm_columns" not in errors, errors["svm_columns"]
        fewest, most, calls = results["svm_columns"].tolist()
        assert fewest == most == share and calls > 0


@pytest.mark.subprocess
def test_svm_unseeded_probability_is_rank0s(svm_ranks):
    """probability=True with random_state=None: rank 0's folds on every rank, so the same
    fit."""
    assert _result(svm_ranks, "svc_unseeded").size > 0


@pytest.mark.subprocess
def test_svm_refuses_different_arguments(svm_ranks):
    """Other labels (the same ones in another order) or another C on rank 1: refused on every
    rank before any work, with the contract's message."""
    world = svm_ranks[0]
    different = ("{}.fit: the ranks passed different arguments: rank 1 of {} passed a different "
                 "{} than rank 0; under a process group every rank passes the same full "
                 "arguments (the same data, in the same order)")
    assert _errors(svm_ranks, "error_svc_data") == ["ValueError",
                                                    different.format("SVC", world, "y")]
    assert _errors(svm_ranks, "error_svr_params") == [
        "ValueError", different.format("SVR", world, "parameters")]


@pytest.mark.subprocess
def test_svm_errors_are_shared(svm_ranks):
    """A NaN in the last rank's X (its checks) and a MemoryError in the last rank's kernel rows
    (the solver): every rank raises that rank's error, as the same type."""
    world = svm_ranks[0]
    kind, message = _errors(svm_ranks, "error_svc_nan")
    assert kind == "ValueError"
    assert message.startswith(f"rank {world - 1} of {world}: Input X contains NaN")
    assert _errors(svm_ranks, "error_svm_rows") == [
        "MemoryError", f"rank {world - 1} of {world}: injected: no memory for this rank's kernel "
                       "rows"]
