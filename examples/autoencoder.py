#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""A data-parallel autoencoder in PyTorch (DDP), recoverable in place under rdzv-agent.

The two autoencoders of rdzv's seed scripts, as one PyTorch script:
  --shape linspace: an MLP 1000-100-1000 on linspace data (sample i is linspace(0, i, 1000),
                    normalised);
  --shape mnist:    an MLP 784-128-128-128-784 (ReLU) on MNIST's shapes: the images of
                    --mnist FILE (a .npy array of N x 784, or N x 28 x 28, uint8 or float),
                    else synthetic data of that shape (linspace(0, i, 784), normalised).

What makes it recoverable in place is rdzv.torch (python/rdzv/torch.py): init() in place of
init_process_group, keep() naming what a replacement must receive, check() before each step,
recover() after a failure. The same script runs unchanged under rdzv-agent --recovery restart,
under torchrun, and alone (python3 examples/autoencoder.py): there, recover() raises the
failure again and a restart resumes from the newest checkpoint (--ckpt-dir).

The sample order does not depend on the world size: each epoch is one permutation of the data
set (seeded by --seed and the epoch), step k of an epoch trains on its k-th slice of --batch
samples (the global batch), and rank r of a world of W takes every W-th sample of that slice
from r. The loss is the mean over the global batch (each rank's sum, scaled so that DDP's
average over ranks is that mean). So a world that shrinks or grows computes the same steps on
the same samples, no sample of an epoch is skipped or seen twice, and the losses differ only by
the order of floating-point sums.

Rank 0 prints one JSON line per --log-every steps ({"step", "loss"}: the mean loss of rank 0's
part of the global batch; "t": the wall-clock time the step completed), {"event":"resumed"}
when it read a checkpoint, rdzv.torch's {"event":"reformed"} after a recovery in place, and
{"event":"done", "step", "steps" (the steps this process trained), "world", "final_loss"}.
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import rdzv  # noqa: E402  (installed by meson install; the source tree's otherwise)
import rdzv.torch as rt  # noqa: E402


def data_set(shape, mnist, n):
    dim = 1000 if shape == "linspace" else 784
    if shape == "mnist" and mnist and os.path.exists(mnist):
        import numpy
        x = torch.from_numpy(numpy.load(mnist).reshape(-1, 784).astype("float32"))
        return x / max(float(x.max()), 1e-8)
    x = torch.stack([torch.linspace(0, i, dim) for i in range(n)])
    return x / x.abs().max(dim=1, keepdim=True).values.clamp(min=1e-8)


def model_of(shape):
    widths = [1000, 100, 1000] if shape == "linspace" else [784, 128, 128, 128, 784]
    layers = []
    for i in range(len(widths) - 1):
        layers.append(torch.nn.Linear(widths[i], widths[i + 1]))
        if i < len(widths) - 2:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


def save(args, kept, step):
    path = os.path.join(args.ckpt_dir, "ckpt-%08d.pt" % step)
    torch.save({k: v.state_dict() for k, v in kept.items()}, path + ".tmp")
    os.replace(path + ".tmp", path)


def resume(args, kept):
    """The newest checkpoint, if any: its step (0: none)."""
    if not args.ckpt_dir or not os.path.isdir(args.ckpt_dir):
        return 0
    names = sorted(f for f in os.listdir(args.ckpt_dir) if f.startswith("ckpt-") and
                   f.endswith(".pt"))
    if not names:
        return 0
    state = torch.load(os.path.join(args.ckpt_dir, names[-1]))
    for k, v in kept.items():
        v.load_state_dict(state[k])
    return kept["position"].step


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", choices=("mnist", "linspace"), default="mnist")
    ap.add_argument("--mnist", help="a .npy of MNIST images (N x 784); synthetic without")
    ap.add_argument("--samples", type=int, default=512, help="synthetic samples")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch", type=int, default=64, help="the global batch")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--backend", default=None, help="gloo or nccl (default: nccl with GPUs)")
    ap.add_argument("--ckpt-dir", help="rank 0 saves a checkpoint here every --ckpt-every")
    ap.add_argument("--ckpt-every", type=int, default=20)
    ap.add_argument("--log-every", type=int, default=10)
    args = ap.parse_args()

    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    job = rt.init(args.backend)
    cuda = job.backend == "nccl"
    dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cuda else "cpu"
    x_all = data_set(args.shape, args.mnist, args.samples).to(dev)
    model = model_of(args.shape).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    pos = rt.Position()
    kept = {"model": model, "optimizer": opt, "position": pos}
    job.keep(**kept)  # in place, a replacement receives all of it here
    if pos.step == 0 and (resumed := resume(args, kept)):
        if dist.get_rank() == 0:
            print(json.dumps({"event": "resumed", "step": resumed}), flush=True)
    ddp = job.wrap(model)  # DDP(model)
    n = x_all.shape[0]
    per_epoch = max(n // args.batch, 1)
    trained, loss_v = 0, float("nan")
    while pos.step < args.steps:
        try:
            job.check()
            rank, world = dist.get_rank(), dist.get_world_size()
            pos.epoch, k = divmod(pos.step, per_epoch)
            order = torch.randperm(n, generator=torch.Generator().manual_seed(
                args.seed * 1000003 + pos.epoch))
            idx = order[k * args.batch:(k + 1) * args.batch][rank::world].to(dev)
            x = x_all[idx]
            opt.zero_grad()
            err = ((ddp(x) - x) ** 2).mean(dim=1)
            loss = err.sum() * world / args.batch
            loss.backward()  # DDP's all-reduce: a dead peer fails it here, before the update
            opt.step()
            pos.step += 1  # the update and its step together: a state is never torn
            trained += 1
            # rank 0's part of the global batch (no collective outside DDP's in a step)
            loss_v = float(err.detach().mean())
            rdzv.progress(pos.step)
            if rank == 0 and pos.step % args.log_every == 0:
                print(json.dumps({"step": pos.step, "loss": loss_v, "t": round(time.time(), 6)}),
                      flush=True)
            if rank == 0 and args.ckpt_dir and pos.step % args.ckpt_every == 0:
                save(args, kept, pos.step)
        except job.failures:
            ddp = job.recover(ddp)  # outside rdzv-agent --recovery inplace: raises again
    if dist.get_rank() == 0:
        print(json.dumps({"event": "done", "step": pos.step, "steps": trained,
                          "world": dist.get_world_size(), "final_loss": loss_v}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
