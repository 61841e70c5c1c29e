"""A sweep's plan: its checked settings, the memory each run needs, and the time it will take.

:func:`kernelkit.attention.comparison.sweeps.sweep` and :func:`sweep_seconds` check their
arguments here (:func:`_setup`) before torch is imported. The memory model
(:data:`QUADRATIC_ARRAYS`, :data:`LINEAR_ARRAYS`) refuses a sweep whose inputs do not fit and
skips a method whose working memory would not; the time model (:data:`CPU_SECONDS`) prices a
sweep on the plain-PyTorch CPU path, so that a long one is announced up front.
"""

from __future__ import annotations

from dataclasses import dataclass

from kernelkit.attention.comparison import memory

__all__ = ["sweep_seconds", "DTYPES"]

#: dtypes a sweep can run in.
DTYPES = ("float32", "float16", "bfloat16")
#: Default lengths: 512 ... 65536 on a GPU; small ones on the CPU, where softmax is O(T²) in
#: plain PyTorch (and far slower under the Triton interpreter).
GPU_LENGTHS = tuple(2**i for i in range(9, 17))
CPU_LENGTHS = (128, 256, 512, 1024, 2048)
_ITEMSIZE = {"float32": 4, "float16": 2, "bfloat16": 2}
#: (B, H, T, T) float32 arrays the plain-PyTorch path of a method holds at its peak (forward;
#: one more with backward): measured with measure() at T = 256, 512 (2.1 and 4.1 arrays).
#: "local" (local + summary attention): its twin measured 3.0 arrays at T = 512 (compare on
#: the real heads, forward); its Triton forward is O(T), its backward the twin's.
QUADRATIC_ARRAYS = {"softmax": 3, "kernel": 5, "local": 4}
#: (B, H, T, M + D) float32 arrays a method with M features (or landmarks) holds at its peak:
#: measure() on the CPU gave 3.0-9.0 for elu+1, favor+:128, taylor2 and nystrom:32 at D = 16
#: and 64, T = 1024 and 4096, causal or not, forward or forward + backward.
LINEAR_ARRAYS = 10
#: Seconds of one forward call on the plain-PyTorch CPU path, for :func:`sweep_seconds`, per
#: B·H·T²·D for the methods of :data:`QUADRATIC_ARRAYS` and per B·H·T·(M + D)·D for a method
#: with M features (or landmarks). A 2-core CPU shared with other jobs (H = 8, D = 64, T = 1024
#: to 4096, causal) took 2.1e-10 to 6.6e-10 for softmax and 7.7e-10 to 1.5e-9 for kernel:rbf;
#: 0.9e-9 (taylor2) to 6.7e-9 (elu+1) per feature unit, nystrom:64 up to 10 times more.
CPU_SECONDS = {"quadratic": 6e-10, "features": 5e-9}
#: Forward + backward over forward alone: 3.5 for softmax on that CPU, 0.8 to 2.3 for the
#: feature maps.
BACKWARD_COST = 3


def _check_int(value, name, minimum=1):
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int; got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}; got {value}")
    return value


def _check_lengths(lengths):
    if isinstance(lengths, (str, bytes)) or not hasattr(lengths, "__iter__"):
        raise TypeError(f"lengths must be a sequence of ints; got {lengths!r}")
    lengths = [_check_int(T, "each length") for T in lengths]
    if not lengths:
        raise ValueError("lengths must hold at least one sequence length")
    if len(set(lengths)) != len(lengths):
        raise ValueError(f"lengths must not repeat a value; got {lengths}")
    return sorted(lengths)


def _input_bytes(B, heads, T, d, dtype, backward):
    """Bytes of one length's tensors: q, k, v, the output (and with backward the output
    gradient and three input gradients), plus the float32 draw of one of them."""
    n = B * heads * T * d
    return ((8 if backward else 4) * _ITEMSIZE[dtype] + 4) * n


def _method_bytes(method, B, heads, T, d, triton, backward):
    """Bytes a method needs beyond its inputs: :data:`QUADRATIC_ARRAYS` (B, H, T, T) arrays
    for softmax and kernel smoothers on the plain-PyTorch path (``triton`` False; the Triton
    kernels need O(T)), :data:`LINEAR_ARRAYS` (B, H, T, M + D) arrays for a method with M
    features or landmarks."""
    family = method.family.partition(":")[0]
    if family in QUADRATIC_ARRAYS:
        quadratic = not triton or (family == "local" and backward)
        return (QUADRATIC_ARRAYS[family] + backward) * B * heads * T * T * 4 if quadratic else 0
    return LINEAR_ARRAYS * B * heads * T * (method.n_features + d) * 4


def _available(where):
    """Bytes free where the sweep allocates: host memory, or the GPU's free memory."""
    if where == "cuda":
        import torch

        return torch.cuda.mem_get_info()[0]
    return memory.available_memory()


def _check_inputs_fit(batches, heads, d, dtype, backward, tokens, available):
    """Refuse the sweep when the inputs of a length do not fit, before anything is drawn."""
    for T, B in batches.items():
        needed = _input_bytes(B, heads, T, d, dtype, backward)
        if needed > available:
            hint = ("fewer tokens" if tokens is not None else
                    f"shorter lengths: they fit up to about T = {int(available * T // needed)}")
            raise ValueError(
                f"the inputs at T = {T} (B x H x T x D = {B} x {heads} x {T} x {d}, {dtype}"
                f"{', with gradients' if backward else ''}) need about "
                f"{memory.format_bytes(needed)} but {memory.format_bytes(available)} of memory is "
                f"available; sweep {hint}"
            )


@dataclass(frozen=True)
class _Setup:
    """A sweep's checked settings: parsed methods, ``{T: batch}``, and the rest as given."""

    methods: list
    batches: dict
    heads: int
    d: int
    backward: bool
    dtype: str
    where: str

    def needed_bytes(self, method, T, triton):
        """Bytes a method needs at length T: its inputs and its working memory."""
        B = self.batches[T]
        return (_input_bytes(B, self.heads, T, self.d, self.dtype, self.backward)
                + _method_bytes(method, B, self.heads, T, self.d, triton, self.backward))


def _setup(methods, lengths, batch, heads, d, backward, dtype, device, tokens, repeat):
    """Check the settings ``sweep`` and :func:`sweep_seconds` share, and that the inputs of
    every length fit; return them resolved, before torch is imported."""
    from kernelkit._util.device import resolve_device

    for name, value in (("heads", heads), ("d", d), ("batch", batch), ("repeat", repeat)):
        _check_int(value, name)
    if not isinstance(backward, bool):
        raise TypeError(f"backward must be True or False; got {backward!r}")
    if tokens is not None:
        _check_int(tokens, "tokens")
        if batch != 1:
            raise ValueError(f"give tokens or batch, not both; got tokens={tokens}, batch={batch}")
    where = resolve_device(device)
    lengths = _check_lengths(GPU_LENGTHS if lengths is None and where == "cuda" else
                             CPU_LENGTHS if lengths is None else lengths)
    if tokens is not None and tokens < lengths[-1]:
        raise ValueError(f"tokens={tokens} is less than one sequence of the longest length "
                         f"T = {lengths[-1]} (batch = tokens // T would be 0); give tokens >= "
                         f"{lengths[-1]}")
    if dtype is None:
        dtype = "bfloat16" if where == "cuda" else "float32"
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}; got {dtype!r}")
    from kernelkit.attention.comparison.methods import parse_methods

    parsed = parse_methods(methods, d)
    batches = {T: tokens // T if tokens is not None else batch for T in lengths}
    available = _available(where)
    if available is not None:
        _check_inputs_fit(batches, heads, d, dtype, backward, tokens, available)
    return _Setup(parsed, batches, heads, d, backward, dtype, where)


def _call_seconds(method, B, heads, T, d, backward):
    """Rough seconds of one call on the plain-PyTorch CPU path (:data:`CPU_SECONDS`)."""
    if method.family.partition(":")[0] in QUADRATIC_ARRAYS:
        seconds = CPU_SECONDS["quadratic"] * B * heads * T * T * d
    else:
        seconds = CPU_SECONDS["features"] * B * heads * T * (method.n_features + d) * d
    return seconds * (BACKWARD_COST if backward else 1)


def sweep_seconds(methods=("softmax", "elu+1"), lengths=None, *, batch=1, heads=8, d=64,
                  backward=False, dtype=None, device="auto", tokens=None, repeat=5):
    """Rough seconds a sweep with these arguments takes on a CPU, to warn before a long run.

    The sweep is :func:`~kernelkit.attention.comparison.sweeps.sweep`: each (method, length) that
    the memory plan lets run costs ``repeat + 2`` calls (the warm-up, the timed calls, the memory
    measurement) of :data:`CPU_SECONDS` per unit of work; a method is counted up to the first
    length whose memory would not fit, as the sweep skips it from there.

    Parameters
    ----------
    methods, lengths, batch, heads, d, backward, dtype, device, tokens, repeat
        As :func:`~kernelkit.attention.comparison.sweeps.sweep`.

    Returns
    -------
    float or None
        Seconds on the plain-PyTorch CPU path; None where that path does not run: on a GPU (the
        Triton kernels) and under the Triton interpreter (``TRITON_INTERPRET=1``, far slower).

    Raises
    ------
    ValueError, TypeError
        As :func:`~kernelkit.attention.comparison.sweeps.sweep`, for the same arguments.
    """
    setup = _setup(methods, lengths, batch, heads, d, backward, dtype, device, tokens, repeat)
    if setup.where != "cpu":
        return None
    import torch

    from kernelkit.attention._dispatch import use_triton

    if use_triton(torch.empty(0, dtype=getattr(torch, setup.dtype))):
        return None
    available = _available("cpu")
    total = 0.0
    for method in setup.methods:
        for T, B in setup.batches.items():
            if available is not None and setup.needed_bytes(method, T, False) > available:
                break  # skipped at this length and every longer one
            total += (repeat + 2) * _call_seconds(method, B, heads, T, d, backward)
    return total
