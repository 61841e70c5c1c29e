"""Parameter settings per registry kernel for the float64 reference tests, from the registry.

Every registry entry carries its test examples (``KernelSpec.examples``); this table is theirs
(those marked ``math``) at ``N_FEATURES`` features, so a new kernel is tested without editing it,
and an entry without examples fails ``test_every_kernel_has_cases``.
"""

from kernelkit_math.registry import REGISTRY

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
