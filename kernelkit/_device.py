"""Where a computation runs: ``device="auto" | "cpu" | "cuda"``."""

DEVICES = ("auto", "cpu", "cuda")


def resolve_device(device):
    """Validate ``device`` and return where the work runs now: ``"cpu"`` or ``"cuda"``.

    Until the GPU Gram kernels land, ``"auto"`` always means the CPU.

    Raises
    ------
    ValueError
        For a name other than "auto", "cpu" or "cuda", or for "cuda" (no GPU backend yet).
    """
    if not isinstance(device, str) or device not in DEVICES:
        raise ValueError(f"device must be one of {', '.join(map(repr, DEVICES))}; got {device!r}")
    if device == "cuda":
        raise ValueError(
            "device='cuda' is not available: this kernelkit build has no GPU Gram backend yet; "
            "use device='cpu' or 'auto'"
        )
    return "cpu"
