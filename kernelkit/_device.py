"""Where a computation runs: ``device="auto" | "cpu" | "cuda"``."""

import functools
import os
import sys

DEVICES = ("auto", "cpu", "cuda")

#: Paths the NVIDIA driver creates; without any of them there is no CUDA GPU to look for,
#: and CPU-only users never pay for importing torch.
_NVIDIA_PATHS = ("/dev/nvidiactl", "/dev/nvidia0", "/proc/driver/nvidia/version")


@functools.lru_cache(maxsize=None)
def gpu_available():
    """True when a CUDA GPU is usable through torch (imports torch only if a driver is present)."""
    if "torch" not in sys.modules and not any(os.path.exists(p) for p in _NVIDIA_PATHS):
        return False
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def check_device(device):
    """Raise ValueError unless ``device`` is "auto", "cpu" or "cuda"; return it."""
    if not isinstance(device, str) or device not in DEVICES:
        raise ValueError(f"device must be one of {', '.join(map(repr, DEVICES))}; got {device!r}")
    return device


def resolve_device(device):
    """Validate ``device`` and return where NumPy work runs: ``"cpu"`` or ``"cuda"``.

    ``"auto"`` is the GPU when one is present, else the CPU.

    Raises
    ------
    ValueError
        For a name other than "auto", "cpu" or "cuda", or for "cuda" without a usable GPU.
    """
    check_device(device)
    if device == "cpu":
        return "cpu"
    if gpu_available():
        return "cuda"
    if device == "cuda":
        raise ValueError(
            "device='cuda' but no CUDA GPU is available (torch.cuda.is_available() is False); "
            "use device='cpu' or 'auto'"
        )
    return "cpu"
