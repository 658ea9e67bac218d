#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# An ordinary PyTorch DDP script, nothing rdzv-specific: the autoencoder of our users' seed
# scripts (an MLP 784-128-128-128-784 with ReLU) on their synthetic data (sample i is
# linspace(0, i, 784), normalised), gloo backend, env:// rendezvous, DistributedSampler, Adam.
# Each rank writes result.<rank>.json (first/last loss, parameter checksum) to argv[1].
import hashlib
import json
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def synthetic(n, dim=784):
    x = torch.stack([torch.linspace(0, i, dim) for i in range(n)])
    return x / x.abs().max(dim=1, keepdim=True).values.clamp(min=1e-8)


def main():
    out = sys.argv[1]
    epochs = int(os.environ.get("EPOCHS", "3"))
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    widths = [784, 128, 128, 128, 784]
    layers = []
    for i in range(len(widths) - 1):
        layers.append(torch.nn.Linear(widths[i], widths[i + 1]))
        if i < len(widths) - 2:
            layers.append(torch.nn.ReLU())
    model = DDP(torch.nn.Sequential(*layers))
    data = TensorDataset(synthetic(512))
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=64 // world, sampler=sampler)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    losses = []
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for (x,) in loader:
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), x)
            loss.backward()
            opt.step()
            t = loss.detach().clone()
            dist.all_reduce(t)
            losses.append(t.item() / world)
    digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes()
                                     for p in model.parameters())).hexdigest()
    with open(os.path.join(out, f"result.{rank}.json"), "w") as f:
        json.dump({"rank": rank, "world": world, "first": losses[0], "last": losses[-1],
                   "steps": len(losses), "params": digest}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
