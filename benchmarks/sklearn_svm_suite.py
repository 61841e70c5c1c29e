"""Run scikit-learn's own ``test_svm.py`` with kernelkit's SVC, SVR and OneClassSVM substituted.

As :mod:`sklearn_gpr_suite` does for the GP: the test file is copied from the installed
scikit-learn into a temporary directory. Its ``svm`` module (``svm.SVC``...) becomes a module
``_kernelkit_svm`` that is scikit-learn's ``sklearn.svm`` except for SVC, SVR and OneClassSVM,
subclasses of kernelkit's whose default is ``device="cpu"`` (or ``--device``); its direct
imports of SVR and OneClassSVM come from there too. NuSVC, NuSVR, LinearSVC and LinearSVR stay
scikit-learn's. pytest runs it and this script writes a JSON summary (counts, each failure's
test id and reason).

Usage::

    PYTHONPATH=. python benchmarks/sklearn_svm_suite.py --out benchmarks/results
"""

from __future__ import annotations

import pathlib
import sys
import tempfile

import sklearn

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from sklearn_gpr_suite import arguments, report, run, substitute  # noqa: E402

_MODULE_IMPORT = "from sklearn import base, datasets, linear_model, metrics, svm\n"
_DIRECT = ("    SVR,\n", "    OneClassSVM,\n")
CLASSES = ("SVC", "SVR", "OneClassSVM")


def _module(workdir, device):
    """Write ``_kernelkit_svm.py``: sklearn.svm with kernelkit's classes."""
    path = workdir / "_kernelkit_svm.py"
    path.write_text("".join(f"from sklearn.svm import {name}\n" for name in CLASSES))
    for name in CLASSES:
        path.write_text(substitute(path, f"from sklearn.svm import {name}\n", name,
                                   {"device": device}))
    path.write_text("import sklearn.svm as _sklearn_svm\n" + path.read_text() + (
        "\n\ndef __getattr__(name):\n"
        "    return getattr(_sklearn_svm, name)\n"))


def _prepare(workdir, test_file, device):
    source = pathlib.Path(test_file).read_text()
    for line in (_MODULE_IMPORT, *_DIRECT):
        if source.count(line) != 1:
            raise SystemExit(f"{test_file}: expected exactly one line {line.strip()!r}")
        source = source.replace(line, "")
    source = source.replace(
        "from sklearn.svm._classes import",
        "from sklearn import base, datasets, linear_model, metrics\n"
        "import _kernelkit_svm as svm\n"
        "from _kernelkit_svm import SVR, OneClassSVM\n"
        "from sklearn.svm._classes import", 1)
    target = workdir / "test_svm_kernelkit.py"
    target.write_text(source)
    _module(workdir, device)
    return target


def main(argv=None):
    name = "sklearn_svm_suite.json"
    args = arguments(__doc__, pathlib.Path(sklearn.__file__).parent / "svm/tests/test_svm.py",
                     name, argv)
    with tempfile.TemporaryDirectory() as tmp:
        workdir = pathlib.Path(tmp)
        target = _prepare(workdir, args.test_file, args.device)
        (workdir / "conftest.py").write_text(
            "from sklearn.conftest import pytest_generate_tests  # noqa: F401\n")
        summary = run(target, workdir, args.k)
    summary["device"] = args.device
    report(summary, args.out, name,
           f"scikit-learn {summary['sklearn']} test_svm.py with kernelkit's SVC, SVR and "
           f"OneClassSVM ({args.device})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
