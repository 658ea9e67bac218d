# SPDX-License-Identifier: Apache-2.0
"""rdzv-agent --preflight net in a real job, as users meet it (needs root and iproute2's ip and
tc, as CI runs; skipped otherwise). Four nodes are network namespaces: their data network on
one bridge (netns_bridge), where the workers' address (--local-addr) and the link check are, and
a management network on another, where rdzvd listens. The job is --nnodes 3, so one node is a
spare.
  - one node's data link shaped to 8 Mbit/s both ways (tc tbf): it is put aside before any of
    its workers starts, its agent exits 69 with the figures, the job runs on the other three;
  - the same with all its data packets dropped (netem loss 100%; blackhole without netem);
  - unshaped, three jobs put nobody aside;
  - the check's cost: the start of a job with and without --preflight net.
/metrics counts the node put aside: rdzvd_nodes_put_aside_total{reason="network"}; rdzvctl status,
status.json and the job's page show each node's figure while the job runs."""
import json
import os
import subprocess
import sys
import tempfile
import time
import unittest

from agenttest import AGENT, RDZVCTL
from rdzvtest import RDZVD, main, netns_nodes, netns_shape, track

NET = "10.241.19."
MGMT = "10.242.19."
NHOSTS = 4
TBF = ["tbf", "rate", "8mbit", "burst", "32kbit", "latency", "400ms"]


def ip(*args):
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


class PreflightJob(unittest.TestCase):

    def setUp(self):
        self.sw, self.hosts = netns_nodes(self, "pj%d" % (os.getpid() % 100000), NHOSTS, NET)
        # The management network: br1 in the switch's namespace, rdzvd on it at MGMT.254.
        ip("-n", self.sw, "link", "add", "br1", "type", "bridge")
        ip("-n", self.sw, "addr", "add", MGMT + "254/24", "dev", "br1")
        ip("-n", self.sw, "link", "set", "br1", "up")
        ip("-n", self.sw, "link", "set", "lo", "up")
        for i, h in enumerate(self.hosts):
            ip("link", "add", "m%dh" % i, "netns", h, "type", "veth", "peer", "name", "m%ds" % i,
               "netns", self.sw)
            ip("-n", h, "addr", "add", "%s%d/24" % (MGMT, i + 1), "dev", "m%dh" % i)
            ip("-n", h, "link", "set", "m%dh" % i, "up")
            ip("-n", self.sw, "link", "set", "m%ds" % i, "master", "br1")
            ip("-n", self.sw, "link", "set", "m%ds" % i, "up")
        self.dir = tempfile.TemporaryDirectory(prefix="rdzvtest-pf-")
        self.addCleanup(self.dir.cleanup)
        self.rdzvd = self.start_rdzvd()

    def start_rdzvd(self):
        port_file = os.path.join(self.dir.name, "port")
        log = open(os.path.join(self.dir.name, "rdzvd.log"), "wb")
        self.addCleanup(log.close)
        self.mport_file = os.path.join(self.dir.name, "mport")
        p = track(subprocess.Popen(
            ["ip", "netns", "exec", self.sw, RDZVD, "--port", "0", "--port-file", port_file,
             "--bind", MGMT + "254", "-l", "info", "--metrics-port", "0",
             "--metrics-port-file", self.mport_file], stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=log))
        self.addCleanup(lambda: (p.kill(), p.wait()))
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with open(port_file, "a+") as f:
                f.seek(0)
                txt = f.read()
            if txt.endswith("\n"):
                self.port = int(txt)
                return p
            time.sleep(0.05)
        self.fail("rdzvd did not start")

    def metrics(self, path="/metrics"):
        """rdzvd's /metrics (or another page), fetched from its own namespace."""
        with open(self.mport_file) as f:
            url = "http://%s254:%d%s" % (MGMT, int(f.read()), path)
        return subprocess.run(
            ["ip", "netns", "exec", self.sw, sys.executable, "-c",
             "import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=10)"
             ".read().decode())", url], capture_output=True, text=True, timeout=20,
            check=True).stdout

    def shape(self, i, qdisc, instead=None):
        """Node i's data link, both ways."""
        netns_shape(self.sw, self.hosts, i, qdisc, instead)

    def job(self, run_id, preflight=True, sleep=0, during=None, spare_delay=0):
        """Four agents of job run_id (--nnodes 3); each worker leaves a file ran-<its node>.
        Each worker sleeps sleep s first, while during() runs. The last agent starts spare_delay
        s after the others (the first check is then a trio). Returns each agent's exit status
        and output, and when each node's worker ran (s from the start)."""
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("SLURM_", "PBS_", "OMPI_", "RDZV_", "PET_"))}
        ps = []
        t0, wall0 = time.monotonic(), time.time()
        mark = os.path.join(self.dir.name, run_id + "-ran-$PF_NODE")  # one command for all
        for i, h in enumerate(self.hosts):
            if i == NHOSTS - 1:
                time.sleep(spare_delay)
            cmd = ["ip", "netns", "exec", h, AGENT, "--endpoint",
                   "%s254:%d" % (MGMT, self.port), "--rdzv-id", run_id, "--nnodes", "3",
                   "--nproc", "1", "--nccl", "off", "--local-addr", "%s%d" % (NET, i + 1),
                   "--host", "n%d" % i]
            if preflight:
                cmd += ["--preflight", "net"]  # the default fraction, a quarter
            cmd += ["--", "/bin/sh", "-c", "sleep $PF_SLEEP; date +%s.%N > " + mark]
            ps.append(track(subprocess.Popen(cmd, env=dict(env, PF_NODE=str(i),
                                                           PF_SLEEP=str(sleep)),
                                             stdout=subprocess.PIPE,
                                             stderr=subprocess.STDOUT, text=True)))
        if during:
            during()
        outs = []
        for p in ps:
            try:
                outs.append(p.communicate(timeout=max(1, t0 + 90 - time.monotonic()))[0])
            except subprocess.TimeoutExpired:
                p.kill()
                outs.append(p.communicate()[0] + "\n(killed: still running after 90 s)")
        ran = {}
        for i in range(NHOSTS):
            mark = os.path.join(self.dir.name, "%s-ran-%d" % (run_id, i))
            if os.path.exists(mark):
                with open(mark) as f:
                    ran[i] = float(f.read()) - wall0 - sleep  # when its worker ran
        return [p.returncode for p in ps], outs, ran

    def assert_put_aside(self, run_id, bad, figures):
        codes, outs, ran = self.job(run_id)
        for i in range(NHOSTS):
            print("node %d exit %d:\n%s" % (i, codes[i], outs[i][-600:]), flush=True)
        self.assertEqual(codes[bad], 69, outs[bad])
        self.assertRegex(outs[bad], figures)
        self.assertNotIn(bad, ran, "a worker of the node put aside started")
        self.assertEqual(sorted(ran), sorted(set(range(NHOSTS)) - {bad}))
        for i in set(range(NHOSTS)) - {bad}:
            self.assertEqual(codes[i], 0, outs[i])
        self.assertIn('rdzvd_nodes_put_aside_total{reason="network"} 1\n', self.metrics())

    def test_1_a_shaped_node_is_put_aside(self):
        self.shape(2, TBF)
        self.assert_put_aside("shaped", 2, r"failed the network pre-flight: link to n\d: "
                              r"[0-9.]+ MB/s, job median \d+ MB/s")

    def test_2_all_packets_dropped(self):
        self.shape(1, ["netem", "loss", "100%"], instead=["blackhole"])
        self.assert_put_aside("dropped", 1, r"failed the network pre-flight: link to n\d: "
                              r"unreachable, job median \d+ MB/s")

    def test_3_unshaped_puts_nobody_aside(self):
        for k in range(3):
            codes, outs, ran = self.job("plain%d" % k)
            self.assertNotIn(69, codes, outs)
            self.assertEqual(len(ran), 3, outs)  # three placed, one spare

    def test_5_the_figures_are_shown(self):
        """While the job runs: each node's fastest link in rdzvctl status (NETWORK), in
        status.json (preflight_mbps) and on the job's page."""
        seen = {}

        def look():
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and "ctl" not in seen:
                ctl = subprocess.run(
                    ["ip", "netns", "exec", self.sw, RDZVCTL, "-e", "%s254:%d" % (MGMT, self.port),
                     "status"], capture_output=True, text=True, timeout=20).stdout
                if " NETWORK" in ctl and "MB/s" in ctl:
                    seen["ctl"] = ctl
                    seen["json"] = json.loads(self.metrics("/status.json"))
                    seen["page"] = self.metrics("/job/shown")
                time.sleep(0.2)

        codes, outs, _ = self.job("shown", sleep=3, during=look)
        self.assertEqual(codes.count(0), NHOSTS, outs)
        self.assertIn("ctl", seen, "rdzvctl status never showed the NETWORK column")
        print(seen["ctl"], flush=True)
        job = [j for j in seen["json"]["jobs"] if j["run_id"] == "shown"][0]
        figures = [n.get("preflight_mbps") for n in job["nodes"]]
        self.assertEqual(len(figures), NHOSTS)
        self.assertTrue(all(f is not None and f > 20 for f in figures), figures)
        self.assertIn("<th>network</th>", seen["page"])
        self.assertRegex(seen["page"], r"<td>\d+ MB/s</td>")

    def test_4_the_checks_cost(self):
        """The check adds at most 3 s to a job's start (the first worker's)."""
        for run_id, preflight in (("nocheck", False), ("check", True)):
            codes, outs, ran = self.job(run_id, preflight=preflight)
            if len(ran) != 3:
                with open(os.path.join(self.dir.name, "rdzvd.log")) as f:
                    print("rdzvd:\n" + f.read()[-6000:], flush=True)
            self.assertEqual(len(ran), 3, "%s: %s %s" % (run_id, codes, outs))
            if preflight:
                with_ = ran
            else:
                without = ran
        cost = min(with_.values()) - min(without.values())
        print("first worker after %.2f s without the check, %.2f s with it: +%.2f s" % (
            min(without.values()), min(with_.values()), cost), flush=True)
        self.assertLess(cost, 3.0)


if __name__ == "__main__":
    main()
