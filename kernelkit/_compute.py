"""Where the scikit-learn-facing kernels pick the CPU or the GPU for K(X, Y) and its gradient.

Used by :mod:`kernelkit.pairwise` (the functions) and :mod:`kernelkit._kernel_base` (the base
of the kernel classes: values and log-hyperparameter gradients), and by nothing else. The other entry points
choose their own path: :func:`kernelkit.blocked_gram.gram` computes row blocks, the solvers and
the Gaussian process have their kernel operators, the attention functions dispatch in
:mod:`kernelkit.attention._dispatch`.

- NumPy in: validated by :func:`kernelkit._util.validation.check_pair`; ``device`` resolves to the CPU
  (the float64 registry reference) or to CUDA (``kernelkit_gpu.gram``, float64 kernels for
  float64 data and for float32 data mixed with float64 data, the accurate float32 mode for
  float32 data). NumPy comes back.
- torch tensors in: the result is a tensor on the same device, with no host round trip. CUDA
  tensors run the Triton kernels; CPU tensors take the float64 NumPy path (exact, and faster than
  the Triton interpreter), returned as float32 for 32- and 16-bit input, float64 for float64.

torch and kernelkit_gpu are imported only when a GPU is used or a tensor is passed.
"""

import sys

import numpy as np

from kernelkit._util.device import check_device, resolve_device, to_cuda
from kernelkit._util.validation import check_pair, result_dtype

#: Share of the free GPU memory the gradient path may plan to use; beyond it, the CPU reference.
GPU_MEMORY_SHARE = 0.8


def is_tensor(obj):
    """True for a torch.Tensor, without importing torch."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.Tensor)


def _gpu_gram(spec, X, Y, params):
    import kernelkit_gpu

    dtype = X.dtype if Y is None else np.promote_types(X.dtype, Y.dtype)  # gram takes one dtype
    x = to_cuda(np.ascontiguousarray(X, dtype=dtype))
    y = None if Y is None else to_cuda(np.ascontiguousarray(Y, dtype=dtype))
    with kernelkit_gpu.assume_finite():  # X and Y passed check_pair (finite)
        return kernelkit_gpu.gram(x, y, kernel=spec.name, **params).cpu().numpy()


def numpy_kernel_matrix(spec, X, Y, params, where):
    """K(X, Y) for validated NumPy arrays on ``where`` ("cpu" or "cuda").

    ``params`` are registry parameters, already resolved. float64 on the CPU; on the GPU float32
    when every input is float32, else float64.
    """
    if where == "cuda":
        K = _gpu_gram(spec, X, Y, params)
        if Y is None and K.dtype == np.float64:  # the diagonal exactly as diag() gives it
            np.fill_diagonal(K, spec.diag_fn(X, **params))
        return K
    return spec.value_fn(X, Y, **params)


def _check_tensors(x, y):
    import torch

    for name, t in (("X", x), ("Y", y)):
        if t is None:
            continue
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"X and Y must both be torch tensors or both array-likes; {name} is {type(t).__name__}")
        if t.ndim != 2:
            raise ValueError(f"{name} must be 2-D (n_samples, n_features); got shape {tuple(t.shape)}")
        if not t.dtype.is_floating_point:
            raise TypeError(f"{name} must have a floating dtype; got {t.dtype}")
        if 0 in t.shape:
            raise ValueError(f"{name} is empty (shape {tuple(t.shape)}); need at least one sample and one feature")
        if not bool(torch.isfinite(t).all()):
            raise ValueError(f"Input {name} contains NaN or infinity.")
    if y is not None:
        if y.shape[1] != x.shape[1]:
            raise ValueError(f"X has {x.shape[1]} features but Y has {y.shape[1]}; they must match")
        if y.device != x.device:
            raise ValueError(f"X and Y must be on the same device; got {x.device} and {y.device}")


def tensor_kernel_matrix(spec, x, y, params_fn, device, always_float64=False):
    """K(x, y) for torch tensors, returned on their device.

    ``params_fn(n_features)`` returns resolved registry parameters. The result is float64 when
    ``always_float64`` or when every input is float64, else float32.
    """
    import torch

    check_device(device)
    _check_tensors(x, y)
    if device != "auto" and device != x.device.type:
        raise ValueError(
            f"device={device!r} but the tensors are on {x.device}; move them or use device='auto'"
        )
    params = params_fn(x.shape[1])
    all_float64 = x.dtype == torch.float64 and (y is None or y.dtype == torch.float64)
    out_dtype = torch.float64 if always_float64 or all_float64 else torch.float32
    if x.device.type == "cuda":
        import kernelkit_gpu

        if always_float64:
            x, y = x.double(), None if y is None else y.double()
        elif y is not None and y.dtype != x.dtype:
            common = torch.promote_types(x.dtype, y.dtype)
            x, y = x.to(common), y.to(common)
        K = kernelkit_gpu.gram(x, y, kernel=spec.name, **params).to(out_dtype)
        if y is None and out_dtype == torch.float64:  # the diagonal exactly as diag() gives it
            diag = spec.diag_fn(x.detach().cpu().to(torch.float64).numpy(), **params)
            K.diagonal().copy_(torch.from_numpy(diag))
        return K
    X = x.detach().to(torch.float64).numpy()
    Y = None if y is None else y.detach().to(torch.float64).numpy()
    return torch.from_numpy(spec.value_fn(X, Y, **params)).to(out_dtype)


def kernel_matrix(spec, X, Y, params_fn, device, always_float64=False):
    """Validate and evaluate K(X, Y) for array-like or torch input (see the module docstring).

    ``params_fn(n_features)`` returns resolved registry parameters. NumPy results are float64
    when ``always_float64`` (the scikit-learn kernel classes), else float32 exactly when every
    input is float32 (scikit-learn's pairwise rule).
    """
    if is_tensor(X) or is_tensor(Y):
        return tensor_kernel_matrix(spec, X, Y, params_fn, device, always_float64)
    where = resolve_device(device)
    X, Y = check_pair(X, Y)
    if always_float64:
        X, Y = X.astype(np.float64, copy=False), None if Y is None else Y.astype(np.float64, copy=False)
    K = numpy_kernel_matrix(spec, X, Y, params_fn(X.shape[1]), where)
    dtype = np.float64 if always_float64 else result_dtype(X, Y)
    return np.require(K, dtype, ["W"])


def _select_columns(dK, columns):
    """``dK[:, :, index] * factor`` (NumPy or torch), skipping what is the identity."""
    index, factor = columns
    on_host = isinstance(dK, np.ndarray)
    if not (len(index) == dK.shape[2] and (index == np.arange(len(index))).all()):
        dK = dK[:, :, index if on_host else dK.new_tensor(index).long()]
    if not (factor == 1.0).all():
        dK = dK * (factor if on_host else dK.new_tensor(factor))
    return dK


def kernel_gradient(spec, X, params, device, columns):
    """K(X, X) and its log-hyperparameter gradient for validated float64 NumPy X, as NumPy.

    ``params``: resolved registry parameters. ``columns = (index, factor)`` turns the registry's
    gradient layout (:meth:`kernelkit_math.registry.KernelSpec.gradient`) into the caller's:
    ``dK[:, :, index] * factor`` (reordered, fixed ones dropped, rescaled).

    K is what :func:`numpy_kernel_matrix` gives on the same device, so ``kernel(X)`` and
    ``kernel(X, eval_gradient=True)[0]`` agree bit for bit. The gradient is computed on the GPU
    (:func:`kernelkit_gpu.gram_log_gradient`, float64; columns selected there, so only
    the result crosses to the host) when ``device`` resolves to CUDA and K, dK and the
    temporaries fit in :data:`GPU_MEMORY_SHARE` of the free GPU memory; otherwise by the float64
    reference on the CPU, which needs the same host memory as the GPU path's result.
    """
    where = resolve_device(device)
    if where != "cuda":
        K, dK = spec.gradient_fn(X, **params)
        return K, _select_columns(dK, columns)
    import torch

    from kernelkit_gpu.pairwise.log_gradient import gram_log_gradient, log_gradient_bytes

    K = numpy_kernel_matrix(spec, X, None, params, where)
    n_columns = sum(1 if params[p.name] is None else int(np.size(params[p.name]))
                    for p in spec.hyperparameters)
    if log_gradient_bytes(X.shape[0], n_columns) > GPU_MEMORY_SHARE * torch.cuda.mem_get_info()[0]:
        return K, _select_columns(spec.gradient_fn(X, **params)[1], columns)
    dK = gram_log_gradient(to_cuda(X), spec.name, **params)[1]
    return K, _select_columns(dK, columns).cpu().numpy()
