"""Shared test settings: the --device option, the per-dtype tolerance table and the fixtures of the
Triton kernel tests.

On the CPU (the default) Triton kernels run under TRITON_INTERPRET=1, which .ci/run exports
before Python starts; run ``pytest --device cuda`` on a GPU machine to test the compiled kernels.
"""

import os

if os.environ.get("PYTEST_XDIST_WORKER"):
    # One pytest process per core (-n N): one thread per process, for the processes these tests
    # start too. Two processes of two threads each on two cores spent most of their time in
    # OpenMP's and OpenBLAS's spinning threads (tests/test_zoo.py: 125 s against 14 s).
    for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_var, "1")
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=1)  # for libraries loaded before these variables were read

import numpy as np
import pytest

if os.environ.get("KERNELKIT_TOLERANCE_REPORT"):  # opt-in: see tests/tolerance_report.py
    from tests import tolerance_report

    tolerance_report.install(os.environ[tolerance_report.ENV])

#: Tolerances per dtype, passed by keyword: ``np.testing.assert_allclose(a, b, **TOL["float32"])``.
#: float64: references agree to a few ulps of 1e-16 after O(n) accumulation.
#: float32: the kernels compute in float64 or with compensated float32; rounding of the output
#: itself is 6e-8 relative, so 1e-6 leaves room for accumulation over the feature axis.
#: float16 / bfloat16: inputs are rounded to 11 / 8 significant bits before any arithmetic.
TOL = {
    "float64": dict(rtol=1e-12, atol=1e-12),
    "float32": dict(rtol=1e-6, atol=1e-6),
    "float16": dict(rtol=2e-3, atol=2e-3),
    "bfloat16": dict(rtol=1.6e-2, atol=1.6e-2),
}


def pytest_configure(config):
    """``--device`` decides where the whole run computes. ``cpu`` (the default, as CI runs) hides
    every GPU from this process and the processes it starts (``CUDA_VISIBLE_DEVICES=""`` before
    torch looks for one), so ``device="auto"`` means the CPU and a run on a GPU machine tests
    exactly what CI tests. ``cuda`` makes ``device="auto"`` the GPU, and needs one."""
    if config.getoption("--device") == "cpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    config.addinivalue_line(
        "markers", "interpreter: runs Triton kernels (under the CPU interpreter: slow); given "
        "automatically to every test that uses the triton_can_run fixture")
    config.addinivalue_line("markers", "subprocess: starts a Python process (a few seconds each)")


def pytest_collection_modifyitems(config, items):
    """Mark the Triton kernel tests ``interpreter``, so a fast local loop can leave them out:
    ``pytest -n 2 -m "not interpreter and not subprocess" tests`` (.ci/run runs everything)."""
    for item in items:
        if "triton_can_run" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.interpreter)


def pytest_addoption(parser):
    parser.addoption(
        "--device", action="store", default="cpu", choices=("cpu", "cuda"),
        help="where GPU-kernel tests run: cpu (Triton interpreter, default) or cuda",
    )


@pytest.fixture(scope="session")
def device(request):
    """The device GPU-kernel tests run on ("cpu" under the Triton interpreter, or "cuda")."""
    name = request.config.getoption("--device")
    if name == "cuda":
        import torch

        if not torch.cuda.is_available():
            pytest.fail("--device cuda needs a CUDA GPU (torch.cuda.is_available() is False)",
                        pytrace=False)
    return name


@pytest.fixture
def rng():
    """A fresh seeded generator per test, so failures reproduce."""
    return np.random.default_rng(12345)


@pytest.fixture
def no_gpu(monkeypatch):
    """Pretend no CUDA GPU is present, so device="cuda" errors can be tested on any machine."""
    import kernelkit._util.device

    monkeypatch.setattr(kernelkit._util.device, "gpu_available", lambda: False)


# ------------------------------------------------------------- fixtures of the Triton kernel tests
# Requested by the tests/test_gpu_*.py modules (``pytestmark = pytest.mark.usefixtures(...)`` or
# by name); kernelkit_gpu is imported inside them, so CPU-only test modules never load triton.
@pytest.fixture(scope="module")
def triton_can_run(device):
    """CPU tensors need the interpreter, switched on before triton was imported; never skip."""
    from kernelkit_gpu import _launch

    if device == "cpu" and not _launch.INTERPRET:
        pytest.fail(
            "Triton kernel tests on the CPU need TRITON_INTERPRET=1 in the environment before "
            "Python starts (.ci/run exports it); or run on a GPU with --device cuda",
            pytrace=False,
        )
    if device == "cpu":
        _interpreter_runs()


_INTERPRETER_ERROR = []


def _interpreter_runs():
    """Fail with one clear message where this environment's Triton interpreter cannot run a
    kernel at all (seen: triton 3.6's interpreter with NumPy 2.5, which no longer converts a
    1-element array to a Python scalar), instead of a cryptic error in every test."""
    if not _INTERPRETER_ERROR:
        import torch
        import triton

        import kernelkit_gpu

        try:
            kernelkit_gpu.gram(torch.ones(2, 2))
            _INTERPRETER_ERROR.append("")
        except Exception as exc:  # noqa: BLE001 - reported below, whatever it is
            _INTERPRETER_ERROR.append(
                f"the Triton interpreter cannot run a kernel here (triton {triton.__version__}, "
                f"NumPy {np.__version__}): {exc!r}; install the versions CI tests with "
                "(pip install -c .ci/constraints.txt ...), or run with --device cuda")
    if _INTERPRETER_ERROR[0]:
        pytest.fail(_INTERPRETER_ERROR[0], pytrace=False)


@pytest.fixture(scope="module")
def attention_autotune_off():
    """No attention autotuning inside the suite (it would compile every config for every dtype /
    head dim / mask key): the first config that fits; ``test_every_config`` runs each config of
    the autotuner's sets instead."""
    from kernelkit_gpu.attention import _configs as _attn_configs

    saved = _attn_configs.AUTOTUNE
    _attn_configs.AUTOTUNE = False
    yield
    _attn_configs.AUTOTUNE = saved


@pytest.fixture
def poisoned_outputs(monkeypatch):
    """Every buffer the attention launchers allocate (``kernelkit_gpu._launch.alloc``) starts as
    NaN: elements a kernel leaves unwritten show up."""
    import torch
    from kernelkit_gpu import _launch

    def alloc(shape, dtype, device):
        return torch.full(tuple(shape), float("nan"), dtype=dtype, device=device)

    monkeypatch.setattr(_launch, "alloc", alloc)
