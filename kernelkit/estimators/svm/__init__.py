"""Support vector machines as scikit-learn estimators: :class:`SVC`, :class:`SVR` and
:class:`OneClassSVM`, on libsvm's dual problems solved by batched SMO
(:func:`kernelkit.linalg.smo.solve`) with kernel rows from the kernel operator
(:mod:`kernelkit.operators.kernel_operator`); the shared part in :mod:`._base`.

Importing this package loads NumPy and scikit-learn only; torch, the operators and the solver
load on the first ``fit``.
"""

from kernelkit.estimators.svm.classifier import SVC
from kernelkit.estimators.svm.one_class import OneClassSVM
from kernelkit.estimators.svm.regressor import SVR

__all__ = ["SVC", "SVR", "OneClassSVM"]
