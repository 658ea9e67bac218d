# SPDX-License-Identifier: Apache-2.0
"""A worker that uses its generation's TCPStore before and after the rdzvd leader is killed
(tests/faults/test_replica_faults.py): an unmodified PyTorch client (torch.distributed.TCPStore) on
MASTER_ADDR:MASTER_PORT. Before: every rank sets a key and counts itself in. Then it waits for
the test's flag file (the leader was SIGKILLed), and reads every rank's key, counts itself in
again and waits for all: a store that died with the leader fails this (the client's 30 s
timeout). Prints where the store was and "STORE OK" at the end; exits 0 only then."""
import os
import sys
import time
from datetime import timedelta

import torch.distributed as dist

flag = sys.argv[1]
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
print("rank %d store %s:%d" % (rank, addr, port), flush=True)
s = dist.TCPStore(addr, port, world, False, timedelta(seconds=30))
s.set("before/%d" % rank, str(rank))
s.add("arrived", 1)
print("rank %d before the kill" % rank, flush=True)
while not os.path.exists(flag):
    time.sleep(0.05)
s.wait(["before/%d" % r for r in range(world)], timedelta(seconds=30))
assert [s.get("before/%d" % r) for r in range(world)] == [str(r).encode() for r in range(world)]
s.set("after/%d" % rank, "1")
s.wait(["after/%d" % r for r in range(world)], timedelta(seconds=30))
assert s.add("arrived", 0) == world
print("rank %d STORE OK" % rank, flush=True)
