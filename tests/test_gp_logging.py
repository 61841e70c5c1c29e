"""A fit says what it is doing (issue 39): GaussianProcessRegressor.fit logs one INFO record per
log marginal likelihood evaluation of its optimiser (theta, the value, its standard error, CG
steps, seconds; the numbers in ``record.kernelkit``), a record at the start and the end of each
phase, and ``verbose`` shows a status line of the fit's convergence on stderr (1) and a line per
evaluation on stdout (2).

Tried as a new user would, a fit at n = 12 000 on a CPU printed nothing for 10 minutes: the
package had no logging and the GP no ``verbose``.
"""

import logging

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.gaussian_process.kernels import ConstantKernel as C
from sklearn.gaussian_process.kernels import WhiteKernel as W

import kernelkit as kk
from kernelkit.estimators.gp import _exact, _lml, _optimizer

KERNEL = C(1.0) * kk.RBF([1.0, 1.0]) + W(0.05)


def _data(n, targets=1):
    rng = np.random.default_rng(0)
    X = rng.uniform(-2.0, 2.0, (n, 2))
    Y = np.stack([np.sin(2.0 * X[:, 0]) + (k + 1) * np.cos(X[:, 1]) for k in range(targets)],
                 axis=1)
    Y += 0.1 * rng.standard_normal(Y.shape)
    return X, (Y[:, 0] if targets == 1 else Y)


def _records(caplog, event=None, phase=None):
    """The numbers of the GP's records (``record.kernelkit``), in order."""
    out = [r.kernelkit for r in caplog.records if hasattr(r, "kernelkit")
           and r.kernelkit["estimator"] == "GaussianProcessRegressor"]
    return [f for f in out if (event is None or f["event"] == event)
            and (phase is None or f["phase"] == phase)]


def _gp(**params):
    return kk.GaussianProcessRegressor(KERNEL, device="cpu", random_state=0, **params)


def _check_hyperparameters(record):
    """``hyperparameters`` is exp(theta) by the kernel's free hyperparameter names."""
    theta = np.exp(record["theta"])
    assert record["hyperparameters"] == {"k1__k1__constant_value": theta[0],
                                         "k1__k2__length_scale": [theta[1], theta[2]],
                                         "k2__noise_level": theta[3]}


def test_exact_fit_logs_each_evaluation_at_the_values_the_optimiser_saw(caplog, monkeypatch):
    """One record per call of the exact objective, with its theta, its value (= the regressor's
    log_marginal_likelihood there), no standard error and no CG steps; start and end records
    around them."""
    calls = []
    exact_lml = _exact.exact_lml

    def counted(op, theta, Y, alpha, eval_gradient):
        calls.append(np.array(theta))
        return exact_lml(op, theta, Y, alpha, eval_gradient)

    monkeypatch.setattr(_exact, "exact_lml", counted)
    caplog.set_level(logging.INFO, logger="kernelkit")
    X, y = _data(40)
    gp = _gp().fit(X, y)
    seen = list(calls)
    records = _records(caplog)
    assert [r["event"] for r in records] == (["fit_start"] + ["evaluation"] * len(seen)
                                             + ["fit_end"])
    start, evaluations, end = records[0], records[1:-1], records[-1]
    assert start == {"estimator": "GaussianProcessRegressor", "phase": "fit",
                     "event": "fit_start", "n": 40, "d": 2, "path": "exact", "device": "cpu",
                     "dtype": "float64", "preconditioner_rank": None, "pretrain_size": 0}
    assert len(seen) > 3
    for k, (record, theta) in enumerate(zip(evaluations, seen), start=1):
        assert record["evaluation"] == k and record["phase"] == "fit"
        np.testing.assert_array_equal(record["theta"], theta)
        _check_hyperparameters(record)
        # the same float64 computation at the same theta
        assert record["lml"] == pytest.approx(gp.log_marginal_likelihood(theta), rel=1e-12)
        assert record["lml_se"] is None and record["cg_steps"] is None
        assert record["seconds"] > 0
    assert end["evaluations"] == len(seen)
    assert end["lml"] == gp.log_marginal_likelihood_value_
    assert end["stopped"].startswith("L-BFGS-B after ")
    assert end["seconds"] >= sum(r["seconds"] for r in evaluations)
    text = [r.getMessage() for r in caplog.records if getattr(r, "kernelkit", {}).get("event")
            == "evaluation"]
    assert text[0].startswith("fit, evaluation 1: LML ") and "RBF(length_scale=[" in text[0]


def test_iterative_fit_logs_cg_steps_and_standard_error_per_evaluation(caplog, monkeypatch):
    """The iterative path (exact_max_n=0, a preconditioner of rank 5 < n: CG takes several
    steps): per evaluation the sum over the two target columns of the CG steps of their
    solves, the summed estimate and its standard error (the columns' spreads in quadrature)."""
    columns = []
    estimate = _lml.log_marginal_likelihood

    def counted(op, theta, y, probes, settings, eval_gradient=False, info=None, warn=True):
        out = estimate(op, theta, y, probes, settings, eval_gradient, info, warn)
        if info is not None:  # the objective's calls (the final solve passes none)
            columns.append((np.array(theta), out[0], info["cg"].n_iter, info["spread"]))
        return out

    monkeypatch.setattr(_lml, "log_marginal_likelihood", counted)
    caplog.set_level(logging.INFO, logger="kernelkit")
    X, Y = _data(60, targets=2)
    _gp(exact_max_n=0, preconditioner_rank=5, n_probes=4).fit(X, Y)
    evaluations = _records(caplog, "evaluation")
    start, = _records(caplog, "fit_start")
    assert start["path"] == "iterative" and start["preconditioner_rank"] == 5
    assert len(columns) == 2 * len(evaluations) and len(evaluations) > 3
    for k, record in enumerate(evaluations):
        (theta, lml0, steps0, se0), (theta1, lml1, steps1, se1) = columns[2 * k:2 * k + 2]
        np.testing.assert_array_equal(theta, theta1)
        np.testing.assert_array_equal(record["theta"], theta)
        _check_hyperparameters(record)
        assert record["cg_steps"] == steps0 + steps1 and steps0 > 1
        assert record["lml"] == pytest.approx(lml0 + lml1, rel=1e-12)
        assert record["lml_se"] == pytest.approx(np.hypot(se0, se1), rel=1e-12)
        assert record["lml_se"] > 0
    assert _records(caplog, "fit_end")[0]["evaluations"] == len(evaluations)


def test_pretraining_is_its_own_phase(caplog, capsys):
    """The pretraining sub-fit logs and displays as the phase "pretraining" (its own status
    line, numbered evaluations), then the fit on all rows says it started from it."""
    caplog.set_level(logging.INFO, logger="kernelkit")
    X, y = _data(60)
    _gp(pretrain_size=30, verbose=1).fit(X, y)
    phases = [(r["phase"], r["event"]) for r in _records(caplog) if r["event"] != "evaluation"]
    assert phases == [("pretraining", "fit_start"), ("pretraining", "fit_end"),
                      ("fit", "fit_start"), ("fit", "fit_end")]
    for phase, n in (("pretraining", 30), ("fit", 60)):
        start, = _records(caplog, "fit_start", phase)
        assert start["n"] == n
        numbers = [r["evaluation"] for r in _records(caplog, "evaluation", phase)]
        assert numbers == list(range(1, len(numbers) + 1)) and numbers
    assert _records(caplog, "fit_start", "fit")[0]["pretrain_size"] == 30
    err = capsys.readouterr().err
    lines = [line.split("\r")[-1] for line in err.rstrip("\n").split("\n")]
    assert len(lines) == 2
    assert lines[0].startswith("GaussianProcessRegressor pretraining (n=30, exact) [")
    assert lines[1].startswith("GaussianProcessRegressor fit (n=60, exact) [")


def test_verbose_0_is_silent(capsys):
    X, y = _data(40)
    _gp().fit(X, y)
    _gp(exact_max_n=0, verbose=False).fit(X, y)
    assert capsys.readouterr() == ("", "")


def test_verbose_1_shows_convergence_on_stderr(caplog, capsys):
    """One status line, rewritten in place: the evaluations, the best value, the last
    iteration's gain (on the iterative path against the standard error it stops below), the
    last evaluation's CG steps and seconds; it ends with the final value and why L-BFGS-B
    stopped, and no count out of optimizer_max_iter."""
    caplog.set_level(logging.INFO, logger="kernelkit")
    X, y = _data(60)
    gp = _gp(exact_max_n=0, preconditioner_rank=5, verbose=1).fit(X, y)
    end, = _records(caplog, "fit_end")
    out, err = capsys.readouterr()
    assert out == ""
    assert err.endswith("\n") and err.count("\n") == 1  # one line, closed
    states = err.rstrip("\n").split("\r")
    assert states[-1].startswith("GaussianProcessRegressor fit (n=60, iterative) [")
    assert states[-1].endswith(f"{end['evaluations']} evaluations, LML "
                               f"{gp.log_marginal_likelihood_value_:.6g}, stopped: "
                               f"{end['stopped']}]")
    progress = [s for s in states if "last iteration" in s]
    assert progress and all("best LML" in s and "(stops below " in s and " CG steps, " in s
                            for s in progress)
    assert "/100" not in err and "of 100" not in err  # optimizer_max_iter


class _Interrupting:
    """An optimizer callable that evaluates the objective twice, then raises."""

    def __init__(self, error):
        self.error = error

    def __call__(self, obj_func, initial_theta, bounds):
        obj_func(initial_theta)
        obj_func(initial_theta + 0.1)
        raise self.error


@pytest.mark.parametrize("error", [KeyboardInterrupt, RuntimeError("planted")])
def test_display_is_closed_and_end_recorded_when_fit_raises(error, caplog, capsys):
    caplog.set_level(logging.INFO, logger="kernelkit")
    X, y = _data(40)
    with pytest.raises(type(error) if isinstance(error, Exception) else error):
        _gp(optimizer=_Interrupting(error), verbose=1).fit(X, y)
    err = capsys.readouterr().err
    assert err.endswith("\n") and err.count("\n") == 1  # closed, once
    assert "2 evaluations" in err.split("\r")[-1]
    end, = _records(caplog, "fit_end")
    name = "KeyboardInterrupt" if error is KeyboardInterrupt else "RuntimeError"
    assert end["evaluations"] == 2 and end["lml"] is None
    assert end["stopped"] == f"raised {name}"


def test_verbose_2_prints_one_line_per_evaluation(caplog, capsys):
    caplog.set_level(logging.INFO, logger="kernelkit")
    X, y = _data(40)
    _gp(verbose=2).fit(X, y)
    lines = capsys.readouterr().out.splitlines()
    evaluations = _records(caplog, "evaluation")
    assert len(lines) == len(evaluations) > 3
    for k, (line, record) in enumerate(zip(lines, evaluations), start=1):
        assert line.startswith(f"fit, evaluation {k}: LML {record['lml']:.6g}, ")


def test_kernelkit_logger_has_a_null_handler():
    """A library's records reach the application's handlers or nowhere: the ``kernelkit``
    logger has a NullHandler (never Python's last-resort handler on stderr) and no other."""
    handlers = logging.getLogger("kernelkit").handlers
    assert [type(h) for h in handlers] == [logging.NullHandler]


@pytest.mark.parametrize("value, error", [(-1, ValueError), (1.5, TypeError), ("2", TypeError),
                                          (None, TypeError)])
@pytest.mark.parametrize("estimator", [kk.GaussianProcessRegressor(device="cpu"),
                                       kk.KernelRidge(device="cpu")])
def test_bad_verbose_is_refused_naming_it(estimator, value, error):
    X, y = _data(20)
    with pytest.raises(error, match=r"verbose must be an integer >= 0 or a bool; got "):
        clone(estimator).set_params(verbose=value).fit(X, y)


def test_verbose_is_a_scikit_learn_parameter():
    gp = kk.GaussianProcessRegressor(verbose=2)
    assert gp.get_params()["verbose"] == 2 and clone(gp).verbose == 2
    assert kk.GaussianProcessRegressor().verbose == 0


def test_only_rank_0_of_a_process_group_displays(monkeypatch):
    """Every rank computes the same fit; only rank 0 draws and prints."""
    from kernelkit.estimators import _verbosity
    from kernelkit_gpu import distributed as D

    monkeypatch.setattr(_verbosity.distributed, "active", lambda: True)
    for rank, shown in ((0, True), (1, False)):
        monkeypatch.setattr(D, "world", lambda rank=rank: (rank, 2))
        assert _verbosity.displays(1) is shown and _verbosity.displays(0) is False


def test_warm_up_is_recorded_before_the_first_evaluation_and_changes_nothing(caplog,
                                                                            monkeypatch):
    """The iterative path records one warm-up (its seconds) before its first evaluation, the
    exact path none; the fit without the warm-up ends at the same theta and value (it only
    compiles and initialises: its draws are its own)."""
    caplog.set_level(logging.INFO, logger="kernelkit")
    X, y = _data(60)
    warm = _gp(exact_max_n=0, preconditioner_rank=5, n_probes=4).fit(X, y)
    events = [r["event"] for r in _records(caplog)]
    assert events.count("warm_up") == 1
    assert events.index("warm_up") < events.index("evaluation")
    assert _records(caplog, "warm_up")[0]["seconds"] > 0
    caplog.clear()
    monkeypatch.setattr(_optimizer.StochasticObjective, "warm_up", lambda self, theta: 0.0)
    cold = _gp(exact_max_n=0, preconditioner_rank=5, n_probes=4).fit(X, y)
    np.testing.assert_array_equal(cold.kernel_.theta, warm.kernel_.theta)
    assert cold.log_marginal_likelihood_value_ == warm.log_marginal_likelihood_value_
    caplog.clear()
    _gp().fit(X, y)  # n = 60: the exact path
    assert _records(caplog, "warm_up") == []
