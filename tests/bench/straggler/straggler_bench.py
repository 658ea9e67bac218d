#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""A real slowdown, found and replaced: straggler_bench.py BUILD_DIR [options].

Each trial is a fresh job on this machine: rdzvd, then three rdzv-agents (hosts a, b, spare;
--nnodes 2 --nproc N (default 2) --nccl off --recovery inplace --straggler-window W
--straggler-factor F), a and b forming generation 1, the spare joining after. Workers: rdzv-train
on gloo (CPU), or with --worker torch examples/autoencoder.py through rdzv.torch (DDP; --samples
1024 --batch 256, so that a step is mostly compute), or with --worker ddp
tests/rendezvous/scripts/straggler_ddp.py (DDP through rdzv.torch, each step's forward --ddp-ms:
short steps, which a stall by fits hits some of and not others). Each agent runs in its own CPU
cgroup (v2 cpu.max, else v1 cpu.cfs_quota_us), made and removed by this script (root only), which
its workers inherit. After --healthy seconds of training, node b's cgroup is throttled for real to
--quota of one CPU, or with --throttle stop its workers are stopped --stop-ms of every --period-ms
(SIGSTOP, SIGCONT: a node that runs by fits, whose stalls land anywhere in a step; 60 of 100 by
default). Figures, from rdzvd's /status.json (rank 0's step, sampled each second) and
its log:
  healthy:    steps per second over the --healthy period before the throttle;
  throttled:  with --on-straggler report, over the --measure seconds after the window passed;
  after:      with --on-straggler aside, over --measure seconds from the first step of the
              generation that took the spare in;
  named:      seconds from the throttle to rdzvd's "is a straggler" line (target: <= window + 5);
  replaced:   seconds from the throttle to rank 0's second step past its step at the verdict
              (training again, with the spare);
each the median of --trials trials, steps per second as a ratio to the same trial's healthy
rate; --worker both runs the rdzv-train trials, then the torch ones, into one table. --windows
W,W,... adds one rdzv-train report trial per window (throttle to named only). --false-alarm
SECONDS runs one healthy job that long (at each of --factors F,F,..., else at --factor) with
noise: a checkpoint every 50 steps; every node throttled together for 10 s in each minute (a
shared filesystem slowing all); every --hiccup-every seconds one worker of node a or b stopped
(SIGSTOP) for --hiccup seconds, a data loader's hiccup; every --restart-every seconds a worker
of node a killed, so that the in-place recovery's new generation starts with its first steps;
and counts "is a straggler" lines (target 0). Progress on stderr, a markdown table on stdout."""
import argparse
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))


def note(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class Cgroup:
    """A CPU cgroup of its own (v2 or v1), with a quota in CPUs (None: unlimited)."""

    def __init__(self, name):
        v2 = "/sys/fs/cgroup/cgroup.controllers"
        if os.path.exists(v2):
            self.v2, self.path = True, f"/sys/fs/cgroup/{name}"
        else:
            self.v2, self.path = False, f"/sys/fs/cgroup/cpu/{name}"
        os.makedirs(self.path, exist_ok=True)

    def add(self, pid):
        with open(os.path.join(self.path, "cgroup.procs"), "w") as f:
            f.write(str(pid))

    def quota(self, cpus):
        period = 100000
        if self.v2:
            val = "max" if cpus is None else f"{int(cpus * period)} {period}"
            with open(os.path.join(self.path, "cpu.max"), "w") as f:
                f.write(val)
        else:
            with open(os.path.join(self.path, "cpu.cfs_quota_us"), "w") as f:
                f.write("-1" if cpus is None else str(int(cpus * period)))

    def pids(self):
        with open(os.path.join(self.path, "cgroup.procs")) as f:
            return [int(x) for x in f.read().split()]

    def remove(self):
        """Its processes (workers the agent's end is still killing) moved up, then it removed;
        tried for up to 5 s, as a worker may still be leaving."""
        parent = os.path.dirname(self.path)
        deadline = time.monotonic() + 5
        while True:
            try:
                with open(os.path.join(self.path, "cgroup.procs")) as f:
                    pids = f.read().split()
                for pid in pids:
                    with open(os.path.join(parent, "cgroup.procs"), "w") as f:
                        f.write(pid)
            except OSError:
                pass
            try:
                os.rmdir(self.path)
                return
            except FileNotFoundError:
                return
            except OSError:
                if time.monotonic() > deadline:
                    note(f"{self.path} not removed")
                    return
                time.sleep(0.1)


def worker_cmd(kind, ckpt_dir):
    if kind == "ddp":  # short steps (RDZV_TEST_MS, --ddp-ms): a stall hits some, not others
        return ["/usr/bin/python3",
                os.path.join(ROOT, "tests", "rendezvous", "scripts", "straggler_ddp.py")]
    if kind == "torch":
        return ["/usr/bin/python3", os.path.join(ROOT, "examples", "autoencoder.py"),
                "--steps", "100000000", "--log-every", "100000000", "--samples", "1024",
                "--batch", "256"] + \
               (["--ckpt-dir", ckpt_dir, "--ckpt-every", "50"] if ckpt_dir else [])
    return [os.path.join(BUILD, "train", "rdzv-train"), "--backend", "gloo", "--steps",
            "100000000", "--log-every", "100000000", "--layers", "784,256,256,784",
            "--batch-size", "512"] + \
           (["--ckpt-dir", ckpt_dir, "--ckpt-every", "50"] if ckpt_dir else [])


class Job:
    def __init__(self, args, mode, tag, noise=False, factor=None, worker=None, window=None):
        self.args, self.dir = args, tempfile.mkdtemp(prefix=f"rdzv-straggler-{tag}-")
        self.procs, self.groups, self.stopper = [], {}, None
        port_file, mport_file = os.path.join(self.dir, "port"), os.path.join(self.dir, "mport")
        self.log = open(os.path.join(self.dir, "rdzvd.log"), "w")
        self.d = subprocess.Popen([os.path.join(BUILD, "daemon", "rdzvd"), "--bind", "127.0.0.1",
                                   "--port", "0", "--port-file", port_file, "--metrics-port", "0",
                                   "--metrics-port-file", mport_file], stderr=self.log)
        self.port, self.mport = wait_int(port_file), wait_int(mport_file)
        ckpt = os.path.join(self.dir, "ckpt") if noise else None  # rank 0's, wherever it runs
        if ckpt:
            os.makedirs(ckpt)
        for host in ("a", "b", "spare"):
            if host == "spare":
                self.wait_log(r"generation 1 formed", 60)
            g = Cgroup(f"rdzv-straggler-{tag}-{host}")
            self.groups[host] = g
            cmd = [os.path.join(BUILD, "agent", "rdzv-agent"), "--endpoint",
                   f"127.0.0.1:{self.port}", "--rdzv-id", "bench", "--nnodes", "2",
                   "--nproc", str(args.nproc), "--host", host, "--nccl", "off",
                   "--recovery", "inplace",
                   "--max-restarts", "100", "--heartbeat-timeout", "2", "--last-call", "0.5",
                   "--straggler-window", f"{window or args.window:g}",
                   "--straggler-factor", f"{factor or args.factor:g}", "--on-straggler", mode,
                   "--", *worker_cmd(worker or "train", ckpt)]
            out = open(os.path.join(self.dir, f"agent-{host}.log"), "w")
            p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                 start_new_session=True, cwd=self.dir)
            g.add(p.pid)  # before it forks its workers: they inherit it
            self.procs.append(p)

    def rdzvd_log(self):
        with open(os.path.join(self.dir, "rdzvd.log")) as f:
            return f.read()

    def wait_log(self, pattern, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = re.search(pattern, self.rdzvd_log())
            if m:
                return m
            time.sleep(0.1)
        raise RuntimeError(f"no {pattern!r} in rdzvd's log within {timeout} s ({self.dir})")

    def status(self):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.mport}/status.json", timeout=5) as r:
            return next(j for j in json.load(r)["jobs"] if j["run_id"] == "bench")

    def rank0(self):
        """(time, rank 0's step), or None before it reported."""
        job = self.status()
        r0 = [r for r in job.get("ranks", []) if r["rank"] == 0]
        return (time.time() - r0[0]["age_s"], r0[0]["step"]) if r0 else None

    def rate(self, seconds):
        a = self.wait_rank0()
        time.sleep(seconds)
        b = self.wait_rank0()
        return (b[1] - a[1]) / (b[0] - a[0]) if b[0] > a[0] and b[1] >= a[1] else float("nan")

    def wait_rank0(self, timeout=60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            s = self.rank0()
            if s:
                return s
            time.sleep(0.2)
        raise RuntimeError("rank 0 reported no step")

    def close(self):
        if self.stopper:
            self.stopper.end()
        for p in self.procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except OSError:
                pass
            p.wait()
        self.d.terminate()
        self.d.wait()
        for g in self.groups.values():
            g.remove()
        if not self.args.keep:
            shutil.rmtree(self.dir, ignore_errors=True)


class Stopper:
    """Node b's workers (its cgroup's processes but its agent) stopped stop_ms of every
    period_ms (SIGSTOP, then SIGCONT): a node that runs by fits, a paused VM's or a starved
    host's, whose stalls land anywhere in a step, compute or collective."""

    def __init__(self, job, stop_ms, period_ms):
        self.job, self.stop_ms, self.period_ms = job, stop_ms, period_ms
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        agent = self.job.procs[1].pid  # host b's
        while not self.done.is_set():
            pids = [p for p in self.job.groups["b"].pids() if p != agent]
            for sig, ms in ((signal.SIGSTOP, self.stop_ms),
                            (signal.SIGCONT, self.period_ms - self.stop_ms)):
                for p in pids:
                    try:
                        os.kill(p, sig)
                    except OSError:
                        pass
                time.sleep(ms / 1000)

    def end(self):
        self.done.set()
        self.thread.join()
        for p in self.job.groups["b"].pids():
            try:
                os.kill(p, signal.SIGCONT)
            except OSError:
                pass


def wait_int(path, timeout=10):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(path) as f:
                return int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            time.sleep(0.05)
    raise RuntimeError(f"{path} not written")


def trial(args, kind, mode, i, window=None, measure=True):
    """One trial: kind's workers, --on-straggler mode; measure: the rates after, not only
    the times."""
    window = window or args.window
    job = Job(args, mode, f"{kind}-{mode}{i}", worker=kind, window=window)
    try:
        job.wait_log(r"generation 1 formed", 60)
        job.wait_rank0()
        time.sleep(3)  # the first steps (not scored, nor measured)
        res = {"healthy": job.rate(args.healthy)}
        t0 = time.time()
        if args.throttle == "stop":
            job.stopper = Stopper(job, args.stop_ms, args.period_ms)
        else:
            job.groups["b"].quota(args.quota)
        note(f"{kind} {mode} {i}: healthy {res['healthy']:.2f} steps/s; node b throttled to "
             f"{throttle_words(args)}")
        m = job.wait_log(r"(\d{4}-\d\d-\d\dT[\d:.]+)Z? \S+ job=bench .*node=b \(node id [^)]*\) "
                         r"is a straggler", window + 60)
        res["named"] = parse_ts(m.group(1)) - t0
        if not measure:
            pass
        elif mode == "report":
            res["throttled"] = job.rate(args.measure)
        else:
            # Trained again: rank 0 (a survivor) two steps past its step when b was named (a
            # rank kept in place may finish the step it was in; the next needs the spare's).
            # Not the recovery's first_step point: a survivor's step of that kind stamps it.
            s0, deadline, r = job.wait_rank0()[1], time.monotonic() + 120, None
            while time.monotonic() < deadline and not (r and r[1] >= s0 + 2):
                time.sleep(0.2)
                r = job.rank0()
            if not (r and r[1] >= s0 + 2):
                raise RuntimeError("no training after the straggler was put aside")
            res["replaced"] = r[0] - t0
            res["after"] = job.rate(args.measure)
        note(f"{kind} {mode} {i}: " + ", ".join(f"{k} {v:.2f}" for k, v in res.items()))
        return res
    finally:
        job.close()


def tried(args, kind, mode, i, **kw):
    """trial()'s figures, or None (said on stderr, left out of the medians) when it failed."""
    try:
        return trial(args, kind, mode, i, **kw)
    except RuntimeError as e:
        note(f"{kind} {mode} {i}: FAILED: {e}")
        return None


def parse_ts(s):
    import calendar
    base, _, frac = s.partition(".")
    return calendar.timegm(time.strptime(base, "%Y-%m-%dT%H:%M:%S")) + float("0." + (frac or "0"))


def noise_events(seconds, hiccup_every, restart_every):
    """(time, what) in order: every node slowed together 10 s a minute (from 50 s), a worker of
    node a or b stopped for one step (a data loader's hiccup) every hiccup_every s, a worker of
    node a killed every restart_every s (an in-place recovery: a new generation's first steps)."""
    ev = [(t, "slow") for t in range(50, int(seconds), 60)]
    ev += [(t + 10, "fast") for t, _ in list(ev)]
    if hiccup_every > 0:
        ev += [(t, "hiccup") for t in frange(hiccup_every / 2, seconds, hiccup_every)]
    if restart_every > 0:
        ev += [(t, "restart") for t in frange(restart_every, seconds - 30, restart_every)]
    return sorted(ev)


def frange(start, stop, step):
    while start < stop:
        yield start
        start += step


def fa_worker(args):
    return "torch" if args.worker == "torch" else "train"


def workers(job, host):
    """The pids of host's workers: its cgroup's processes running the worker's program (not
    the agent, nor its worker reaper)."""
    with open(os.path.join(job.groups[host].path, "cgroup.procs")) as f:
        pids = [int(p) for p in f.read().split()]
    prog = "autoencoder.py" if fa_worker(job.args) == "torch" else "rdzv-train"
    out = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if any(os.path.basename(a.decode(errors="replace")) == prog for a in argv[:2]):
            out.append(pid)
    return out


def false_alarms(args, factor):
    job = Job(args, "report", f"noise{factor:g}".replace(".", "_"), noise=True, factor=factor,
              worker=fa_worker(args))
    rng, counts = random.Random(factor), {"hiccup": 0, "restart": 0}
    try:
        job.wait_log(r"generation 1 formed", 60)
        job.wait_rank0()
        t0 = time.monotonic()
        for at, what in noise_events(args.false_alarm, args.hiccup_every, args.restart_every):
            time.sleep(max(0, t0 + at - time.monotonic()))
            if what in ("slow", "fast"):  # every node slows together
                for g in ("a", "b"):
                    job.groups[g].quota(args.quota if what == "slow" else None)
                continue
            pids = workers(job, "a" if what == "restart" else rng.choice("ab"))
            if not pids:
                continue
            pid = rng.choice(pids)
            try:
                if what == "restart":
                    os.kill(pid, signal.SIGKILL)
                else:
                    os.kill(pid, signal.SIGSTOP)
                    time.sleep(args.hiccup)
                    os.kill(pid, signal.SIGCONT)
                counts[what] += 1
            except ProcessLookupError:
                pass
        time.sleep(max(0, t0 + args.false_alarm - time.monotonic()))
        n = len(re.findall(r"is a straggler", job.rdzvd_log()))
        job_st = job.status()
        r0 = job.rank0()
        return {"alarms": n, "step": r0[1] if r0 else None, "generation": job_st["generation"],
                "restarts": job_st["restart_count"], **counts}
    finally:
        job.close()


def throttle_words(args):
    if args.throttle == "stop":
        return (f"its workers stopped {args.stop_ms:g} ms of every {args.period_ms:g} ms "
                f"(SIGSTOP, SIGCONT)")
    return f"{args.quota} CPU"


def floats(s):
    return [float(x) for x in s.split(",") if x]


def main():
    global BUILD
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("build")
    ap.add_argument("--nproc", type=int, default=2, help="workers a node (default 2)")
    ap.add_argument("--ddp-ms", type=int, default=20,
                    help="--worker ddp: each step's forward (ms; straggler_ddp.py's)")
    ap.add_argument("--worker", choices=("train", "torch", "ddp", "both"), default="train",
                    help="both: the rdzv-train trials, then the torch ones, in one table")
    ap.add_argument("--window", type=float, default=10)
    ap.add_argument("--factor", type=float, default=1.3, help="--straggler-factor (1.3)")
    ap.add_argument("--quota", type=float, default=0.25, help="CPUs node b keeps (default 0.25)")
    ap.add_argument("--throttle", choices=("quota", "stop"), default="quota",
                    help="how node b is slowed: its cgroup's CPU --quota, or its workers "
                         "stopped --stop-ms of every --period-ms")
    ap.add_argument("--stop-ms", type=float, default=60)
    ap.add_argument("--period-ms", type=float, default=100)
    ap.add_argument("--healthy", type=float, default=15)
    ap.add_argument("--measure", type=float, default=15)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--modes", type=lambda v: v.split(","), default=["report", "aside"],
                    metavar="report,aside", help="the --on-straggler modes tried")
    ap.add_argument("--windows", type=floats, default=[], metavar="W,W,...",
                    help="throttle to named, one report trial (rdzv-train) at each window")
    ap.add_argument("--false-alarm", type=float, default=0, metavar="SECONDS")
    ap.add_argument("--factors", type=floats, default=[], metavar="F,F,...",
                    help="one --false-alarm run at each factor (default: --factor's)")
    ap.add_argument("--hiccup-every", type=float, default=20, metavar="SECONDS",
                    help="in the noise, a worker of node a or b stopped for --hiccup seconds")
    ap.add_argument("--hiccup", type=float, default=1.0, metavar="SECONDS")
    ap.add_argument("--restart-every", type=float, default=200, metavar="SECONDS",
                    help="in the noise, a worker of node a killed (in-place recovery)")
    ap.add_argument("--keep", action="store_true", help="keep each trial's directory")
    args = ap.parse_args()
    BUILD = os.path.abspath(args.build)
    os.environ.update(RDZV_SOURCE_ROOT=ROOT, RDZV_TEST_MS=str(args.ddp_ms),
                      RDZV_TEST_STOP=os.path.join(tempfile.gettempdir(), "rdzv-straggler-none"))
    if os.geteuid() != 0:
        sys.exit("straggler_bench.py: needs root (it makes CPU cgroups)")
    kinds = ("train", "torch") if args.worker == "both" else (args.worker,)
    rows = {(k, m): [r for i in range(args.trials) if (r := tried(args, k, m, i))]
            for k in kinds for m in args.modes} if args.trials else {}
    sweep = [(w, (tried(args, "train", "report", 0, window=w, measure=False) or
                  {"named": float("nan")})["named"]) for w in args.windows]
    if rows:
        print_trials(args, kinds, rows)
    if sweep:
        print()
        print(f"Throttle to named (rdzv-train, factor {args.factor:g}, one trial each): " +
              ", ".join(f"window {w:g} s: {t:.1f} s" for w, t in sweep))
    if args.false_alarm:
        print_false_alarms(args)


def print_trials(args, kinds, rows):
    def med(kind, mode, key, ratio=False):
        xs = [r[key] / r["healthy"] if ratio else r[key] for r in rows[(kind, mode)]]
        return statistics.median(xs) if xs else float("nan")

    print(f"rdzv-agent --straggler-window {args.window:g} --straggler-factor {args.factor:g}, "
          f"node b throttled to {throttle_words(args)}; median of {args.trials} trials (those "
          f"that failed are left out: {sum(args.trials - len(r) for r in rows.values())}), "
          f"{os.cpu_count()} CPUs")
    for (k, m), rs in rows.items():
        print(f"throttle to named, each trial ({k}, {m}): " +
              ", ".join(f"{r['named']:.1f} s" for r in rs))
    print()
    print("| worker | --on-straggler | healthy steps/s | throttled / healthy "
          "| after aside / healthy | throttle to named | throttle to training on the spare |")
    print("|---|---|---|---|---|---|---|")
    for k in kinds:
        if (k, "report") not in rows:
            print(f"| {k} | aside | {med(k, 'aside', 'healthy'):.2f} | - | "
                  f"{med(k, 'aside', 'after', True):.2f} | {med(k, 'aside', 'named'):.1f} s | "
                  f"{med(k, 'aside', 'replaced'):.1f} s |")
            continue
        print(f"| {k} | report | {med(k, 'report', 'healthy'):.2f} | "
              f"{med(k, 'report', 'throttled', True):.2f} | - | "
              f"{med(k, 'report', 'named'):.1f} s | - |")
        print(f"| {k} | aside | {med(k, 'aside', 'healthy'):.2f} | - | "
              f"{med(k, 'aside', 'after', True):.2f} | {med(k, 'aside', 'named'):.1f} s | "
              f"{med(k, 'aside', 'replaced'):.1f} s |")


def print_false_alarms(args):
    for factor in args.factors or [args.factor]:
        r = false_alarms(args, factor)
        print()
        print(f"False alarms in {args.false_alarm:g} s of a healthy job ({fa_worker(args)}, window "
              f"{args.window:g} s, factor {factor:g}; checkpoints every 50 steps, every node "
              f"throttled together to {args.quota} CPU 10 s a minute, {r['hiccup']} hiccups "
              f"of {args.hiccup:g} s, {r['restart']} workers killed): {r['alarms']} (rank 0 "
              f"at step {r['step']}, generation {r['generation']}, {r['restarts']} restarts)")
        note(f"factor {factor:g}: {r}")


if __name__ == "__main__":
    main()
