"""The Gram family on torch tensors: fused Gram matrices (``gram_fused``, Triton kernels in
``gram_tiles``, launch configurations in ``gram_configs``), matrix-free products
(``matvec_fused``), the float64 log-gradient (``log_gradient``) and their plain-PyTorch twins
(``naive``). The public functions are exported by :mod:`kernelkit_gpu`."""
