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

The ranks run on the CPU under every ``--device``: on a GPU the Triton kernel values of a pair
depend on the operands' centring and on the rest of its tile (a tile with a near pair is
recomputed by direct differences), which differ between one process and a rank's shard, so the
fits agree only to the solver's tolerance there (on an H200, 7% of an SVC's dual coefficients
differed from the third digit on), and bit-for-bit equality is a claim about the CPU's kernel
values.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

from tests.distributed_worker import svm_fits, svm_inputs
from tests.test_distributed import _errors, _result, _shares, spawn


@pytest.fixture(scope="module", params=[2, 3], ids=["2-ranks", "3-ranks"])
def svm_ranks(request, tmp_path_factory):
    """``(world, [(results, errors) per rank], outdir)`` of one spawn of the SVM checks."""
    import json

    world = request.param
    outdir = tmp_path_factory.mktemp(f"svm{world}")
    codes, outputs = spawn(world, outdir, scenario="svm", device="cpu")  # module docstring
    assert codes == [0] * world, "\n".join(outputs)
    found = []
    for r in range(world):
        with np.load(outdir / f"rank{r}.npz") as f:
            results = {k: f[k] for k in f.files}
        found.append((results, json.loads((outdir / f"rank{r}.json").read_text())))
    return world, found, outdir


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
