#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# badnode_bench.py BUILD_DIR [options]: a bad node is put aside, not restarted into.
# Run through run-badnode-bench.sh; prints a markdown table on stdout, progress on stderr.
#
# Each trial is a fresh job of three agents on this machine (gloo, CPU), --nnodes 2 --nproc 1
# --max-restarts 4: "bad", "good" and "spare". The bad node and the good one form generation 1
# (rdzv: bad is started, its join awaited in rdzvd's log, then good, then "generation 1 formed"
# awaited; torchrun: good first, as it hosts the c10d store, then bad, then its first worker
# start awaited), then the spare is started. Every worker is a /bin/sh wrapper that appends
# `date +%s.%N` to starts.NODE in the trial's directory, then exits 3 at once where the variable
# BADNODE_BENCH_BAD is set (only the bad node's agent has it: its workers die at start-up, as on
# a broken GPU), else execs the trainer: rdzv-train (or, under torchrun, ddp_ckpt.py, the same
# model), or with --worker torch examples/autoencoder.py everywhere (recovery_bench.py's two
# worker kinds, their arguments and its helpers). Rank 0 prints a JSON line per step whose "t"
# is the wall-clock time the step completed.
#
# Rows: rdzv --recovery restart and inplace (--bad-node-failures 2, the default); rdzv with
# --bad-node-failures 0 (never put aside); torchrun 1.13 (c10d,
# --max_restarts 4, the same wrapper and the same bad node). Figures per trial:
#   t_fail:     the bad node's first worker start (its starts file);
#   t_aside:    the timestamp of rdzvd's "node=bad put aside" line (cut to the millisecond: a
#               start counts as after it from the next millisecond on);
#   t_progress: the earliest step line with t later than the spare's first worker start (no step
#               can complete before: every world before it has the bad node's rank, which never
#               gets past its wrapper);
#   (a) t_progress - t_fail, (b) t_progress - t_aside (target: <= --heartbeat-timeout + 1 s), (c)
#   the bad node's worker starts, in all and after t_aside (must be 0), (d) how it ended: the trial
#   stops 2 s after t_progress, when every agent has exited, 3 s after the good node's agent exited
#   non-zero (the job failed: the good node is in every rdzv generation and hosts torchrun's store),
#   or at --cap seconds after the spare was started; the agents' exit codes then ("running": still
#   up, training). t_fail -> the job's failure is t_fail to the good node's agent's non-zero exit.
# Everything a trial started is killed after it (recovery_bench.py's Job.kill).
import argparse
import collections
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "recovery"))
import recovery_bench as rb  # noqa: E402  (puts ../restart on sys.path)
from restart_bench import free_port, log_time, note  # noqa: E402

NODES = ("bad", "good", "spare")
RUN_ID = "bench"
WRAP = ('date +%s.%N >> "$BADNODE_BENCH_DIR/starts.$BADNODE_BENCH_NODE"; '
        'if [ -n "$BADNODE_BENCH_BAD" ]; then exit 3; fi; exec "$@"')
TRAIN_SEEN_S = 2.0   # stop a trial this long after the first step on the spare
FAILED_WAIT_S = 3.0  # and this long after the good node's agent failed (the others' exits)


class Trial(rb.Job):
    """One trial's processes: rdzvd (rdzv rows), the three agents, their workers."""

    def __init__(self, bench, name):
        super().__init__(bench, "badnode-" + name)
        self.agents = {}  # node -> Popen
        self.exits = {}   # node -> (exit code, time.time() when seen)

    def env(self, extra=None):
        e = {k: v for k, v in super().env().items() if not k.startswith("BADNODE_BENCH_")}
        e["BADNODE_BENCH_DIR"] = self.dir
        e.update(extra or {})
        return e

    def spawn_node(self, node, cmd):
        out = os.path.join(self.dir, f"{node}.out")
        err = os.path.join(self.dir, f"{node}.err")
        extra = {"BADNODE_BENCH_NODE": node}
        if node == "bad":
            extra["BADNODE_BENCH_BAD"] = "1"
        p = subprocess.Popen(cmd, env=self.env(extra), stdin=subprocess.DEVNULL,
                             stdout=open(out, "wb"), stderr=open(err, "wb"),
                             start_new_session=True)
        p.err_path = err
        self.procs.append(p)
        self.outs.append(out)
        self.agents[node] = p
        # The time an agent exits, to the millisecond: a thread waits for it.
        threading.Thread(target=self.reap, args=(node, p), daemon=True).start()
        return p

    def reap(self, node, p):
        rc = p.wait()
        self.exits[node] = (rc, time.time())

    def wrapped(self, trainer):
        return ["/bin/sh", "-c", WRAP, "badnode-worker", *trainer]

    def rdzv_agent(self, node, recovery, bad_node_failures):
        a = self.b.a
        extra = ["--recovery", recovery]
        if bad_node_failures is not None:
            extra += ["--bad-node-failures", str(bad_node_failures)]
        return self.spawn_node(node, [
            self.b.agent, "--endpoint", f"127.0.0.1:{self.port}", "--rdzv-id", RUN_ID,
            "--nnodes", "2", "--nproc", "1", "--max-restarts", "4", "--grace", f"{a.grace:g}",
            "--last-call", "0.5", "--nccl", "off", "--heartbeat-timeout",
            f"{a.heartbeat_timeout:g}", "--host", node, "--log-level", "warn", *extra, "--",
            *self.wrapped(self.rdzv_worker() + self.train_args())])

    def rdzv_worker(self):
        if self.b.torch:
            return [self.b.python, self.b.torch_script, "--backend", "gloo", "--log-every", "1"]
        return [self.b.train, "--backend", "gloo", "--log-every", "1"]

    def torchrun_agent(self, node, port):
        a = self.b.a
        mi = a.torchrun_monitor_interval
        script = ([self.b.python, self.b.torch_script, "--backend", "gloo", "--log-every", "1"]
                  if self.b.torch else [self.b.python, self.b.ddp_script])
        # --redirects/--tee 1: see tests/bench/restart/restart_bench.py (torch 1.13 on Python
        # 3.11 crashes with the defaults).
        return self.spawn_node(node, [
            self.b.python, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc_per_node",
            "1", "--rdzv_backend", "c10d", "--rdzv_endpoint", f"127.0.0.1:{port}", "--rdzv_id",
            RUN_ID, "--max_restarts", "4", "--redirects", "1", "--tee", "1",
            *(["--monitor_interval", f"{mi:g}"] if mi else []),
            "--log_dir", os.path.join(self.dir, f"logs.{node}"), "--no_python",
            *self.wrapped(script + self.train_args())])

    def starts(self, node):
        try:
            with open(os.path.join(self.dir, f"starts.{node}")) as f:
                return sorted(float(x) for x in f.read().split())
        except (FileNotFoundError, ValueError):
            return []

    def progress(self):
        """t of the earliest step line after the spare's first worker start, or None."""
        sp = self.starts("spare")
        if not sp:
            return None
        ts = [o["t"] for o in self.steps(self.lines()) if o["t"] > sp[0]]
        return min(ts) if ts else None

    def wait_for(self, pred, what, timeout):
        deadline = time.monotonic() + timeout
        while not pred():
            for node, p in self.agents.items():
                if node in self.exits:
                    raise RuntimeError(f"the {node} agent exited {self.exits[node][0]} before "
                                       f"{what}: "
                                       + open(p.err_path, errors="replace").read()[-1500:])
            if time.monotonic() > deadline:
                raise RuntimeError(f"no {what} within {timeout:.0f} s")
            time.sleep(0.005)

    def dump(self):
        for path in [getattr(p, "err_path", None) for p in self.procs] + \
                [getattr(self, "daemon_log", None)]:
            if path and os.path.exists(path):
                with open(path, errors="replace") as f:
                    tail = f.read()[-2500:]
                note(f"  {os.path.basename(path)}:\n" +
                     "".join(f"    {ln}\n" for ln in tail.splitlines()))


class Bench:
    def __init__(self, a):
        self.a = a
        self.rdzvd = os.path.join(a.build, "daemon", "rdzvd")
        self.agent = os.path.join(a.build, "agent", "rdzv-agent")
        self.train = os.path.join(a.build, "train", "rdzv-train")
        self.ddp_script = os.path.join(HERE, "..", "recovery", "ddp_ckpt.py")
        self.torch = a.worker == "torch"
        self.torch_script = os.path.join(HERE, "..", "..", "..", "examples", "autoencoder.py")
        self.python = a.python
        self.keep = a.keep
        for f in (self.rdzvd, self.agent) + (() if self.torch else (self.train,)):
            if not os.access(f, os.X_OK):
                sys.exit(f"run-badnode-bench.sh: {f} is missing: build first "
                         f"(ninja -C {a.build})")
        if "--bad-node-failures" not in subprocess.run([self.agent, "--help"],
                                                       capture_output=True, text=True).stdout:
            sys.exit("run-badnode-bench.sh: this rdzv-agent has no --bad-node-failures")

    def trial(self, row, n):
        a = self.a
        j = Trial(self, f"{row}-{n}")
        try:
            if row == "torchrun":
                port = free_port()
                j.torchrun_agent("good", port)
                time.sleep(1.0)  # the first one hosts the c10d store
                j.torchrun_agent("bad", port)
                j.wait_for(lambda: j.starts("bad"), "the bad node's first worker start",
                           a.start_timeout)
                j.torchrun_agent("spare", port)
            else:
                recovery = "inplace" if row == "inplace" else "restart"
                bnf = 0 if row == "never" else None
                j.start_daemon(level="info")  # info: its "joined" and "formed" lines
                j.daemon.err_path = j.daemon_log
                j.rdzv_agent("bad", recovery, bnf)
                j.wait_for(lambda: j.daemon_lines(r"job=%s gen=\d+ node=bad joined" % RUN_ID),
                           "join of the bad node", a.start_timeout)
                j.rdzv_agent("good", recovery, bnf)
                j.wait_for(lambda: j.daemon_lines(r"job=%s gen=1 generation 1 formed" % RUN_ID),
                           "generation 1", a.start_timeout)
                j.rdzv_agent("spare", recovery, bnf)
            deadline = time.monotonic() + a.cap
            t_prog = None
            while time.monotonic() < deadline:
                now = time.time()
                if t_prog is None:
                    t_prog = j.progress()
                if t_prog is not None and now >= t_prog + TRAIN_SEEN_S:
                    break
                if len(j.exits) == len(NODES):
                    break
                g = j.exits.get("good")
                if g and g[0] != 0 and now >= g[1] + FAILED_WAIT_S:
                    break
                time.sleep(0.02)
            if t_prog is None:
                t_prog = j.progress()
            bad = j.starts("bad")
            t_fail = bad[0] if bad else None
            t_aside = None
            if row != "torchrun":
                aside = j.daemon_lines(r"job=%s .*node=bad put aside \(node id" % RUN_ID)
                t_aside = log_time(aside[0]) if aside else None
            g = j.exits.get("good")
            codes = ", ".join(f"{nd} {j.exits[nd][0] if nd in j.exits else 'running'}"
                              for nd in NODES)
            if t_prog is not None:
                outcome = "training on the spare"
            elif g and g[0] != 0:
                outcome = "failed"
            elif len(j.exits) == len(NODES):
                outcome = "ended without training on the spare"
            else:
                outcome = f"no training on the spare within {a.cap:g} s"
            r = {"fail_to_progress": (t_prog - t_fail) if t_prog and t_fail else None,
                 "aside_to_progress": (t_prog - t_aside) if t_prog and t_aside else None,
                 "aside": t_aside is not None,
                 "bad_starts": len(bad),
                 # rdzvd's timestamps are cut to the millisecond: a start in the millisecond of
                 # the put-aside line came before it (the failure it reacts to followed it).
                 "bad_after_aside": (sum(1 for t in bad if t >= t_aside + 0.001)
                                     if t_aside else None),
                 "fail_to_failed": (g[1] - t_fail) if g and g[0] != 0 and t_fail else None,
                 "outcome": f"{outcome} ({codes})"}
            if row in ("restart", "inplace") and (t_prog is None or not r["aside"]):
                self.keep = True
                note(f"  {row} trial {n}: no put-aside or no training on the spare (kept {j.dir})")
                j.dump()
            return r
        except Exception as e:  # noqa: BLE001  (a trial that broke is reported, the run goes on)
            self.keep = True
            note(f"  {row} trial {n}: {e} (kept {j.dir})")
            j.dump()
            return {"error": str(e).splitlines()[0][:120]}
        finally:
            j.kill()
            self.keep = self.a.keep

    def row(self, row, trials):
        note(f"{row}: {trials} trials")
        out = []
        for n in range(trials):
            r = self.trial(row, n)
            note(f"  trial {n}: " + ", ".join(
                f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in r.items()))
            out.append(r)
        return out


def fmt(x):
    return f"{x * 1000:.0f} ms" if x < 1 else f"{x:.2f} s"


def ok(rs):
    return [r for r in rs if "error" not in r]


def cell(rs, key, missing):
    good = ok(rs)
    xs = [r[key] for r in good if r[key] is not None]
    if not xs:
        return missing if good else "-"
    s = f"{fmt(statistics.median(xs))} ({fmt(min(xs))} - {fmt(max(xs))})"
    if len(xs) < len(good):
        s += f"; {len(good) - len(xs)} of {len(good)}: {missing}"
    return s


def counts(rs, key):
    xs = [r[key] for r in ok(rs) if r[key] is not None]
    if not xs:
        return "-"
    m = statistics.median(xs)
    return f"{m:g} ({min(xs)} - {max(xs)})"


def outcomes(rs):
    c = collections.Counter(r["outcome"] for r in ok(rs))
    s = "; ".join(f"{k} {v} of {len(rs)}" for v, k in
                  sorted(((v, k) for k, v in c.items()), reverse=True))
    errs = [r["error"] for r in rs if "error" in r]
    if errs:
        s += f"; {len(errs)} of {len(rs)} broke: {errs[0]}"
    return s


def main():
    ap = argparse.ArgumentParser(prog="run-badnode-bench.sh")
    ap.add_argument("build")
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--cap", type=float, default=60.0,
                    help="how long a trial waits (s) after the spare is started")
    ap.add_argument("--no-torchrun", action="store_true")
    ap.add_argument("--rows", default="restart,inplace,never,torchrun",
                    help="which rows, of restart,inplace,never,torchrun")
    ap.add_argument("--worker", choices=("rdzv-train", "torch"), default="rdzv-train",
                    help="torch: every row runs examples/autoencoder.py (rdzv.torch)")
    ap.add_argument("--heartbeat-timeout", type=float, default=2)
    ap.add_argument("--grace", type=float, default=2)
    ap.add_argument("--ckpt-every", type=int, default=50)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--layers", default="784,128,128,128,784")
    ap.add_argument("--torchrun-monitor-interval", type=float, default=0,
                    help="torchrun's --monitor_interval (default: its own, 5 s)")
    ap.add_argument("--start-timeout", type=float, default=60)
    ap.add_argument("--python", default="/usr/bin/python3")
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    b = Bench(a)
    t_start = time.monotonic()
    torch_ok = not a.no_torchrun and subprocess.run(
        [a.python, "-c", "import torch.distributed.run"], capture_output=True).returncode == 0
    want = a.rows.split(",")
    if set(want) - {"restart", "inplace", "never", "torchrun"}:
        sys.exit(f"run-badnode-bench.sh: --rows {a.rows}: rows are restart,inplace,never,torchrun")
    rows = [r for r in ("restart", "inplace", "never", "torchrun")
            if r in want and (r != "torchrun" or torch_ok)]
    res = {row: b.row(row, a.trials) for row in rows}

    torch_v = "(not run)"
    if torch_ok:
        torch_v = subprocess.run([a.python, "-c", "import torch; print(torch.__version__)"],
                                 capture_output=True, text=True).stdout.strip()
    w = ("examples/autoencoder.py (rdzv.torch)" if b.torch else "rdzv-train")
    names = {"restart": f"rdzv, {w}, `--recovery restart` (`--bad-node-failures 2`, the default)",
             "inplace": f"rdzv, {w}, `--recovery inplace`",
             "never": f"rdzv, {w}, `--bad-node-failures 0` (never put aside)",
             "torchrun": f"torchrun {torch_v} (c10d, `--max_restarts 4`), "
                         + ("the same script" if b.torch else "ddp_ckpt.py (the same model)")}
    target = a.heartbeat_timeout + 1
    print(f"| bad node's worker exits 3 at start-up (3 agents, `--nnodes 2 --nproc 1 "
          f"--max-restarts 4`, gloo, CPU) | first failure on the bad node -> training on the "
          f"spare | put aside -> training on the spare (target <= {target:g} s) | bad node's "
          f"worker starts (of them after it was put aside) | first failure -> the job failed | "
          f"how the trial ended (agents' exit codes) |")
    print("|---|---|---|---|---|---|")
    failed = []
    for row in rows:
        rs = res[row]
        good = ok(rs)
        nospare = f"no training on the spare within {a.cap:g} s"
        a_cell = cell(rs, "fail_to_progress", nospare)
        if row in ("restart", "inplace"):
            b_cell = cell(rs, "aside_to_progress", "not put aside, or no training on the spare")
            xs = [r["aside_to_progress"] for r in good if r["aside_to_progress"] is not None]
            if xs:
                met = sum(1 for x in xs if x <= target)
                b_cell += f", target met in {met} of {len(rs)}"
            after = [r["bad_after_aside"] for r in good if r["bad_after_aside"] is not None]
            c_cell = counts(rs, "bad_starts") + (
                f" ({sum(after)} after, over all trials)" if after else " (never put aside)")
            if (len(good) < len(rs) or len(xs) < len(rs) or sum(after) or len(after) < len(rs)):
                failed.append(row)
        else:
            b_cell = "n/a (never put aside)"
            c_cell = counts(rs, "bad_starts")
            prog = sum(1 for r in good if r["fail_to_progress"] is not None)
            a_cell = (f"trained on the spare in {prog} of {len(rs)}"
                      + (f": {cell(rs, 'fail_to_progress', nospare)}" if prog else ""))
        d_cell = cell(rs, "fail_to_failed", "not failed")
        print(f"| {names[row]} | {a_cell} | {b_cell} | {c_cell} | {d_cell} | {outcomes(rs)} |")
    load = " ".join(open("/proc/loadavg").read().split()[:3])
    print()
    worker = 'examples/autoencoder.py --shape mnist' if b.torch else 'rdzv-train layers ' + a.layers
    print(f"(`run-badnode-bench.sh: median (min - max) over {a.trials} trials, {worker}"
          f", batch {a.batch_size}, rdzv-agent --heartbeat-timeout {a.heartbeat_timeout:g} "
          f"--grace {a.grace:g} --last-call 0.5, torchrun --monitor_interval "
          f"{a.torchrun_monitor_interval or 5:g}, a trial stopped {TRAIN_SEEN_S:g} s into "
          f"training on the spare, cap {a.cap:g} s, {os.cpu_count()} CPUs, "
          f"{os.uname().release}, {time.monotonic() - t_start:.0f} s, load {load}`)")
    if failed:
        note("run-badnode-bench.sh: rdzv did not put the bad node aside and train on the spare "
             "in every trial: " + ", ".join(failed))
        sys.exit(1)


if __name__ == "__main__":
    main()
