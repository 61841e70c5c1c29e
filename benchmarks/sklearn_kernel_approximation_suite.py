"""Run scikit-learn's own ``test_kernel_approximation.py`` with kernelkit's Nystroem and RBFSampler
substituted.

As :mod:`sklearn_kernel_ridge_suite` does for KernelRidge: the test file is copied from the
installed scikit-learn into a temporary directory, its imports of ``Nystroem`` and ``RBFSampler``
replaced by subclasses of :class:`kernelkit.Nystroem` and :class:`kernelkit.RBFSampler` whose
default is ``device="cpu"`` (or ``--device``); scikit-learn's other transformers stay. pytest
runs it and this script writes a JSON summary.

Usage::

    PYTHONPATH=. python benchmarks/sklearn_kernel_approximation_suite.py --out benchmarks/results
"""

from __future__ import annotations

import pathlib
import sys
import tempfile

import sklearn

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from sklearn_gpr_suite import arguments, report, run, substitute  # noqa: E402

_NAMES = ("Nystroem", "RBFSampler")


def _one_import_per_name(test_file, workdir):
    """A copy of ``test_file`` whose ``Nystroem`` and ``RBFSampler`` come from one import line
    each (the file imports them in one block with scikit-learn's other transformers)."""
    source = pathlib.Path(test_file).read_text()
    for name in _NAMES:
        if source.count(f"    {name},\n") != 1:
            raise SystemExit(f"{test_file}: expected one '{name},' line in its imports")
        source = source.replace(f"    {name},\n", "", 1)
    source = "".join(f"from sklearn.kernel_approximation import {name}\n"
                     for name in _NAMES) + source
    path = workdir / "test_kernel_approximation_imports.py"
    path.write_text(source)
    return path


def main(argv=None):
    name = "sklearn_kernel_approximation_suite.json"
    args = arguments(__doc__, pathlib.Path(sklearn.__file__).parent
                     / "tests/test_kernel_approximation.py", name, argv)
    with tempfile.TemporaryDirectory() as tmp:
        workdir = pathlib.Path(tmp)
        # scikit-learn's fixtures (global_dtype, the array API parametrisation) live in its
        # conftest, which pytest finds only beside the test file
        (workdir / "conftest.py").write_text("from sklearn.conftest import *  # noqa: F403\n")
        source = _one_import_per_name(args.test_file, workdir)
        for cls in _NAMES:
            source.write_text(substitute(source, f"from sklearn.kernel_approximation import "
                                         f"{cls}\n", cls, {"device": args.device}))
        target = workdir / "test_kernel_approximation_kernelkit.py"
        source.rename(target)
        summary = run(target, workdir, args.k)
    summary["device"] = args.device
    report(summary, args.out, name,
           f"scikit-learn {summary['sklearn']} test_kernel_approximation.py with kernelkit's "
           f"Nystroem and RBFSampler ({args.device})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
