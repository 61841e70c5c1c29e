"""What the estimators say while they fit, besides their results.

- :mod:`logging` records, always (INFO; silent until the application turns them on): each
  module logs to ``logging.getLogger(__name__)``, under the ``kernelkit`` logger, which has a
  ``NullHandler`` only. A record's numbers are in its attribute :data:`RECORD_ATTRIBUTE`
  (``record.kernelkit``), a dict whose ``"event"`` names it, so that a ``logging.Handler`` can
  collect them;
- the ``verbose`` parameter (:func:`check_verbose`): a display on stderr, and printed lines,
  on one process only (:func:`displays`).

Importing this module loads nothing beyond the standard library.
"""

from __future__ import annotations

import numbers

from kernelkit import distributed

__all__ = ["RECORD_ATTRIBUTE", "check_verbose", "displays"]

#: The attribute of the estimators' log records that holds their numbers, a dict.
RECORD_ATTRIBUTE = "kernelkit"


def check_verbose(value):
    """``verbose`` as an int >= 0 (False and True are 0 and 1, as in scikit-learn)."""
    if not isinstance(value, numbers.Integral):
        raise TypeError(f"verbose must be an integer >= 0 or a bool; got {value!r}")
    if value < 0:
        raise ValueError(f"verbose must be an integer >= 0 or a bool; got {value!r}")
    return int(value)


def displays(verbose):
    """Whether this process shows the display of ``verbose`` (checked): verbose >= 1, and
    under a ``torch.distributed`` process group only on rank 0 (the others compute the same
    fit)."""
    if verbose < 1:
        return False
    if not distributed.active():
        return True
    from kernelkit_gpu import distributed as D

    return D.world()[0] == 0
