#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# recovery_bench.py BUILD_DIR [options]: from a worker's failure to the next training step, for
# rdzv-train in place (rdzv-agent --recovery inplace), rdzv-train restarted from its checkpoint
# (--recovery restart, the default) and torchrun 1.13 running ddp_ckpt.py (the same model and
# batch, checkpoint resume), side by side in one run. Run through run-recovery-bench.sh; prints a
# markdown table on stdout, progress on stderr.
#
# Each trial is a fresh job of 2 agents x 2 workers on this machine (gloo, CPU). Once the job is
# past its first checkpoint (every --ckpt-every steps) and a few more steps (varied per trial so
# the kill falls at different places between checkpoints, the same places for every system), the
# bench sends SIGKILL (a crash) or SIGSTOP (a hang) to the worker whose RANK is 3, taking the time
# with time.time() right before os.kill.
#
# With --worker torch, every row runs the same PyTorch DDP script, examples/autoencoder.py
# (rdzv.torch: in place under --recovery inplace, a checkpoint resume under --recovery restart and
# under torchrun), on the same model (784-128-128-128-784, --batch-size) and the same data:
# the benchmark of recovery in place. A replacement worker there starts a Python and imports torch.
#
# Rank 0 of either trainer prints a JSON line per step whose "t" is the wall-clock time the step
# completed, and an event line when a new incarnation of the job starts ("resumed" or "reformed"
# from rdzv-train, "started" from ddp_ckpt.py). Lines that follow such an event printed after the
# failure come from the recovered job; every other step line comes from the job that failed
# (including a step whose collective completed just as the worker died). Two figures per trial:
#   first step: the earliest step line of the recovered job (it may redo steps: a restart resumes
#               from the checkpoint);
#   progress:   the earliest step line of the recovered job whose step number exceeds every step
#               the failed job completed: training makes progress again.
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "restart"))
from restart_bench import Run, free_port, note  # noqa: E402

MARKERS = ("resumed", "reformed", "started")
VICTIM_RANK = 3
TAG = "RECOVERY_BENCH_TAG"


class Unsupported(Exception):
    """The agent refused an option this row needs (--recovery inplace before it is wired)."""


class Job(Run):
    """One trial's processes: rdzvd (rdzv rows, started as the restart bench starts it), two
    agents, their workers (found by a tag in their environment); kill() leaves nothing behind."""

    def __init__(self, bench, name):
        super().__init__(bench, f"recovery-{name}")
        self.ckpt = os.path.join(self.dir, "ckpt")
        os.mkdir(self.ckpt)
        self.outs = []

    def env(self, extra=None):
        e = {k: v for k, v in os.environ.items()
             if not k.startswith(("SLURM_", "PBS_", "OMPI_", "RDZV_", "RDZVD_", "PET_",
                                  "TORCHELASTIC_", "MASTER_"))
             and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
        e[TAG] = self.dir
        return e

    def spawn(self, cmd, name="agent"):
        n = len(self.procs)
        out = os.path.join(self.dir, f"{name}.{n}.out")
        err = os.path.join(self.dir, f"{name}.{n}.err")
        p = subprocess.Popen(cmd, env=self.env(), stdin=subprocess.DEVNULL,
                             stdout=open(out, "wb"), stderr=open(err, "wb"),
                             start_new_session=True)
        p.err_path = err
        self.procs.append(p)
        self.outs.append(out)
        return p

    def train_args(self):
        a = self.b.a
        if self.b.torch:
            return ["--shape", "mnist", "--steps", "100000000", "--batch", str(a.batch_size),
                    "--ckpt-dir", self.ckpt, "--ckpt-every", str(a.ckpt_every)]
        return ["--steps", "100000000", "--batch-size", str(a.batch_size), "--layers", a.layers,
                "--ckpt-dir", self.ckpt, "--ckpt-every", str(a.ckpt_every)]

    def rdzv_worker(self):
        if self.b.torch:
            return [self.b.python, self.b.torch_script, "--backend", "gloo", "--log-every", "1"]
        return [self.b.train, "--backend", "gloo", "--log-every", "1"]

    def rdzv_agents(self, recovery, progress_timeout):
        self.start_daemon(level="warn")
        self.daemon.err_path = self.daemon_log
        port = self.port
        extra = []
        if recovery == "inplace" or self.b.agent_has_recovery:
            extra += ["--recovery", recovery]
        if progress_timeout:
            extra += ["--progress-timeout", str(progress_timeout)]
        return [self.spawn([self.b.agent, "--endpoint", f"127.0.0.1:{port}", "--rdzv-id", "bench",
                            "--nnodes", "2", "--nproc", "2", "--max-restarts", "3",
                            "--grace", str(self.b.a.grace), "--last-call", "0.5", "--nccl", "off",
                            "--log-level", "warn", *extra, "--", *self.rdzv_worker(),
                            *self.train_args()],
                           "agent") for _ in range(2)]

    def torchrun_agents(self, mi):
        port = free_port()
        cmd = [self.b.python, "-m", "torch.distributed.run", "--nnodes", "2",
               "--nproc_per_node", "2", "--rdzv_backend", "c10d", "--rdzv_endpoint",
               f"127.0.0.1:{port}", "--rdzv_id", "bench", "--max_restarts", "3",
               # --redirects/--tee 1: see tests/bench/restart/restart_bench.py (torch 1.13 on
               # Python 3.11 crashes with the defaults).
               "--redirects", "1", "--tee", "1", *(["--monitor_interval", str(mi)] if mi else [])]
        ps = []
        for i in range(2):
            script = ([self.b.torch_script, "--log-every", "1"] if self.b.torch
                      else [self.b.ddp_script])
            ps.append(self.spawn(cmd + ["--log_dir", os.path.join(self.dir, f"logs.{i}"),
                                        *script, *self.train_args()], "torchrun"))
            if i == 0:
                time.sleep(1.0)  # the first one hosts the c10d store
        return ps

    # -- what the trainers printed --

    def lines(self):
        """Per agent output file, its rank 0 JSON objects in order, each with "_off" (the byte
        offset of its line in that file) and "_file"."""
        out = []
        for i, path in enumerate(self.outs):
            off = 0
            with open(path, "rb") as f:
                data = f.read()
            for raw in data.split(b"\n")[:-1]:
                pos = off
                off += len(raw) + 1
                j = raw.find(b"{")
                if j < 0:
                    continue
                try:
                    obj = json.loads(raw[j:])
                except ValueError:
                    continue
                if isinstance(obj, dict):
                    obj["_off"], obj["_file"] = pos, i
                    out.append(obj)
        return out

    def sizes(self):
        return [os.path.getsize(p) for p in self.outs]

    @staticmethod
    def steps(objs):
        return [o for o in objs if "event" not in o and "step" in o and "t" in o]

    def last_step(self):
        s = self.steps(self.lines())
        return max((o["step"] for o in s), default=0)

    def split(self, sizes):
        """(old, new): step lines of the job that failed, and of the recovered job (those after
        a start/recovery event written past the offsets `sizes` taken at the failure)."""
        objs = self.lines()
        marker = {}
        for o in objs:
            if (o.get("event") in MARKERS and o["_off"] >= sizes[o["_file"]] and
                    o["_file"] not in marker):
                marker[o["_file"]] = o["_off"]
        old, new = [], []
        for o in self.steps(objs):
            m = marker.get(o["_file"])
            (new if m is not None and o["_off"] > m else old).append(o)
        return old, sorted(new, key=lambda o: o["t"])

    # -- processes --

    def workers(self):
        """{pid: RANK} of every process started with this job's tag and a RANK."""
        found = {}
        tag = f"{TAG}={self.dir}".encode()
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                with open(f"/proc/{d}/environ", "rb") as f:
                    env = f.read().split(b"\0")
            except OSError:
                continue
            if tag not in env:
                continue
            for kv in env:
                if kv.startswith(b"RANK="):
                    found[int(d)] = int(kv[5:])
        return found

    def check_agents(self):
        for p in self.procs:
            if p.poll() is not None:
                err = open(p.err_path, errors="replace").read()
                if "--recovery" in err and ("unknown option" in err or "invalid" in err):
                    raise Unsupported(err.strip().splitlines()[-1])
                raise RuntimeError(f"{p.args[0]} exited {p.returncode} (kept {self.dir}): "
                                   + err[-1500:])

    def kill(self):
        for _ in range(2):
            pids = list(self.workers())
            for p in self.procs:
                if p.poll() is None:
                    pids.append(-p.pid)
            for pid in pids:
                for sig in (signal.SIGCONT, signal.SIGKILL):
                    try:
                        os.kill(pid, sig)
                    except ProcessLookupError:
                        pass
            for p in self.procs:
                try:
                    p.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass
            time.sleep(0.1)
        self.procs = []
        super().kill()


class Bench:
    def __init__(self, a):
        self.a = a
        self.rdzvd = os.path.join(a.build, "daemon", "rdzvd")
        self.agent = os.path.join(a.build, "agent", "rdzv-agent")
        self.train = os.path.join(a.build, "train", "rdzv-train")
        self.ddp_script = os.path.join(HERE, "ddp_ckpt.py")
        self.torch = a.worker == "torch"
        self.torch_script = os.path.join(HERE, "..", "..", "..", "examples", "autoencoder.py")
        self.python = a.python
        self.keep = a.keep
        for f in (self.rdzvd, self.agent) + (() if a.worker == "torch" else (self.train,)):
            if not os.access(f, os.X_OK):
                sys.exit(f"run-recovery-bench.sh: {f} is missing: build first "
                         f"(ninja -C {a.build})")
        helptext = subprocess.run([self.agent, "--help"], capture_output=True,
                                  text=True).stdout
        self.agent_has_recovery = "--recovery" in helptext

    def kill_at(self, trial):
        """The step after which trial `trial` fails: past the first checkpoint, spread over one
        checkpoint interval (the same for every system)."""
        k = self.a.ckpt_every
        return k + 2 + int((trial + 0.5) * (k - 2) / self.a.trials)

    def trial(self, system, sig, trial, cap):
        """One job, one failure. Returns a dict of figures (None where not reached in cap)."""
        a = self.a
        j = Job(self, f"{system.replace('/', '-')}-{sig.name.lower()}-{trial}")
        try:
            if system.startswith("torchrun"):
                ps = j.torchrun_agents(a.torchrun_fast_monitor if system == "torchrun/fast"
                                       else a.torchrun_monitor_interval)
            else:
                recovery, pt = system.split("/")
                ps = j.rdzv_agents(recovery, a.progress_timeout if pt == "hang" else 0)
            target = self.kill_at(trial)
            deadline = time.monotonic() + a.start_timeout
            while j.last_step() < target:
                j.check_agents()
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{system}: not at step {target} after "
                                       f"{a.start_timeout:.0f} s (kept {j.dir})")
                time.sleep(0.005)
            victims = [pid for pid, r in j.workers().items() if r == VICTIM_RANK]
            if len(victims) != 1:
                raise RuntimeError(f"{system}: {len(victims)} processes with RANK={VICTIM_RANK}"
                                   f" (kept {j.dir})")
            t0 = time.time()
            os.kill(victims[0], sig)
            sizes = j.sizes()
            res = {"first": None, "progress": None, "rate": None}
            deadline = time.monotonic() + cap
            while time.monotonic() < deadline:
                old, new = j.split(sizes)
                s_old = max(o["step"] for o in old)
                past = [o for o in new if o["step"] > s_old]
                if past:
                    span = [o for o in old if o["t"] <= t0]
                    res = {"first": new[0]["t"] - t0, "progress": past[0]["t"] - t0,
                           "rate": (span[-1]["step"] - span[0]["step"]) /
                                   max(span[-1]["t"] - span[0]["t"], 1e-9),
                           "s_before": max(o["step"] for o in old if o["t"] <= t0),
                           "s_old": s_old, "resume_step": new[0]["step"] - 1}
                    break
                if any(p.poll() is not None for p in ps):
                    j.check_agents()
                time.sleep(0.01)
            if res["first"] is None:
                self.keep = True  # the directory stays, and its logs' tails go to stderr
                note(f"{system}: no recovered step within {cap:.0f} s (kept {j.dir})")
                logs = [getattr(p, "err_path", None) for p in j.procs]
                for path in logs + [getattr(j, "daemon_log", None)]:
                    if path and os.path.exists(path):
                        with open(path, errors="replace") as f:
                            tail = f.read()[-3000:]
                        note(f"  {os.path.basename(path)}:\n" + "".join(
                            f"    {ln}\n" for ln in tail.splitlines()))
            return res
        except Unsupported:
            raise
        except Exception:
            self.keep = True
            raise
        finally:
            j.kill()

    def row(self, system, sig, cap):
        what = "SIGKILL" if sig == signal.SIGKILL else "SIGSTOP"
        note(f"{system}: worker rank {VICTIM_RANK} {what}, {self.a.trials} trials")
        out = []
        for t in range(self.a.trials if not system.startswith("torchrun") or sig == signal.SIGKILL
                       else min(self.a.trials, self.a.torchrun_hang_trials)):
            r = self.trial(system, sig, t, cap)
            note(f"  trial {t}: {r}")
            out.append(r)
        return out


def fmt(x):
    return f"{x * 1000:.0f} ms" if x < 1 else f"{x:.2f} s"


def cell(rs, key, cap):
    if rs is None:
        return "not run"
    if isinstance(rs, str):
        return rs
    xs = [r[key] for r in rs if r[key] is not None]
    miss = len(rs) - len(xs)
    if not xs:
        return f"not recovered within {cap:.0f} s ({len(rs)} of {len(rs)} trials)"
    s = f"{fmt(statistics.median(xs))} ({fmt(min(xs))} - {fmt(max(xs))})"
    if miss:
        s += f", {miss} of {len(rs)} not within {cap:.0f} s"
    return s


def med(rs, key):
    if not rs or isinstance(rs, str):
        return None
    xs = [r[key] for r in rs if r[key] is not None]
    return statistics.median(xs) if len(xs) == len(rs) else None


def redone(rs):
    if not rs or isinstance(rs, str):
        return "-"
    xs = [r["s_old"] - r["resume_step"] for r in rs if r["first"] is not None]
    rate = [r["rate"] for r in rs if r["rate"] is not None]
    if not xs:
        return "-"
    return (f"{statistics.median(xs):.0f} ({min(xs)} - {max(xs)}) at "
            f"{statistics.median(rate):.0f} steps/s")


def main():
    ap = argparse.ArgumentParser(prog="run-recovery-bench.sh")
    ap.add_argument("build")
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--cap", type=float, default=30.0,
                    help="how long to wait for a recovery (s); torchrun's hang never recovers")
    ap.add_argument("--no-torchrun", action="store_true")
    ap.add_argument("--worker", choices=("rdzv-train", "torch"), default="rdzv-train",
                    help="torch: every row runs examples/autoencoder.py (rdzv.torch)")
    ap.add_argument("--ckpt-every", type=int, default=50)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--layers", default="784,128,128,128,784")
    ap.add_argument("--progress-timeout", type=float, default=2)
    ap.add_argument("--grace", type=float, default=2,
                    help="rdzv-agent's --grace (TERM -> KILL when it stops workers)")
    ap.add_argument("--torchrun-monitor-interval", type=float, default=0,
                    help="torchrun's --monitor_interval (default: its own, 5 s)")
    ap.add_argument("--torchrun-fast-monitor", type=float, default=0.5,
                    help="also torchrun with this --monitor_interval, for crashes (0: not)")
    ap.add_argument("--torchrun-hang-trials", type=int, default=1)
    ap.add_argument("--start-timeout", type=float, default=120)
    ap.add_argument("--python", default="/usr/bin/python3")
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    # SIGTERM (meson test's timeout, a user) unwinds like ^C, so every job's agents and
    # workers (in sessions of their own) are killed on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if a.ckpt_every < 4:
        sys.exit("run-recovery-bench.sh: --ckpt-every must be at least 4")
    b = Bench(a)
    t_start = time.monotonic()
    torch_ok = not a.no_torchrun and subprocess.run(
        [a.python, "-c", "import torch.distributed.run"], capture_output=True).returncode == 0
    na = "n/a (this rdzv-agent has no --recovery inplace)"

    sysnames = ["inplace", "restart", "torchrun", "torchrun/fast"]
    res = {}
    for sig in (signal.SIGKILL, signal.SIGSTOP):
        for system in sysnames:
            key = (system, sig)
            if system.startswith("torchrun"):
                if not torch_ok or (system == "torchrun/fast" and (
                        sig == signal.SIGSTOP or not a.torchrun_fast_monitor)):
                    res[key] = None
                else:
                    res[key] = b.row(system, sig, a.cap)
                continue
            try:
                res[key] = b.row(f"{system}/{'hang' if sig == signal.SIGSTOP else 'crash'}",
                                 sig, a.cap)
            except Unsupported as e:
                note(f"  {system}: {e}")
                res[key] = na

    torch_v = "(not run)"
    if torch_ok:
        torch_v = subprocess.run([a.python, "-c", "import torch; print(torch.__version__)"],
                                 capture_output=True, text=True).stdout.strip()
    tr_name = (f"torchrun {torch_v} (c10d, `--max-restarts 3`), ddp_ckpt.py (checkpoint "
               "resume)")
    if a.worker == "torch":
        tr_name = (f"torchrun {torch_v} (c10d, `--max-restarts 3`), the same script "
                   "(checkpoint resume)")
    names = {"inplace": "rdzv-train, `--recovery inplace`",
             "restart": "rdzv-train, `--recovery restart` (checkpoint resume)",
             "torchrun": tr_name,
             "torchrun/fast": f"the same, `--monitor_interval {a.torchrun_fast_monitor:g}`"}
    if a.worker == "torch":
        names.update(inplace="examples/autoencoder.py with rdzv.torch, `--recovery inplace`",
                     restart="the same script, `--recovery restart` (checkpoint resume)")
    print("| failure of worker rank 3 (2 agents x 2 workers, gloo, CPU) | system | "
          "to the first step line after it | to progress beyond the last step before it | "
          "steps redone (step rate before the failure) | torchrun / this (progress, medians) |")
    print("|---|---|---|---|---|---|")
    for sig, label in ((signal.SIGKILL, "SIGKILL (crash)"),
                       (signal.SIGSTOP, f"SIGSTOP (hang), rdzv `--progress-timeout "
                                        f"{a.progress_timeout:g}`")):
        tr = med(res[("torchrun", sig)], "progress")
        trf = med(res[("torchrun/fast", sig)], "progress")
        for system in sysnames:
            rs = res[(system, sig)]
            if system == "torchrun/fast" and rs is None:
                continue
            ratio = "-"
            mine = med(rs, "progress")
            if not system.startswith("torchrun") and mine:
                if tr:
                    ratio = f"{tr / mine:.1f}x"
                    if trf:
                        ratio += f" (`--monitor_interval {a.torchrun_fast_monitor:g}`: " \
                                 f"{trf / mine:.1f}x)"
                elif res[("torchrun", sig)]:
                    ratio = f"> {int(a.cap / mine)}x"
            print(f"| {label} | {names[system]} | {cell(rs, 'first', a.cap)} | "
                  f"{cell(rs, 'progress', a.cap)} | {redone(rs)} | {ratio} |")
    # rdzv is expected to recover: a row that did not (a regression) fails the run.
    failed = [f"{s} {sig.name}" for (s, sig), rs in res.items()
              if not s.startswith("torchrun") and isinstance(rs, list) and any(r["progress"] is None
                                                                  for r in rs)]
    load = " ".join(open("/proc/loadavg").read().split()[:3])
    print()
    worker = ('examples/autoencoder.py --shape mnist' if a.worker == 'torch'
              else 'layers ' + a.layers)
    print(f"(`run-recovery-bench.sh: median (min - max) over {a.trials} trials (torchrun's hang: "
          f"{min(a.trials, a.torchrun_hang_trials)}), checkpoint every {a.ckpt_every} steps, "
          f"batch {a.batch_size}, "
          f"{worker}"
          f", rdzv-agent --grace {a.grace:g}, "
          f"torchrun --monitor_interval {a.torchrun_monitor_interval or 5:g}, "
          f"{os.cpu_count()} CPUs, "
          f"{os.uname().release}, {time.monotonic() - t_start:.0f} s, load {load}`)")
    if failed:
        note("run-recovery-bench.sh: rdzv did not recover within the cap: " + ", ".join(failed))
        sys.exit(1)


if __name__ == "__main__":
    main()
