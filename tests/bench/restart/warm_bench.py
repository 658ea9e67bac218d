#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# warm_bench.py BUILD_DIR [--trials N] [--no-torchrun] [--python-form] [--no-cold] [--keep]:
# a worker SIGKILLed under --recovery restart, the plain DDP script (tests/faults/plain_ddp.py:
# gloo, no rdzv import), 2 agents x 2 workers against one rdzvd on 127.0.0.1: the time from the
# kill to the first step of the next generation (rank 0's {"step": 1, "t": ...} line), rdzv-agent
# with and without --warm-workers, and torchrun (c10d, its defaults) measured the same way in the
# same run, with this interpreter's torch. --python-form adds --warm-workers with the command
# given as `-- PYTHON SCRIPT ARGS` (the README's form) beside the script form. Under torch 2.6:
# tests/torch2/in-root.sh /usr/bin/python3 THIS BUILD.
# Prints a markdown table on stdout, progress on stderr. Not a timed test: run it by hand.
#
# The victim is global rank 3 (node rank 1, local rank 1), killed once rank 0 said step 3 and,
# with --warm-workers, once every standby of the next generation waits on its socket (blocked in
# recvmsg, /proc/PID/syscall): a job that ran a while has them ready.
import argparse
import glob
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import tempfile
import time

from restart_bench import free_port, note

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
SCRIPT = os.path.join(SRC, "tests", "faults", "plain_ddp.py")
STARTED = re.compile(r"started worker rank (\d+) \(local rank \d+, pid (\d+)\)")
STANDBY = re.compile(r"standby of local rank \d+ started \(pid (\d+)\)")
SYS_RECVMSG = 47  # x86_64


def waiting_in_recvmsg(pid):
    try:
        with open(f"/proc/{pid}/syscall") as f:
            return f.read().split()[0] == str(SYS_RECVMSG)
    except (OSError, IndexError):
        return False


class Run:
    def __init__(self, b, name):
        self.b = b
        self.dir = tempfile.mkdtemp(prefix=f"rdzv-warm-{name}-")
        self.procs = []

    def spawn(self, cmd, name, env=None):
        out = os.path.join(self.dir, f"{name}.out")
        err = os.path.join(self.dir, f"{name}.err")
        e = {k: v for k, v in os.environ.items()
             if not k.startswith(("SLURM_", "PBS_", "OMPI_", "RDZV_", "RDZVD_", "PET_"))}
        e.update(env or {})
        p = subprocess.Popen(cmd, env=e, stdin=subprocess.DEVNULL, stdout=open(out, "wb"),
                             stderr=open(err, "wb"), start_new_session=True)
        p.out, p.err = out, err
        self.procs.append(p)
        return p

    def steps(self, files):
        """(step, t) of every JSON step line in files."""
        res = []
        for path in files:
            try:
                text = open(path, errors="replace").read()
            except OSError:
                continue
            for line in text.splitlines():
                i = line.find('{"step"')
                if i < 0:
                    continue
                try:
                    o = json.loads(line[i:])
                except ValueError:
                    continue
                res.append((o["step"], o["t"]))
        return res

    def wait(self, pred, timeout, what):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            v = pred()
            if v:
                return v
            if any(p.poll() is not None for p in self.procs):
                raise RuntimeError(f"{what}: a launcher exited early (kept {self.dir})")
            time.sleep(0.01)
        raise RuntimeError(f"{what}: not within {timeout} s (kept {self.dir})")

    def kill(self, keep):
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        # what torchrun's workers left: this run's own (their command names its directory)
        for pid in os.listdir("/proc"):
            try:
                if self.dir.encode() in open(f"/proc/{pid}/cmdline", "rb").read():
                    os.kill(int(pid), signal.SIGKILL)
            except (OSError, ValueError):
                pass
        if not keep:
            shutil.rmtree(self.dir, ignore_errors=True)


class Bench:
    def __init__(self, a):
        self.a = a
        self.rdzvd = os.path.join(a.build, "daemon", "rdzvd")
        self.agent = os.path.join(a.build, "agent", "rdzv-agent")

    def rdzv(self, warm, trial, raw=False):
        r = Run(self, f"{'warm' if warm else 'cold'}{'-raw' if raw else ''}-{trial}")
        try:
            pf = os.path.join(r.dir, "port")
            r.spawn([self.rdzvd, "--port", "0", "--port-file", pf, "--bind", "127.0.0.1",
                         "-l", "warn"], "rdzvd")
            r.wait(lambda: os.path.exists(pf) and open(pf).read().endswith("\n"), 10, "rdzvd")
            port = int(open(pf).read())
            env = {"PYTHON_EXEC": self.a.python, "PYTHONPATH": os.path.join(SRC, "python")}
            ps = [r.spawn([self.agent, "--endpoint", f"127.0.0.1:{port}", "--rdzv-id", "w",
                           "--nnodes", "2", "--node-rank", str(i), "--nproc", "2", "--grace",
                           "2", "--last-call", "0.5", "--nccl", "off", "--bad-node-failures",
                           "0", "--restart-backoff", "0", "--max-restarts", "3", "--recovery",
                           "restart", *(["--warm-workers"] if warm else []),
                           *(["--", self.a.python] if raw else []), SCRIPT, "100000", r.dir],
                          f"agent{i}", env) for i in (0, 1)]
            outs = [p.out for p in ps]
            r.wait(lambda: any(s >= 3 for s, _ in r.steps(outs)), 120, "step 3")
            if warm:
                r.wait(lambda: all(len(STANDBY.findall(open(p.err).read())) >= 4 for p in ps) and
                       all(waiting_in_recvmsg(int(pid)) for p in ps
                           for pid in STANDBY.findall(open(p.err).read())[2:4]),
                       120, "the standbys ready")
            victim = int(dict(STARTED.findall(open(ps[1].err).read()))["3"])
            t0 = time.time()
            os.kill(victim, signal.SIGKILL)
            t1 = r.wait(lambda: min((t for s, t in r.steps(outs) if s == 1 and t > t0),
                                    default=None), 60, "the next generation's first step")
            log = open(ps[0].err).read() + open(ps[1].err).read()
            n_warm = log.count("in its warm standby")
            return t1 - t0, n_warm
        except Exception:
            self.a.keep = True
            raise
        finally:
            r.kill(self.a.keep)

    def torchrun(self, trial):
        r = Run(self, f"torchrun-{trial}")
        failed = False
        try:
            port = free_port()
            logs = os.path.join(r.dir, "logs")
            ps = []
            for i in (0, 1):
                ps.append(r.spawn([self.a.python, "-m", "torch.distributed.run", "--nnodes", "2",
                                   "--nproc_per_node", "2", "--rdzv_backend", "c10d",
                                   "--rdzv_endpoint", f"127.0.0.1:{port}", "--rdzv_id", "w",
                                   "--max_restarts", "3", "--redirects", "1", "--tee", "1",
                                   "--log_dir", os.path.join(logs, str(i)), SCRIPT, "100000",
                                   r.dir], f"torchrun{i}"))
                if i == 0:
                    time.sleep(1.0)  # the first one hosts the c10d store

            def outs():  # torch 1.13 tees from the log files, 2.x to the console
                return [p.out for p in ps] + glob.glob(
                    os.path.join(logs, "*", "*", "attempt_*", "*", "stdout.log"))

            r.wait(lambda: any(s >= 3 for s, _ in r.steps(outs())), 180, "step 3")
            victim = None
            for pid in os.listdir("/proc"):
                try:
                    env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
                    cmd = open(f"/proc/{pid}/cmdline", "rb").read()
                except OSError:
                    continue
                if b"RANK=3" in env and r.dir.encode() in cmd:
                    victim = int(pid)
            t0 = time.time()
            os.kill(victim, signal.SIGKILL)
            try:
                t1 = r.wait(lambda: min((t for s, t in r.steps(outs()) if s == 1 and t > t0),
                                        default=None), 120, "the next generation's first step")
            except RuntimeError as e:  # its restarts spent without a step: say so, go on
                note(f"  torchrun: {e}")
                failed = True
                return None
            return t1 - t0
        except Exception:
            self.a.keep = True
            raise
        finally:
            r.kill(self.a.keep or failed)


def cell(xs):
    ok = [x for x in xs if x is not None]
    each = ", ".join("no step" if x is None else f"{x:.2f}" for x in xs)
    if not ok:
        return f"no step of a next generation within 120 s ({each})"
    return f"{statistics.median(ok):.2f} s / {max(ok):.2f} s ({each})"


def main():
    ap = argparse.ArgumentParser(prog="warm_bench.py")
    ap.add_argument("build")
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--python", default="/usr/bin/python3")
    ap.add_argument("--no-torchrun", action="store_true")
    ap.add_argument("--python-form", action="store_true")
    ap.add_argument("--no-cold", action="store_true")
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    b = Bench(a)
    t_start = time.monotonic()
    loads = [open("/proc/loadavg").read().split()[0]]
    torch_v = subprocess.run([a.python, "-c", "import torch; print(torch.__version__)"],
                             capture_output=True, text=True).stdout.strip()
    cold, warm, raw, tr, used = [], [], [], [], []
    for t in range(a.trials):  # alternating, so that a change of load hits each alike
        if not a.no_cold:
            note(f"trial {t + 1}: rdzv-agent")
            cold.append(b.rdzv(False, t)[0])
        note(f"trial {t + 1}: rdzv-agent --warm-workers")
        x, n = b.rdzv(True, t)
        warm.append(x)
        used.append(n)
        if a.python_form:
            note(f"trial {t + 1}: rdzv-agent --warm-workers -- {a.python} SCRIPT")
            x, n = b.rdzv(True, t, raw=True)
            raw.append(x)
            used.append(n)
        if not a.no_torchrun:
            note(f"trial {t + 1}: torchrun")
            tr.append(b.torchrun(t))
        loads.append(open("/proc/loadavg").read().split()[0])
    print(f"| kill -> first step of the next generation, torch {torch_v}, median / max "
          f"(each trial) | |")
    print("|---|---|")
    if cold:
        print(f"| rdzv-agent --recovery restart | {cell(cold)} |")
    print(f"| rdzv-agent --recovery restart --warm-workers | {cell(warm)} |")
    if raw:
        print(f"| rdzv-agent --recovery restart --warm-workers -- {a.python} SCRIPT | "
              f"{cell(raw)} |")
    if tr:
        print(f"| torchrun (c10d, defaults) | {cell(tr)} |")
    print()
    print(f"(`warm_bench.py: {os.cpu_count()} CPUs, {a.trials} trials, torch {torch_v}, "
          f"workers started in their standby per warm trial {used}, "
          f"{time.monotonic() - t_start:.0f} s, 1-min load average at each trial's end "
          f"{' '.join(loads)}`)")


if __name__ == "__main__":
    main()
