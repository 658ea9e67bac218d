#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# A PyTorch DDP script through rdzv.torch (gloo, CPU) whose nodes may be made slow for real: each
# rank's forward sleeps RDZV_TEST_MS ms (default 20) a step, the agent of the slow node gives its
# workers more. rdzv.torch's timer counts the forward in the step's compute time, and not the
# time a fast rank's backward then waits on the slow one's all-reduce; rdzv.progress(step)
# reports it on the agent's progress channel. With RDZV_TEST_PLAIN=1 it is an unmodified script
# instead (no rdzv import: init_process_group, DDP): rdzv-agent's Python hooks time it and report
# its steps.
#
# It trains until the file RDZV_TEST_STOP exists on some rank, all ranks stopping after the same
# step with no collective of their own (one would count as compute time): the model's "stop"
# parameter's gradient is 1 on a rank that saw the file, 0 on the others, and DDP's all-reduce
# hands every rank the same mean. Local rank 0 prints "torch V" once and "generation G step N"
# after each step, flushed, for the test to wait on.
import os
import sys
import time

import torch
import torch.distributed as dist

PLAIN = os.environ.get("RDZV_TEST_PLAIN") == "1"
if not PLAIN:
    sys.path.insert(0, os.path.join(os.environ.get("RDZV_SOURCE_ROOT", os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "..", "..")), "python"))
    import rdzv
    import rdzv.torch as rt


class Work(torch.nn.Module):
    def __init__(self, ms):
        super().__init__()
        self.ms = ms
        self.lin = torch.nn.Linear(16, 16)
        self.stop = torch.nn.Parameter(torch.zeros(()))

    def forward(self, x, flag):
        time.sleep(self.ms / 1000)
        return self.lin(x), self.stop * flag


def main():
    torch.set_num_threads(1)
    stop = os.environ["RDZV_TEST_STOP"]
    say = os.environ.get("LOCAL_RANK") == "0"
    job = None if PLAIN else rt.init("gloo")
    if PLAIN:
        dist.init_process_group("gloo")
    torch.manual_seed(0)
    work = Work(int(os.environ.get("RDZV_TEST_MS", "20")))
    ddp = torch.nn.parallel.DistributedDataParallel(work) if PLAIN else job.wrap(work)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    if say:
        print("torch %s" % torch.__version__, flush=True)
    step = 0
    while True:
        step += 1
        x = torch.randn(8, 16)
        opt.zero_grad()
        out, flag = ddp(x, 1.0 if os.path.exists(stop) else 0.0)
        ((out - x) ** 2).mean().add(flag).backward()
        opt.step()
        if not PLAIN:
            rdzv.progress(step)
        if say:
            print("generation %s step %d" % (os.environ["RDZV_GENERATION"], step), flush=True)
        if ddp.module.stop.grad.item() > 0:
            break
    dist.destroy_process_group()


main()
