"""Tensors of the wire: the cluster's dtype (f32, bf16, f16) over memory the binding can send."""
import numpy as np
import torch

WIRE_DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
_PAGE = 4096  # device paths (posix transport) use O_DIRECT


def element_size(dtype):
    """Bytes per element of a torch dtype (torch 1.13's dtypes have no itemsize)."""
    return torch.tensor([], dtype=dtype).element_size()


def wire_element_bytes(dtype_name):
    """Bytes per element of the cluster dtype ("f32", "bf16", "f16")."""
    return element_size(WIRE_DTYPES[dtype_name])


def wire_buffer(elements, dtype, pinned):
    """A zeroed flat tensor of the wire dtype over page-aligned memory (pinned for CUDA copies)."""
    if pinned:
        return torch.zeros(elements, dtype=dtype, pin_memory=True)  # cudaHostAlloc: page-aligned
    itemsize = element_size(dtype)
    raw = np.zeros(elements * itemsize + _PAGE, np.uint8)
    start = (-raw.ctypes.data) % _PAGE
    return torch.from_numpy(raw[start:start + elements * itemsize]).view(dtype)


def integer_view(tensor):
    """The tensor's memory as integers of its element size: what gloo broadcasts and numpy takes whatever the dtype
    (neither has bfloat16)."""
    return tensor.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[tensor.element_size()])


def bytes_of(tensor):
    """The tensor's memory as a numpy array the binding can take (numpy has no bfloat16)."""
    return integer_view(tensor).numpy()
