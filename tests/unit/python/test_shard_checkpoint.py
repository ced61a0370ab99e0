"""blockps._shard_checkpoint: the worker package's reader and writer of shard checkpoint files (the format is
contract/checkpoint_file.h, linked without any shard code). The shard's side (options parsed, old files loaded):
tests/unit/ps_backend/checkpoint; the torch export and import over running shards: tests/integration
(TorchOptimizerTest.TorchCheckpointRoundTrip)."""
import json
import struct
import zlib

import numpy as np
import pytest

from blockps import _shard_checkpoint
from blockps.shard_settings import options_of

OPTIONS = "size=40;dtype=f32;block=16;opt=adam;lr=0.01"


def written(tmp_path):
    """A 10-element adam checkpoint in blocks of 4 (3 blocks, the last of 2), and what it holds."""
    path = str(tmp_path / "m.ckpt")
    weights = np.arange(10, dtype=np.float32) * 0.5
    state = [weights + 1, weights - 1]
    steps = np.array([3, 4, 5], np.uint64)
    _shard_checkpoint.write(path, OPTIONS, 4, steps, weights, state)
    return path, steps, weights, state


def test_round_trip(tmp_path):
    path, steps, weights, state = written(tmp_path)
    header = _shard_checkpoint.read_header(path)
    assert header["options"] == OPTIONS
    assert options_of(header["options"])["opt"] == "adam"
    assert header["blocks"] == 3
    assert header["geometry"] == {"elements": 10, "block_elements": 4, "state_slots": 2}
    assert (header["job"], header["place"]) == ("", "")
    ck = _shard_checkpoint.read(path)
    assert ck["block_elements"] == 4
    assert np.array_equal(ck["steps"], steps)
    assert np.array_equal(ck["weights"], weights)
    assert len(ck["state"]) == 2 and all(np.array_equal(a, b) for a, b in zip(ck["state"], state))
    # The geometry the caller expects must be the one the file records.
    assert np.array_equal(_shard_checkpoint.read(path, elements=10, block_elements=4, state_slots=2)["weights"],
                          weights)
    with pytest.raises(ValueError, match="records elements=10 block_elements=4 state_slots=2, expected elements=10 "
                                         "block_elements=4 state_slots=1"):
        _shard_checkpoint.read(path, elements=10, block_elements=4, state_slots=1)
    with pytest.raises(ValueError, match="give all of elements, block_elements and state_slots"):
        _shard_checkpoint.read(path, elements=10)


def test_a_file_without_its_geometry_is_read_with_the_callers(tmp_path):
    """A file written before issue 49 records only the options text: the caller gives the geometry (the cluster
    file's and the optimizer's, as blockps.torch does)."""
    path, steps, weights, state = written(tmp_path)
    data = open(path, "rb").read()
    (length,) = struct.unpack_from("<I", data, 8)
    header = json.loads(data[12:12 + length])
    for key in ("elements", "block_elements", "state_slots"):
        del header[key]
    text = json.dumps(header).encode()
    old = b"BLKPSCK1" + struct.pack("<I", len(text)) + text + data[12 + length:-12]
    open(path, "wb").write(old + struct.pack("<I", zlib.crc32(old)) + b"BLKPSEND")
    assert _shard_checkpoint.read_header(path)["geometry"] is None
    with pytest.raises(RuntimeError, match="does not record its geometry"):
        _shard_checkpoint.read(path)
    ck = _shard_checkpoint.read(path, elements=10, block_elements=4, state_slots=2)
    assert np.array_equal(ck["weights"], weights) and np.array_equal(ck["steps"], steps)
    with pytest.raises(RuntimeError, match="block count 3 does not match"):
        _shard_checkpoint.read(path, elements=10, block_elements=5, state_slots=2)


def test_refusals_name_what_is_wrong(tmp_path):
    path, steps, weights, state = written(tmp_path)
    before = open(path, "rb").read()
    with pytest.raises(ValueError, match="steps: 2 blocks, 10 weights in blocks of 4 are 3"):
        _shard_checkpoint.write(path, OPTIONS, 4, steps[:2], weights, state)
    with pytest.raises(ValueError, match="state: an array of 9 elements, the weights have 10"):
        _shard_checkpoint.write(path, OPTIONS, 4, steps, weights, [state[0], state[1][:9]])
    with pytest.raises(ValueError, match="is unusable"):
        _shard_checkpoint.write(path, OPTIONS, 0, steps, weights, state)
    assert open(path, "rb").read() == before
    corrupt = bytearray(before)
    corrupt[-20] ^= 0x5A
    open(path, "wb").write(corrupt)
    with pytest.raises(RuntimeError, match="CRC mismatch"):
        _shard_checkpoint.read(path)
    open(path, "wb").write(before[:100])
    with pytest.raises(RuntimeError, match="truncated"):
        _shard_checkpoint.read(path)
