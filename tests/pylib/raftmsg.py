# SPDX-License-Identifier: Apache-2.0
"""libraft 0.15's messages on a replica link, as bytes (proto/rdzv-raft-wire.h): the encoders
the replica-link tests (test_replica_link.py) and the guard's fuzz seeds
(tests/fuzz/make-seeds-raft-wire.py) build their messages with."""
import struct

AE, AER, RV, RVR, IS, TN = 1, 2, 3, 4, 5, 6  # message types
COMMAND, BARRIER, CHANGE = 1, 2, 3           # entry types


def le(*vals):
    """Each value as a little-endian u64 (taken modulo 2^64: -1 is 2^64-1)."""
    return b"".join(struct.pack("<Q", v & 0xffffffffffffffff) for v in vals)


def msg(typ, header):
    return le(typ, len(header)) + header


def conf(*servers):
    """A libraft configuration of (id, address) voters, padded to 8 bytes."""
    b = bytes([1]) + le(len(servers))
    for i, a in servers:
        b += le(i) + a.encode() + b"\0" + bytes([1])
    return b + b"\0" * (-len(b) % 8)


def append_entries(term, prev_index=0, prev_term=0, commit=0, entries=()):
    """entries: (term, type, payload)."""
    h = le(term, prev_index, prev_term, commit, len(entries))
    for t, ty, data in entries:
        h += le(t) + bytes([ty, 0, 0, 0]) + struct.pack("<I", len(data))
    return msg(AE, h + le(0)) + b"".join(d for _, _, d in entries)
