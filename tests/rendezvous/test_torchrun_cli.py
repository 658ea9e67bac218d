# SPDX-License-Identifier: Apache-2.0
"""rdzv-agent as a drop-in for torchrun's command line: every option of torch's own
parsers (torch.distributed.run and .launch) in both spellings, PET_* variables, and the command as
torchrun runs it ($PYTHON_EXEC -u SCRIPT, -m, --no-python; "--" keeps rdzv's meaning)."""
import os
import stat
import subprocess
import sys

from agenttest import AGENT, AgentTestCase, finish, main, start

PYTHON = os.environ.get("RDZV_TEST_PYTHON", "/usr/bin/python3")
SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts")

# A value rdzv-agent must accept for each torchrun option (by argparse dest).
SAMPLES = {
    "nnodes": "1:2", "nproc_per_node": "2", "rdzv_backend": "c10d",
    "rdzv_endpoint": "127.0.0.1:29400", "rdzv_id": "job", "rdzv_conf": "join_timeout=5,is_host=0",
    "max_restarts": "1", "monitor_interval": "0.1", "start_method": "spawn", "role": "trainer",
    "log_dir": "/tmp/rdzv-logs", "redirects": "3", "tee": "0:1,1:2", "node_rank": "0",
    "master_addr": "127.0.0.1", "master_port": "1234", "local_addr": "127.0.0.1",
    "local_ranks_filter": "0,1", "signals_to_handle": "SIGTERM,SIGUSR1", "shutdown_timeout": "5",
    "logs_specs": "default", "event_log_handler": "console", "numa_binding": "node",
}


def torch_parsers():
    try:
        import torch.distributed.launch as launch
        import torch.distributed.run as run
    except ImportError:
        return None
    return [run.get_args_parser(), launch.get_args_parser()]


def spellings(opt):
    if not opt.startswith("--"):
        return [opt]
    return sorted({opt, "--" + opt[2:].replace("_", "-"), "--" + opt[2:].replace("-", "_")})


class TestTorchrunOptions(AgentTestCase):
    def accepts(self, args, env=None):
        e = {k: v for k, v in os.environ.items() if not k.startswith(("PET_", "RDZV_", "SLURM_"))}
        e.update(env or {})
        return subprocess.run([AGENT, *args, "--help-options"], capture_output=True, text=True,
                              env=e, timeout=10)

    def test_every_option_of_torchs_parsers_in_both_spellings(self):
        parsers = torch_parsers()
        if parsers is None:
            self.skipTest(f"PyTorch is not installed for {sys.executable}")
        seen = 0
        for parser in parsers:
            for action in parser._actions:
                if not action.option_strings or action.dest == "help":
                    continue
                takes = action.nargs != 0
                for opt in action.option_strings:
                    for spelled in spellings(opt):
                        val = [SAMPLES.get(action.dest, "1")] if takes else []
                        r = self.accepts([spelled, *val])
                        self.assertNotIn("unknown option", r.stderr, spelled)
                        self.assertNotIn("ambiguous option", r.stderr, spelled)
                        if action.dest in SAMPLES or not takes:
                            self.assertEqual(r.returncode, 0, f"{spelled} {val}: {r.stderr}")
                        seen += 1
        self.assertGreater(seen, 30, "torch's parsers were read")

    def test_torch2_options_and_launch_forms(self):
        for args in (["--nproc-per-node", "cpu"], ["--nproc_per_node=auto"],
                     ["--pass-local-rank"], ["--pass-local-rank=underscore"],
                     ["--use_env"],
                     ["--rdzv-conf", "keep_alive_interval=2,keep_alive_max_attempt=2"],
                     ["--local-ranks-filter", "0"], ["--shutdown_timeout", "3"],
                     ["-m", "--no_python", "--run_path"], ["--virtual-local-rank"]):
            r = self.accepts(args)
            self.assertEqual(r.returncode, 0, f"{args}: {r.stderr}")

    def test_bad_values_and_etcd_are_refused_clearly(self):
        r = self.accepts(["--rdzv-backend", "etcd"])
        self.assertEqual(r.returncode, 2)
        self.assertIn("use --rdzv-backend c10d", r.stderr)
        for args in (["--rdzv_backend=etcd-v2"], ["--tee", "5"], ["--redirects", "0:9"],
                     ["--start-method", "thread"], ["--rdzv-conf", "nokey"],
                     ["--pass-local-rank=both"], ["--signals-to-handle", "TERM"]):
            r = self.accepts(args)
            self.assertEqual(r.returncode, 2, f"{args}: {r.stderr}")
            self.assertIn("invalid", r.stderr, args)

    def test_option_errors_list_the_valid_forms_and_the_candidates(self):
        r = self.accepts(["--nproc-per-node", "two"])
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("invalid --nproc-per-node 'two': expected a whole number from 1 to 1024, "
                      "gpu, cpu or auto", r.stderr)
        r = self.accepts(["--n", "2"])
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("ambiguous option '--n': --nnodes, --nproc", r.stderr)
        self.assertIn("--node-rank", r.stderr)

    def test_unknown_rdzv_conf_key_is_a_warning(self):
        r = self.accepts(["--rdzv-conf", "join_timeout=5,frobnicate=1"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("unknown key 'frobnicate'", r.stderr)


class TestTorchrunCommand(AgentTestCase):
    """--standalone: one node, an embedded rdzvd; what matters is how the command is run."""

    def run_agent(self, *args, env=None, rc=0):
        p = start([AGENT, *args], env={"PYTHON_EXEC": PYTHON, **(env or {})})
        code, out, err = finish(p, timeout=60)
        self.assertEqual(code, rc, err[-3000:])
        return out, err

    def read(self, path):
        with open(path) as f:
            return f.read().splitlines()

    def test_script_runs_as_python_exec_u_script_args(self):
        out = self.outdir()
        wrapper = os.path.join(out, "py")
        with open(wrapper, "w") as f:
            f.write(f'#!/bin/sh\necho "$@" > "{out}/pyargs.$RANK"\nexec {PYTHON} "$@"\n')
        os.chmod(wrapper, stat.S_IRWXU)
        script = os.path.join(SCRIPTS, "tr_args.py")
        self.run_agent("--standalone", "--nproc_per_node=2", script, out, "--batch_size=6144",
                       "--ddp", env={"PYTHON_EXEC": wrapper})
        for r in (0, 1):
            self.assertEqual(self.read(f"{out}/pyargs.{r}"),
                             [f"-u {script} {out} --batch_size=6144 --ddp"])
            self.assertEqual(self.read(f"{out}/args.{r}"), ["__main__", "--batch_size=6144",
                                                             "--ddp"])

    def test_module_and_pet_variables(self):
        out = self.outdir()
        self.run_agent("-m", "tr_args", out, "x",
                       env={"PET_STANDALONE": "1", "PET_NPROC_PER_NODE": "3",
                            "PYTHONPATH": SCRIPTS})
        for r in (0, 1, 2):
            self.assertEqual(self.read(f"{out}/args.{r}"), ["__main__", "x"])
        self.assertFalse(os.path.exists(f"{out}/args.3"), "PET_NPROC_PER_NODE=3: three workers")

    def test_no_python_and_double_dash_run_as_given(self):
        out = self.outdir()
        cmd = ["/bin/sh", "-c", f'echo "$0 $*" > {out}/sh.$RANK', "zero", "a"]
        self.run_agent("--standalone", "--no-python", *cmd)
        self.assertEqual(self.read(f"{out}/sh.0"), ["zero a"])
        os.unlink(f"{out}/sh.0")
        self.run_agent("--standalone", "--", *cmd)
        self.assertEqual(self.read(f"{out}/sh.0"), ["zero a"])

    def test_redirects_tee_and_local_ranks_filter_reach_the_workers(self):
        out = self.outdir()
        cmd = ["--no-python", "/bin/sh", "-c", 'echo "out$LOCAL_RANK"']
        stdout, _ = self.run_agent("--standalone", "--nproc_per_node=3", "--log_dir", out,
                                   "--local_ranks_filter=0,1", "-r", "1:1", *cmd)
        self.assertIn("[rank0]: out0", stdout)
        self.assertNotIn("out1", stdout, "-r 1:1: local rank 1's stdout to its file only")
        self.assertNotIn("out2", stdout, "--local-ranks-filter 0,1: rank 2 not on the console")
        logs = sorted(os.path.relpath(os.path.join(d, f), out)
                      for d, _, fs in os.walk(out) for f in fs if f == "stdout.log")
        self.assertEqual(len(logs), 3, logs)
        texts = set()
        for rel in logs:
            texts.update(self.read(os.path.join(out, rel)))
        self.assertEqual(texts, {"out0", "out1", "out2"})

    def test_launch_script_gets_its_local_rank_argument(self):
        out = self.outdir()
        script = os.path.join(SCRIPTS, "tr_launch.py")
        _, err = self.run_agent("--standalone", "--nproc_per_node=2", script, out, rc=2)
        self.assertIn("--local_rank", err, "without --pass-local-rank the script fails")
        self.run_agent("--standalone", "--nproc_per_node=2", "--pass-local-rank=underscore",
                       script, out, "--flag=u")
        self.run_agent("--standalone", "--nproc_per_node=2", "--pass-local-rank", "--use-env",
                       "--no-python", "/bin/true")
        self.assertEqual([self.read(f"{out}/launch.{r}") for r in (0, 1)], [["0 u"], ["1 u"]])


if __name__ == "__main__":
    main()
