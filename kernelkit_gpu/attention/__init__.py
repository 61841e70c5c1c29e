"""Attention on torch tensors: FlashAttention-style softmax (``softmax``, backward in
``softmax_bwd``), the exact kernel smoother for any registry kernel (``smoother``), chunked
linear attention (``linear``, Triton passes in ``linear_chunk``) and local + summary attention
(``local``: Triton forward), each beside its plain-PyTorch twin (``naive``, ``linear_naive``,
``local_naive``); packed variable-length batches (``varlen``: the softmax kernels in their
VARLEN form, ``varlen_naive``: checks and the per-sequence twin, ``_varlen``: the tile table);
tile helpers (``_tiles``), the twins' products over the
visible pairs of a causal mask (``_visible``), the finiteness gate of the causal Triton paths
(``gate``) and launch configurations (``_configs``). The
public functions are exported by :mod:`kernelkit_gpu` (local attention's from ``local``)."""
