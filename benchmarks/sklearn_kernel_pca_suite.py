"""Run scikit-learn's own ``test_kernel_pca.py`` with kernelkit's KernelPCA substituted.

As :mod:`sklearn_gpr_suite` does for the GP: the test file is copied from the installed
scikit-learn into a temporary directory, its import of ``KernelPCA`` replaced by a subclass of
:class:`kernelkit.KernelPCA` whose default is ``device="cpu"`` (or ``--device``). pytest runs
it and this script writes a JSON summary (counts, each failure's test id and reason). The tests'
``global_random_seed`` fixture comes from scikit-learn's conftest (42, or
``SKLEARN_TESTS_GLOBAL_RANDOM_SEED``).

Usage::

    PYTHONPATH=. python benchmarks/sklearn_kernel_pca_suite.py --out benchmarks/results
"""

from __future__ import annotations

import pathlib
import sys
import tempfile

import sklearn

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from sklearn_gpr_suite import arguments, report, run, substitute  # noqa: E402

_IMPORT = "from sklearn.decomposition import PCA, KernelPCA\n"
#: The file's own import line, split so that only KernelPCA is substituted.
_SPLIT = "from sklearn.decomposition import PCA\nfrom sklearn.decomposition import KernelPCA\n"


def main(argv=None):
    name = "sklearn_kernel_pca_suite.json"
    args = arguments(__doc__, pathlib.Path(sklearn.__file__).parent
                     / "decomposition/tests/test_kernel_pca.py", name, argv)
    with tempfile.TemporaryDirectory() as tmp:
        workdir = pathlib.Path(tmp)
        source = pathlib.Path(args.test_file).read_text()
        if source.count(_IMPORT) != 1:
            raise SystemExit(f"{args.test_file}: expected exactly one line {_IMPORT.strip()!r}")
        split = workdir / "test_kernel_pca_split.py"
        split.write_text(source.replace(_IMPORT, _SPLIT))
        target = workdir / "test_kernel_pca_kernelkit.py"
        target.write_text(substitute(split, "from sklearn.decomposition import KernelPCA\n",
                                     "KernelPCA", {"device": args.device}))
        split.unlink()
        # the file's tests take scikit-learn's global_random_seed fixture (its conftest: 42,
        # or SKLEARN_TESTS_GLOBAL_RANDOM_SEED)
        (workdir / "conftest.py").write_text(
            "from sklearn.conftest import pytest_generate_tests  # noqa: F401\n")
        summary = run(target, workdir, args.k)
    summary["device"] = args.device
    report(summary, args.out, name,
           f"scikit-learn {summary['sklearn']} test_kernel_pca.py with kernelkit's KernelPCA "
           f"({args.device})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
