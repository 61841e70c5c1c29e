"""Parameter settings per registry kernel, shared by the registry-wide tests.

A registry entry with no cases here fails ``test_every_kernel_has_cases``, so a new kernel cannot
land untested. Values are chosen so that K is neither ~0 nor ~1 on standard-normal data.
"""

import numpy as np

PARAM_CASES = {
    "linear": [{}],
    "polynomial": [{}, dict(gamma=0.3, degree=2, coef0=0.5), dict(gamma=0.2, degree=1, coef0=2.0)],
    "rbf": [{}, dict(gamma=0.4), dict(gamma=np.array([0.1, 0.7, 0.3]))],
    "laplacian": [{}, dict(gamma=0.4), dict(gamma=np.array([0.2, 0.5, 0.9]))],
    "matern": [
        dict(nu=0.5, length_scale=1.3),
        dict(nu=1.5, length_scale=0.9),
        dict(nu=2.5, length_scale=np.array([0.8, 1.5, 2.0])),
    ],
    "rational_quadratic": [{}, dict(length_scale=0.7, alpha=2.5), dict(length_scale=np.array([1.0, 2.0, 0.5]), alpha=0.3)],
    "cosine": [{}],
    "sigmoid": [{}, dict(gamma=0.2, coef0=0.3)],
    "exponential": [{}, dict(scale=0.25)],
}

N_FEATURES = 3  # per-feature parameters above have this many entries


def case_ids():
    """(kernel name, params) pairs with readable pytest ids."""
    out = []
    for name, cases in PARAM_CASES.items():
        for i, params in enumerate(cases):
            out.append((name, params, f"{name}-{i}"))
    return out
