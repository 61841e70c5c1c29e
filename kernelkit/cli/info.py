"""``kernelkit info``: versions of kernelkit and its libraries, and the backends this machine has."""

from __future__ import annotations

import importlib
import os
import platform

__all__ = ["cmd_info", "info_lines", "kernelkit_version"]


def kernelkit_version():
    try:
        from kernelkit import __version__

        return __version__
    except Exception:  # pragma: no cover - a broken checkout still prints something
        return "unknown"


def _module_version(module):
    try:
        mod = importlib.import_module(module)
    except ImportError:
        return None, "not installed"
    except Exception as exc:  # a broken install, e.g. a missing shared library
        return None, f"import failed ({type(exc).__name__}: {exc})"
    return mod, getattr(mod, "__version__", "unknown version")


def info_lines():
    """The lines ``kernelkit info`` prints: versions, then backends."""
    rows = [("kernelkit", kernelkit_version()), ("python", platform.python_version())]
    modules = {}
    for label, module in [
        ("numpy", "numpy"), ("scipy", "scipy"), ("scikit-learn", "sklearn"),
        ("torch", "torch"), ("triton", "triton"),
    ]:
        modules[module], text = _module_version(module)
        rows.append((label, str(text)))
    lines = ["versions:"] + [f"  {k:<14}{v}" for k, v in rows]
    lines.append(f"  {'platform':<14}{platform.platform()}")

    backends = [("NumPy (float64 reference)", "available")]
    if modules["triton"] is not None:
        mode = "on" if os.environ.get("TRITON_INTERPRET") == "1" else "off"
        backends.append(("Triton interpreter", f"available (TRITON_INTERPRET=1 is {mode})"))
    else:
        backends.append(("Triton interpreter", "not available (triton not installed)"))
    torch = modules["torch"]
    if torch is None:
        backends.append(("CUDA GPU", "not available (torch not installed)"))
    else:
        try:
            if torch.cuda.is_available():
                names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
                backends.append(("CUDA GPU", "available: " + ", ".join(names)))
            else:
                backends.append(("CUDA GPU", "not available (torch.cuda.is_available() is False)"))
        except Exception as exc:  # pragma: no cover - driver trouble
            backends.append(("CUDA GPU", f"not available ({type(exc).__name__}: {exc})"))
    lines.append("backends:")
    lines += [f"  {k:<28}{v}" for k, v in backends]
    from kernelkit._util.device import resolve_device

    label = 'device="auto" runs on'
    lines.append(f"  {label:<28}{resolve_device('auto')}")
    return lines


def cmd_info(args):
    print("\n".join(info_lines()))
    return 0
