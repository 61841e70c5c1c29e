"""Kernel operators: K(A, B), K @ V, K_nM @ V and the derivative contractions of a registry kernel
(:mod:`.kernel_operator`) or of a scikit-learn kernel tree (:mod:`.kernel_tree` parses it,
:mod:`.covariance` evaluates it, :mod:`.fused_tree` / :mod:`.fused` run its fused Triton
passes), on any device; the row-sharded variant beside its base (:mod:`.covariance_sharded`).

The only room of kernelkit that uses ``kernelkit_gpu``'s pairwise building blocks (epilogues,
operand preparation). Imports nothing from :mod:`kernelkit.linalg` or
:mod:`kernelkit.estimators`.
"""
