# SPDX-License-Identifier: Apache-2.0
"""A plain DDP script, as a torchrun user writes it: no rdzv import, gloo through env://, a small
linear model, STEPS steps (argv[1], default 40) of 50 ms or more. Rank 0 prints {"step": N, "t":
UNIX TIME} after each step and {"event": "done", ...} at the end, one JSON object a line."""
import json
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 40
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = DDP(torch.nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(1, STEPS + 1):
    loss = model(torch.randn(4, 8)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if rank == 0:
        print(json.dumps({"step": step, "t": time.time()}), flush=True)
    time.sleep(0.05)
if rank == 0:
    print(json.dumps({"event": "done", "step": STEPS, "world": world,
                      "restart": int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))}),
          flush=True)
dist.destroy_process_group()
