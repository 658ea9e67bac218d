#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# ddp_ckpt.py [--steps N] [--ckpt-dir DIR] [--ckpt-every K] [--samples N] [--batch-size B]
#             [--layers W0,...,WN] [--lr LR]
# The recovery benchmark's PyTorch side (tests/bench/recovery): an ordinary DDP script, gloo on
# CPU, torchrun's env:// contract, doing what rdzv-train does with the same defaults (an MLP
# 784-128-128-128-784 with ReLU, synthetic sample i = linspace(0, i, 784) normalised, global
# batch 64 split across the ranks, Adam, MSE), with the usual checkpoint/resume of a torchrun
# job: rank 0 saves model, optimiser and step every K steps (atomically: a temporary file, then
# rename), and every rank loads the newest checkpoint at start.
#
# Rank 0 prints one JSON object per line on stdout, flushed, like rdzv-train:
#   {"event":"started","step":S,"resumed":true|false,"restart":R,"t":T}  after the start/resume
#   {"step":S,"loss":L,"world":W,"t":T}                                  after every step
#   {"event":"done","step":S,"t":T}                                      at the end
# T is wall-clock seconds since the epoch (time.time()) when the step completed.
import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DistributedSampler


def synthetic(n, dim):
    x = torch.stack([torch.linspace(0, i, dim) for i in range(n)])
    return x / x.abs().max(dim=1, keepdim=True).values.clamp(min=1e-8)


def emit(obj):
    obj["t"] = time.time()
    sys.stdout.write(json.dumps(obj, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def ckpt_path(d):
    return os.path.join(d, "ckpt.pt")


def save(d, step, model, opt):
    tmp = ckpt_path(d) + ".tmp"
    torch.save({"step": step, "model": model.module.state_dict(), "opt": opt.state_dict()}, tmp)
    os.replace(tmp, ckpt_path(d))


def main():
    ap = argparse.ArgumentParser(prog="ddp_ckpt.py")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--ckpt-dir")
    ap.add_argument("--ckpt-every", type=int, default=0)
    ap.add_argument("--samples", type=int, default=512)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--layers", default="784,128,128,128,784")
    ap.add_argument("--lr", type=float, default=1e-3)
    a = ap.parse_args()
    widths = [int(w) for w in a.layers.split(",")]

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if a.batch_size % world:
        sys.exit(f"ddp_ckpt.py: --batch-size {a.batch_size} is not a multiple of {world} ranks")
    torch.manual_seed(0)
    layers = []
    for i in range(len(widths) - 1):
        layers.append(torch.nn.Linear(widths[i], widths[i + 1]))
        if i < len(widths) - 2:
            layers.append(torch.nn.ReLU())
    model = DDP(torch.nn.Sequential(*layers))
    opt = torch.optim.Adam(model.parameters(), lr=a.lr)
    step = 0
    resumed = False
    if a.ckpt_dir and os.path.exists(ckpt_path(a.ckpt_dir)):
        ck = torch.load(ckpt_path(a.ckpt_dir))
        model.module.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        step = ck["step"]
        resumed = True
    data = synthetic(a.samples, widths[0])
    sampler = DistributedSampler(range(a.samples), num_replicas=world, rank=rank, shuffle=True,
                                 seed=0, drop_last=True)
    local = a.batch_size // world
    per_epoch = len(sampler) // local
    if rank == 0:
        emit({"event": "started", "step": step, "resumed": resumed,
              "restart": int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")), "world": world})
    while step < a.steps:
        epoch, k = divmod(step, per_epoch)
        sampler.set_epoch(epoch)
        idx = list(sampler)[k * local:(k + 1) * local]
        x = data[idx]
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), x)
        loss.backward()
        opt.step()
        step += 1
        if rank == 0:
            emit({"step": step, "loss": round(loss.item(), 6), "world": world})
            if a.ckpt_dir and a.ckpt_every and step % a.ckpt_every == 0:
                save(a.ckpt_dir, step, model, opt)
    if rank == 0:
        emit({"event": "done", "step": step})
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
