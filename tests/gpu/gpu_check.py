# SPDX-License-Identifier: Apache-2.0
# gpu_check.py BUILD_DIR OUT_DIR: what CI cannot check, on a machine with a GPU, NCCL and a
# PyTorch 2.x (run it with that PyTorch's python3; tests/gpu/gpu-check.sh sets the libraries up):
#   1. rdzv-train on the GPU through rdzv-agent (NCCL id from the agent): its loss curve against
#      the CPU/gloo backend and against PyTorch with the same seed; bf16 and fp16 train;
#      the agent's default command (no command after --) picks the GPU;
#   2. a worker crash on the GPU: the agent restarts it with a fresh NCCL id and it resumes;
#   3. steady-state step throughput of rdzv-train against the same model in PyTorch (DDP, NCCL);
#   4. PyTorch 2.x clients against rdzvd: its TCPStore client op by op (torch2_store.py),
#      torchrun --rdzv-backend c10d and DDP under two rdzv-agents (the CI tests, with this
#      PyTorch through RDZV_TEST_PYTHON);
#   5. recovery in place on NCCL, one worker per GPU: rdzv.torch (examples/autoencoder.py,
#      backend="nccl") with a worker SIGKILLed, and one SIGSTOPped and failed by
#      --progress-timeout (the survivors abort their communicators and carry on, the same
#      processes to the end); rdzv-train --recovery inplace with a worker SIGKILLed. NCCL refuses
#      two ranks of one communicator on one GPU, so these need 2 GPUs: with fewer they are
#      recorded as not run;
#   6. the wheel (RDZV_WHEEL=path, built by tests/wheel-test.sh's pip wheel elsewhere) installed
#      into a venv of this python (its torch visible) and a job run with python -m rdzv.run;
#   7. the node's health checks with the real NVML: a healthy node passes, one GPU short fails.
# Writes OUT_DIR/gpu-check.json and ends with a table; exits 1 when any check failed (a check
# not run is listed as such and fails nothing).
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(HERE))
build, out_dir = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
AGENT = f"{build}/agent/rdzv-agent"
TRAIN = f"{build}/train/rdzv-train"
RDZVD = f"{build}/daemon/rdzvd"
PY = sys.executable
results, failures = [], []
os.makedirs(out_dir, exist_ok=True)
log = open(os.path.join(out_dir, "gpu-check.log"), "w")


def note(msg):
    print(msg, flush=True)
    log.write(msg + "\n")
    log.flush()


def record(name, ok, detail):
    """ok: True, False, or None (not run here, with the reason in detail)."""
    results.append({"check": name, "ok": ok, "detail": detail})
    note(f"{'ok  ' if ok else 'skip' if ok is None else 'FAIL'} {name}: {detail}")
    if ok is False:
        failures.append(name)


def run(cmd, timeout=300, env=None):
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                       env=dict(os.environ, **(env or {})))
    log.write(f"$ {' '.join(cmd)}\nrc={p.returncode} ({time.monotonic() - t0:.1f} s)\n"
              f"--- stdout\n{p.stdout[-20000:]}\n--- stderr\n{p.stderr[-20000:]}\n")
    log.flush()
    return p


def json_lines(text):
    """rank 0's JSON objects from an agent's relayed output ('[rank0]: {...}')."""
    objs = []
    for line in text.splitlines():
        m = re.match(r"^(?:\[rank0\]: )?(\{.*\})\s*$", line)
        if m:
            try:
                objs.append(json.loads(m.group(1)))
            except ValueError:
                pass
    return objs


def agent_job(worker, extra=(), timeout=300):
    """One standalone rdzv-agent with one worker per GPU; returns (rc, json lines, process)."""
    cmd = [AGENT, "--standalone", "--nproc", "1", "--log-level", "warn", *extra]
    if worker:
        cmd += ["--", *worker]
    p = run(cmd, timeout=timeout)
    return p.returncode, json_lines(p.stdout), p


def curve(objs):
    return {o["step"]: o["loss"] for o in objs if "step" in o and "loss" in o and "event" not in o}


def done(objs):
    return next((o for o in objs if o.get("event") == "done"), None)


def max_rel(a, b):
    """Largest relative difference of two loss curves over the logged steps where b's loss is
    above 1e-4 of its first: below that (the model fits its data to ~1e-8 here) both are
    rounding noise, and a relative difference says nothing."""
    steps = sorted(set(a) & set(b))
    if not steps:
        return float("inf"), 0
    floor = 1e-4 * b[steps[0]]
    steps = [s for s in steps if b[s] > floor]
    return max(abs(a[s] - b[s]) / b[s] for s in steps), len(steps)


def steady_sps(objs):
    """Median samples/s over the log windows after the first (start-up and warm-up excluded)."""
    w = [o["samples_per_s"] for o in objs if "step" in o and "event" not in o][1:]
    return statistics.median(w) if w else 0.0


# ---- environment ----
try:
    gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                          "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
except OSError as e:
    gpu = f"none (nvidia-smi: {e.strerror})"
import torch  # noqa: E402  (the PyTorch 2.x under test)

try:
    nccl = ".".join(map(str, torch.cuda.nccl.version()))
except Exception:  # a CPU-only PyTorch
    nccl = "none"
note(f"GPU: {gpu}; torch {torch.__version__} (CUDA {torch.version.cuda}, NCCL {nccl}); "
     f"python {sys.version.split()[0]}")
v = run([TRAIN, "--version"])
record("rdzv-train has the NCCL backend", "nccl" in v.stdout, v.stdout.strip())

# ---- 1. loss curves ----
small = ["--steps", "300", "--log-every", "10", "--seed", "0"]
rc_g, o_gpu, _ = agent_job([TRAIN, "--backend", "nccl", *small])
d = done(o_gpu)
record("rdzv-train nccl fp32 under rdzv-agent", rc_g == 0 and d is not None and
       d["backend"] == "cuda/nccl" and d["final_loss"] < d["first_loss"] * 0.5,
       f"rc {rc_g}, {d and d['backend']}, loss {d and d['first_loss']:.4g} -> "
       f"{d and d['final_loss']:.4g}" if d else f"rc {rc_g}, no done line")
rc_c, o_cpu, _ = agent_job([TRAIN, "--backend", "gloo", *small])
diff, n = max_rel(curve(o_gpu), curve(o_cpu))
record("loss curve: GPU/NCCL against CPU/gloo, same seed", rc_c == 0 and n >= 5 and diff < 1e-3,
       f"max relative difference {diff:.2e} over the {n} logged steps above 1e-4 of the first loss")
rc_t, o_t, _ = agent_job([PY, os.path.join(HERE, "torch_mlp.py"), *small])
diff_t, n_t = max_rel(curve(o_gpu), curve(o_t))
record("loss curve: rdzv-train GPU against PyTorch GPU, same seed",
       rc_t == 0 and n_t >= 5 and diff_t < 1e-3,
       f"max relative difference {diff_t:.2e} over the {n_t} logged steps above 1e-4 of the first "
       f"loss (torch rc {rc_t})")
fp32 = curve(o_gpu)
for prec in ("bf16", "fp16"):
    rc_p, o_p, _ = agent_job([TRAIN, "--backend", "nccl", "--precision", prec, *small])
    d = done(o_p)
    diff_p, n_p = max_rel(curve(o_p), fp32)
    ok = rc_p == 0 and d is not None and d["final_loss"] < d["first_loss"] * 0.5
    record(f"rdzv-train {prec} trains", ok,
           f"rc {rc_p}, loss {d['first_loss']:.4g} -> {d['final_loss']:.4g}; differs from fp32 "
           f"by up to {diff_p:.1%} over {n_p} steps" if d else f"rc {rc_p}, no done line")
# No command after --: the agent runs rdzv-train, which picks NCCL on a GPU. The agent looks
# for rdzv-train beside itself, then in the build tree.
rc_d, o_d, p_d = agent_job(None, ["--nproc", "gpu"])
d = done(o_d)
record("agent default command on a GPU node (--nproc gpu)",
       rc_d == 0 and d is not None and d["backend"] == "cuda/nccl",
       f"rc {rc_d}, backend {d and d['backend']}, world {d and d['world']}")

# ---- 2. restart on the GPU ----
ck = tempfile.mkdtemp(prefix="rdzv-gpu-ckpt-")
rc_r, o_r, p_r = agent_job([TRAIN, "--backend", "nccl", "--steps", "300", "--ckpt-dir", ck,
                            "--ckpt-every", "50", "--fail-at-step", "170", "--fail-rank", "0"],
                           ["--max-restarts", "1"])
resumed = next((o for o in o_r if o.get("event") == "resumed"), None)
d = done(o_r)
record("worker crash on the GPU: restarted with a fresh NCCL id, resumed from checkpoint",
       rc_r == 0 and resumed is not None and resumed.get("step") == 150 and d is not None and
       d["step"] == 300 and d["final_loss"] < d["first_loss"],
       f"rc {rc_r}, resumed at {resumed and resumed.get('step')}, done at {d and d['step']}")
shutil.rmtree(ck, ignore_errors=True)

# ---- 3. throughput against PyTorch ----
configs = [
    ("784-128-128-128-784, batch 64", ["--steps", "1000", "--log-every", "100"], []),
    ("4096-8192-8192-4096, batch 1024",
     ["--layers", "4096,8192,8192,4096", "--batch-size", "1024", "--samples", "4096",
      "--steps", "200", "--log-every", "20"], []),
]
perf = []
for label, args, _ in configs:
    for prec in ("fp32", "bf16"):
        rc1, o1, _ = agent_job([TRAIN, "--backend", "nccl", "--precision", prec, *args])
        rc2, o2, _ = agent_job([PY, os.path.join(HERE, "torch_mlp.py"), "--precision", prec,
                                *args])
        a, b = steady_sps(o1), steady_sps(o2)
        ratio = a / b if b else 0.0
        perf.append({"model": label, "precision": prec, "rdzv_train_samples_per_s": a,
                     "torch_samples_per_s": b, "ratio": ratio})
        record(f"throughput {label} {prec}", rc1 == 0 and rc2 == 0 and a > 0 and b > 0,
               f"rdzv-train {a:,.0f} samples/s, PyTorch {b:,.0f} samples/s: {ratio:.2f}x")

# ---- 4. PyTorch 2.x clients against rdzvd ----
port_file = os.path.join(tempfile.mkdtemp(), "port")
dp = subprocess.Popen([RDZVD, "--port", "0", "--bind", "127.0.0.1", "--port-file", port_file,
                       "-l", "warn"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
for _ in range(500):
    if os.path.exists(port_file) and open(port_file).read().endswith("\n"):
        break
    time.sleep(0.01)
port = open(port_file).read().strip()
p = run([PY, os.path.join(HERE, "torch2_store.py"), "127.0.0.1", port], timeout=120)
last = (p.stdout.strip().splitlines() or ["(no output)"])[-1]
record("PyTorch 2.x TCPStore client against rdzvd", p.returncode == 0, last)
dp.terminate()
dp.wait()
env = {"RDZV_TEST_PYTHON": PY, "RDZV_BUILD_ROOT": build, "RDZV_SOURCE_ROOT": SRC,
       "PYTHONPATH": os.path.join(SRC, "tests", "pylib")}
for name, path in (("torchrun --rdzv-backend c10d, 2 nodes x 2 gloo workers, rdzvd as store",
                    "tests/integration/test_torchrun.py"),
                   ("DDP (gloo) under two rdzv-agents, workers on the generation store",
                    "tests/rendezvous/test_ddp.py")):
    p = run([PY, os.path.join(SRC, path)], timeout=300, env=env)
    tail = (p.stdout + p.stderr).strip().splitlines()
    record(f"PyTorch {torch.__version__}: {name}", p.returncode == 0,
           tail[-1] if tail else f"rc {p.returncode}")

# ---- 5. recovery in place on NCCL ----
STARTED_RE = re.compile(r"started worker rank (\d+) \(local rank \d+, pid (\d+)\)")
EXITED_RE = re.compile(r"worker rank (\d+) \(local rank \d+, pid (\d+)\) "
                       r"(?:exited with status (\d+)|was killed by signal (\d+))")
AUTOENC = os.path.join(SRC, "examples", "autoencoder.py")
HIT = 60  # the fault comes once rank 0 reported this step


def inplace_job(name, worker, sig, nproc, extra=()):
    """One standalone agent, --recovery inplace, nproc workers (one per GPU); once rank 0 reports
    step HIT, the last rank gets sig. Checks: the agent exits 0, every other worker is the same
    process to the end and exits 0, only the hit rank is started again, rank 0 logs one
    'reformed' (world nproc, the state from a survivor) and a 'done'; no checkpoint is read."""
    errf = open(os.path.join(out_dir, name + ".agent.log"), "w+")
    cmd = [AGENT, "--standalone", "--nproc", str(nproc), "--log-level", "info", "--recovery",
           "inplace", "--max-restarts", "3", *extra, "--", *worker]
    log.write(f"$ {' '.join(cmd)}\n")
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=errf, text=True)
    killer = threading.Timer(300, p.kill)
    killer.start()
    objs, hit_pid, victim = [], None, nproc - 1
    for line in p.stdout:
        o = json_lines(line)
        objs += o
        if hit_pid is None and any(x.get("step", 0) >= HIT and "event" not in x for x in o):
            errf.flush()
            started = {int(r): int(pid) for r, pid in STARTED_RE.findall(open(errf.name).read())}
            hit_pid = started.get(victim)
            if hit_pid:
                os.kill(hit_pid, sig)
    rc = p.wait()
    killer.cancel()
    if sig == signal.SIGSTOP and hit_pid:
        try:
            os.kill(hit_pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
    text = open(errf.name).read()
    errf.close()
    starts = [(int(r), int(pid)) for r, pid in STARTED_RE.findall(text)]
    exits = {int(m.group(2)): (int(m.group(3)) if m.group(3) is not None else -int(m.group(4)))
             for m in EXITED_RE.finditer(text)}
    first = {}
    for r, pid in starts:
        first.setdefault(r, pid)
    again = sorted(r for r, pid in starts if first[r] != pid)
    survivors_ok = all(exits.get(first[r]) == 0 for r in first if r != victim)
    reformed = [o for o in objs if o.get("event") == "reformed"]
    d = done(objs)
    ok = (rc == 0 and hit_pid is not None and again == [victim] and survivors_ok and
          len(reformed) == 1 and reformed[0].get("world") == nproc and
          reformed[0].get("source") != victim and d is not None and
          not any(o.get("event") == "resumed" for o in objs))
    return ok, (f"rc {rc}, rank {victim} hit by {signal.Signals(sig).name} "
                f"(pid {hit_pid}), started again: {again}, survivors exit 0: {survivors_ok}, "
                f"reformed {reformed[:1]}, done at step {d and d.get('step')}")


ngpu = torch.cuda.device_count() if torch.cuda.is_available() else 0
inplace_cases = [
    ("rdzv.torch in place, NCCL, a worker SIGKILLed", "torch-kill",
     [PY, AUTOENC, "--backend", "nccl", "--steps", "200", "--log-every", "10"], signal.SIGKILL, ()),
    ("rdzv.torch in place, NCCL, a worker SIGSTOPped (--progress-timeout 2)", "torch-stop",
     [PY, AUTOENC, "--backend", "nccl", "--steps", "200", "--log-every", "10"], signal.SIGSTOP,
     ("--progress-timeout", "2")),
    ("rdzv-train --recovery inplace, NCCL, a worker SIGKILLed", "train-kill",
     [TRAIN, "--backend", "nccl", "--steps", "300", "--log-every", "10"], signal.SIGKILL, ()),
]
for label, name, worker, sig, extra in inplace_cases:
    if ngpu < 2:
        record(label, None, f"not run: {ngpu} GPU(s); NCCL refuses two ranks of one "
                            f"communicator on one GPU, and in place needs a survivor")
        continue
    ok, detail = inplace_job(name, worker, sig, ngpu, extra)
    record(f"{label}, {ngpu} workers", ok, detail)

# ---- 7. the node's health checks with the real NVML ----
# Every GPU given to the agent (--nproc gpu): NVML counts them, no uncorrectable ECC error, no
# retired page pending, no critical XID; a healthy node passes and the job runs. Then a check
# that asks for one GPU more than the node has (CUDA_VISIBLE_DEVICES naming ngpu + 1) fails it.
p = run([AGENT, "--standalone", "--nproc", "gpu", "--log-level", "info", "--health-interval",
         "1", "--", "/bin/sh", "-c", "sleep 3"], timeout=120)
record("health checks pass on a healthy GPU node (real NVML)",
       p.returncode == 0 and "NVML cannot be loaded" not in p.stderr,
       f"rc {p.returncode}: " + (p.stderr.strip().splitlines() or [""])[-1][-300:])
env = dict(os.environ, CUDA_VISIBLE_DEVICES=",".join(str(i) for i in range(ngpu + 1)))
p = run([AGENT, "--standalone", "--nproc", "1", "--", "/bin/true"], timeout=120, env=env)
record("health check: a GPU missing from NVML puts the node aside (exit 69)",
       p.returncode == 69
       and f"NVML sees {ngpu} GPU(s), the node should have {ngpu + 1}" in p.stderr,
       f"rc {p.returncode}: " + (p.stderr.strip().splitlines() or [""])[-1][-300:])

# ---- 6. the wheel, installed into this python ----
wheel = os.environ.get("RDZV_WHEEL")
if not wheel:
    record("the wheel in this python (python -m rdzv.run)", None,
           "not run: RDZV_WHEEL names no wheel (tests/wheel-test.sh builds one)")
else:
    venv = tempfile.mkdtemp(prefix="rdzv-gpu-venv-")
    run([PY, "-m", "venv", "--system-site-packages", venv])
    vpy = os.path.join(venv, "bin", "python")
    pi = run([vpy, "-m", "pip", "install", "--no-index", "--no-deps", wheel], timeout=120)
    backend, n = ("nccl", ngpu) if ngpu >= 2 else ("gloo", 2)
    p = run([vpy, "-m", "rdzv.run", "--standalone", "--nproc-per-node", str(n), AUTOENC,
             "--backend", backend, "--steps", "40", "--log-every", "10"], timeout=300)
    d = done(json_lines(p.stdout))
    record(f"the wheel in this python: python -m rdzv.run, {backend}",
           pi.returncode == 0 and p.returncode == 0 and d is not None,
           f"pip rc {pi.returncode}, job rc {p.returncode}, done at step {d and d.get('step')}")
    shutil.rmtree(venv, ignore_errors=True)

with open(os.path.join(out_dir, "gpu-check.json"), "w") as f:
    json.dump({"gpu": gpu, "torch": torch.__version__, "results": results, "throughput": perf},
              f, indent=1)
note("\n| model | precision | rdzv-train samples/s | PyTorch samples/s | ratio |")
note("|---|---|---|---|---|")
for r in perf:
    note(f"| {r['model']} | {r['precision']} | {r['rdzv_train_samples_per_s']:,.0f} | "
         f"{r['torch_samples_per_s']:,.0f} | {r['ratio']:.2f}x |")
skipped = sum(1 for r in results if r["ok"] is None)
note(f"\n{len(results) - len(failures) - skipped} passed, {len(failures)} failed, "
     f"{skipped} not run")
sys.exit(1 if failures else 0)
