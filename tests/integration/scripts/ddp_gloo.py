#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# ddp_gloo.py: a tiny DDP training job on CPU (gloo) for the torchrun integration test. A small
# autoencoder MLP learns synthetic data for a few dozen steps; the loss is all-reduced; each rank
# writes rank<N>.json (rank, world_size, final loss, a checksum of the final parameters) into
# the directory given as argv[1] (or $DDP_OUT_DIR).

import hashlib
import json
import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

STEPS = 30
DIM, HIDDEN, BATCH = 64, 16, 32


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.environ["DDP_OUT_DIR"]
    torch.set_num_threads(1)
    t0 = time.monotonic()
    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    assert rank == int(os.environ["RANK"]) and world == int(os.environ["WORLD_SIZE"])

    torch.manual_seed(0)  # same init everywhere (DDP also broadcasts rank 0's parameters)
    model = torch.nn.Sequential(torch.nn.Linear(DIM, HIDDEN), torch.nn.ReLU(),
                                torch.nn.Linear(HIDDEN, DIM))
    ddp = DDP(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)

    gen = torch.Generator().manual_seed(1000 + rank)  # each rank its own data shard
    basis = torch.randn(4, DIM, generator=torch.Generator().manual_seed(7))
    loss_avg = None
    first = None
    for step in range(STEPS):
        x = torch.randn(BATCH, 4, generator=gen) @ basis  # low-rank data an autoencoder can learn
        loss = torch.nn.functional.mse_loss(ddp(x), x)
        opt.zero_grad()
        loss.backward()
        opt.step()
        avg = loss.detach().clone()
        dist.all_reduce(avg)
        loss_avg = avg.item() / world
        if first is None:
            first = loss_avg

    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().contiguous().numpy().tobytes())
    result = {
        "rank": rank,
        "world_size": world,
        "local_rank": int(os.environ["LOCAL_RANK"]),
        "group_rank": int(os.environ.get("GROUP_RANK", -1)),
        "restart_count": int(os.environ.get("TORCHELASTIC_RESTART_COUNT", -1)),
        "run_id": os.environ.get("TORCHELASTIC_RUN_ID"),
        "first_loss": first,
        "final_loss": loss_avg,
        "param_sha256": h.hexdigest(),
        "steps": STEPS,
        "pid": os.getpid(),
        "seconds": time.monotonic() - t0,
    }
    dist.barrier()
    dist.destroy_process_group()
    tmp = os.path.join(out_dir, ".rank%d.json.tmp" % rank)
    with open(tmp, "w") as f:
        json.dump(result, f)
    os.rename(tmp, os.path.join(out_dir, "rank%d.json" % rank))
    print("rank %d/%d done: loss %.4f -> %.4f" % (rank, world, first, loss_avg), flush=True)


if __name__ == "__main__":
    main()
