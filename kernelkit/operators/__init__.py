"""Kernel operators: K(A, B), K @ V, K_nM @ V, diagonals and the derivative contractions, for a
kernel tree (:mod:`.kernel_tree` parses it; a registry kernel by name is the one-leaf tree), on
any device. One class family (:mod:`.base`, the protocol and the shared tree walk):
:mod:`.kernel_operator` (KernelRidge and the Falkon system; a precomputed matrix),
:mod:`.covariance` (the Gaussian process's K_theta; :mod:`.fused_tree` / :mod:`.fused` run its
fused Triton passes), the row-sharded variant beside its base (:mod:`.covariance_sharded`).

The only room of kernelkit that uses ``kernelkit_gpu``'s pairwise building blocks (epilogues,
operand preparation, the torch twin's pairwise quantities). Imports nothing from
:mod:`kernelkit.linalg` or :mod:`kernelkit.estimators`.
"""
