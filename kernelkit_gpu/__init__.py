"""kernelkit_gpu: torch + Triton compute kernels (Gram matrices, matrix-free products, attention).

Imported lazily by :mod:`kernelkit`; may import :mod:`kernelkit_math`, never :mod:`kernelkit`.
Importing it loads torch and triton (nothing else heavy). On the CPU the Triton kernels run under
the interpreter, which must be switched on (``TRITON_INTERPRET=1``) before this package is imported:
Triton reads the variable when a kernel is defined.

Public functions
----------------
gram(x, y=None, kernel="rbf", *, precision="accurate", out=None, **params)
    Fused Gram matrix K(X, Y) (:mod:`kernelkit_gpu.gram`).
kernel_matvec(x, y, v, kernel="rbf", *, transpose=False, precision="accurate", **params)
    Matrix-free K(X, Y) @ V (:mod:`kernelkit_gpu.matvec`).
gram_naive, kernel_matvec_naive
    Plain-PyTorch versions with the same signatures (:mod:`kernelkit_gpu.naive`).
gram_log_gradient(x, kernel="rbf", **params)
    K(X, X) and its gradient with respect to the log hyperparameters, float64
    (:mod:`kernelkit_gpu.gradient`; what scikit-learn's ``kernel(X, eval_gradient=True)`` returns).
softmax_attention(q, k, v, *, is_causal=False, scale=None, enable_gqa=False, return_lse=False)
    FlashAttention-style online-softmax attention, forward and backward
    (:mod:`kernelkit_gpu.softmax_attention`).
kernel_attention(q, k, v, kernel="rbf", *, is_causal=False, eps=1e-6, enable_gqa=False, **params)
    The exact kernel smoother for any registry kernel (:mod:`kernelkit_gpu.kernel_attention`).
linear_attention(q, k, v, *, feature_map="elu+1", is_causal=False, normalize=True, ...)
    Chunked linear attention with fused cheap feature maps (:mod:`kernelkit_gpu.linear_attention`).
apply_feature_map(fmap, x)
    Any kernelkit_math feature map on a torch tensor (:mod:`kernelkit_gpu.feature_maps`).

The submodules ``kernelkit_gpu.gram``, ``kernelkit_gpu.softmax_attention``, ... share their names
with the functions exported here; reach the modules through ``sys.modules`` or ``importlib``.
"""

from kernelkit_gpu.gram import gram
from kernelkit_gpu.matvec import kernel_matvec
from kernelkit_gpu.naive import gram_naive, kernel_matvec_naive
from kernelkit_gpu.gradient import gram_log_gradient
from kernelkit_gpu.feature_maps import apply_feature_map
from kernelkit_gpu.kernel_attention import kernel_attention
from kernelkit_gpu.linear_attention import linear_attention
from kernelkit_gpu.softmax_attention import softmax_attention

__all__ = [
    "gram", "kernel_matvec", "gram_naive", "kernel_matvec_naive", "gram_log_gradient", "softmax_attention",
    "kernel_attention", "linear_attention", "apply_feature_map",
]
