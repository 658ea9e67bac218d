# SPDX-License-Identifier: Apache-2.0
"""torchrun's Slurm line under the local two-node Slurm, with no rdzvd started by hand:
srun --ntasks-per-node=1 --ntasks=2 rdzv-agent --nnodes=2 --nproc_per_node=N
--rdzv_id=$SLURM_JOB_ID --rdzv_backend=c10d --rdzv_endpoint=$(hostname):$MASTER_PORT main.py ARGS
running an unmodified PyTorch gloo DDP script (Debian's torch 1.13)."""
import json
import os
import shlex
import socket
import subprocess
import unittest

from agenttest import AGENT, AgentTestCase, finish, main, start
from rdzvtest import fixed_port
from test_schedulers import Slurm

PYTHON = os.environ.get("RDZV_TEST_PYTHON", "/usr/bin/python3")
DDP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts", "tr_ddp.py")


class TestTorchrunSlurm(AgentTestCase):
    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("the local Slurm needs root")
        if subprocess.run([PYTHON, "-c", "import torch.distributed"],
                          capture_output=True).returncode != 0:
            raise unittest.SkipTest(f"PyTorch is not installed for {PYTHON}")
        cls.slurm = Slurm()

    @classmethod
    def tearDownClass(cls):
        cls.slurm.stop()

    def test_srun_c10d_line_without_a_daemon(self):
        port = fixed_port()
        out = self.outdir()
        agent_line = " ".join(shlex.quote(x) for x in [
            AGENT, "--nnodes=2", "--nproc_per_node=2"]) + " --rdzv_id=$SLURM_JOB_ID " + \
            " ".join(shlex.quote(x) for x in [
                "--rdzv_backend=c10d", f"--rdzv_endpoint={socket.gethostname()}:{port}", DDP,
                out])
        # The job id as the job's shell expands it, as in a batch script.
        cmd = ["srun", "--ntasks-per-node=1", "--ntasks=2", "--kill-on-bad-exit=1",
               "sh", "-c", "exec " + agent_line]
        p = start(cmd, env={**self.slurm.env, "PYTHON_EXEC": PYTHON})
        rc, _, err = finish(p, timeout=150)
        self.assertEqual(rc, 0, err[-3000:])
        self.assertEqual(err.count("hosting rdzvd"), 1, "one agent hosted rdzvd")
        res = []
        for r in range(4):
            with open(os.path.join(out, f"ddp.{r}.json")) as f:
                res.append(json.load(f))
        self.assertEqual([x["world"] for x in res], [4] * 4)
        self.assertEqual(len({x["params"] for x in res}), 1, "DDP kept the replicas identical")


if __name__ == "__main__":
    main()
