# SPDX-License-Identifier: Apache-2.0
"""A node put aside is put aside by its GPUs' UUIDs too: real rdzv-agents against a real rdzvd,
--nnodes 2 (one spare), each agent given its GPUs by RDZV_GPU_UUIDS (no GPU here). The bad
node fails its health check while the job runs and is put aside; its agent coming back under
another name (--host, or the scheduler's SLURMD_NODENAME) with one of the same GPUs is refused,
naming the GPU and the node put aside, while a node with other GPUs joins. rdzvctl status
(text and JSON) lists the GPUs; rdzvctl release of one GPU lets a node with it join, the rest
staying put aside. A malformed RDZV_GPU_UUIDS stops the agent before it joins, saying which
entry."""
import json
import os
import subprocess
import urllib.request

import test_bad_node
from agenttest import agent_cmd, finish, main, start

RDZVCTL = test_bad_node.RDZVCTL
WORKER = test_bad_node.WORKER  # appends its generation to starts.<node>, runs RDZV_TEST_RUN s

U1 = "GPU-5f2e1a3b-0c4d-4e5f-8a9b-0123456789ab"
U2 = "GPU-00000000-1111-2222-3333-444444444444"
U3 = "GPU-abcdef01-2345-6789-abcd-ef0123456789"
U4 = "GPU-99999999-8888-7777-6666-555555555555"
U5 = "GPU-12121212-3434-5656-7878-909090909090"


class GpuAside(test_bad_node.Base):
    def agent(self, ep, out, run_id, node, gpus, *extra, host=True, env=None):
        env = dict(env or {}, RDZV_TEST_OUT=out, RDZV_TEST_NODE=node, RDZV_GPU_UUIDS=gpus)
        name = ("--host", node) if host else ()
        return start(agent_cmd(ep, "--nnodes", "2", "--nproc", "1", "--rdzv-id", run_id,
                               "--max-restarts", "4", *name, "--grace", "2", "--last-call",
                               "0.5", "--nccl", "off", *extra, worker=WORKER), env=env)

    def ctl(self, d, *args):
        return subprocess.run([RDZVCTL, "-e", "127.0.0.1:%d" % d.port, *args],
                              capture_output=True, text=True, timeout=10)

    def test_gpus_put_aside_under_another_name(self):
        d, mport = self.daemon_with_metrics()
        ep = f"127.0.0.1:{d.port}"
        out = self.outdir()
        run_id = "gpus"
        flag = os.path.join(out, "broken")
        check = ("--health-check", 'if [ -e %s ]; then echo "GPU 1 has fallen off the bus"; '
                 'exit 1; fi' % flag, "--health-interval", "0.3")
        env = {"RDZV_TEST_RUN": "20"}
        bad = self.agent(ep, out, run_id, "bad", U1 + "," + U2, *check, env=env)
        d.wait_log(r"job=%s .*node=bad joined" % run_id)
        good = self.agent(ep, out, run_id, "good", U3, env=env)
        d.wait_log(r"job=%s gen=1 generation 1 formed" % run_id)
        spare = self.agent(ep, out, run_id, "spare", U4, env=env)
        d.wait_log(r"job=%s .*node=spare joined" % run_id)
        open(flag, "w").close()
        rc, _, err = finish(bad, timeout=30)
        self.assertEqual(rc, 69, err[-3000:])
        self.assertIn("GPU 1 has fallen off the bus", err)
        d.wait_log(r"job=%s gen=2 generation 2 formed" % run_id)

        # The same GPU under another --host, then under another scheduler's name: refused.
        refused = "this node's GPU %s was put aside by job %s with node bad (node id " % (
            U2, run_id)
        p = self.agent(ep, out, run_id, "renamed", U5 + "," + U2)
        rc, _, err = finish(p, timeout=30)
        self.assertEqual(rc, 69, err[-3000:])
        self.assertIn(refused, err)
        self.assertIn("failed a health check: GPU 1 has fallen off the bus", err)
        p = self.agent(ep, out, run_id, "slurm", U1, host=False,
                       env={"SLURMD_NODENAME": "slurm-renamed"})
        rc, _, err = finish(p, timeout=30)
        self.assertEqual(rc, 69, err[-3000:])
        self.assertIn("this node's GPU %s was put aside by job %s with node bad" % (U1, run_id),
                      err)
        self.assertIsNone(d.find_log(r"job=%s .*node=(renamed|slurm-renamed) joined" % run_id))
        self.assertEqual(self.starts(out, "renamed") + self.starts(out, "slurm"), [])

        # Status lists the GPUs put aside with the node.
        p = self.ctl(d, "status")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("put aside:\n    bad", p.stdout)
        self.assertIn("      GPUs: %s, %s\n" % (U1, U2), p.stdout)
        st = json.loads(self.ctl(d, "status", "--json").stdout)
        job = [j for j in st["jobs"] if j["run_id"] == run_id][0]
        self.assertEqual(job["put_aside"][0]["gpu_uuids"], [U1, U2])
        with urllib.request.urlopen("http://127.0.0.1:%d/job/%s" % (mport, run_id),
                                    timeout=10) as r:
            page = r.read().decode()
        self.assertIn("<th>GPUs</th>", page)
        self.assertIn("<td>%s<br>%s</td>" % (U1, U2), page)

        # Released, that GPU only: a node with it joins (a spare); U1 and the host stay aside.
        p = self.ctl(d, "release", run_id, U2)
        self.assertEqual((p.returncode, p.stdout), (
            0, "released GPU %s of 1 node(s) put aside by job %s\n" % (U2, run_id)), p.stderr)
        d.wait_log(r"job=%s GPU %s released by an operator from 1 node\(s\) put aside"
                   % (run_id, U2))
        back = self.agent(ep, out, run_id, "renamed", U2 + "," + U5, env=env)
        d.wait_log(r"job=%s .*node=renamed joined" % run_id)
        p = self.agent(ep, out, run_id, "other", U1)
        rc, _, err = finish(p, timeout=30)
        self.assertEqual(rc, 69, err[-3000:])
        self.assertIn("GPU %s was put aside" % U1, err)
        st = json.loads(self.ctl(d, "status", "--json").stdout)
        job = [j for j in st["jobs"] if j["run_id"] == run_id][0]
        self.assertEqual(job["put_aside"][0]["gpu_uuids"], [U1])

        # The job finishes on good and spare; the node that joined after waits as a spare.
        for q in (good, spare, back):
            rc, _, err = finish(q, timeout=60)
            self.assertEqual(rc, 0, err[-3000:])
        self.assertEqual(self.starts(out, "bad"), ["1"])

    def test_malformed_gpu_uuids_stop_the_agent(self):
        d = self.daemon()
        ep = f"127.0.0.1:{d.port}"
        p = self.agent(ep, self.outdir(), "badlist", "n", U1 + ",GPU-not-a-uuid")
        rc, _, err = finish(p, timeout=30)
        self.assertEqual(rc, 2, err[-3000:])
        self.assertIn("RDZV_GPU_UUIDS: entry 2, 'GPU-not-a-uuid', is not a GPU UUID", err)
        self.assertIsNone(d.find_log(r"job=badlist .*joined"))


if __name__ == "__main__":
    main()
