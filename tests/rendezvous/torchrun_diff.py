# SPDX-License-Identifier: Apache-2.0
"""torchrun's meaning, by differential test.

Generates command lines from a seed, parses each with torch's own parser
(torch.distributed.run.get_args_parser(), Debian's torch 1.13) and torchrun's own resolution
(run()'s --standalone overrides, then config_from_args: parse_min_max_nnodes,
determine_local_world_size, the rendezvous config, get_rdzv_endpoint, the worker's command, plus
what the rendezvous handler checks first: a known backend, a static endpoint with a port, a c10d
endpoint that parses), then asks `rdzv-agent --print-launch` (RDZV_PRINT_LAUNCH=1, argv exactly
the line) and compares field by field: nnodes min/max, nproc, backend, standalone, endpoint,
run id, node rank, max restarts, and the worker's program and argv. A line torch refuses
(argparse's SystemExit, or an error of the resolution) must be refused by rdzv-agent too: exit
status 2 and one line on stderr. The few deliberate exceptions are listed in EXCEPTIONS, and each
is checked for what rdzv-agent does instead.

Options only torch 2.x has come from TORCH2_OPTIONS (marked so): lines in "2x" mode use them
(and the dash spellings of every option, which 1.13 lacks); they are parsed by the 1.13 parser
extended with that table, so that the rest of their meaning is still torch's own.

The interpreter: torchrun execs $PYTHON_EXEC, else its own sys.executable; rdzv-agent execs
$PYTHON_EXEC, else "python3" looked up in PATH. Most lines run with PYTHON_EXEC set (the same
string must come out); the others compare torch's sys.executable with rdzv's "python3", the
Python that a torchrun found on PATH runs under. --run-path: torchrun calls runpy.run_path(SCRIPT)
in its own interpreter with sys.argv = [SCRIPT, ARGS...]; rdzv-agent runs
`$PYTHON_EXEC -u -c RUNPY SCRIPT ARGS...`, which does the same; both are compared as
["<runpy>", SCRIPT, ARGS...].

Usage: torchrun_diff.py [--seed N] [--count N] [--jobs N] [--single N] [--show N] [--dump]
rdzv-agent reads the lines in batches (RDZV_PRINT_LAUNCH=batch: one process, one JSON array a
line), the first --single of them (100) also one process each with RDZV_PRINT_LAUNCH=1, which must
agree with the batch.
Exit status 0: no differences; 1: differences (each printed with the line, both parses and the
seed); 77: torch is not installed (skipped).
"""
import argparse
import concurrent.futures
import contextlib
import io
import json
import os
import random
import shlex
import subprocess
import sys
import time

AGENT = os.environ.get("RDZV_AGENT") or os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "build", "agent", "rdzv-agent")
PYEXEC = "/usr/bin/python3"

# Options only torch 2.x has (torch/distributed/run.py of 2.x), and how rdzv-agent reads them:
# accepted; none of them changes the fields compared here. Marked: torch 2.x only.
TORCH2_OPTIONS = {  # option (dash spelling) -> (takes a value, sample values)
    "--local-addr": (True, ["127.0.0.1", "node-a"]),
    "--logs-specs": (True, ["default"]),
    "--local-ranks-filter": (True, ["0", "0,1"]),
    "--signals-to-handle": (True, ["SIGTERM,SIGINT", "SIGUSR1"]),
    "--shutdown-timeout": (True, ["5", "30"]),
    "--event-log-handler": (True, ["console", "null"]),
    "--numa-binding": (True, ["node"]),
    "--virtual-local-rank": (False, []),
}

# Under torch 2.x, the options of TORCH2_OPTIONS its own parser lacks (newer than it): rdzv-agent
# accepts them, and they are listed as such in the output.
NEWER_THAN_THIS_TORCH = set()
TORCH_MAJOR = 0

# Deliberate, listed exceptions: lines torch accepts that rdzv-agent reads otherwise, and what
# rdzv-agent must do instead (checked). docs/guide/from-torchrun.md lists them too.
EXCEPTIONS = {
    "etcd": "--rdzv-backend etcd/etcd-v2: refused (etcd 3.6 removed the v2 API they use)",
    "raw-cmd": "-- COMMAND where COMMAND is no Python script (*.py) and none of -m, "
               "--run-path, --no-python is given: rdzv's own form, COMMAND runs as given, c10d "
               "at --endpoint unless a backend, --rdzv-endpoint or --master-* is given "
               "(torchrun: $PYTHON_EXEC -u COMMAND, which cannot be a Python file)",
    "range": "a value torch takes but no launch can use is refused at once: nproc < 1, a node "
             "rank outside the world (static), a port above 65535",
    "standalone-nodes": "--standalone with --nnodes MAX > 1: refused (torchrun waits for nodes "
                        "that cannot join: its run id is random)",
    "standalone-id": "--standalone keeps a given --rdzv-id (torchrun replaces it with a random "
                     "one); without one both pick a random id",
    "c10d-rank": "c10d: --node-rank is a demand (torchrun ignores it); one outside 0..MAX-1 is "
                 "refused",
    "port0-nodes": "an endpoint HOST:0 (torchrun: the agent hosts the store on a free port) with "
                   "--nnodes MAX > 1: refused (the other nodes cannot learn that port)",
}

SCRIPTS = ["train.py", "dir/train.py", "/abs/main.py", "t.py"]
MODULES = ["pkg.train", "mymod"]
PROGRAMS = ["/bin/echo", "echo", "train.sh", "./run"]
SCRIPT_ARGS = ["--nnodes", "3", "--", "-m", "x", "--lr=0.1", "-v", "--nproc_per_node", "gpu",
               "--standalone", "a b", "--batch_size=64", "-r", "1", "--no_python", "train.py"]


def values(dest, rng):
    """A value for option dest: mostly valid, sometimes one that both must refuse."""
    bad = rng.random() < 0.04
    v = {
        "nnodes": (["1", "2", "1:4", "2:2", "3:5", "1:1"], ["0", "4:2", "1:2:3", "x", "-1", ""]),
        "nproc_per_node": (["1", "2", "4", "8", "cpu", "auto"],
                           ["x", "gpu", "2.5", "", "0", "2000"]),
        "rdzv_backend": (["static", "c10d"], ["bogus", ""]),
        "rdzv_endpoint": (["localhost", "10.0.0.1:1234", "node-1:29400", "[::1]:5000",
                           "host.example.com", "127.0.0.1:29555", "localhost:0",
                           "127.0.0.1:0"], ["h:x", "h:70000"]),
        "rdzv_id": (["job1", "abc-123", "none", "J"], []),
        "rdzv_conf": (["join_timeout=5", "is_host=0,read_timeout=30", "last_call_timeout=1",
                       "timeout=60"], ["nokey", "a="]),
        "max_restarts": (["0", "1", "3", "10"], ["-1", "x", "1.5"]),
        "monitor_interval": (["0.1", "5", "1", "0.5", "2e-1"], ["x"]),
        "start_method": (["spawn", "fork", "forkserver"], ["thread"]),
        "role": (["trainer", "default", "w"], []),
        "log_dir": (["/tmp/logs", "logs"], []),
        "redirects": (["0", "1", "3", "0:1,1:2"], ["5", "x"]),
        "tee": (["0", "2", "3", "0:3"], ["9"]),
        "node_rank": (["0", "1", "2"], ["x", "-1"]),
        "master_addr": (["127.0.0.1", "10.1.2.3", "nodeA"], []),
        "master_port": (["1234", "29500", "29411", "0"], ["x", "70000"]),
    }.get(dest)
    if v is None:
        return "1"
    good, worse = v
    return rng.choice(worse) if bad and worse else rng.choice(good)


def torch_parser(mode):
    import torch.distributed.run as run
    p = run.get_args_parser()
    if mode == "2x":  # torch 2.x: dash spellings of every option, and the options only it has
        # (under torch 2.x itself, only those newer than it: NEWER_THAN_THIS_TORCH)
        have = set(p._option_string_actions)
        for a in list(p._actions):
            for s in list(a.option_strings):
                if s.startswith("--") and "_" in s:
                    d = "--" + s[2:].replace("_", "-")
                    if d not in have:
                        a.option_strings.append(d)
                        p._option_string_actions[d] = a
        for opt, (takes, _) in TORCH2_OPTIONS.items():
            if opt in have:
                continue
            if TORCH_MAJOR >= 2:
                NEWER_THAN_THIS_TORCH.add(opt)
            names = [opt] + [u for u in ["--" + opt[2:].replace("-", "_")] if u not in have]
            if takes:
                p.add_argument(*names, type=str, default=None)
            else:
                p.add_argument(*names, action="store_true")
    return p


def option_table(parser):
    """[(option strings, dest, takes a value)] from the parser's actions."""
    out = []
    torch2 = {o[2:].replace("-", "_") for o in TORCH2_OPTIONS}
    for a in parser._actions:
        if not a.option_strings or a.dest in ("help", *torch2):
            continue
        out.append((list(a.option_strings), a.dest, a.nargs != 0))
    return out


def unambiguous_prefixes(opt, all_opts):
    """The prefixes of a long option argparse resolves to it (allow_abbrev)."""
    out = []
    for n in range(3, len(opt)):
        pre = opt[:n]
        if pre in all_opts:
            continue
        matches = [o for o in all_opts if o.startswith(pre)]
        if len(matches) == 1:
            out.append(pre)
    return out


def gen_line(rng, mode, table, all_opts):
    """One command line: (argv list, tags)."""
    tags = set()
    words = []
    n_opts = rng.randint(0, 7)
    flags_left = {"module": False, "no_python": False, "run_path": False}
    kind = rng.choices(["script", "module", "nopython", "runpath"], [6, 2, 2, 1])[0]
    tags.add(kind)
    if kind == "module":
        flags_left["module"] = True
    elif kind == "nopython":
        flags_left["no_python"] = True
    elif kind == "runpath":
        flags_left["run_path"] = True
    items = []
    for _ in range(n_opts):
        strings, dest, takes = rng.choice(table)
        if dest in ("module", "no_python", "run_path"):
            continue
        items.append((strings, dest, takes))
    for d, want in flags_left.items():
        if want or (d == "run_path" and rng.random() < 0.03):
            items.append(([s for strings, dd, _ in table if dd == d for s in strings], d, False))
    if rng.random() < 0.15:
        items.append((["--standalone"], "standalone", False))
    if rng.random() < 0.2:  # an option repeated
        if items:
            items.append(rng.choice(items))
            tags.add("repeated")
    rng.shuffle(items)
    for strings, dest, takes in items:
        s = rng.choice(strings)
        if mode == "113" and s.startswith("--") and rng.random() < 0.3:
            pre = unambiguous_prefixes(s, all_opts)
            if pre:
                s = rng.choice(pre)
                tags.add("prefix")
        if not takes:
            if len(s) == 2 and words and len(words[-1]) == 2 and words[-1][0] == "-" \
                    and words[-1][1] != "-" and rng.random() < 0.5:
                words[-1] += s[1]  # -m clustered with another short flag
                tags.add("cluster")
            else:
                words.append(s)
            continue
        v = values(dest, rng)
        if len(s) == 2:  # -r / -t
            form = rng.choice(["sep", "glued", "eq"])
            if form == "glued" and kind == "module" and rng.random() < 0.5:
                s = "-m" + s[1]  # -mr3: -m clustered with -r and its value
                tags.add("cluster")
            words += [s, v] if form == "sep" else [s + v] if form == "glued" else [s + "=" + v]
        elif rng.random() < 0.5 or (v.startswith("-") and not v[1:].isdigit()):
            words.append(s + "=" + v)
        else:
            words += [s, v]
    if mode == "2x":
        for _ in range(rng.randint(1, 3)):
            opt = rng.choice(list(TORCH2_OPTIONS))
            takes, samples = TORCH2_OPTIONS[opt]
            if rng.random() < 0.5:
                opt = "--" + opt[2:].replace("-", "_")
            pos = rng.randint(0, len(words))
            if takes:
                ins = [opt + "=" + rng.choice(samples)] if rng.random() < 0.5 \
                    else [opt, rng.choice(samples)]
            else:
                ins = [opt]
            # keep an option's separate value with it: insert before an option word only
            while pos < len(words) and not words[pos].startswith("-"):
                pos += 1
            words[pos:pos] = ins
    if rng.random() < 0.25:
        words.append("--")
        tags.add("-- before")
    if kind == "module":
        words.append(rng.choice(MODULES))
    elif kind == "nopython":
        words.append(rng.choice(PROGRAMS))
    elif kind == "runpath":
        words.append(rng.choice(["/abs/main.py", "rel.py"]))
    else:
        words.append(rng.choice(SCRIPTS + (PROGRAMS if rng.random() < 0.1 else [])))
    args = [rng.choice(SCRIPT_ARGS) for _ in range(rng.randint(0, 5))]
    if rng.random() < 0.2:
        args.insert(0, "--")
    if "--" in args:
        tags.add("-- in args")
    return words + args, tags


def torch_resolve(argv, mode, pyexec):
    """torchrun's meaning of argv: a dict of the compared fields, or ("refused", why)."""
    import torch.distributed.run as run
    from torch.distributed.elastic.rendezvous.utils import parse_rendezvous_endpoint
    parser = torch_parser(mode)
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            args = parser.parse_args(argv)
    except SystemExit:
        return ("refused", "argparse: " + err.getvalue().strip().splitlines()[-1])
    given_id = args.rdzv_id
    if args.standalone:  # torch.distributed.run.run()
        args.rdzv_backend = "c10d"
        args.rdzv_endpoint = "localhost:29400"
        args.rdzv_id = "<random>"
    env = dict(os.environ)
    try:
        if pyexec:
            os.environ["PYTHON_EXEC"] = pyexec
        else:
            os.environ.pop("PYTHON_EXEC", None)
        with contextlib.redirect_stderr(io.StringIO()):
            config, cmd, cmd_args = run.config_from_args(args)
        # What the rendezvous handler checks before anything else (its registry, the
        # endpoint's form); a line that fails there is refused by torchrun at start.
        backend = config.rdzv_backend
        if backend not in ("static", "c10d", "etcd", "etcd-v2"):
            raise ValueError(f"rendezvous backend {backend!r} is not registered")
        default_port = -1 if backend == "static" else 29400
        host, port = parse_rendezvous_endpoint(config.rdzv_endpoint, default_port)
        if backend == "static" and port == -1:
            raise ValueError("static: port is absent in the endpoint")
    except (ValueError, RuntimeError, AssertionError, TypeError) as e:
        return ("refused", f"{type(e).__name__}: {e}")
    finally:
        os.environ.clear()
        os.environ.update(env)
    if callable(cmd):
        prog = ["<runpy>", *cmd_args]
    else:
        prog = [cmd, *cmd_args]
    # static: StaticTCPRendezvous's world is max_nodes (static_tcp_rendezvous.py), MIN unused
    min_nodes = config.max_nodes if backend == "static" else config.min_nodes
    return {
        "nnodes_min": min_nodes, "nnodes_max": config.max_nodes,
        "nproc": config.nproc_per_node, "backend": backend, "standalone": bool(args.standalone),
        "endpoint": f"[{host}]:{port}" if ":" in host else f"{host}:{port}",
        "run_id": config.run_id, "node_rank": args.node_rank,
        "max_restarts": config.max_restarts, "argv": prog, "given_id": given_id,
    }


def rdzv_env(pyexec):
    e = {k: v for k, v in os.environ.items()
         if not k.startswith(("PET_", "RDZV_", "SLURM_", "OMPI_", "PBS_", "PYTHON_EXEC"))}
    e["RDZV_PRINT_LAUNCH"] = "1"
    e["CUDA_VISIBLE_DEVICES"] = ""  # Debian's torch has no CUDA: no GPUs for either
    if pyexec:
        e["PYTHON_EXEC"] = pyexec
    return e


def rdzv_batch(corpus_part, pyexec):
    """RDZV_PRINT_LAUNCH=batch: one rdzv-agent process for many lines (one JSON array a line
    in, one JSON object a line out), the same code path as one --print-launch run each."""
    env = rdzv_env(pyexec)
    env["RDZV_PRINT_LAUNCH"] = "batch"
    inp = "".join(json.dumps(argv) + "\n" for argv in corpus_part)
    r = subprocess.run([AGENT], input=inp, capture_output=True, text=True, env=env, timeout=600)
    out = r.stdout.splitlines()
    if r.returncode != 0 or len(out) != len(corpus_part):
        raise SystemExit(f"rdzv-agent batch failed ({r.returncode}): {r.stderr[-2000:]}")
    res = []
    for ln in out:
        j = json.loads(ln)
        if "status" in j:
            errs = [e for e in j["stderr"].splitlines() if ": warning: " not in e]
            res.append(("refused", j["status"], errs))
        else:
            res.append(j)
    return res


def rdzv_resolve(argv, pyexec):
    r = subprocess.run([AGENT, *argv], capture_output=True, text=True, env=rdzv_env(pyexec),
                       timeout=60)
    errs = [ln for ln in r.stderr.splitlines() if ": warning: " not in ln]
    if r.returncode != 0:
        return ("refused", r.returncode, errs)
    try:
        return json.loads(r.stdout)
    except ValueError:
        return ("bad-output", r.returncode, r.stdout, r.stderr)


def exception_of(argv, t):
    """The listed exception a torch-accepted line falls under, or None."""
    if t["backend"] in ("etcd", "etcd-v2"):
        return "etcd"
    if t["nproc"] < 1 or t["nproc"] > 1024:
        return "range"
    if t["standalone"] and t["nnodes_max"] > 1:
        return "standalone-nodes"
    if not t["standalone"] and t["endpoint"].endswith(":0") and t["nnodes_max"] > 1:
        return "port0-nodes"
    if t["backend"] == "static" and not 0 <= t["node_rank"] < t["nnodes_max"]:
        return "range"
    if t["backend"] == "c10d" and not t["standalone"] and \
            not 0 <= t["node_rank"] < t["nnodes_max"]:
        return "c10d-rank"
    return None


def raw_form(argv, t):
    """Is argv rdzv's "-- COMMAND" form: "--" right before a script that is no Python script
    (not *.py, no -m, no --run-path, no --no-python)?"""
    a = t["argv"]
    if a[0] == "<runpy>" or len(a) < 3 or a[1] != "-u" or a[2] == "-m":
        return False  # --run-path, --no-python, -m: torchrun's meaning
    script = a[2]
    for i in range(1, len(argv)):
        if argv[i] == script and argv[i - 1] == "--" and "--" not in argv[:i - 1]:
            return not script.endswith(".py")
    return False


def compare(argv, mode, pyexec, t, r):
    """A list of differences (empty: the same meaning)."""
    if isinstance(t, tuple):
        if isinstance(r, tuple) and r[0] == "refused":
            if r[1] != 2 or len(r[2]) != 1:
                return [f"refused, but not with status 2 and one line: {r}"]
            return []
        return ["torch refuses, rdzv-agent accepts"]
    exc = exception_of(argv, t)
    if exc in ("etcd", "range", "standalone-nodes", "c10d-rank", "port0-nodes"):
        if isinstance(r, tuple) and r[0] == "refused" and r[1] == 2 and len(r[2]) == 1:
            return []
        return [f"exception '{exc}': rdzv-agent must refuse with one line"]
    if isinstance(r, tuple):
        if raw_form(argv, t) and r[0] == "refused" and r[1] == 2 and len(r[2]) == 1 and \
                "pass --endpoint" in r[2][0]:
            return []  # exception 'raw-cmd': rdzv's "-- COMMAND" asks for rdzvd's --endpoint
        return ["torch accepts, rdzv-agent refuses"]
    diffs = []
    want = dict(t)
    got = dict(r)
    if bool(got.get("raw_cmd")) != raw_form(argv, t):
        diffs.append(f"raw_cmd {got.get('raw_cmd')}: the '-- COMMAND' rule says otherwise")
    elif got.get("raw_cmd"):  # exception 'raw-cmd': COMMAND runs as given
        want["argv"] = want["argv"][2:]
    if want["standalone"]:  # a local rendezvous; exception 'standalone-id': a given id is kept
        gid = want["given_id"]
        ok = got["run_id"] == gid if gid not in ("none", "") else \
            got["run_id"] == "none" or got["run_id"].startswith("standalone-")
        want["run_id"] = got["run_id"] if ok else gid
        want["endpoint"] = got["endpoint"] if got["endpoint"] == "127.0.0.1:0" else \
            "127.0.0.1:0"
    if want["backend"] == "c10d" or want["standalone"]:
        # torchrun ignores --node_rank with c10d; rdzv: null, or the same rank as a demand
        if got["node_rank"] is None or got["node_rank"] == want["node_rank"]:
            want["node_rank"] = got["node_rank"]
    g = list(got["argv"])
    if len(g) >= 4 and g[1:3] == ["-u", "-c"] and "runpy.run_path" in g[3]:
        g = ["<runpy>", *g[4:]]
    if not pyexec and g and g[0] == "python3" and want["argv"] and \
            want["argv"][0] == sys.executable:
        g[0] = sys.executable
    got["argv"] = g
    for k in ("nnodes_min", "nnodes_max", "nproc", "backend", "standalone", "endpoint",
              "run_id", "node_rank", "max_restarts", "argv"):
        if want[k] != got.get(k):
            diffs.append(f"{k}: torch {want[k]!r} rdzv {got.get(k)!r}")
    return diffs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=int(os.environ.get("TORCHRUN_DIFF_SEED", "17")))
    ap.add_argument("--count", type=int, default=2000)
    ap.add_argument("--jobs", type=int, default=max(2, os.cpu_count() or 1))
    ap.add_argument("--single", type=int, default=100,
                    help="lines also run as one rdzv-agent process each")
    ap.add_argument("--show", type=int, default=20, help="differences printed at most")
    ap.add_argument("--dump", action="store_true", help="print the corpus, one line each")
    opts = ap.parse_args()
    # No GPUs for either side (Debian's torch has no CUDA; a GPU machine's torch would count
    # them): nproc gpu is refused by both, auto means the CPUs (os.cpu_count() and
    # sysconf(_SC_NPROCESSORS_ONLN) are the same number).
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    try:
        import torch
        import torch.distributed.run  # noqa: F401
    except ImportError:
        print(f"torch is not installed for {sys.executable}: skipped")
        return 77
    global TORCH_MAJOR
    TORCH_MAJOR = int(torch.__version__.split(".")[0])
    print(f"torch {torch.__version__} ({sys.executable}): its own parser and resolution")
    t0 = time.monotonic()
    rng = random.Random(opts.seed)
    tables = {}
    for mode in ("113", "2x"):
        p = torch_parser(mode)
        tables[mode] = (option_table(p), [s for s in p._option_string_actions if
                                          s.startswith("--")])
    corpus, kinds = [], {}
    for _ in range(opts.count):
        mode = "2x" if rng.random() < 0.2 else "113"
        argv, tags = gen_line(rng, mode, *tables[mode])
        pyexec = PYEXEC if rng.random() < 0.8 else None
        corpus.append((argv, mode, pyexec))
        for tag in tags | {"torch " + mode} | ({"PYTHON_EXEC unset"} if not pyexec else set()):
            kinds[tag] = kinds.get(tag, 0) + 1
    if opts.dump:
        for argv, mode, pyexec in corpus:
            print(mode, "PYTHON_EXEC=" + (pyexec or ""), shlex.join(argv))
        return 0
    torch_side = [torch_resolve(argv, mode, pyexec) for argv, mode, pyexec in corpus]
    # Most lines in batches (fast under ASan too); the first --single lines also one process
    # each, which must agree with the batch.
    chunks = []
    for pyexec in (PYEXEC, None):
        idx = [i for i, c in enumerate(corpus) if c[2] == pyexec]
        per = max(1, -(-len(idx) // max(1, opts.jobs // 2)))
        chunks += [(idx[k:k + per], pyexec) for k in range(0, len(idx), per)]
    rdzv_side = [None] * len(corpus)
    with concurrent.futures.ThreadPoolExecutor(opts.jobs) as ex:
        done = ex.map(lambda ch: rdzv_batch([corpus[i][0] for i in ch[0]], ch[1]), chunks)
        for (idx, _), res in zip(chunks, done):
            for i, r in zip(idx, res):
                rdzv_side[i] = r
        single = list(ex.map(lambda c: rdzv_resolve(c[0], c[2]), corpus[:opts.single]))
    for (argv, _, pyexec), b, one in zip(corpus, rdzv_side, single):
        if not isinstance(b, tuple) and not isinstance(one, tuple):
            b, one = dict(b, run_id=""), dict(one, run_id="")  # standalone's are random
        if b != one:
            print(f"BATCH AND SINGLE RUN DISAGREE (seed {opts.seed}): {shlex.join(argv)}\n"
                  f"    batch:  {b}\n    single: {one}")
            return 1
    ndiff = 0
    counts = {"accepted": 0, "refused": 0}
    for (argv, mode, pyexec), t, r in zip(corpus, torch_side, rdzv_side):
        counts["refused" if isinstance(t, tuple) else "accepted"] += 1
        diffs = compare(argv, mode, pyexec, t, r)
        exc = None if isinstance(t, tuple) else exception_of(argv, t)
        if not isinstance(t, tuple) and (r[0] == "refused" if isinstance(r, tuple) else
                                         r.get("raw_cmd")) and raw_form(argv, t):
            exc = "raw-cmd"
        if exc:
            kinds["exception " + exc] = kinds.get("exception " + exc, 0) + 1
        if diffs:
            ndiff += 1
            if ndiff <= opts.show:
                print(f"DIFFERENCE (seed {opts.seed}, torch {mode}, "
                      f"PYTHON_EXEC={pyexec or '(unset)'}): {shlex.join(argv)}")
                for d in diffs:
                    print("   ", d)
                print("    torch:", t)
                print("    rdzv: ", r)
    dt = time.monotonic() - t0
    print("lines by kind: " + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())))
    print(f"{len(corpus)} lines (seed {opts.seed}; torch accepts {counts['accepted']}, "
          f"refuses {counts['refused']}): {ndiff} differences, {dt:.1f} s")
    if NEWER_THAN_THIS_TORCH:
        print("options newer than this torch (accepted by rdzv-agent, read with the table's "
              "meaning): " + ", ".join(sorted(NEWER_THAN_THIS_TORCH)))
    return 1 if ndiff else 0


if __name__ == "__main__":
    sys.exit(main())
