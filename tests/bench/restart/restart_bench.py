#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# restart_bench.py BUILD_DIR [options]: how fast rdzv recovers from faults, beside torchrun 1.13
# measured the same way in the same run. Run through run-restart-bench.sh; prints a markdown table
# on stdout, progress on stderr.
#
# Every worker is fault-worker (tests/faults): a tiny C program that appends "start <us>" to a
# shared file when it starts (CLOCK_REALTIME, microseconds) and "crash <us>" just before a planned
# exit 1. Figures are taken from those lines, from the times the bench sent a signal, and from
# rdzvd's log timestamps (milliseconds).
import argparse
import datetime
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

EV_RE = re.compile(r"^(start|crash) (\d+) gen=(-?\d+) rank=(-?\d+) restart=(-?\d+) world=(-?\d+) "
                   r"pid=(\d+) node=(-?\d+) agent=(\d+)$")
LOG_TS = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+)Z ")


def note(msg):
    print(msg, file=sys.stderr, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def log_time(line):
    m = LOG_TS.match(line)
    return datetime.datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S.%f").replace(
        tzinfo=datetime.timezone.utc).timestamp()


def pct(xs, p):
    xs = sorted(xs)
    k = (len(xs) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


class Run:
    """One job's processes and its workers' record; kill() leaves nothing behind."""

    def __init__(self, bench, name):
        self.b = bench
        self.dir = tempfile.mkdtemp(prefix=f"rdzv-restart-{name}-")
        self.procs = []
        self.daemon = None

    def env(self, extra=None):
        e = {k: v for k, v in os.environ.items()
             if not k.startswith(("SLURM_", "PBS_", "OMPI_", "RDZV_", "RDZVD_"))}
        e["FAULT_DIR"] = self.dir
        e.update(extra or {})
        return e

    def start_daemon(self, port=0, level="info"):
        pf = os.path.join(self.dir, "port")
        if os.path.exists(pf):
            os.unlink(pf)
        self.daemon_log = os.path.join(self.dir, f"rdzvd.{len(self.procs)}.log")
        self.daemon = subprocess.Popen(
            [self.b.rdzvd, "--port", str(port), "--port-file", pf, "--bind", "127.0.0.1", "-l",
             level], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=open(self.daemon_log, "wb"), start_new_session=True)
        self.procs.append(self.daemon)
        deadline = time.monotonic() + 10
        while not (os.path.exists(pf) and open(pf).read().endswith("\n")):
            if time.monotonic() > deadline or self.daemon.poll() is not None:
                raise RuntimeError("rdzvd did not start: " + open(self.daemon_log).read())
            time.sleep(0.005)
        self.port = int(open(pf).read())
        return self.daemon

    def spawn(self, cmd, extra_env=None):
        p = subprocess.Popen(cmd, env=self.env(extra_env), stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL,
                             stderr=open(os.path.join(self.dir, f"agent.{len(self.procs)}.log"),
                                         "wb"),
                             start_new_session=True)
        self.procs.append(p)
        return p

    def rdzv_agent(self, run_id, *args, env=None):
        return self.spawn([self.b.agent, "--endpoint", f"127.0.0.1:{self.port}", "--rdzv-id",
                           run_id, "--nproc", "2", "--grace", "2", "--last-call", "0.5",
                           # The same rank crashes at start-up each generation: with the default
                           # bad-node verdict its node was put aside at the second crash, and
                           # the job waited for a node (no spare) instead of restarting; and the
                           # default restart backoff (1 s doubling to 30 s) is what torchrun
                           # does not have: the bench times the restart itself.
                           "--bad-node-failures", "0", "--restart-backoff", "0",
                           "--log-level", "warn", *args, "--", self.b.worker], env)

    def torchrun(self, run_id, port, nnodes, max_restarts, env=None, extra=()):
        # --redirects/--tee 1: Debian's torch 1.13 on Python 3.11 turns "0" (the default) and "3"
        # into None (Std is an IntFlag, whose iteration yields only OUT and ERR) and crashes
        # starting the workers; tests/integration/test_torchrun.py passes 1 too.
        n = len(self.procs)
        return self.spawn([self.b.python, "-m", "torch.distributed.run", "--nnodes", nnodes,
                           "--nproc_per_node", "2", "--rdzv_backend", "c10d", "--rdzv_endpoint",
                           f"127.0.0.1:{port}", "--rdzv_id", run_id, "--max_restarts",
                           str(max_restarts), "--redirects", "1", "--tee", "1", "--log_dir",
                           os.path.join(self.dir, f"torchrun-logs.{n}"), *extra, "--no_python",
                           self.b.worker], env)

    def events(self, kind=None, restart=None):
        try:
            lines = open(os.path.join(self.dir, "events")).read().splitlines()
        except FileNotFoundError:
            return []
        out = []
        for ln in lines:
            m = EV_RE.match(ln)
            if not m:
                continue
            ev = {"kind": m.group(1), "t": int(m.group(2)) / 1e6, "gen": int(m.group(3)),
                  "rank": int(m.group(4)), "restart": int(m.group(5)), "pid": int(m.group(7)),
                  "node": int(m.group(8)), "agent": int(m.group(9))}
            if ((kind is None or ev["kind"] == kind) and
                    (restart is None or ev["restart"] == restart)):
                out.append(ev)
        return out

    def wait(self, pred, timeout, procs=()):
        """Poll pred() until it returns something true; None after timeout, or as soon as one
        of procs has exited."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            v = pred()
            if v:
                return v
            if any(p.poll() is not None for p in procs):
                note(f"  an agent exited early (log in {self.dir})")
                return None
            time.sleep(0.01)
        return None

    def wait_starts(self, n, timeout, procs=(), **kw):
        return self.wait(lambda: (lambda e: e if len(e) >= n else None)(self.events("start", **kw)),
                         timeout, procs)

    def daemon_lines(self, pattern):
        rx = re.compile(pattern)
        return [ln for ln in open(self.daemon_log, errors="replace").read().splitlines()
                if rx.search(ln)]

    def release(self):
        open(os.path.join(self.dir, "release"), "w").close()

    def finish(self, procs, timeout=30):
        rcs = []
        for p in procs:
            try:
                rcs.append(p.wait(timeout=timeout))
            except subprocess.TimeoutExpired:
                rcs.append(None)
        return rcs

    def kill(self):
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGCONT)
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for ev in self.events("start"):
            if alive(ev["pid"]):
                try:
                    os.kill(ev["pid"], signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for p in self.procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        if self.b.keep:
            note(f"  kept {self.dir}")
        else:
            shutil.rmtree(self.dir, ignore_errors=True)


class Bench:
    def __init__(self, a):
        self.build = a.build
        self.rdzvd = os.path.join(a.build, "daemon", "rdzvd")
        self.agent = os.path.join(a.build, "agent", "rdzv-agent")
        self.worker = os.path.join(a.build, "tests", "faults", "fault-worker")
        self.python = a.python
        self.keep = a.keep
        self.a = a
        for f in (self.rdzvd, self.agent, self.worker):
            if not os.access(f, os.X_OK):
                sys.exit(f"run-restart-bench.sh: {f} is missing: build first (ninja -C {a.build})")

    # -- worker crash -> every replacement worker started --

    @staticmethod
    def after(r, t, agent=None):
        """Worker starts after time t (of one agent's workers), earliest first."""
        return sorted((e for e in r.events("start") if e["t"] > t and
                       (agent is None or e["agent"] == agent)), key=lambda e: e["t"])

    def crashes_done(self, r, n):
        crashes = sorted(e["t"] for e in r.events("crash"))
        return len(crashes) >= n and len(self.after(r, crashes[n - 1])) >= 4

    def crash_times(self, r, n):
        """Per crash: from its crash line to the last of the next 4 worker starts (the
        generation that replaces it; rank 0 of each new generation crashes again)."""
        out = []
        for t in sorted(e["t"] for e in r.events("crash"))[:n]:
            nxt = self.after(r, t)[:4]
            if sorted(e["rank"] for e in nxt) != [0, 1, 2, 3]:
                raise RuntimeError(f"after the crash at {t:.6f}: starts {nxt} (kept {r.dir})")
            out.append(nxt[-1]["t"] - t)
        return out

    def crash_env(self, n):
        return {"FAULT_CRASH": "0:1:-1", "FAULT_MAX_CRASHES": str(n),
                "FAULT_CRASH_AFTER_MS": str(self.a.crash_after_ms)}

    def crash_rdzv(self, nccl, n):
        note(f"rdzv, --nccl {nccl}: {n} worker crashes")
        r = Run(self, f"crash-{nccl}")
        try:
            r.start_daemon(level="warn")
            ps = [r.rdzv_agent("crash", "--nnodes", "2", "--max-restarts", str(n), "--nccl", nccl,
                               env=self.crash_env(n)) for _ in range(2)]
            if not r.wait(lambda: self.crashes_done(r, n), 30 + 5 * n, ps):
                raise RuntimeError(f"rdzv did not get through {n} crashes (kept {r.dir})")
            r.release()
            rcs = r.finish(ps)
            starts = r.events("start")
            if {(e["gen"], e["restart"]) for e in starts} != {(k + 1, k) for k in range(n + 1)}:
                raise RuntimeError(f"rdzv: generations and restart counts disagree (kept {r.dir})")
            return self.crash_times(r, n), rcs
        except Exception:
            self.keep = True
            raise
        finally:
            r.kill()

    def crash_torchrun(self, n, extra=()):
        note(f"torchrun {' '.join(extra)}: {n} worker crashes")
        r = Run(self, "crash-torchrun")
        try:
            port = free_port()
            a = r.torchrun("crash", port, "2", n + 2, self.crash_env(n), extra)
            time.sleep(1.0)  # the first one hosts the c10d store
            b = r.torchrun("crash", port, "2", n + 2, self.crash_env(n), extra)
            if not r.wait(lambda: self.crashes_done(r, n), 60 + 20 * n, [a, b]):
                raise RuntimeError(f"torchrun did not get through {n} crashes (kept {r.dir})")
            r.release()
            rcs = r.finish([a, b], timeout=60)
            return self.crash_times(r, n), rcs
        except Exception:
            self.keep = True
            raise
        finally:
            r.kill()

    # -- agent SIGKILL / SIGSTOP -> survivors' new generation --

    def node_loss_rdzv(self, sig, trials, hb):
        what = "SIGKILL" if sig == signal.SIGKILL else "SIGSTOP"
        note(f"rdzv: agent {what}, {trials} trials (--nnodes 1:2, --heartbeat-timeout {hb})")
        res = []
        for t in range(trials):
            r = Run(self, f"{what.lower()}-{t}")
            try:
                r.start_daemon(level="debug")
                ps = [r.rdzv_agent("loss", "--nnodes", "1:2", "--node-rank", str(i),
                                   "--max-restarts", "3", "--heartbeat-timeout", str(hb),
                                   "--nccl", "off") for i in (0, 1)]
                if not r.wait_starts(4, 30, procs=ps, restart=0):
                    raise RuntimeError(f"no first generation (kept {r.dir})")
                time.sleep(0.3 + 0.1 * t)  # vary the phase against the heartbeat interval
                victims = [e["pid"] for e in r.events("start", 0) if e["agent"] == ps[1].pid]
                t0 = time.time()
                os.kill(ps[1].pid, sig)
                starts = r.wait(lambda: (lambda e: e if len(e) >= 2 else None)(
                    self.after(r, t0, ps[0].pid)), 30 + 3 * hb, ps[:1])
                if not starts:
                    raise RuntimeError(f"no new generation (kept {r.dir})")
                row = {"new_gen": max(e["t"] for e in starts) - t0}
                if sig == signal.SIGKILL:
                    gone = r.wait(lambda: not any(alive(p) for p in victims), 2.0)
                    row["workers_gone"] = bool(gone)
                else:
                    lost = r.daemon_lines(r"sent no heartbeat for")
                    conn = r.daemon_lines(r"conn \d+ \(.*\): closed: sent no heartbeat")
                    cid = re.search(r"conn (\d+) ", conn[0]).group(1)
                    hbs = [ln for ln in r.daemon_lines(rf"conn {cid} \(.*\): HEARTBEAT")
                           if log_time(ln) <= log_time(lost[0])]
                    row["detect"] = log_time(lost[0]) - t0
                    row["excess"] = log_time(lost[0]) - log_time(hbs[-1]) - hb
                ps[1].send_signal(signal.SIGKILL)
                r.release()
                r.finish(ps[:1])
                res.append(row)
            except Exception:
                self.keep = True
                raise
            finally:
                r.kill()
        return res

    def node_loss_torchrun(self, sig, cap):
        what = "SIGKILL" if sig == signal.SIGKILL else "SIGSTOP"
        note(f"torchrun: agent {what} (--nnodes 1:2), waiting up to {cap:.0f} s for a new "
             "generation")
        r = Run(self, f"torchrun-{what.lower()}")
        try:
            port = free_port()
            a = r.torchrun("loss", port, "1:2", 3)
            time.sleep(1.0)
            b = r.torchrun("loss", port, "1:2", 3)
            if not r.wait_starts(4, 60, procs=[a, b], restart=0):
                raise RuntimeError(f"torchrun: no first generation (kept {r.dir})")
            time.sleep(0.5)
            victims = [e["pid"] for e in r.events("start", 0) if e["agent"] == b.pid]
            t0 = time.time()
            os.kill(b.pid, sig)
            gone = r.wait(lambda: not any(alive(p) for p in victims), 2.0)
            starts = r.wait(lambda: (lambda e: e if len(e) >= 2 else None)(
                self.after(r, t0, a.pid)), cap, [a])
            return {"new_gen": max(e["t"] for e in starts) - t0 if starts else None,
                    "workers_gone": bool(gone), "victims": len(victims),
                    "survivor_rc": a.poll(), "after": time.time() - t0}
        finally:
            r.kill()

    # -- rdzvd SIGKILL + restart --

    def daemon_restart_rdzv(self, trials):
        note(f"rdzv: rdzvd SIGKILL + restart on the same port, {trials} trials")
        res = []
        for t in range(trials):
            r = Run(self, f"dkill-{t}")
            try:
                port = free_port()
                r.start_daemon(port=port)
                ps = [r.rdzv_agent("dkill", "--nnodes", "2", "--max-restarts", "3", "--nccl", "off")
                      for _ in range(2)]
                if not r.wait_starts(4, 30, procs=ps, restart=0):
                    raise RuntimeError(f"no first generation (kept {r.dir})")
                time.sleep(0.3 + 0.2 * t)
                t0 = time.time()
                r.daemon.kill()
                r.daemon.wait()
                r.start_daemon(port=port)
                t_up = time.time()
                rebuilt = r.wait(lambda: r.daemon_lines(r"rebuilt; its workers never stopped"), 30)
                if not rebuilt:
                    raise RuntimeError(f"job not rebuilt (kept {r.dir})")
                r.release()
                rcs = r.finish(ps)
                starts = r.events("start")
                res.append({"rebuilt": log_time(rebuilt[0]) - t0,
                            "after_up": log_time(rebuilt[0]) - t_up,
                            "starts": len(starts), "rcs": rcs})
            except Exception:
                self.keep = True
                raise
            finally:
                r.kill()
        return res


def ms(x):
    return f"{x * 1000:.0f} ms"


def secs(x):
    return f"{x:.2f} s"


def fmt(x):
    return ms(x) if x < 1 else secs(x)


def main():
    ap = argparse.ArgumentParser(prog="run-restart-bench.sh")
    ap.add_argument("build")
    ap.add_argument("--crashes", type=int, default=10)
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--cap", type=float, default=60.0)
    ap.add_argument("--crash-after-ms", type=int, default=500)
    ap.add_argument("--python", default="/usr/bin/python3")
    ap.add_argument("--no-torchrun", action="store_true")
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    b = Bench(a)
    t_start = time.monotonic()
    rows = []
    n = a.crashes
    torch_ok = not a.no_torchrun and subprocess.run(
        [a.python, "-c", "import torch.distributed.run"], capture_output=True).returncode == 0

    c_off, rc_off = b.crash_rdzv("off", n)
    c_auto, rc_auto = b.crash_rdzv("auto", n)
    c_tr, rc_tr = b.crash_torchrun(n) if torch_ok else (None, None)
    c_tr5, rc_tr5 = (b.crash_torchrun(n, ("--monitor_interval", "0.5")) if torch_ok
                     else (None, None))

    def crash_cell(ts):
        return f"{fmt(statistics.median(ts))} / {fmt(pct(ts, 90))}" if ts else "not run"

    rows.append((f"worker crash -> all 4 replacement workers started on both nodes, median / p90 "
                 f"over {n} crashes, `--nccl off`", crash_cell(c_off), crash_cell(c_tr),
                 crash_cell(c_tr5)))
    rows.append(("the same, `--nccl auto` (a fresh NCCL id per generation)", crash_cell(c_auto),
                 "(no NCCL id)", "(no NCCL id)"))

    kill = b.node_loss_rdzv(signal.SIGKILL, a.trials, 5)
    tr_kill = b.node_loss_torchrun(signal.SIGKILL, a.cap) if torch_ok else None
    tk = [x["new_gen"] for x in kill]

    def tr_cell(x):
        if x is None:
            return "not run"
        if x["new_gen"] is None and x["survivor_rc"] is not None:
            return (f"no new generation: the survivor exited {x['survivor_rc']} after "
                    f"{x['after']:.1f} s")
        if x["new_gen"] is None:
            return f"did not recover within {a.cap:.0f} s"
        return fmt(x["new_gen"])

    rows.append((f"agent SIGKILL -> survivor's new generation started (`--nnodes 1:2`), median / "
                 f"max over {a.trials}", f"{fmt(statistics.median(tk))} / {fmt(max(tk))}",
                 tr_cell(tr_kill), "-"))
    rows.append(("the SIGKILLed agent's workers gone within 2 s",
                 f"{sum(x['workers_gone'] for x in kill)} of {len(kill)} trials",
                 "not run" if tr_kill is None else
                 ("yes" if tr_kill["workers_gone"]
                  else f"no ({tr_kill['victims']} still running)"), "-"))

    stop = b.node_loss_rdzv(signal.SIGSTOP, a.trials, 1)
    tr_stop = b.node_loss_torchrun(signal.SIGSTOP, a.cap) if torch_ok else None
    det = [x["detect"] for x in stop]
    exc = [x["excess"] for x in stop]
    ng = [x["new_gen"] for x in stop]
    rows.append((f"agent SIGSTOP -> rdzvd logs the node lost (`--heartbeat-timeout 1`), from the "
                 f"SIGSTOP, median / max over {a.trials}",
                 f"{fmt(statistics.median(det))} / {fmt(max(det))}", "-", "-"))
    rows.append(("  excess over the timeout, counted from the node's last heartbeat (median / max)",
                 f"{fmt(statistics.median(exc))} / {fmt(max(exc))}", "-", "-"))
    rows.append(("agent SIGSTOP -> survivor's new generation started, median / max",
                 f"{fmt(statistics.median(ng))} / {fmt(max(ng))}", tr_cell(tr_stop), "-"))

    dr = b.daemon_restart_rdzv(a.trials)
    rows.append((f"rdzvd SIGKILLed, restarted on the same port at once -> job rebuilt, median / "
                 f"max over {a.trials} (from the SIGKILL)",
                 f"{fmt(statistics.median([x['rebuilt'] for x in dr]))} / "
                 f"{fmt(max(x['rebuilt'] for x in dr))}",
                 "n/a (the c10d store lives in one agent)", "-"))
    rows.append(("  workers restarted by the daemon restart; agents' exit codes",
                 f"{sum(x['starts'] - 4 for x in dr)}; "
                 f"{sorted(set(rc for x in dr for rc in x['rcs']))}", "-", "-"))

    torch_v = "(not run)"
    if torch_ok:
        torch_v = subprocess.run([a.python, "-c", "import torch; print(torch.__version__)"],
                                 capture_output=True, text=True).stdout.strip()
    print(f"| measure (2 agents x 2 workers on one machine) | rdzv | torchrun {torch_v} (c10d, "
          f"defaults) | torchrun `--monitor_interval 0.5` |")
    print("|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    load = " ".join(open("/proc/loadavg").read().split()[:3])
    print()
    print(f"(`run-restart-bench.sh: {os.cpu_count()} CPUs, {os.uname().release}, {n} crashes, "
          f"{a.trials} trials, crash {a.crash_after_ms} ms after start, torchrun exits "
          f"{rc_tr} {rc_tr5}, rdzv exits {rc_off} {rc_auto}, {time.monotonic() - t_start:.0f} s, "
          f"load {load}`)")
    if c_tr:
        note("torchrun crash times: " + " ".join(f"{x:.2f}" for x in c_tr))
        note("torchrun --monitor_interval 0.5 crash times: " + " ".join(f"{x:.2f}" for x in c_tr5))
    note("rdzv --nccl off crash times: " + " ".join(f"{x * 1000:.0f}" for x in c_off))
    note("rdzv --nccl auto crash times: " + " ".join(f"{x * 1000:.0f}" for x in c_auto))
    note(f"rdzv SIGKILL: {kill}\nrdzv SIGSTOP: {stop}\ntorchrun: {tr_kill} {tr_stop}\n"
         f"daemon restart: {dr}")


if __name__ == "__main__":
    main()
