#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# replica_bench.py BUILD_DIR [--failovers N] [--seconds S] [--conns C]: rdzvd --peers
# measured, in one run on this machine:
#   failover: three replicas on 127.0.0.1; N times: write a batch of keys through the leader
#             (each acknowledged: a reply that follows it), SIGKILL the leader, take the time
#             until another replica serves a TCPStore client (a PING answered; clients probe
#             every 5 ms), check that every key acknowledged since the start is there, restart
#             the killed replica on its directory. Prints the new-leader times and the number
#             of acknowledged writes lost (must be 0).
#   agents:   M times: two rdzv-agents (--endpoint the three replicas, one worker each) run
#             generation 1 of a job; SIGKILL the leader; take the time until both agents are
#             registered on the next leader with generation 1 going on ("reconnected to rdzvd"),
#             and check that no worker was started again.
#   replies/s: rdzv-bench throughput (GET only, then ADD only: writes) against a single rdzvd
#             and against the leader of three replicas, side by side.
# Prints a markdown table on stdout, progress on stderr. Not a timed test: run by hand.
import argparse
import os
import platform
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "pylib"))

from rdzvtest import HOST, RDZVD, die_with_parent, track  # noqa: E402
from replicatest import Cluster  # noqa: E402


def note(msg):
    print(msg, file=sys.stderr, flush=True)


def failovers(n, batch):
    cl = Cluster()
    times, acked, lost, probes = [], 0, 0, 0
    try:
        lead, c = cl.leader()
        for k in range(n):
            for i in range(batch):
                c.set(b"f%d-%d" % (k, i), b"v%d" % i)
            c.ping()  # replies are in order: every SET above is acknowledged
            acked += batch
            c.close()
            lead.kill()
            t0 = time.monotonic()
            new = None
            while new is None:
                for r in cl.r:
                    if r is not lead:
                        probes += 1
                        cc = cl.serving(r)
                        if cc:
                            new = (r, cc)
                            break
                if new is None:
                    if time.monotonic() - t0 > 30:
                        raise RuntimeError("no new leader within 30 s")
                    time.sleep(0.005)
            times.append(time.monotonic() - t0)
            lead2, c = new
            for kk in range(k + 1):
                for i in range(batch):
                    if c.get(b"f%d-%d" % (kk, i)) != b"v%d" % i:
                        lost += 1
            lead.start()
            time.sleep(0.5)  # it catches up before the next kill can need its vote
            lead = lead2
            if (k + 1) % 10 == 0:
                note("  %d failovers, median %.0f ms" % (k + 1,
                                                        1000 * statistics.median(times)))
        c.close()
    finally:
        cl.close()
    return times, acked, lost


def agent_failovers(build, n, hb_timeout):
    agent = os.path.join(build, "agent", "rdzv-agent")
    times, restarted = [], 0
    cl = Cluster()
    try:
        for k in range(n):
            lead, c = cl.leader()
            c.close()
            logs = ["/tmp/rdzv-replica-bench-agent%d.log" % i for i in range(2)]
            agents = []
            for path in logs:
                with open(path, "wb") as f:
                    agents.append(track(subprocess.Popen(
                        [agent, "--endpoint", cl.peers, "--rdzv-id", "af%d" % k, "--nnodes", "2",
                         "--nproc", "1", "--nccl", "off", "--heartbeat-timeout", str(hb_timeout),
                         "--log-level", "info", "--", "/bin/sleep", "600"],
                        stdin=subprocess.DEVNULL, stdout=f, stderr=f, start_new_session=True,
                        preexec_fn=die_with_parent()), group=True))

            def text(path):
                with open(path, errors="replace") as f:
                    return f.read()
            deadline = time.monotonic() + 30
            while not all("started worker rank" in text(p) for p in logs):
                if time.monotonic() > deadline:
                    raise RuntimeError("the job did not start: %s" % [text(p) for p in logs])
                time.sleep(0.01)
            # The job's leader: the replica that formed it (a leader change before the kill
            # would make another one the job's).
            lead = next(r for r in cl.r if r.alive() and
                        "job=af%d gen=1 generation 1 formed" % k in r.text())
            lead.kill()
            t0 = time.monotonic()
            while not all("reconnected to rdzvd: generation 1 goes on" in text(p) for p in logs):
                if time.monotonic() - t0 > 30:
                    raise RuntimeError("the agents did not come back: %s" % [text(p) for p in logs])
                time.sleep(0.005)
            times.append(time.monotonic() - t0)
            restarted += sum(text(p).count("started worker rank") - 1 for p in logs)
            for a in agents:
                os.killpg(a.pid, 9)
                a.wait()
            lead.start()
            time.sleep(0.5)
            note("  agents: %d failovers, median %.0f ms" % (k + 1,
                                                             1000 * statistics.median(times)))
    finally:
        cl.close()
    return times, restarted


def bench_rate(build, port, op, secs, conns, pid):
    out = subprocess.run([os.path.join(build, "tests", "bench", "rdzv-bench"), "--port",
                          str(port), "--pid", str(pid), "-c", str(conns), "-d", str(secs),
                          "-w", "0.5", "--op", op, "throughput"],
                         capture_output=True, text=True, timeout=120)
    kv = dict(w.split("=", 1) for w in out.stdout.split() if "=" in w)
    if out.returncode != 0 or "replies_per_s" not in kv:
        raise RuntimeError("rdzv-bench failed: %s %s" % (out.stdout, out.stderr))
    return float(kv["replies_per_s"])


def rates(build, secs, conns):
    res = {}
    # A single rdzvd, as users run it today (no --state-dir).
    single = track(subprocess.Popen([RDZVD, "--port", "0", "--bind", HOST, "-l", "warn",
                                     "--port-file", "/tmp/rdzv-replica-bench.port"],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                    preexec_fn=die_with_parent()))
    try:
        for _ in range(100):
            if os.path.exists("/tmp/rdzv-replica-bench.port"):
                with open("/tmp/rdzv-replica-bench.port") as f:
                    txt = f.read()
                if txt.endswith("\n"):
                    break
            time.sleep(0.05)
        port = int(txt)
        for op in ("get", "add"):
            res[("single", op)] = bench_rate(build, port, op, secs, conns, single.pid)
    finally:
        single.kill()
        single.wait()
        os.unlink("/tmp/rdzv-replica-bench.port")
    cl = Cluster()
    try:
        lead, c = cl.leader()
        c.close()
        for op in ("get", "add"):
            res[("replicas", op)] = bench_rate(build, lead.port, op, secs, conns, lead.proc.pid)
    finally:
        cl.close()
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--failovers", type=int, default=100)
    ap.add_argument("--batch", type=int, default=20, help="keys written before each kill")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--conns", type=int, default=50)
    ap.add_argument("--agent-failovers", type=int, default=10)
    ap.add_argument("--heartbeat-timeout", type=float, default=5.0,
                    help="the agents' --heartbeat-timeout")
    a = ap.parse_args()
    t0 = time.monotonic()
    note("failover: %d leader SIGKILLs" % a.failovers)
    times, acked, lost = failovers(a.failovers, a.batch)
    note("failover seen by agents: %d leader SIGKILLs under a running job" % a.agent_failovers)
    atimes, restarted = agent_failovers(a.build, a.agent_failovers, a.heartbeat_timeout)
    note("replies/s: single rdzvd and 3 replicas, GET and ADD, %d connections" % a.conns)
    r = rates(a.build, a.seconds, a.conns)
    ms = sorted(1000 * t for t in times)
    print("| rdzvd --peers, 3 replicas on 127.0.0.1 | figure |")
    print("|---|---|")
    print("| leader SIGKILL -> another replica serves a TCPStore client, median (p90, max) over "
          "%d failovers | %.0f ms (%.0f ms, %.0f ms) |" % (
              len(ms), statistics.median(ms), ms[int(0.9 * (len(ms) - 1))], ms[-1]))
    print("| acknowledged writes lost over those failovers | %d of %d |" % (lost, acked))
    am = sorted(1000 * t for t in atimes)
    print("| leader SIGKILL -> both agents of a running job registered on the next leader, "
          "generation 1 going on, median (p90, max) over %d failovers | %.0f ms (%.0f ms, "
          "%.0f ms) |" % (len(am), statistics.median(am), am[int(0.9 * (len(am) - 1))], am[-1]))
    print("| workers started again over those failovers | %d |" % restarted)
    for op, what in (("get", "GET"), ("add", "ADD (a write)")):
        s, p = r[("single", op)], r[("replicas", op)]
        print("| %s replies/s, %d connections: 3 replicas / single rdzvd | %.2fx (%.0f / %.0f) |"
              % (what, a.conns, p / s, p, s))
    load = os.getloadavg()
    print("\n(`replica_bench.py: %d CPUs, %s, %.0f s, load %.2f %.2f %.2f`)" % (
        os.cpu_count(), platform.release(), time.monotonic() - t0, *load))
    return 0 if lost == 0 and restarted == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
