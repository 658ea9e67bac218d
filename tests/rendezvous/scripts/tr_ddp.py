# SPDX-License-Identifier: Apache-2.0
"""An unmodified-style PyTorch gloo DDP script: reads only LOCAL_RANK, RANK and WORLD_SIZE (the
rest of env:// is torch's own business), trains a few steps and writes <out>/ddp.<RANK>.json.
Usage: tr_ddp.py OUT_DIR [SLEEP_S]"""
import json
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

local_rank, rank, world = (int(os.environ[k]) for k in ("LOCAL_RANK", "RANK", "WORLD_SIZE"))
torch.set_num_threads(1)
dist.init_process_group("gloo")
torch.manual_seed(0)
model = DDP(torch.nn.Linear(8, 8))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(5):
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(rank * 100 + step))
    loss = torch.nn.functional.mse_loss(model(x), x)
    opt.zero_grad()
    loss.backward()
    opt.step()
if len(sys.argv) > 2:
    time.sleep(float(sys.argv[2]))
dist.barrier()
with open(os.path.join(sys.argv[1], f"ddp.{rank}.json"), "w") as f:
    json.dump({"rank": rank, "local_rank": local_rank, "world": world,
               "params": float(sum(p.sum() for p in model.parameters())),
               "restart": os.environ.get("TORCHELASTIC_RESTART_COUNT")}, f)
dist.destroy_process_group()
