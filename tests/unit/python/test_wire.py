"""blockps/torch/wire.py: the cluster's wire dtypes as torch dtypes and their sizes, zeroed page-aligned wire
buffers (the posix transport reads and writes them with O_DIRECT), and a tensor's memory as integers of its
element size for gloo and numpy, which have no bfloat16."""
import pytest

torch = pytest.importorskip("torch")  # python3-torch; without it the whole file is reported skipped
np = pytest.importorskip("numpy")

from blockps.torch import wire  # noqa: E402


def test_the_wire_dtypes_and_their_sizes():
    assert wire.WIRE_DTYPES == {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
    assert [wire.wire_element_bytes(d) for d in ("f32", "bf16", "f16")] == [4, 2, 2]
    with pytest.raises(KeyError):
        wire.wire_element_bytes("f64")


@pytest.mark.parametrize("dtype, size", [(torch.float64, 8), (torch.float32, 4), (torch.bfloat16, 2),
                                         (torch.float16, 2), (torch.int8, 1), (torch.uint8, 1), (torch.int64, 8)])
def test_element_size_of_a_dtype(dtype, size):
    assert wire.element_size(dtype) == size


@pytest.mark.parametrize("dtype", list(wire.WIRE_DTYPES.values()))
@pytest.mark.parametrize("elements", [0, 1, 1000, 4097])
def test_a_wire_buffer_is_zeroed_flat_and_page_aligned(dtype, elements):
    buffer = wire.wire_buffer(elements, dtype, pinned=False)
    assert buffer.dtype == dtype
    assert buffer.shape == (elements,)
    assert buffer.is_contiguous()
    if elements:
        assert buffer.data_ptr() % 4096 == 0
        assert not buffer.any()


def test_a_wire_buffer_keeps_its_memory_alive():
    buffer = wire.wire_buffer(1024, torch.float32, pinned=False)
    buffer.fill_(2.5)  # the numpy array under it is referenced by the tensor, not freed
    assert buffer.sum().item() == 2560.0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="pinned memory needs CUDA")
def test_a_pinned_wire_buffer_is_zeroed_and_page_aligned():
    buffer = wire.wire_buffer(1000, torch.bfloat16, pinned=True)
    assert buffer.is_pinned()
    assert buffer.data_ptr() % 4096 == 0
    assert not buffer.any()


@pytest.mark.parametrize("dtype, integers, one", [(torch.float32, torch.int32, 0x3F800000),
                                                  (torch.bfloat16, torch.int16, 0x3F80),
                                                  (torch.float16, torch.int16, 0x3C00),
                                                  (torch.float64, torch.int64, 0x3FF0000000000000),
                                                  (torch.uint8, torch.uint8, 1)])
def test_integer_view_is_the_same_bits_as_integers(dtype, integers, one):
    tensor = torch.ones(3, dtype=dtype)
    view = wire.integer_view(tensor)
    assert view.dtype == integers
    assert view.tolist() == [one] * 3
    view[1] = 0  # a view: the tensor's own memory
    assert tensor[1].item() == 0


def test_integer_view_of_a_negative_float_keeps_its_sign_bit():
    assert wire.integer_view(torch.tensor([-2.0], dtype=torch.bfloat16)).tolist() == [-16384]  # 0xC000


def test_bytes_of_is_a_numpy_array_over_the_tensors_memory():
    tensor = wire.wire_buffer(4, torch.bfloat16, pinned=False)
    array = wire.bytes_of(tensor)
    assert isinstance(array, np.ndarray)
    assert array.dtype == np.int16
    assert array.nbytes == 8
    array[2] = 0x3F80  # bf16 1.0
    assert tensor.tolist() == [0.0, 0.0, 1.0, 0.0]
    assert wire.bytes_of(torch.zeros(2, dtype=torch.float32)).dtype == np.int32
