#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# A gloo worker for the fault tests. Generation 1 (TORCHELASTIC_RESTART_COUNT 0): every rank joins
# the process group; rank $VICTIM writes its pid to victim.pid and sleeps (the test SIGKILLs it);
# the others write blocked.<rank> and enter an all_reduce that cannot complete without it. Later
# generations: a few DDP steps on a tiny model, then result.<rank>.json (world, checksum).
# argv[1]: output directory.
import hashlib
import json
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    out = sys.argv[1]
    restart = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    victim = int(os.environ.get("VICTIM", "1"))
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    with open(os.path.join(out, f"started.{restart}.{rank}"), "w") as f:
        f.write(f"{os.getpid()}\n")
    if restart == 0:
        if rank == victim:
            with open(os.path.join(out, "victim.pid.tmp"), "w") as f:
                f.write(f"{os.getpid()}\n")
            os.rename(os.path.join(out, "victim.pid.tmp"), os.path.join(out, "victim.pid"))
            time.sleep(600)
            sys.exit(5)
        with open(os.path.join(out, f"blocked.{rank}"), "w") as f:
            f.write(f"{os.getpid()}\n")
        t = torch.ones(1)
        dist.all_reduce(t)  # blocks: the victim never joins it
        sys.exit(6)
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(8, 8))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(5):
        x = torch.full((4, 8), float(step + rank))
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
    digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes()
                                     for p in model.parameters())).hexdigest()
    with open(os.path.join(out, f"result.{rank}.json"), "w") as f:
        json.dump({"rank": rank, "world": world, "restart": restart, "params": digest}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
