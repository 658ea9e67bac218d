# SPDX-License-Identifier: Apache-2.0
# torch_mlp.py: the PyTorch twin of rdzv-train, for tests/gpu/gpu-check.sh. Same model (an MLP
# autoencoder, nn.Linear's default init after torch.manual_seed), same synthetic data (sample i
# = linspace(0, i, W0) / max), same Adam and MSE, the same sample order (DistributedSampler's
# randperm(seed + epoch), rank r of w reading positions k*B + r + w*j), and the same data path:
# each step's batch is gathered on the host and copied to the device, and the loss is read
# back every step. DDP over NCCL, env:// rendezvous (a worker of rdzv-agent or torchrun).
# Prints rdzv-train's JSON lines: {"step","loss","samples_per_s"} every --log-every steps and
# {"event":"done",...} at the end (rank 0).
import argparse
import json
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def synthetic(n, dim):
    x = torch.stack([torch.linspace(0, i, dim) for i in range(n)])
    return x / x.abs().max(dim=1, keepdim=True).values.clamp(min=1e-8)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", default="784,128,128,128,784")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--samples", type=int, default=512)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()

    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    dist.init_process_group("nccl", device_id=dev)
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.backends.cuda.matmul.allow_tf32 = False  # rdzv-train's fp32 GEMMs are plain fp32

    widths = [int(w) for w in a.layers.split(",")]
    torch.manual_seed(a.seed)
    layers = []
    for i in range(len(widths) - 1):
        layers.append(torch.nn.Linear(widths[i], widths[i + 1]))
        if i < len(widths) - 2:
            layers.append(torch.nn.ReLU())
    model = DDP(torch.nn.Sequential(*layers).to(dev), device_ids=[local])
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    data = synthetic(a.samples, widths[0])
    B, local_b = a.batch_size, a.batch_size // world
    per_epoch = len(data) // B

    step, epoch, perm = 0, -1, None
    t0 = last_t = time.perf_counter()
    last_step, first = 0, None
    while step < a.steps:
        k = step % per_epoch
        if k == 0:
            epoch += 1
            g = torch.Generator()
            g.manual_seed(a.seed + epoch)
            perm = torch.randperm(len(data), generator=g)
        pos = k * B + rank + world * torch.arange(local_b)
        x = data[perm[pos]].to(dev)
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            y = model(x)
        loss = torch.nn.functional.mse_loss(y.float(), x)
        loss.backward()
        opt.step()
        t = loss.detach().clone()
        dist.all_reduce(t)
        loss_v = t.item() / world
        step += 1
        if first is None:
            first = loss_v
        if rank == 0 and (step % a.log_every == 0 or step == a.steps):
            now = time.perf_counter()
            sps = (step - last_step) * B / (now - last_t)
            print(json.dumps({"step": step, "epoch": epoch + 1, "loss": loss_v,
                              "samples_per_s": sps, "world": world, "backend": "torch/nccl"}),
                  flush=True)
            last_t, last_step = now, step
    if rank == 0:
        secs = time.perf_counter() - t0
        print(json.dumps({"event": "done", "steps": step, "first_loss": first,
                          "final_loss": loss_v, "time_s": secs,
                          "samples_per_s": step * B / secs, "world": world,
                          "backend": "torch/nccl", "torch": torch.__version__}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
