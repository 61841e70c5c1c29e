"""Run scikit-learn's own ``test_kernel_ridge.py`` with kernelkit's KernelRidge substituted.

As :mod:`sklearn_gpr_suite` does for the GP: the test file is copied from the installed
scikit-learn into a temporary directory, its import of ``KernelRidge`` replaced by a subclass of
:class:`kernelkit.KernelRidge` whose defaults are ``device="cpu"`` (or ``--device``) and
``tol=1e-10`` (``--tol``): scikit-learn's solve is direct, exact to rounding, and the tests
compare predictions to 6 decimals on targets of size ~300 (5e-9 relative), which CG's default
``tol=1e-6`` does not reach. pytest runs it and this script writes a JSON summary.

Usage::

    PYTHONPATH=. python benchmarks/sklearn_kernel_ridge_suite.py --out results.json
"""

from __future__ import annotations

import pathlib
import sys
import tempfile

import sklearn

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from sklearn_gpr_suite import arguments, report, run, substitute  # noqa: E402

_IMPORT = "from sklearn.kernel_ridge import KernelRidge\n"


def main(argv=None):
    name = "sklearn_kernel_ridge_suite.json"
    args = arguments(__doc__, pathlib.Path(sklearn.__file__).parent / "tests/test_kernel_ridge.py",
                     name, argv, [("--tol", dict(type=float, default=1e-10))])
    with tempfile.TemporaryDirectory() as tmp:
        workdir = pathlib.Path(tmp)
        target = workdir / "test_kernel_ridge_kernelkit.py"
        target.write_text(substitute(args.test_file, _IMPORT, "KernelRidge",
                                     {"device": args.device, "tol": args.tol}))
        summary = run(target, workdir, args.k)
    summary.update(device=args.device, tol=args.tol)
    report(summary, args.out, name,
           f"scikit-learn {summary['sklearn']} test_kernel_ridge.py with kernelkit's KernelRidge "
           f"({args.device}, tol={args.tol:g})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
