"""What :meth:`kernelkit.GaussianProcessRegressor.fit` says while it runs
(:mod:`kernelkit.estimators._verbosity`): :mod:`logging` records and the ``verbose`` display.

Records: INFO, logger ``kernelkit.estimators.gp._progress``, each with its numbers in
``record.kernelkit``, a dict with ``"estimator": "GaussianProcessRegressor"``, ``"phase"``
(``"pretraining"``: the fit on a subset that gives the start, ``pretrain_size``; ``"fit"``: the
fit on all rows) and ``"event"``:

- ``"fit_start"``, when the phase's optimiser starts: ``n``, ``d``, ``path`` (``"exact"`` or
  ``"iterative"``), ``device``, ``dtype`` (of the kernel products), ``preconditioner_rank``
  (None on the exact path), ``pretrain_size`` (the rows of this fit's pretraining phase, which
  ran before: 0 for none);
- ``"evaluation"``, one per log marginal likelihood evaluation of the optimiser (restarts
  included): ``evaluation`` (1, 2, ... within the phase), ``theta`` (the log-hyperparameters, a
  list), ``hyperparameters`` (the kernel's free hyperparameters by name: exp(theta); a float,
  or a list for one per feature), ``lml`` (the value the optimiser got: on the iterative path
  the estimate, and at a trial point the objective does not trust the best so far minus
  max(1, |best|), :class:`~kernelkit.estimators.gp._optimizer.StochasticObjective`), ``lml_se``
  (its standard error; None on the exact path), ``cg_steps`` (CG steps, summed over the target
  columns; None on the exact path), ``seconds``;
- ``"warm_up"``, on the iterative path before the first evaluation: ``seconds`` of one
  evaluation cut short, which compiles the GPU kernels and initialises the libraries
  (:meth:`~kernelkit.estimators.gp._optimizer.StochasticObjective.warm_up`);
- ``"preconditioner_rank"``, once after the first evaluation where ``preconditioner_rank`` is
  "auto", a larger rank is possible and that evaluation took more than one CG step
  (:mod:`kernelkit.estimators.gp._rank`): ``rank`` (the first), ``chosen`` (the rest of the
  fit's), ``cg_steps`` (the first evaluation's, at ``rank``), ``step_seconds`` (one CG step), ``preconditioner_seconds`` (``[[rank, seconds],
  [larger rank, seconds]]``: the preconditioner with its gradient);
- ``"fit_end"``: ``evaluations``, ``seconds`` (since the phase began, its pretraining
  included), ``lml`` (``log_marginal_likelihood_value_``; None when the fit raised),
  ``stopped`` (why the optimiser stopped, one reason per run; the exception when the fit
  raised).

Display (``verbose`` >= 1): one status line per phase on stderr (tqdm): the evaluations so far,
the best log marginal likelihood, the gain of the last L-BFGS-B iteration (on the iterative path
against its standard error, below which it stops), and the last evaluation's CG steps
and seconds; at the end the final value and why the optimiser stopped. ``verbose`` >= 2 also
prints each evaluation's record on stdout. No iteration count out of ``optimizer_max_iter``:
that is an upper limit a converging fit does not reach.

Under a ``torch.distributed`` process group every rank logs its records (rank 0's values and
standard errors: every rank computes the same fit), and only rank 0 displays and prints.
"""

from __future__ import annotations

import logging
import math
import sys
import time

import numpy as np

from kernelkit.estimators._verbosity import RECORD_ATTRIBUTE, displays

__all__ = ["FitReport"]

logger = logging.getLogger(__name__)


class FitReport:
    """The records and display of one phase of a fit; a context manager that closes the
    display and records the end of a started phase that raised (KeyboardInterrupt included).

    Parameters
    ----------
    verbose : int
        The regressor's checked ``verbose``.
    phase : {"fit", "pretraining"}
    """

    def __init__(self, verbose, phase):
        self.verbose, self.phase = verbose, phase
        self.evaluations, self.best, self.reasons = 0, -math.inf, []
        self._t0 = time.perf_counter()
        self._kernel = self._bar = self._previous = None
        self._gain = self._last = ""

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        try:
            if exc_type is not None and self._kernel is not None:
                self.reasons.append(f"raised {exc_type.__name__}")
                self.end(None)
        finally:
            if self._bar is not None:
                self._bar.close()
                self._bar = None
        return False

    def _log(self, event, message, **fields):
        record = {"estimator": "GaussianProcessRegressor", "phase": self.phase, "event": event,
                  **fields}
        logger.info("%s", message, extra={RECORD_ATTRIBUTE: record})

    def start(self, kernel, n, d, exact, device, dtype, rank, pretrain_size):
        """Record the start of the phase's optimiser on ``n`` x ``d`` data with ``kernel`` (its
        structure names the hyperparameters); open the display."""
        self._kernel = kernel
        path = "exact" if exact else "iterative"
        dtype = str(dtype).replace("torch.", "")
        self._log("fit_start",
                  f"{self.phase}: n={n}, d={d}, {path} path on {device} ({dtype})"
                  + ("" if exact else f", preconditioner rank {rank}")
                  + (f", after pretraining on {pretrain_size} rows" if pretrain_size else ""),
                  n=n, d=d, path=path, device=str(device), dtype=dtype,
                  preconditioner_rank=rank, pretrain_size=pretrain_size)
        if displays(self.verbose):
            from tqdm import tqdm

            self._bar = tqdm(desc=f"GaussianProcessRegressor {self.phase} (n={n}, {path})",
                             bar_format="{desc} [{elapsed}{postfix}]", file=sys.stderr)

    def warm_up(self, seconds):
        """Record the warm-up before the first evaluation (iterative path)."""
        self._log("warm_up", f"{self.phase}: warm-up (compilation, library set-up) "
                  f"{seconds:.3g} s", seconds=seconds)

    def rank(self, rank, chosen, steps, step_s, pre_times):
        """Record the "auto" preconditioner rank's decision (:mod:`.gp._rank`)."""
        self._log("preconditioner_rank",
                  f"{self.phase}: preconditioner rank {rank} -> {chosen} ({steps} CG steps at "
                  f"{step_s:.3g} s; preconditioner "
                  + ", ".join(f"{s:.3g} s at rank {k}" for k, s in pre_times) + ")",
                  rank=rank, chosen=chosen, cg_steps=steps, step_seconds=step_s,
                  preconditioner_seconds=[[k, s] for k, s in pre_times])

    def new_run(self):
        """An optimiser run starts: its first iteration's gain is against its first value."""
        self._previous = None

    def evaluation(self, theta, lml, lml_se, cg_steps, seconds):
        """Record one evaluation of the optimiser's objective: the log marginal likelihood
        ``lml`` at ``theta``, its standard error (None: exact), the CG steps (None: exact) and
        the seconds it took."""
        self.evaluations += 1
        self.best = max(self.best, lml)
        if self._previous is None:
            self._previous = -lml
        printing = self._bar is not None and self.verbose >= 2
        if printing or logger.isEnabledFor(logging.INFO):
            text = (f"{self.phase}, evaluation {self.evaluations}: LML {lml:.6g}"
                    + ("" if lml_se is None else f" +- {lml_se:.2g}")
                    + ("" if cg_steps is None else f", {cg_steps} CG steps")
                    + f", {seconds:.3g} s; {self._kernel.clone_with_theta(theta)!r}")
            self._log("evaluation", text, evaluation=self.evaluations,
                      theta=np.asarray(theta).tolist(),
                      hyperparameters=_hyperparameters(self._kernel, theta), lml=lml,
                      lml_se=lml_se, cg_steps=cg_steps, seconds=seconds)
            if printing:
                self._bar.write(text, file=sys.stdout)
        if self._bar is not None:
            self._last = (", last evaluation " + ("" if cg_steps is None else
                                                  f"{cg_steps} CG steps, ") + f"{seconds:.2g} s")
            self._show()

    def iteration(self, value, se=None):
        """An optimiser iteration ended at the minimised objective ``value`` (-lml); ``se``: the
        gain below which it stops (the iterative path's standard error)."""
        gain = self._previous - value if self._previous is not None else math.nan
        self._previous = value
        self._gain = f", last iteration {gain:+.3g}" + ("" if se is None else
                                                        f" (stops below {se:.2g})")
        if self._bar is not None:
            self._show()

    def stopped(self, reason):
        """The optimiser run stopped for ``reason``."""
        self.reasons.append(reason)

    def end(self, lml):
        """Record the end of the phase: the final log marginal likelihood (None: it raised)."""
        seconds = time.perf_counter() - self._t0
        stopped = "; ".join(self.reasons) or "no hyperparameters optimised"
        final = "" if lml is None else f", LML {lml:.6g}"
        self._log("fit_end", f"{self.phase} ended after {self.evaluations} evaluations, "
                  f"{seconds:.3g} s{final}: {stopped}", evaluations=self.evaluations,
                  seconds=seconds, lml=lml, stopped=stopped)
        if self._bar is not None:
            self._bar.set_postfix_str(f"{self.evaluations} evaluations{final}, stopped: "
                                      f"{stopped}")

    def _show(self):
        self._bar.set_postfix_str(f"{self.evaluations} evaluations, best LML {self.best:.6g}"
                                  f"{self._gain}{self._last}")


def _hyperparameters(kernel, theta):
    """``{name: value}`` of ``kernel``'s free hyperparameters at ``theta``: exp(theta), a float
    or a list for a hyperparameter of several elements."""
    values, out, i = np.exp(np.asarray(theta, dtype=np.float64)), {}, 0
    for h in kernel.hyperparameters:
        if h.fixed:
            continue
        part = values[i:i + h.n_elements]
        out[h.name] = float(part[0]) if h.n_elements == 1 else part.tolist()
        i += h.n_elements
    return out
