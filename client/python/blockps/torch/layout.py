"""The flat model: where each trainable parameter and floating-point buffer of a torch model lies among the
elements the shards hold. The package's one layout: DistributedOptimizer, the DDP hook, ParameterServerStep and
the torch-format checkpoints all place tensors through ModelLayout, so a model's blocks are the same whichever of
them wrote the shards.

Order: the trainable parameters end to end in reverse registration order (model.named_parameters(), reversed),
then, from the next block boundary, the floating-point buffers in registration order. Reverse because backward
produces the last layers' gradients first: their blocks are the first blocks, so the pushes that start during
backward go out from block 0 upward as the gradients come (DistributedOptimizer sends from its first unsent block,
the hook every run of blocks whose parameters are staged). The buffers start on a block of their own so that rank
0 writes them without touching a parameter's block. Shard checkpoint files and the torch-format export hold this
order: changing it moves every parameter of every existing checkpoint. (ParameterServerStep laid the parameters out
in registration order until 2026-11-28: docs/OPTIONS.md, "Python".)
"""
import math


class ParameterSlot:
    """Where one named tensor lives in the flat model: elements [offset, offset + numel)."""

    def __init__(self, name, tensor, offset, is_parameter):
        self.name, self.tensor, self.offset, self.numel = name, tensor, offset, tensor.numel()
        self.is_parameter = is_parameter

    @property
    def end(self):
        return self.offset + self.numel


class ModelLayout:
    """The flat model of `model` in blocks of `block_elements` (see the module's doc): parameter slots, then
    floating-point buffer slots from a block boundary. elements: how many elements the cluster's model must hold
    (the parameters alone when the model has no floating-point buffer)."""

    def __init__(self, model, block_elements):
        self.block_elements = block_elements
        named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        self.parameters, offset = [], 0
        for name, p in reversed(named):
            self.parameters.append(ParameterSlot(name, p, offset, True))
            offset += p.numel()
        self.parameter_elements = offset
        self.parameter_blocks = math.ceil(offset / block_elements)
        offset = self.parameter_blocks * block_elements
        self.buffer_offset = offset
        self.buffers = []
        for name, b in model.named_buffers():
            if b.is_floating_point():
                self.buffers.append(ParameterSlot(name, b, offset, False))
                offset += b.numel()
        self.buffer_blocks = math.ceil((offset - self.buffer_offset) / block_elements)
        self.elements = offset if self.buffers else self.parameter_elements

    def blocks_of(self, slot):
        """The global blocks that hold any of the slot's elements."""
        if slot.numel == 0:
            return range(0)
        return range(slot.offset // self.block_elements, (slot.end - 1) // self.block_elements + 1)

    def block_span(self, flat, first, end):
        """The elements of blocks first..end-1 in `flat`, a tensor laid out as this model (a view; it ends early
        where `flat` does)."""
        return flat[first * self.block_elements:end * self.block_elements]

    def names_in(self, first_block, end_block):
        lo, hi = first_block * self.block_elements, end_block * self.block_elements
        return [s.name for s in self.parameters + self.buffers if s.offset < hi and s.end > lo]


def block_bytes_for(model, shards, element_bytes=4, *, blocks_per_shard=16, smallest=16 << 10, largest=256 << 10):
    """A block size for `model` over `shards` shards, in wire bytes (`element_bytes` a element: 4 for f32, 2 for
    bf16 and f16): the largest power of two from `smallest` to `largest` that gives every shard at least
    `blocks_per_shard` blocks of the model's trainable parameters. A shard pipelines block by block (a block's pull
    leaves as soon as every worker pushed it, while the next blocks' pushes go on), so a shard holding one block of
    a small model cannot overlap its pull with its push: at 256 KiB the Fashion-MNIST MLP over 4 shards is one block
    per shard (issue 48). The floor: below 16 KiB the cost of a command would weigh (bench/RESULTS.md, issue 48:
    at 16 KiB the MLP over 4 shards at 10 Mbit/s ran 1.32x DDP, its CPU 27-30% busy)."""
    if shards < 1 or element_bytes < 1 or not smallest <= largest:
        raise ValueError(f"blockps: block_bytes_for: shards={shards}, element_bytes={element_bytes}, "
                         f"smallest={smallest}, largest={largest}: need shards >= 1 and smallest <= largest")
    per_shard = sum(p.numel() for p in model.parameters() if p.requires_grad) * element_bytes / shards
    block = largest
    while block // 2 >= smallest and per_shard < blocks_per_shard * block:
        block //= 2
    return block
