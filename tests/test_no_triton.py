"""kernelkit without triton (no wheel on macOS, Windows or Linux on ARM): everything that needs no
Triton kernel works, and a Triton entry point says clearly what is missing.

One fresh Python runs with ``.ci/no_triton`` first on PYTHONPATH: its sitecustomize puts
``sys.modules["triton"] = None``, which makes ``import triton`` fail and ``find_spec`` return None,
as on a machine where triton is not installed (the CI step "without triton" in .ci/run uses the
same blocker for a whole pytest run). The tests below read what that process printed.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BLOCKER = ROOT / ".ci" / "no_triton"

SCRIPT = r'''
import importlib.util
import json

import numpy as np
import torch
from sklearn.datasets import make_friedman1
from sklearn.svm import SVC

import kernelkit
import kernelkit_gpu
from kernelkit._util import device as _device
from kernelkit.attention import kernel_attention, linear_attention, softmax_attention
from kernelkit.attention.comparison import compare
from kernelkit.attention.comparison.qkv import synthetic_qkv
from kernelkit_gpu.attention.naive import softmax_attention_naive

out = {}
try:
    import triton  # noqa: F401
    out["import triton"] = "imported"
except ImportError:
    out["import triton"] = "ImportError"
out["find_spec"] = repr(importlib.util.find_spec("triton"))

rng = np.random.default_rng(0)
X = rng.normal(size=(60, 3))
y = (X[:, 0] > 0).astype(int)
out["svc score"] = SVC(kernel=kernelkit.RBF(length_scale=2.0)).fit(X, y).score(X, y)
out["rbf_kernel diagonal"] = float(kernelkit.rbf_kernel(X, gamma=0.5)[3, 3])
Xr, yr = make_friedman1(200, n_features=5, random_state=0)
krr = kernelkit.KernelRidge(alpha=0.1, gamma=0.2, n_components=50).fit(Xr, yr)
out["KernelRidge R2"] = krr.score(Xr, yr)

q, k, v = (torch.randn(1, 2, 7, 8, generator=torch.Generator().manual_seed(i)) for i in range(3))
o = softmax_attention(q, k, v, is_causal=True)
out["softmax = naive"] = torch.equal(o, softmax_attention_naive(q, k, v, is_causal=True))
out["linear shape"] = list(linear_attention(q, k, v, "elu+1").shape)
out["kernel shape"] = list(kernel_attention(q, k, v, "rbf", gamma=0.5).shape)
try:
    kernelkit_gpu.gram(q[0, 0])
except ImportError as e:
    out["gram"] = str(e)

qs, ks, vs = synthetic_qkv(batch=1, heads=1, T=32, d=8, temperature=1.0, seed=0)
report = compare(qs, ks, vs, ["softmax", "elu+1"], device="cpu", seeds=(0,))
out["compare methods"] = [row["method"] for row in report.rows]

out["auto"] = _device.resolve_device("auto")
_device.cuda_available = lambda: True  # a CUDA machine without triton
try:
    kernelkit.rbf_kernel(X, device="cuda")
except ValueError as e:
    out["device cuda"] = str(e)
print(json.dumps(out))
'''


@pytest.fixture(scope="module")
def without_triton():
    """What SCRIPT printed, run in a fresh Python that cannot import triton."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(BLOCKER), str(ROOT)]))
    env["TRITON_INTERPRET"] = "1"  # as in CI: the flag alone must not send work to Triton
    proc = subprocess.run([sys.executable, "-c", SCRIPT], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.subprocess
def test_the_blocker_hides_triton(without_triton):
    assert without_triton["import triton"] == "ImportError"
    assert without_triton["find_spec"] == "None"


@pytest.mark.subprocess
def test_sklearn_kernels_pairwise_and_estimators_run(without_triton):
    assert without_triton["svc score"] > 0.9
    assert without_triton["rbf_kernel diagonal"] == 1.0
    assert without_triton["KernelRidge R2"] > 0.5


@pytest.mark.subprocess
def test_attention_api_runs_its_torch_path(without_triton):
    assert without_triton["softmax = naive"] is True
    assert without_triton["linear shape"] == [1, 2, 7, 8]
    assert without_triton["kernel shape"] == [1, 2, 7, 8]


@pytest.mark.subprocess
def test_compare_tool_runs_on_the_cpu(without_triton):
    assert without_triton["compare methods"] == ["softmax", "elu+1"]


@pytest.mark.subprocess
def test_triton_entry_points_and_device_cuda_say_what_is_missing(without_triton):
    assert without_triton["gram"].startswith(
        "kernelkit_gpu.gram runs a Triton kernel, and triton is not installed")
    assert without_triton["auto"] == "cpu"
    assert without_triton["device cuda"].startswith(
        "device='cuda' needs triton, which is not installed")
