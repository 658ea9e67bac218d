#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""rdzv.torch measures each step's compute time for the module it wraps (issue 37), with no
change to the training loop: rdzv.progress(step) writes "step N compute_ms M" (proto/WORKER.md),
M the time since the last report less the backward's wait on its all-reduces. One process,
gloo on CPU. Exits 77 (skipped) when torch is not importable."""
import os
import socket
import sys
import time
import unittest

from rdzvtest import main, skip_without_torch

skip_without_torch()
sys.path.insert(0, os.path.join(os.environ.get("RDZV_SOURCE_ROOT", "../.."), "python"))
import torch  # noqa: E402

import rdzv  # noqa: E402
import rdzv.torch as rt  # noqa: E402


class Slow(torch.nn.Module):
    """A linear layer whose forward takes at least 30 ms: compute the timer must count."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(16, 16)

    def forward(self, x):
        time.sleep(0.03)
        return self.lin(x)


class ComputeTest(unittest.TestCase):
    def test_wrapped_module_reports_its_compute_time(self):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        rfd, wfd = os.pipe()
        os.environ.update(RDZV_PROGRESS_FD=str(wfd), MASTER_ADDR="127.0.0.1",
                          MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1")
        rdzv._fd = rdzv._UNSET  # read the variable again
        job = rt.init("gloo")
        ddp = job.wrap(Slow())
        opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
        for step in range(1, 4):  # the user's loop, unchanged
            opt.zero_grad()
            ddp(torch.randn(8, 16)).sum().backward()
            opt.step()
            rdzv.progress(step)
        os.close(wfd)
        torch.distributed.destroy_process_group()
        lines = os.read(rfd, 4096).decode().splitlines()
        os.close(rfd)
        self.assertEqual([ln.split(" compute_ms ")[0] for ln in lines],
                         ["step 1", "step 2", "step 3"], lines)
        for ln in lines:
            self.assertRegex(ln, r"^step \d compute_ms \d+$")
            self.assertTrue(30 <= int(ln.split()[-1]) < 10000, lines)


if __name__ == "__main__":
    main()
