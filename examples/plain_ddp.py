# SPDX-License-Identifier: Apache-2.0
"""An ordinary DDP script, as a torchrun user writes it: no rdzv import. It reads torchrun's
environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, LOCAL_RANK), trains a small model with
gloo on CPU or NCCL on GPUs, and saves a checkpoint that a restarted run resumes from.

    rdzv-agent --standalone --nproc 2 -- python3 examples/plain_ddp.py --steps 40
    torchrun --standalone --nproc-per-node 2 examples/plain_ddp.py --steps 40
"""
import argparse
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--checkpoint", default="plain_ddp.pt",
                    help="saved every 10 steps by rank 0; a restart resumes from it")
    args = ap.parse_args()

    gpu = torch.cuda.is_available()
    dist.init_process_group("nccl" if gpu else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"])) if gpu else torch.device("cpu")
    if gpu:
        torch.cuda.set_device(device)

    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                                    torch.nn.Linear(64, 1)).to(device))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    start = 0
    if os.path.exists(args.checkpoint):
        state = torch.load(args.checkpoint, map_location=device)
        model.module.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start = state["step"]

    gen = torch.Generator().manual_seed(rank)
    for step in range(start + 1, args.steps + 1):
        x = torch.randn(64, 32, generator=gen).to(device)
        loss = (model(x) - x.sum(dim=1, keepdim=True)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if rank == 0 and step % 10 == 0:
            torch.save({"model": model.module.state_dict(), "opt": opt.state_dict(),
                        "step": step}, args.checkpoint)
            print(f"step {step}: loss {loss.item():.4f} (world size {world})", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
