# SPDX-License-Identifier: Apache-2.0
"""rdzvd under load: 15,000 idle (handshaken) TCPStore connections next to an active job. The
daemon's own CPU time per store round trip (its on-CPU nanoseconds, /proc/PID/schedstat) must stay
within 4x of the same daemon's without them: work per idle connection per request or per loop turn
would show there. Wall-clock round trips are printed, not asserted: on these 2-vCPU machines a round
trip between two processes on different CPUs takes 60-90 us and on one CPU about 9 us (a cross-CPU
wake-up in the VM), so their ratio follows where the scheduler puts the client, not rdzvd (it
measured 6.4x in both builds on a clean clone with no change to rdzvd); the daemon and the client
are pinned to one CPU for both measurements, so the ratio printed compares like with like. The idle
connections must cost at most 4 KiB each, and the job must still run and finish. Prints the figures
(docs/BENCHMARKS.md, "Under load")."""
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


def on_cpu_ns(pid):
    """Nanoseconds pid has spent on a CPU (the first field of /proc/PID/schedstat)."""
    with open(f"/proc/{pid}/schedstat") as f:
        return int(f.read().split()[0])


def round_trips(port, pid, n=ROUND_TRIPS):
    """Median and p99 of n GET round trips (seconds) on one connection to port, and the on-CPU
    nanoseconds of process pid (the daemon) per round trip. The daemon and this process are
    pinned to one CPU meanwhile: how long a wake-up takes depends on whether it crosses CPUs
    (about 9 us one CPU, 60-90 us two here, in wall clock and in the woken one's CPU time)."""
    mine, its = os.sched_getaffinity(0), os.sched_getaffinity(pid)
    cpu_ = {min(mine & its or mine)}
    os.sched_setaffinity(0, cpu_)
    os.sched_setaffinity(pid, cpu_)
    c = rdzvtest.Client(port)
    try:
        c.set(b"/load-key", b"x" * 64)
        times = []
        cpu0 = on_cpu_ns(pid)
        for _ in range(n):
            t0 = time.perf_counter()
            assert c.get(b"/load-key") == b"x" * 64
            times.append(time.perf_counter() - t0)
        cpu = (on_cpu_ns(pid) - cpu0) / n
    finally:
        c.close()
        os.sched_setaffinity(pid, its)
        os.sched_setaffinity(0, mine)
    times.sort()
    return statistics.median(times), times[int(len(times) * 0.99)], cpu


IP_BIND_ADDRESS_NO_PORT = 24  # linux/in.h

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

        pid = d.proc.pid
        round_trips(store_port, pid, 500)  # warm up
        idle_med, idle_p99, idle_cpu = round_trips(store_port, pid)
        rss0 = d.rss_kb()

        conns = []
        self.addCleanup(lambda: [s.close() for s in conns])
        t0 = time.monotonic()
        for i in range(IDLE):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setblocking(True)
            # From 8 loopback addresses, each port picked at connect(): 15,000 connections
            # from one address can run out of local ports when earlier tests left many in
            # TIME_WAIT (EADDRNOTAVAIL).
            s.setsockopt(socket.IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, 1)
            s.bind(("127.0.0.%d" % (2 + i % 8), 0))
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

        load_med, load_p99, load_cpu = round_trips(store_port, pid)
        ratio = load_med / idle_med
        cpu_ratio = load_cpu / idle_cpu
        print(f"\n{IDLE} idle connections opened in {t_open:.2f} s; rdzvd RSS {rss0} -> {rss1} KiB "
              f"({per_conn:.0f} B per idle connection)\n"
              f"job store GET round trip: idle daemon median {idle_med * 1e6:.1f} us "
              f"(p99 {idle_p99 * 1e6:.1f}), with {IDLE} idle connections median "
              f"{load_med * 1e6:.1f} us (p99 {load_p99 * 1e6:.1f}): {ratio:.2f}x (wall clock, "
              f"not asserted)\nrdzvd on-CPU time per round trip: {idle_cpu / 1e3:.1f} us idle, "
              f"{load_cpu / 1e3:.1f} us with {IDLE} idle connections: {cpu_ratio:.2f}x",
              flush=True)
        self.assertLessEqual(per_conn, 4096, "memory per idle connection")
        # 0.8-1.0x in both builds here. Work per idle connection per request or per turn (15,000
        # of anything) would cost tens of microseconds or more on top of ~25 us.
        self.assertLess(cpu_ratio, 4.0, "rdzvd CPU per round trip, 15k idle connections vs none")

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
