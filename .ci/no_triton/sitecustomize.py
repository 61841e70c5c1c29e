"""Hide triton from this Python process and every process it starts (through PYTHONPATH).

.ci/run puts this directory first on PYTHONPATH for the step that checks kernelkit without
triton. ``sys.modules["triton"] = None`` is Python's own import blocker: ``import triton`` raises
ModuleNotFoundError and ``importlib.util.find_spec("triton")`` returns None, as on a machine where
triton is not installed.
"""

import sys

sys.modules["triton"] = None
