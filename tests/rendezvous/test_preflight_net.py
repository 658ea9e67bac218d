# SPDX-License-Identifier: Apache-2.0
"""The network pre-flight between nodes that are network namespaces on one bridge (needs root
and iproute2's ip and tc, as CI runs; skipped otherwise). Each node runs the link check's
listener (agent/preflight/, through preflight-net); the nodes are paired as rdzvd will pair them
(proto/rdzv-preflight.h: round 1, round 2, the verdict), and each pair's probe measures its link
each way, the pairs of a slot at the same time.
  - unshaped, three runs flag nobody;
  - one node's link shaped to 8 Mbit/s both ways (tc tbf) is told from the others: it alone is
    bad, its figures a few MB/s against the job's hundreds;
  - twenty strangers on a listener (silent, garbage, a wrong token) do not keep a probe out,
    and are closed within the hello's bound;
  - one node whose packets are all dropped (netem loss 100%; the blackhole qdisc where the
    kernel has no netem) is unreachable, and alone bad.
These are the check's parts alone; rendezvous-preflight-job runs it in real jobs
(docs/design/preflight.md)."""
import json
import os
import subprocess
import sys
import time
import unittest

from rdzvtest import die_with_parent, main, netns_nodes, netns_shape, track

NET = "10.241.9."
NHOSTS = 4
TOKEN = "0123456789abcdef0123456789abcdef"
BOUND_MS = "1000"
TOOL = os.environ.get("RDZV_PREFLIGHT_NET", "")
FRACTION = "0.25"  # the default
TBF = ["tbf", "rate", "8mbit", "burst", "32kbit", "latency", "400ms"]


class PreflightNet(unittest.TestCase):

    def setUp(self):
        self.sw, self.hosts = netns_nodes(self, "pf%d" % (os.getpid() % 100000), NHOSTS, NET)
        self.servers = []
        self.addCleanup(self.stop_servers)
        self.ports = [self.serve(i) for i in range(NHOSTS)]

    def stop_servers(self):
        for p in self.servers:
            p.kill()
            p.wait()

    def serve(self, i):
        p = track(subprocess.Popen(
            ["ip", "netns", "exec", self.hosts[i], TOOL, "serve", "%s%d:0" % (NET, i + 1), TOKEN],
            stdout=subprocess.PIPE, text=True, preexec_fn=die_with_parent()))
        self.servers.append(p)
        line = p.stdout.readline().split()
        self.assertEqual(line[:1], ["port"], "node %d's listener did not start" % i)
        return int(line[1])

    def shape(self, i, qdisc, instead=None):
        netns_shape(self.sw, self.hosts, i, qdisc, instead)

    @staticmethod
    def tool(*args, job=None):
        out = subprocess.run([TOOL, *args], input=json.dumps(job) if job else None,
                             capture_output=True, text=True, timeout=10, check=True).stdout
        return json.loads(out)

    def measure(self, links):
        """Each link's figures, slot by slot, the links of a slot at the same time."""
        for slot in sorted({l["slot"] for l in links}):
            running = []
            for l in (l for l in links if l["slot"] == slot):
                peer = "%s%d:%d" % (NET, l["b"] + 1, self.ports[l["b"]])
                full = ["full"] if l.get("confirm") else []
                running.append((l, subprocess.Popen(
                    ["ip", "netns", "exec", self.hosts[l["a"]], TOOL, "probe", peer, TOKEN,
                     BOUND_MS, *full], stdout=subprocess.PIPE, text=True)))
            for l, p in running:
                out, _ = p.communicate(timeout=30)
                fig = json.loads(out)
                l["ab"], l["ba"] = fig["up"], fig["down"]
        return links

    def check(self):
        """Both rounds, the confirmation and the verdict, as rdzvd runs them."""
        t0 = time.monotonic()
        links = self.measure(self.tool("round1", str(NHOSTS))["links"])
        job = {"n": NHOSTS, "links": links}
        job["links"] += self.measure(self.tool("round2", FRACTION, job=job)["links"])
        job["links"] += self.measure(self.tool("confirm", FRACTION, job=job)["links"])
        verdict = self.tool("verdict", FRACTION, job=job)
        print("links %s\nverdict %s, in %.2f s" % (
            ", ".join("%d-%d: %.1f/%.1f MB/s" % (l["a"], l["b"], l["ab"], l["ba"])
                      for l in job["links"]), verdict, time.monotonic() - t0), flush=True)
        return verdict

    def test_1_unshaped_flags_nobody(self):
        for _ in range(3):
            v = self.check()
            self.assertEqual(v["bad"], [])
            self.assertGreater(v["median"], 20)

    def test_2_a_shaped_link_is_told(self):
        self.shape(2, TBF)
        v = self.check()
        self.assertEqual(v["bad"], [2])
        self.assertLess(v["best"][2], 3)  # 8 Mbit/s: 1 MB/s
        self.assertGreater(v["median"], 20)

    def test_3_all_packets_dropped(self):
        self.shape(1, ["netem", "loss", "100%"], instead=["blackhole"])
        v = self.check()
        self.assertEqual(v["bad"], [1])
        self.assertEqual(v["best"][1], 0)

    def test_4_strangers_on_the_listener(self):
        """Twenty strangers on node 0's listener (silent, garbage, a wrong token): a probe with
        the token still measures the link, and each stranger's connection is closed within the
        hello's bound (2 s)."""
        stranger = subprocess.Popen(
            ["ip", "netns", "exec", self.hosts[1], sys.executable, "-c", STRANGERS,
             "%s1" % NET, str(self.ports[0])], stdout=subprocess.PIPE, text=True)
        self.assertEqual(stranger.stdout.readline().strip(), "connected")
        peer = "%s1:%d" % (NET, self.ports[0])
        fig = json.loads(subprocess.run(
            ["ip", "netns", "exec", self.hosts[2], TOOL, "probe", peer, TOKEN, BOUND_MS],
            capture_output=True, text=True, timeout=30, check=True).stdout)
        self.assertGreater(min(fig["up"], fig["down"]), 20, fig)
        out, _ = stranger.communicate(timeout=30)
        closed = json.loads(out)
        self.assertEqual(len(closed), 20)
        self.assertLess(max(closed), 4.0, "a stranger's connection outlived the hello's bound")


# Twenty connections: ten silent ones, garbage, the right magic with a wrong token; prints
# "connected", then the seconds each took to be closed by the listener, as JSON.
STRANGERS = r"""
import json, socket, sys, time
addr = (sys.argv[1], int(sys.argv[2]))
socks = []
for i in range(20):
    s = socket.create_connection(addr, timeout=10)
    s.sendall([b"", b"", b"GET / HTTP/1.0\r\n\r\n" * 3, b"RDZVPF1\n" + b"x" * 16 + b"D"][i % 4])
    socks.append(s)
t0 = time.monotonic()
print("connected", flush=True)
closed = []
for s in socks:
    try:
        while s.recv(65536):
            pass
    except OSError:
        pass
    closed.append(time.monotonic() - t0)
print(json.dumps(closed))
"""

if __name__ == "__main__":
    main()
