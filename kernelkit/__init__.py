"""kernelkit: kernels in all three ML senses.

- Math kernels: scikit-learn-native kernel classes (:class:`RBF`, :class:`Matern`...) and
  pairwise functions with scikit-learn's signatures (:func:`rbf_kernel`...).
- Compute kernels: Triton Gram matrices and matrix-free products (``kernelkit_gpu``);
  :func:`gram` computes K(X, Y) block by block on the CPU or GPU, into memory or a ``.npy`` file.
- Attention kernels: softmax and linear attention as kernel smoothers.

``import kernelkit`` never imports torch or triton; the GPU code loads on first use. triton is
optional (it has wheels for Linux x86-64 only): without it everything except the Triton kernels
themselves runs on the CPU.
"""

import logging as _logging

from kernelkit import kernels as _kernels
from kernelkit.kernels import *  # noqa: F403 - every kernel class (kernelkit.kernels.__all__)
from kernelkit.blocked_gram import gram
from kernelkit.pairwise import (
    cosine_similarity,
    laplacian_kernel,
    linear_kernel,
    pairwise_kernels,
    polynomial_kernel,
    rbf_kernel,
    sigmoid_kernel,
)
from kernelkit.estimators import (SVC, SVR, GaussianProcessRegressor, KernelPCA, KernelRidge,
                                  Nystroem, OneClassSVM, RBFSampler)

__version__ = "0.1.0"

# a library's convention: records reach the application's handlers, or nowhere (never the
# "last resort" handler on stderr); logging.getLogger("kernelkit").setLevel(logging.INFO) and a
# handler turn the estimators' fit records on (docs/guide.md, "Logging and progress")
_logging.getLogger(__name__).addHandler(_logging.NullHandler())

__all__ = [
    *(name for name in _kernels.__all__ if name != "KERNEL_CLASSES"),
    "linear_kernel", "polynomial_kernel", "rbf_kernel", "laplacian_kernel", "sigmoid_kernel",
    "cosine_similarity", "pairwise_kernels", "gram", "KernelRidge", "GaussianProcessRegressor",
    "KernelPCA", "Nystroem", "RBFSampler", "SVC", "SVR", "OneClassSVM", "__version__",
]
