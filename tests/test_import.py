"""Importing kernelkit stays cheap and never pulls in torch or triton."""

import subprocess
import sys
import time

import pytest

HEAVY = ("torch", "triton")


def run_python(code):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout


@pytest.mark.parametrize("package", ["kernelkit", "kernelkit_math"])
def test_import_does_not_load_heavy_modules(package):
    out = run_python(f"import sys, {package}; print(sorted(m for m in {HEAVY!r} if m in sys.modules))")
    assert out.strip() == "[]"


def test_kernelkit_math_does_not_import_sklearn_or_torch():
    out = run_python("import sys, kernelkit_math; print('sklearn' in sys.modules, 'torch' in sys.modules)")
    assert out.strip() == "False False"


def _import_seconds(statement, repeats=5):
    code = (
        "import time; t = time.perf_counter(); "
        f"{statement}; print(time.perf_counter() - t)"
    )
    return min(float(run_python(code)) for _ in range(repeats))


def test_import_overhead_over_sklearn_is_small():
    base = "import sklearn.metrics.pairwise, sklearn.gaussian_process.kernels"
    before = _import_seconds(base)
    after = _import_seconds(base + "; import kernelkit")
    assert after - before <= 0.3, f"import kernelkit adds {after - before:.3f} s"
