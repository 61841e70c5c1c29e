"""tests/tolerance_report.py: the ratio it records is the error over the tolerance."""

import json

import numpy as np
import pytest

from tests import tolerance_report


def test_ratio_is_the_error_over_the_tolerance():
    ratio, dtype = tolerance_report._ratio(np.array([1.0, 2.0 + 3e-6]), np.array([1.0, 2.0]),
                                           rtol=1e-6, atol=1e-6)
    assert dtype == "float64"
    assert ratio == pytest.approx(3e-6 / (1e-6 + 2e-6), rel=1e-6)
    assert tolerance_report._ratio(np.nan, np.nan, rtol=0.0, atol=0.0)[0] == 0.0  # equal_nan


def test_summary_keeps_the_largest_ratio_per_line(tmp_path):
    path = tmp_path / "tol"
    rows = [dict(test="t", where="a.py:1", rtol=1e-6, atol=0, ratio=r, dtype="float32")
            for r in (0.1, 0.7, 0.3)] + [dict(test="u", where="b.py:2", rtol=1e-12, atol=0,
                                              ratio=0.2, dtype="float64")]
    (tmp_path / "tol.gw0").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert [(r[0], r[1]) for r in tolerance_report.summary(str(path))] == [
        (0.7, "a.py:1"), (0.2, "b.py:2")]
