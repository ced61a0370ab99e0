#!/usr/bin/env python3
"""Writes the seed inputs of fuzz_command (tests/fuzz/corpus/command): one per mode and LU role, in the input's
encoding (fuzz_command.cpp): two bytes of setup, then actions. Run it after changing that encoding."""
import os
import struct
import sys

OPCODES = ['read10', 'write10', 'read6', 'write6', 'read16', 'write16', 'read12', 'write12', 'read10b', 'write10b',
           'sync10', 'sync16', 'unmap', 'writesame10', 'writesame16', 'orwrite16', 'verify10', 'verify12', 'verify16',
           'prefetch10', 'prefetch16', 'writeverify10', 'writeverify12', 'writeverify16', 'compareandwrite']
CDB_BYTES = {0: 6, 1: 10, 2: 10, 5: 12}
CODES = {'read10': 0x28, 'write10': 0x2a, 'read6': 0x08, 'write6': 0x0a, 'read16': 0x88, 'write16': 0x8a,
         'read12': 0xa8, 'write12': 0xaa, 'sync10': 0x35, 'sync16': 0x91, 'unmap': 0x42, 'writesame10': 0x41,
         'writesame16': 0x93, 'orwrite16': 0x8b, 'verify10': 0x2f, 'verify12': 0xaf, 'verify16': 0x8f,
         'prefetch10': 0x34, 'prefetch16': 0x90, 'writeverify10': 0x2e, 'writeverify12': 0xae,
         'writeverify16': 0x8e, 'compareandwrite': 0x89}
GRAD, WEIGHTS, STATUS = 0, 1, 2
RUN_POOL, RUN_ONE, WAKE, ABORT, END_SESSION, REOPEN, TOGGLE_FAULT = 9, 10, 11, 12, 13, 14, 15


def setup(mode, dtype=0, lu4k=False, admins=False, may_fail=False, deadline=False, b=0):
    a = mode | dtype << 2 | lu4k << 4 | admins << 5 | may_fail << 6 | deadline << 7
    return bytes([a, b])


def send(op, role=GRAD, slot=0, lba=0, blocks=8, flags=0, data=b'', data_len=None, lu=512):
    """A command with the LBA and block count given (reduced by the target as it reduces them); data-out padded
    with zeros to the length it has (blocks x lu, or data_len; one LU block for WRITE SAME)."""
    code = CODES[op.rstrip('b')]
    cdb_len = CDB_BYTES.get(code >> 5, 16)
    fields = bytearray(cdb_len - 1)
    fields[0] = flags
    out = bytes([0, role | slot << 2, OPCODES.index(op)]) + bytes(fields) + struct.pack('>HB', lba, blocks)
    length = data_len if data_len is not None else lu if op.startswith('writesame') else min(blocks * lu, 65536)
    out += bytes([0 if data_len is None else 0xc0 | data_len // 256])
    if not op.startswith('read') and not op.startswith('sync'):
        out += data[:length].ljust(length, b'\0')
    return out


def floats(n, value):
    return struct.pack('<%df' % n, *([value] * n))


def pull_after_pushes(mode):
    block = floats(1024, 1.0)
    return (setup(mode) + send('write10', slot=0, data=block) + bytes([RUN_POOL]) + send('read10', slot=0) +
            bytes([WAKE]) + send('write10', slot=1, data=block) + bytes([RUN_POOL, WAKE, RUN_POOL]) +
            send('read10', role=WEIGHTS, slot=1) + bytes([RUN_POOL]))


SEEDS = {
    'async_push_pull': setup(0, b=0) + send('write10', data=floats(1024, 0.5)) + bytes([RUN_POOL]) +
    send('read10', role=WEIGHTS) + bytes([RUN_POOL]),
    'async_adam_bf16_fua': setup(0, dtype=1, b=2) + send('write16', flags=0x08, data=floats(512, 1.0)) +
    bytes([RUN_POOL]) + send('sync10', role=WEIGHTS) + bytes([RUN_POOL]),
    'sync_round': pull_after_pushes(1),
    'averaging_round': pull_after_pushes(2),
    'ssp_push_ahead': setup(3, b=0x40) + send('write10', data=floats(1024, 1.0)) + bytes([RUN_POOL]) +
    send('write10', data=floats(1024, 1.0)) + bytes([RUN_POOL]) + send('write10', data=floats(1024, 1.0)) +
    bytes([WAKE, RUN_POOL]),
    'weights_rewrites': setup(0, lu4k=True) + send('writesame10', role=WEIGHTS, blocks=0, flags=0x02,
                                                   data=floats(1024, 2.0), lu=4096) +
    send('orwrite16', role=WEIGHTS, blocks=1, data=floats(1024, 3.0), lu=4096) +
    send('writeverify10', role=WEIGHTS, blocks=1, data=floats(1024, 3.0), lu=4096) +
    send('verify10', role=WEIGHTS, blocks=1, flags=0x06, data=floats(1024, 3.0), data_len=4096) + bytes([RUN_POOL]),
    'status_job_claim': setup(1, admins=True) +
    send('write10', role=STATUS, slot=0, blocks=1, data=b'job=run-a\n') + bytes([RUN_POOL]) +
    send('write10', role=GRAD, slot=1, data=floats(1024, 1.0)) + send('write10', role=WEIGHTS, slot=1) +
    send('write10', role=STATUS, slot=1, blocks=1, data=b'release\n') + bytes([WAKE, RUN_POOL]) +
    send('read10', role=STATUS, slot=2, blocks=8) + bytes([RUN_POOL]),
    'sync_failing_store': setup(1, may_fail=True) + send('write10', slot=0) + send('write10', slot=1) +
    bytes([RUN_POOL, TOGGLE_FAULT]) + send('write10', slot=0) + send('read10', slot=0) + send('write10', slot=1) +
    bytes([RUN_POOL, WAKE, TOGGLE_FAULT]) + send('write10', role=STATUS, blocks=1, data=b'reset-rounds\n') +
    bytes([RUN_POOL, WAKE]),
    'sync_abort_end_reopen': setup(1) + send('write10', slot=0) + bytes([RUN_POOL]) + send('read10', slot=0) +
    bytes([ABORT, 1, WAKE]) + send('write10', slot=0) + bytes([RUN_POOL]) + send('read10', slot=0) +
    bytes([END_SESSION, 1, WAKE]) + send('write10', slot=1) + bytes([REOPEN, 0, RUN_ONE, 0]),
    'sync_deadline': setup(1, deadline=True) + send('write10', slot=0) + bytes([RUN_POOL]) + send('read10', slot=0),
    'odd_lengths': setup(0, dtype=2) + send('write10', blocks=3, data=floats(100, 1.0), data_len=768) +
    send('read6', blocks=0) + send('unmap', role=WEIGHTS) + bytes([RUN_ONE, 2, RUN_POOL]),
}

out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), 'corpus',
                                                          'command')
os.makedirs(out, exist_ok=True)
for name, data in SEEDS.items():
    with open(os.path.join(out, name), 'wb') as f:
        f.write(data)
