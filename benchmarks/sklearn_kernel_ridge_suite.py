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

import argparse
import os
import pathlib
import sys
import tempfile

import sklearn

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from sklearn_gpr_suite import report, run  # noqa: E402

_IMPORT = "from sklearn.kernel_ridge import KernelRidge\n"

_SUBSTITUTE = '''\
import types as _types

import kernelkit as _kernelkit

_base_init = _kernelkit.KernelRidge.__init__


class KernelRidge(_kernelkit.KernelRidge):
    """kernelkit's KernelRidge with the runner's defaults (the signature otherwise kernelkit's)."""


_init = _types.FunctionType(_base_init.__code__, _base_init.__globals__, "__init__",
                            _base_init.__defaults__, _base_init.__closure__)
_init.__kwdefaults__ = dict(_base_init.__kwdefaults__, device=DEVICE, tol=TOL)
KernelRidge.__init__ = _init
'''


def _prepare(workdir, test_file, device, tol):
    source = pathlib.Path(test_file).read_text()
    if source.count(_IMPORT) != 1:
        raise SystemExit(f"{test_file}: expected exactly one line {_IMPORT.strip()!r}")
    source = source.replace(_IMPORT, _SUBSTITUTE.replace("DEVICE", repr(device))
                            .replace("TOL", repr(tol)))
    target = workdir / "test_kernel_ridge_kernelkit.py"
    target.write_text(source)
    return target


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default_tests = pathlib.Path(sklearn.__file__).parent / "tests/test_kernel_ridge.py"
    parser.add_argument("--test-file", default=str(default_tests))
    parser.add_argument("--out", "--json", dest="out", default=os.environ.get("OUT"),
                        help="JSON summary path (a directory: sklearn_kernel_ridge_suite.json "
                             "in it)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--tol", type=float, default=1e-10)
    parser.add_argument("-k", default=None, help="pytest -k expression")
    args = parser.parse_args(argv)
    if not pathlib.Path(args.test_file).exists():
        raise SystemExit(f"{args.test_file} not found; pass --test-file")
    with tempfile.TemporaryDirectory() as tmp:
        workdir = pathlib.Path(tmp)
        summary = run(_prepare(workdir, args.test_file, args.device, args.tol), workdir, args.k)
    summary.update(device=args.device, tol=args.tol)
    report(summary, args.out, "sklearn_kernel_ridge_suite.json",
           f"scikit-learn {summary['sklearn']} test_kernel_ridge.py with kernelkit's KernelRidge "
           f"({args.device}, tol={args.tol:g})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
