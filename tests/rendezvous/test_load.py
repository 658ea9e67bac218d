# SPDX-License-Identifier: Apache-2.0
"""rdzvd under load: 15,000 idle (handshaken) TCPStore connections next to an active job. The
job's store round trips must stay within 6x of the same daemon's without them (a bound against
work per idle connection per turn; the figure itself is the README's benchmark), the idle
connections must cost at most 4 KiB each, and the job must still finish. Prints the figures
(README, "Under load")."""
import json
import os
import resource
import socket
import statistics
import subprocess
import time

from agenttest import AgentTestCase, agent_cmd, finish, main, start, rdzvtest

RDZVCTL = os.environ.get("RDZVCTL", os.path.join(os.path.dirname(os.path.dirname(
    os.environ.get("RDZVD", "build/daemon/rdzvd"))), "ctl", "rdzvctl"))
IDLE = int(os.environ.get("RDZV_LOAD_IDLE", "15000"))
ROUND_TRIPS = 3000


def round_trips(port, n=ROUND_TRIPS):
    """Median and p99 of n GET round trips (seconds) on one connection to port."""
    c = rdzvtest.Client(port)
    try:
        c.set(b"/load-key", b"x" * 64)
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            assert c.get(b"/load-key") == b"x" * 64
            times.append(time.perf_counter() - t0)
    finally:
        c.close()
    times.sort()
    return statistics.median(times), times[int(len(times) * 0.99)]


class LoadTest(AgentTestCase):
    def test_15000_idle_connections_beside_an_active_job(self):
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard < IDLE + 500:
            self.skipTest(f"open-file limit {hard} is below {IDLE + 500}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        d = self.daemon(log_level="warn")
        ep = f"127.0.0.1:{d.port}"
        worker = ["/bin/sh", "-c", "sleep 40"]
        agents = [start(agent_cmd(ep, "--rdzv-id", "load", "--nnodes", "2", "--nproc", "1",
                                  "--nccl", "off", "--last-call", "0.2", "--grace", "1",
                                  worker=worker)) for _ in range(2)]
        for a in agents:
            self.addCleanup(a.kill)
        store_port = None
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not store_port:
            st = json.loads(subprocess.run([RDZVCTL, "-e", ep, "status", "--json"],
                                           capture_output=True, text=True, timeout=10).stdout)
            store_port = next((j["store_port"] for j in st["jobs"] if j["state"] == "running"),
                              None)
            time.sleep(0.1)
        self.assertTrue(store_port, "the job never started")

        round_trips(store_port, 500)  # warm up
        idle_med, idle_p99 = round_trips(store_port)
        rss0 = d.rss_kb()

        conns = []
        self.addCleanup(lambda: [s.close() for s in conns])
        t0 = time.monotonic()
        for i in range(IDLE):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setblocking(True)
            s.connect(("127.0.0.1", d.port))
            s.sendall(rdzvtest.VALIDATE_BYTES)
            conns.append(s)
        # Every connection is in and handshaken: a PING through the last one answers.
        with rdzvtest.Client(d.port) as c:
            c.ping()
        t_open = time.monotonic() - t0
        st = json.loads(subprocess.run([RDZVCTL, "-e", ep, "status", "--json"],
                                       capture_output=True, text=True, timeout=10).stdout)
        self.assertGreaterEqual(st["stats"]["connections"], IDLE + 2)
        rss1 = d.rss_kb()
        per_conn = (rss1 - rss0) * 1024 / IDLE

        load_med, load_p99 = round_trips(store_port)
        ratio = load_med / idle_med
        print(f"\n{IDLE} idle connections opened in {t_open:.2f} s; rdzvd RSS {rss0} -> {rss1} KiB "
              f"({per_conn:.0f} B per idle connection)\n"
              f"job store GET round trip: idle daemon median {idle_med * 1e6:.1f} us "
              f"(p99 {idle_p99 * 1e6:.1f}), with {IDLE} idle connections median "
              f"{load_med * 1e6:.1f} us (p99 {load_p99 * 1e6:.1f}): {ratio:.2f}x", flush=True)
        self.assertLessEqual(per_conn, 4096, "memory per idle connection")
        # 1.01x when the README's figure was measured; 2.8-3.4x on a later machine for the code
        # before and after accept pacing alike (median 55-68 us against 19-20 us): a bound that
        # catches work per idle connection per turn, not a benchmark of the kernel's loopback.
        self.assertLess(ratio, 6.0, "round trips with 15k idle connections vs an idle daemon")

        # The job itself is unaffected: its agents are still members and heartbeating.
        st = json.loads(subprocess.run([RDZVCTL, "-e", ep, "status", "--json"],
                                       capture_output=True, text=True, timeout=10).stdout)
        job = next(j for j in st["jobs"] if j["run_id"] == "load")
        self.assertEqual(job["state"], "running")
        self.assertTrue(all(n["last_heartbeat_age_s"] < 3 for n in job["nodes"]), job["nodes"])
        for s in conns:
            s.close()
        conns.clear()
        for a in agents:
            a.terminate()
        for a in agents:
            finish(a, timeout=30)


if __name__ == "__main__":
    main()
