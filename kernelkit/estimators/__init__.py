"""scikit-learn estimators on the kernel operators and the linear algebra below them:
:class:`KernelRidge` (:mod:`.kernel_ridge`), :class:`GaussianProcessRegressor` (:mod:`.gp`),
:class:`KernelPCA` (:mod:`.kernel_pca`), :class:`Nystroem` and :class:`RBFSampler`
(:mod:`.kernel_approximation`), :class:`SVC`, :class:`SVR` and :class:`OneClassSVM` (:mod:`.svm`).
Nothing numerical lives here that another estimator could share.
"""

from kernelkit.estimators.gp import GaussianProcessRegressor
from kernelkit.estimators.kernel_approximation import Nystroem, RBFSampler
from kernelkit.estimators.kernel_pca import KernelPCA
from kernelkit.estimators.kernel_ridge import KernelRidge
from kernelkit.estimators.svm import SVC, SVR, OneClassSVM

__all__ = ["KernelRidge", "GaussianProcessRegressor", "KernelPCA", "Nystroem", "RBFSampler", "SVC",
           "SVR", "OneClassSVM"]
