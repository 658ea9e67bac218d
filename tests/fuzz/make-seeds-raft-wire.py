#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# make-seeds-raft-wire.py: write the hand-made seeds of corpus/fuzz-raft-wire/ (seed-*): honest
# libraft messages of every type, and the messages that crashed or bricked replicas once
# (three single messages and the replica-link fuzzer's empty AppendEntries), so that the replay
# keeps them refused, and a batch in one write (checked again as libraft processes each message).
#
# Input format of fuzz-raft-wire.c: byte 0 the receiver's flags (1 leads, 2 follows leader 1,
# 4 the sender is a member), bytes 1-8 its term, byte 9 the sender's id; then messages.
# Usage: tests/fuzz/make-seeds-raft-wire.py tests/fuzz/corpus/fuzz-raft-wire
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
from raftmsg import (AER, BARRIER, CHANGE, COMMAND, IS, RV, RVR, TN,  # noqa: E402
                     append_entries, conf, le, msg)

def snapshot(term, c, data):
    return msg(IS, le(term, 9, term, 1, len(c)) + c + le(len(data), 0)) + data


def view(term, flags=4, peer=2):
    return bytes([flags]) + le(term) + bytes([peer])


A = ("127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003")
THREE = conf((1, A[0]), (2, A[1]), (3, A[2]))

SEEDS = {
    # Honest traffic a follower (term 5, following leader 2) sees.
    "heartbeat": view(5, 4 | 2) + append_entries(5, 10, 5, 10),
    "append-commands": view(5, 4) + append_entries(5, 10, 5, 10, [(5, COMMAND, b"\1" * 24),
                                                                   (5, BARRIER, b"\0" * 8)]),
    "append-change": view(5, 4) + append_entries(5, 10, 4, 10, [(5, CHANGE, THREE)]),
    "snapshot": view(5, 4) + snapshot(5, THREE, b"\0" * 64),
    "votes": view(5, 4) + msg(RV, le(6, 2, 12, 5)) + msg(RV, le(6, 2, 12, 5, 1)) +
             msg(RVR, le(6, 1)) + msg(RVR, le(6, 0, 1)),
    "results": view(5, 1 | 4) + msg(AER, le(5, 0, 12)) + msg(TN, le(5, 12, 5)),
    "stream": view(7, 4) + b"".join(append_entries(7, 20 + i, 7, 20 + i, [(7, COMMAND, le(i))])
                                    for i in range(8)),
    # An InstallSnapshot of 73 bytes claiming a configuration of 2^62 bytes.
    "snapshot-bomb": view(5, 4) + le(IS, 57) + le(1, 1, 1, 1, 1 << 62) + b"\x01" +
                               b"\0" * 16,
    # An AppendEntries at the leader's own term, to the leader.
    "second-leader": view(5, 1 | 4) + append_entries(5, 10, 5, 10),
    # Term 2^64-1 (the next term wraps to 0).
    "term-wrap": view(5, 4) + append_entries(2**64 - 1, 10, 5, 10),
    # The replica-link fuzzer's find: an AppendEntries whose entries are all empty.
    "fuzzer-empty-entries": view(5, 4) + append_entries(5, 10, 5, 10, [(5, COMMAND, b""),
                                                                       (5, BARRIER, b"")]),
    # A stranger (not in the configuration) and a vote asked for another candidate.
    "stranger": view(5, 0) + append_entries(5, 10, 5, 10),
    "vote-for-another": view(5, 4) + msg(RV, le(6, 3, 12, 5)),
    # One write: follow the sender at term 6, a TimeoutNow (candidate of 7),
    # the vote granted (leader of 7), an AppendEntries of 7. Each passes on arrival; the last
    # must be refused as libraft processes it. And a stale snapshot's payload, dropped.
    "batch-checked-per-message": view(5, 4) + append_entries(6, 10, 5, 10) + msg(TN, le(6, 12, 5)) +
    msg(RVR, le(7, 1, 0)) + append_entries(7, 12, 5, 12),
    "stale-snapshot": view(5, 4) + snapshot(4, THREE, b"\0" * 64) +
    append_entries(5, 10, 5, 10),
}


def main():
    outdir = sys.argv[1] if len(sys.argv) > 1 else "corpus/fuzz-raft-wire"
    os.makedirs(outdir, exist_ok=True)
    for name, data in SEEDS.items():
        with open(os.path.join(outdir, "seed-" + name), "wb") as f:
            f.write(data)
    print("wrote %d seeds to %s" % (len(SEEDS), outdir))


if __name__ == "__main__":
    main()
