"""kernelkit_gpu: torch + Triton compute kernels (Gram matrices, matrix-free products, attention).

Imported lazily by :mod:`kernelkit`; may import :mod:`kernelkit_math`, never :mod:`kernelkit`.
Importing it loads torch and triton (nothing else heavy). On the CPU the Triton kernels run under
the interpreter, which must be switched on (``TRITON_INTERPRET=1``) before this package is imported:
Triton reads the variable when a kernel is defined. Where triton is not installed (it has wheels
for Linux x86-64 only) the plain-PyTorch twins, ``gram_log_gradient``, ``apply_feature_map`` and
``assume_finite`` still work, and the six Triton entry points raise ImportError when called.

Layout
------
``pairwise/``: the Gram family (fused Gram matrix, matrix-free K @ V, the float64 log-gradient),
each beside its plain-PyTorch twin (``pairwise/naive.py``). ``attention/``: softmax, kernel-smoother
and linear attention, each beside its twin (``naive.py``, ``linear_naive.py``). Shared at the top:
the epilogue table (``epilogues.py``: one row per registry kernel), operand preparation
(``prepare.py``), argument checks (``checks.py``), host-read flags (``flags.py``) and launch helpers (``_launch.py``).
``mixed_gemv.py``: a float32 matrix times float64 vectors with float64 sums (the solvers'
Nyström iteration), beside its reference. ``smo_subproblem.py``: one SMO working set's pairwise
steps in one program (the SVM solver's subproblem; reference ``kernelkit_math.smo``);
``smo_combine.py``: the solver's gradient product over kernel rows, each column summed in row
order (the same bits for any block of columns). No module shares its name with a function it
exports.

Public functions
----------------
gram(x, y=None, kernel="rbf", *, precision="accurate", out=None, **params)
    Fused Gram matrix K(X, Y) (:mod:`kernelkit_gpu.pairwise.gram_fused`).
GramRows(x, kernel="rbf", *, precision="accurate", device=None, chunk_rows=None, **params)
    Row blocks K(X[rows], X) of one X for many ``rows``, X checked and prepared once, kept on
    the device or streamed to it in chunks (:mod:`kernelkit_gpu.pairwise.gram_rows`).
kernel_matvec(x, y, v, kernel="rbf", *, transpose=False, precision="accurate", **params)
    Matrix-free K(X, Y) @ V (:mod:`kernelkit_gpu.pairwise.matvec_fused`).
gram_log_gradient(x, kernel="rbf", **params)
    K(X, X) and its gradient with respect to the log hyperparameters, float64
    (:mod:`kernelkit_gpu.pairwise.log_gradient`; what scikit-learn's
    ``kernel(X, eval_gradient=True)`` returns).
softmax_attention(q, k, v, *, is_causal=False, causal_alignment="top_left", scale=None,
                  enable_gqa=False, return_lse=False, window_size=None)
    FlashAttention-style online-softmax attention, forward and backward, with an optional
    sliding window (:mod:`kernelkit_gpu.attention.softmax`).
kernel_attention(q, k, v, kernel="rbf", *, is_causal=False, causal_alignment="top_left",
                 eps=1e-6, enable_gqa=False, **params)
    The exact kernel smoother for any registry kernel (:mod:`kernelkit_gpu.attention.smoother`).
linear_attention(q, k, v, *, feature_map="elu+1", is_causal=False, causal_alignment="top_left",
                 normalize=True, eps=1e-6, initial_state=None, return_state=False,
                 chunk_size=None, causal=None)
    Chunked linear attention with fused cheap feature maps (:mod:`kernelkit_gpu.attention.linear`).
    In all three, a causal mask leaves the keys a query may not see out of its sums (a NaN in a
    value reaches only the rows that see it; rows without keys are 0), as
    :mod:`kernelkit_math.attention` states.
gram_naive, kernel_matvec_naive, softmax_attention_naive, kernel_attention_naive, linear_attention_naive
    Plain-PyTorch twins with the same signatures (any device, float64 included).
apply_feature_map(fmap, x)
    Any kernelkit_math feature map on a torch tensor (:mod:`kernelkit_gpu.feature_maps`).
assume_finite()
    A context in which the entry points skip their NaN / infinity checks (and the device sync
    that reads them), for loops over data validated once (:mod:`kernelkit_gpu.checks`).
"""

from kernelkit_gpu.checks import assume_finite
from kernelkit_gpu._launch import HAS_TRITON, needs_triton
from kernelkit_gpu.attention.linear_naive import linear_attention_naive
from kernelkit_gpu.attention.naive import kernel_attention_naive, softmax_attention_naive
from kernelkit_gpu.feature_maps import apply_feature_map
from kernelkit_gpu.pairwise.log_gradient import gram_log_gradient
from kernelkit_gpu.pairwise.naive import gram_naive, kernel_matvec_naive

if HAS_TRITON:
    from kernelkit_gpu.attention.linear import linear_attention
    from kernelkit_gpu.attention.smoother import kernel_attention
    from kernelkit_gpu.attention.softmax import softmax_attention
    from kernelkit_gpu.pairwise.gram_fused import gram
    from kernelkit_gpu.pairwise.gram_rows import GramRows
    from kernelkit_gpu.pairwise.matvec_fused import kernel_matvec
else:  # the plain-PyTorch twins above still run; these raise a clear ImportError when called
    linear_attention = needs_triton("linear_attention")
    kernel_attention = needs_triton("kernel_attention")
    softmax_attention = needs_triton("softmax_attention")
    gram = needs_triton("gram")
    GramRows = needs_triton("GramRows")
    kernel_matvec = needs_triton("kernel_matvec")

__all__ = [
    "gram", "GramRows", "kernel_matvec", "gram_log_gradient", "softmax_attention",
    "kernel_attention", "linear_attention", "gram_naive", "kernel_matvec_naive",
    "softmax_attention_naive", "kernel_attention_naive", "linear_attention_naive",
    "apply_feature_map", "assume_finite", "HAS_TRITON",
]
