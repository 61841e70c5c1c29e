"""Where a computation runs: ``device="auto" | "cpu" | "cuda"``."""

import functools
import importlib.util
import os
import sys
import warnings

DEVICES = ("auto", "cpu", "cuda")

#: Paths the NVIDIA driver creates; without any of them there is no CUDA GPU to look for,
#: and CPU-only users never pay for importing torch.
_NVIDIA_PATHS = ("/dev/nvidiactl", "/dev/nvidia0", "/proc/driver/nvidia/version")


def triton_installed():
    """True when triton can be imported (checked without importing it)."""
    return importlib.util.find_spec("triton") is not None


@functools.lru_cache(maxsize=None)
def cuda_available():
    """True when torch sees a CUDA GPU (imports torch only if an NVIDIA driver is present)."""
    if "torch" not in sys.modules and not any(os.path.exists(p) for p in _NVIDIA_PATHS):
        return False
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def gpu_available():
    """True when kernelkit can compute on a GPU: torch sees a CUDA GPU and triton is installed
    (kernelkit's GPU path is its Triton kernels)."""
    return cuda_available() and triton_installed()


def check_device(device):
    """Raise ValueError unless ``device`` is "auto", "cpu" or "cuda"; return it."""
    if not isinstance(device, str) or device not in DEVICES:
        raise ValueError(f"device must be one of {', '.join(map(repr, DEVICES))}; got {device!r}")
    return device


def resolve_device(device):
    """Validate ``device`` and return where NumPy work runs: ``"cpu"`` or ``"cuda"``.

    ``"auto"`` is the GPU when one is present and triton is installed, else the CPU.

    Raises
    ------
    ValueError
        For a name other than "auto", "cpu" or "cuda", or for "cuda" without a usable GPU
        (no CUDA GPU, or triton not installed).
    """
    check_device(device)
    if device == "cpu":
        return "cpu"
    if gpu_available():
        return "cuda"
    if device == "cuda":
        if not triton_installed() and cuda_available():
            raise ValueError(
                "device='cuda' needs triton, which is not installed (triton wheels exist for "
                "Linux x86-64: pip install triton); use device='cpu' or 'auto'"
            )
        raise ValueError(
            "device='cuda' but no CUDA GPU is available (torch.cuda.is_available() is False); "
            "use device='cpu' or 'auto'"
        )
    return "cpu"


def to_cuda(array):
    """Copy a NumPy array to the GPU as a torch tensor; the array is only read.

    ``torch.from_numpy`` warns about read-only arrays (a write through the tensor would be
    undefined); the tensor made here lives on the host only until it is copied, so the warning
    says nothing true and is silenced, and read-only inputs need no host copy.
    """
    import torch

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        return torch.from_numpy(array).cuda()
