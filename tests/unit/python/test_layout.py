"""blockps/torch/layout.py: the one flat model (ModelLayout: trainable parameters end to end in reverse
registration order, then the floating-point buffers from the next block boundary; the blocks and names a slot or a
range of blocks covers) and block_bytes_for, the block size that gives every shard enough blocks to pipeline."""
import pytest

torch = pytest.importorskip("torch")  # python3-torch; without it the whole file is reported skipped

from blockps.torch.layout import ModelLayout, block_bytes_for  # noqa: E402


def small_model():
    """Parameters 0.weight (6), 0.bias (2), 1.weight (2), 1.bias (2); float buffers 1.running_mean (2) and
    1.running_var (2); an integer buffer 1.num_batches_tracked."""
    return torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2))


def slots(slot_list):
    return [(s.name, s.offset, s.numel, s.end) for s in slot_list]


def test_parameters_in_reverse_order_then_float_buffers_from_the_next_block():
    model = small_model()
    layout = ModelLayout(model, block_elements=5)
    assert slots(layout.parameters) == [("1.bias", 0, 2, 2), ("1.weight", 2, 2, 4), ("0.bias", 4, 2, 6),
                                        ("0.weight", 6, 6, 12)]
    assert layout.parameter_elements == 12
    assert layout.parameter_blocks == 3
    assert layout.buffer_offset == 15  # the block after the parameters' last
    assert slots(layout.buffers) == [("1.running_mean", 15, 2, 17), ("1.running_var", 17, 2, 19)]
    assert layout.buffer_blocks == 1
    assert layout.elements == 19
    assert all(s.is_parameter for s in layout.parameters) and not any(s.is_parameter for s in layout.buffers)
    named = dict(model.named_parameters())
    assert all(s.tensor is named[s.name] for s in layout.parameters)  # the model's own tensors, not copies


def test_parameters_that_fill_their_last_block_put_the_buffers_right_after():
    layout = ModelLayout(small_model(), block_elements=4)
    assert layout.parameter_blocks == 3
    assert layout.buffer_offset == 12
    assert layout.buffer_blocks == 1
    assert layout.elements == 16


def test_frozen_parameters_and_integer_buffers_are_not_in_the_model():
    model = small_model()
    model[0].weight.requires_grad_(False)
    layout = ModelLayout(model, block_elements=4)
    assert [s.name for s in layout.parameters] == ["1.bias", "1.weight", "0.bias"]
    assert layout.parameter_elements == 6
    assert "1.num_batches_tracked" not in [s.name for s in layout.buffers]
    assert layout.buffer_offset == 8


def test_without_float_buffers_the_model_is_the_parameters_alone():
    layout = ModelLayout(torch.nn.Linear(2, 1), block_elements=4)  # 3 elements
    assert layout.parameter_elements == 3
    assert layout.buffers == []
    assert layout.buffer_offset == 4
    assert layout.buffer_blocks == 0
    assert layout.elements == 3  # not rounded up to the block


def test_blocks_of_a_slot_are_every_block_holding_one_of_its_elements():
    layout = ModelLayout(small_model(), block_elements=4)
    by_name = {s.name: s for s in layout.parameters + layout.buffers}
    assert list(layout.blocks_of(by_name["1.bias"])) == [0]  # elements 0..1
    assert list(layout.blocks_of(by_name["0.bias"])) == [1]  # 4..5
    assert list(layout.blocks_of(by_name["0.weight"])) == [1, 2]  # 6..11
    assert list(layout.blocks_of(by_name["1.running_var"])) == [3]  # 14..15


def test_an_empty_parameter_is_in_no_block():
    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.empty = torch.nn.Parameter(torch.zeros(0))
            self.w = torch.nn.Parameter(torch.zeros(3))

    layout = ModelLayout(Model(), block_elements=2)
    assert slots(layout.parameters) == [("w", 0, 3, 3), ("empty", 3, 0, 3)]
    assert list(layout.blocks_of(layout.parameters[1])) == []
    assert layout.parameter_blocks == 2


def test_block_span_is_a_view_of_the_blocks_that_ends_with_the_tensor():
    layout = ModelLayout(small_model(), block_elements=4)
    flat = torch.arange(14.0)
    assert layout.block_span(flat, 1, 3).tolist() == list(range(4, 12))
    assert layout.block_span(flat, 3, 5).tolist() == [12.0, 13.0]  # flat ends early
    view = layout.block_span(flat, 0, 1)
    view[0] = -1
    assert flat[0] == -1


def test_names_in_a_range_of_blocks_are_the_slots_that_overlap_it():
    layout = ModelLayout(small_model(), block_elements=4)
    assert layout.names_in(0, 1) == ["1.bias", "1.weight"]
    assert layout.names_in(1, 2) == ["0.bias", "0.weight"]
    assert layout.names_in(2, 3) == ["0.weight"]
    assert layout.names_in(2, 4) == ["0.weight", "1.running_mean", "1.running_var"]
    assert layout.names_in(4, 9) == []
    assert layout.names_in(1, 1) == []


def model_of(elements, frozen=0):
    """A module with `elements` trainable parameter elements (and `frozen` more that are not)."""
    model = torch.nn.Module()
    model.trained = torch.nn.Parameter(torch.empty(elements))
    if frozen:
        model.frozen = torch.nn.Parameter(torch.empty(frozen), requires_grad=False)
    return model


def test_block_bytes_for_a_large_model_is_the_largest():
    # 16 blocks of 256 KiB per shard: 4 MiB of f32 per shard.
    assert block_bytes_for(model_of(1 << 20), 1) == 256 << 10
    assert block_bytes_for(model_of(4 << 20), 4) == 256 << 10


def test_block_bytes_for_halves_until_every_shard_has_enough_blocks():
    # 1.5 MiB per shard: 16 blocks of 64 KiB fit, 16 of 128 KiB do not.
    assert block_bytes_for(model_of(786432), 2) == 64 << 10
    # The same elements in bf16 are half the bytes: 32 KiB.
    assert block_bytes_for(model_of(786432), 2, element_bytes=2) == 32 << 10
    # Fewer blocks asked for: a larger block.
    assert block_bytes_for(model_of(786432), 2, blocks_per_shard=4) == 256 << 10


def test_block_bytes_for_a_small_model_is_the_smallest():
    assert block_bytes_for(model_of(10), 4) == 16 << 10
    assert block_bytes_for(model_of(10), 4, smallest=4 << 10) == 4 << 10
    assert block_bytes_for(model_of(10), 4, smallest=64 << 10, largest=64 << 10) == 64 << 10


def test_block_bytes_for_counts_only_trainable_parameters():
    assert block_bytes_for(model_of(10, frozen=1 << 22), 1) == 16 << 10


@pytest.mark.parametrize("kwargs", [dict(shards=0), dict(shards=-1), dict(shards=2, element_bytes=0),
                                    dict(shards=2, smallest=512 << 10)])
def test_block_bytes_for_refuses_what_gives_no_block(kwargs):
    with pytest.raises(ValueError) as refused:
        block_bytes_for(model_of(10), **kwargs)
    assert str(refused.value).startswith("blockps: block_bytes_for: shards=")
    assert str(refused.value).endswith(": need shards >= 1 and smallest <= largest")
    assert f"shards={kwargs['shards']}" in str(refused.value)
