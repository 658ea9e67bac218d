# SPDX-License-Identifier: Apache-2.0
"""Helpers for tests that run real rdzv-agent processes against a real rdzvd."""
import json
import os
import re
import selectors
import signal
import subprocess
import tempfile
import time
import unittest

import rdzvtest  # Daemon, process tracking

HERE = os.path.dirname(os.path.abspath(__file__))

BUILD = os.environ.get("RDZV_BUILD_ROOT", os.path.join(HERE, "..", "..", "build"))
AGENT = os.environ.get("RDZV_AGENT", os.path.join(BUILD, "agent", "rdzv-agent"))
RDZVCTL = os.environ.get("RDZVCTL", os.path.join(BUILD, "ctl", "rdzvctl"))
SRC = os.environ.get("RDZV_SOURCE_ROOT", os.path.join(HERE, "..", ".."))

# A worker that records its environment: one file per global rank.
ENV_WORKER = ["/bin/sh", "-c", 'env > "$RDZV_TEST_OUT/env.$RANK.tmp" && '
              'mv "$RDZV_TEST_OUT/env.$RANK.tmp" "$RDZV_TEST_OUT/env.$RANK"']

CONTRACT = ["RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
            "GROUP_WORLD_SIZE", "ROLE_NAME", "ROLE_RANK", "ROLE_WORLD_SIZE", "MASTER_ADDR",
            "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS",
            "TORCHELASTIC_RUN_ID", "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_ERROR_FILE",
            "OMP_NUM_THREADS", "RDZV_NCCL_UNIQUE_ID", "RDZV_GENERATION", "RDZV_ENDPOINT"]


def agent_cmd(endpoint, *args, worker=None):
    cmd = [AGENT, "--endpoint", endpoint, *args]
    if worker is not None:
        cmd += ["--", *worker]
    return cmd


def start(cmd, env=None, **kw):
    e = dict(os.environ)
    for k in ("SLURM_JOB_ID", "SLURM_NODEID", "SLURM_NNODES", "SLURM_JOB_NUM_NODES", "PBS_JOBID",
              "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"):
        e.pop(k, None)
    e.update(env or {})
    p = subprocess.Popen(cmd, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         start_new_session=True, **kw)
    rdzvtest.track(p, group=True)
    return p


def finish(p, timeout=60):
    """Wait for p; returns (rc, stdout, stderr) as text. Kills the group on timeout."""
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        rdzvtest.kill_proc(p, group=True)
        out, err = p.communicate()
        raise AssertionError(f"{p.args[:3]}... did not finish within {timeout}s:\n"
                             f"{err.decode()[-3000:]}")
    return p.returncode, out.decode(errors="replace"), err.decode(errors="replace")


def wait_output(p, pattern, timeout=60):
    """Read p's stdout (an agent's: its workers' lines) until a line matches pattern; return the
    match. What was read is kept in p.seen (finish() returns only the rest). Fails when p ends
    or the timeout passes first."""
    rx = re.compile(pattern, re.M)
    seen = getattr(p, "seen", b"")
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as sel:
        sel.register(p.stdout, selectors.EVENT_READ)
        while True:
            m = rx.search(seen.decode(errors="replace"))
            if m:
                p.seen = seen
                return m
            left = deadline - time.monotonic()
            chunk = os.read(p.stdout.fileno(), 65536) if left > 0 and sel.select(left) else b""
            if not chunk:
                p.seen = seen
                raise AssertionError(f"{p.args[:3]}... printed no line matching {pattern!r} "
                                     f"({'it ended' if left > 0 else f'within {timeout}s'}); "
                                     f"its output:\n{seen.decode(errors='replace')[-3000:]}")
            seen += chunk


def job_status(endpoint, run_id):
    """The job run_id in rdzvctl status --json (None when rdzvd has no such job)."""
    p = subprocess.run([RDZVCTL, "-e", endpoint, "status", "--json"], capture_output=True,
                       text=True, timeout=10)
    if p.returncode != 0:
        raise AssertionError(f"rdzvctl status --json failed ({p.returncode}): {p.stderr}")
    return next((j for j in json.loads(p.stdout)["jobs"] if j["run_id"] == run_id), None)


def read_envs(outdir):
    envs = {}
    for name in os.listdir(outdir):
        m = re.fullmatch(r"env\.(\d+)", name)
        if not m:
            continue
        d = {}
        with open(os.path.join(outdir, name)) as f:
            for line in f:
                k, _, v = line.rstrip("\n").partition("=")
                d[k] = v
        envs[int(m.group(1))] = d
    return envs


class AgentTestCase(rdzvtest.DaemonTestCase):
    def outdir(self):
        d = tempfile.mkdtemp(prefix="rdzv-agent-test-")
        self.addCleanup(subprocess.call, ["rm", "-rf", d])
        return d

    def daemon_with_metrics(self, *args):
        """An rdzvd with --metrics-port 0: (the daemon, its HTTP port)."""
        d = self.daemon("--metrics-port", "0", "--metrics-port-file",
                        os.path.join(tempfile.mkdtemp(prefix="rdzv-mport-"), "p"), *args)
        mport_file = d.args[d.args.index("--metrics-port-file") + 1]
        deadline = time.monotonic() + 5
        while not os.path.exists(mport_file) and time.monotonic() < deadline:
            time.sleep(0.02)
        with open(mport_file) as f:
            return d, int(f.read())

    def assert_straggler_replaced(self, job, host):
        """job (rdzvctl status --json) succeeded after putting host aside as a straggler, its
        one recovery, which cost no restart."""
        self.assertEqual(job["outcome"]["type"], "succeeded", job)
        self.assertEqual([a["host"] for a in job["put_aside"]], [host])
        self.assertTrue(job["put_aside"][0]["reason"].startswith("a straggler: "), job)
        rec = job["timeline"]["recoveries"]["list"]
        self.assertEqual([r["kind"] for r in rec], ["straggler"], rec)
        self.assertEqual(job["restart_count"], 0, "a straggler put aside costs no restart")

    def assert_contract(self, envs, nnodes, nproc, run_id, endpoint, nccl=True, group_of=None):
        world = nnodes * nproc
        self.assertEqual(sorted(envs), list(range(world)), "every global rank exactly once")
        ids = set()
        ports = set()
        for rank, e in envs.items():
            for k in CONTRACT:
                if k == "RDZV_NCCL_UNIQUE_ID" and not nccl:
                    continue
                self.assertIn(k, e, f"rank {rank} lacks {k}")
            g = int(e["GROUP_RANK"])
            lr = int(e["LOCAL_RANK"])
            self.assertEqual(rank, g * nproc + lr, "node-contiguous global ranks")
            self.assertEqual(int(e["RANK"]), rank)
            self.assertEqual(int(e["WORLD_SIZE"]), world)
            self.assertEqual(int(e["LOCAL_WORLD_SIZE"]), nproc)
            self.assertEqual(int(e["GROUP_WORLD_SIZE"]), nnodes)
            self.assertEqual(e["ROLE_NAME"], "default")
            self.assertEqual(int(e["ROLE_RANK"]), rank)
            self.assertEqual(int(e["ROLE_WORLD_SIZE"]), world)
            self.assertEqual(e["TORCHELASTIC_USE_AGENT_STORE"], "True")
            self.assertEqual(e["TORCHELASTIC_RUN_ID"], run_id)
            self.assertEqual(e["TORCHELASTIC_RESTART_COUNT"], "0")
            self.assertEqual(e["RDZV_GENERATION"], "1")
            self.assertEqual(e["RDZV_ENDPOINT"], endpoint)
            self.assertTrue(e["TORCHELASTIC_ERROR_FILE"].endswith("error.json"))
            self.assertEqual(e["MASTER_ADDR"], "127.0.0.1")
            ports.add(e["MASTER_PORT"])
            if nccl:
                self.assertRegex(e["RDZV_NCCL_UNIQUE_ID"], r"^[0-9a-f]{256}$")
                ids.add(e["RDZV_NCCL_UNIQUE_ID"])
            if group_of is not None:
                self.assertEqual(g, group_of(e), f"rank {rank}: GROUP_RANK vs scheduler's node id")
        self.assertEqual(len(ports), 1, "one store for the whole generation")
        self.assertNotEqual(ports.pop(), endpoint.rsplit(":", 1)[1],
                            "workers get the generation's own store, not rdzvd's main port")
        if nccl:
            self.assertEqual(len(ids), 1, "one NCCL id for every rank")


def main():
    unittest.main(verbosity=2)
