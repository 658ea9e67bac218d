# SPDX-License-Identifier: Apache-2.0
"""rdzv-train end to end: two gloo ranks by hand against a real rdzvd, two under
rdzv-agent --standalone, checkpoint resume (also with another world size), the fault drill, a
SIGKILLed peer, the nccl backend without a GPU, and the one-line errors."""
import gzip
import json
import os
import signal
import struct
import subprocess
import tempfile
import time
import unittest

import rdzvtest

BUILD = rdzvtest.BUILD_ROOT
TRAIN = os.environ.get("RDZV_TRAIN") or os.path.join(BUILD, "train", "rdzv-train")
AGENT = os.environ.get("RDZV_AGENT") or os.path.join(BUILD, "agent", "rdzv-agent")

# Small and quick: 256 synthetic samples, global batch 32, a narrow MLP.
SMALL = ["--backend", "gloo", "--samples", "256", "--batch-size", "32",
         "--layers", "784,64,784", "--log-every", "10"]


def clean_env(extra=None):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("RDZV_TRAIN_", "TORCHELASTIC_", "MASTER_", "RDZV_NCCL"))
           and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update(extra or {})
    return env


def start(args, env, **kw):
    p = subprocess.Popen([TRAIN] + args, env=env, stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         preexec_fn=rdzvtest.die_with_parent(), **kw)
    return rdzvtest.track(p)


def finish(p, timeout=60):
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        rdzvtest.kill_proc(p)
        out, err = p.communicate()
        raise AssertionError("rdzv-train did not finish within %ds:\n%s"
                             % (timeout, err.decode(errors="replace")[-3000:]))
    return p.returncode, out.decode(errors="replace"), err.decode(errors="replace")


def events(stdout, prefix=""):
    objs = []
    for line in stdout.splitlines():
        if line.startswith(prefix + "{"):
            objs.append(json.loads(line[len(prefix):]))
    return objs


def done_event(objs):
    ds = [o for o in objs if o.get("event") == "done"]
    assert len(ds) == 1, "exactly one done event in %r" % objs
    return ds[0]


def rank_env(rank, world, port, extra=None):
    e = {"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank),
         "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    e.update(extra or {})
    return clean_env(e)


class TrainTest(rdzvtest.DaemonTestCase):
    def setUp(self):
        if not os.access(TRAIN, os.X_OK):
            self.skipTest("rdzv-train not built at %s" % TRAIN)

    def tmpdir(self):
        d = tempfile.TemporaryDirectory(prefix="rdzv-train-test-")
        self.addCleanup(d.cleanup)
        return d.name

    def run_world(self, d, world, args, extra_env=None, timeout=90):
        ps = [start(SMALL + args, rank_env(r, world, d.port, extra_env)) for r in range(world)]
        return [finish(p, timeout) for p in ps]

    def test_two_ranks_by_hand_train(self):
        d = self.daemon()
        res = self.run_world(d, 2, ["--steps", "60"])
        for rank, (rc, out, err) in enumerate(res):
            self.assertEqual(rc, 0, "rank %d: %s" % (rank, err))
        self.assertEqual(res[1][1], "", "only rank 0 prints progress")
        objs = events(res[0][1])
        steps = [o for o in objs if "step" in o and "event" not in o]
        self.assertEqual([o["step"] for o in steps], [10, 20, 30, 40, 50, 60])
        for o in steps:
            self.assertEqual(o["world"], 2)
            self.assertGreater(o["samples_per_s"], 0)
        done = done_event(objs)
        self.assertEqual(done["steps"], 60)
        self.assertLess(done["final_loss"], 0.5 * done["first_loss"], "it trained")
        self.assertGreater(done["time_s"], 0)

    def test_agent_standalone_two_workers(self):
        p = subprocess.Popen([AGENT, "--standalone", "--nproc", "2", "--",
                              TRAIN, "--backend", "gloo", "--steps", "200"],
                             env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             start_new_session=True)
        rdzvtest.track(p, group=True)
        rc, out, err = finish(p, timeout=120)
        self.assertEqual(rc, 0, err[-3000:])
        objs = events(out, prefix="[rank0]: ")
        self.assertNotIn("[rank1]: {", out, "rank 1 prints no progress")
        done = done_event(objs)
        self.assertEqual(done["steps"], 200)
        self.assertEqual(done["world"], 2)
        self.assertLess(done["final_loss"], 0.5 * done["first_loss"])
        self.assertEqual(objs[0]["step"], 10)

    def check_restarted_job(self, out, err, world):
        objs = events(out, prefix="[rank0]: ")
        resumed = [o for o in objs if o.get("event") == "resumed"]
        self.assertEqual([o["step"] for o in resumed], [150], "resumed once, at step 150")
        done = done_event(objs)
        self.assertEqual(done["step"], 300, "reached step 300")
        self.assertEqual(done["steps"], 150, "the second attempt ran steps 151..300")
        self.assertEqual(done["world"], world)
        first = next(o for o in objs if "loss" in o and "event" not in o)
        self.assertLess(done["final_loss"], 0.5 * first["loss"], "less than half its first loss")
        self.assertIn("restarting", err)

    def test_agent_restart_resumes_from_checkpoint(self):
        # The fault drill of CI: a fault drill at step 170, one restart, resume at 150, finish 300.
        ckpt = self.tmpdir()
        p = subprocess.Popen([AGENT, "--standalone", "--nproc", "2", "--max-restarts", "1",
                              "--grace", "5", "--", TRAIN, "--backend", "gloo", "--steps", "300",
                              "--ckpt-dir", ckpt, "--ckpt-every", "50", "--fail-at-step", "170",
                              "--fail-rank", "1"],
                             env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             start_new_session=True)
        rdzvtest.track(p, group=True)
        rc, out, err = finish(p, timeout=240)
        self.assertEqual(rc, 0, err[-3000:])
        self.check_restarted_job(out, err, 2)

    def test_two_agents_by_hand_restart_resumes(self):
        # The same job with 2 agents of 2 workers each, started by hand against a real rdzvd.
        d = self.daemon()
        ckpt = self.tmpdir()
        ps = []
        for _ in range(2):
            p = subprocess.Popen([AGENT, "--endpoint", "127.0.0.1:%d" % d.port, "--rdzv-id",
                                  "train-hand", "--nnodes", "2", "--nproc", "2",
                                  "--max-restarts", "1", "--grace", "5", "--last-call", "1",
                                  "--", TRAIN, "--backend", "gloo", "--steps", "300",
                                  "--ckpt-dir", ckpt, "--ckpt-every", "50", "--fail-at-step",
                                  "170", "--fail-rank", "1"],
                                 env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 start_new_session=True)
            rdzvtest.track(p, group=True)
            ps.append(p)
        res = [finish(p, timeout=300) for p in ps]
        for rc, out, err in res:
            self.assertEqual(rc, 0, err[-3000:])
        out = "".join(r[1] for r in res)
        err = "".join(r[2] for r in res)
        self.check_restarted_job(out, err, 4)

    def test_checkpoint_resume_with_other_world_sizes(self):
        d = self.daemon()
        ck = self.tmpdir()
        res = self.run_world(d, 2, ["--steps", "40", "--ckpt-every", "20", "--ckpt-dir", ck])
        for rc, out, err in res:
            self.assertEqual(rc, 0, err)
        self.assertFalse(any(o.get("event") == "resumed" for o in events(res[0][1])))
        self.assertEqual(sorted(f for f in os.listdir(ck) if f.startswith("ckpt-")),
                         ["ckpt-000000000020.bin", "ckpt-000000000040.bin"])
        # One process now: it continues at step 40.
        rc, out, err = finish(start(SMALL + ["--steps", "60", "--ckpt-every", "20",
                                             "--ckpt-dir", ck], clean_env()))
        self.assertEqual(rc, 0, err)
        objs = events(out)
        self.assertEqual(objs[0], {**objs[0], "event": "resumed", "step": 40})
        done = done_event(objs)
        self.assertEqual((done["steps"], done["step"]), (20, 60))
        # And four ranks from there (the global batch of 32 splits 4 ways).
        res = self.run_world(d, 4, ["--steps", "70", "--ckpt-dir", ck])
        for rc, out, err in res:
            self.assertEqual(rc, 0, err)
        objs = events(res[0][1])
        self.assertEqual((objs[0]["event"], objs[0]["step"], objs[0]["world"]),
                         ("resumed", 60, 4))
        self.assertEqual(done_event(objs)["step"], 70)
        self.assertIn("ckpt-000000000070.bin", os.listdir(ck), "a final checkpoint")
        # A corrupt newest checkpoint is skipped with a warning; the one before is used.
        with open(os.path.join(ck, "ckpt-000000000070.bin"), "r+b") as f:
            f.seek(300)
            b = f.read(1)
            f.seek(300)
            f.write(bytes([b[0] ^ 1]))
        rc, out, err = finish(start(SMALL + ["--steps", "61", "--ckpt-dir", ck], clean_env()))
        self.assertEqual(rc, 0, err)
        self.assertIn("skipped 1 invalid checkpoint file", err)
        self.assertEqual(events(out)[0]["step"], 60)

    def test_fail_drill_then_resume_from_last_checkpoint(self):
        ck = self.tmpdir()
        args = SMALL + ["--steps", "200", "--ckpt-every", "50", "--ckpt-dir", ck,
                        "--fail-at-step", "170", "--fail-rank", "0"]
        rc, out, err = finish(start(args, clean_env({"TORCHELASTIC_RESTART_COUNT": "0"})))
        self.assertEqual(rc, 1, err)
        self.assertIn("failing at step 170", err)
        self.assertEqual(max(o["step"] for o in events(out)), 160)
        # The restarted attempt does not fail again, and resumes at the last checkpoint.
        rc, out, err = finish(start(args, clean_env({"TORCHELASTIC_RESTART_COUNT": "1"})))
        self.assertEqual(rc, 0, err)
        objs = events(out)
        self.assertEqual((objs[0]["event"], objs[0]["step"]), ("resumed", 150))
        done = done_event(objs)
        self.assertEqual((done["steps"], done["step"]), (50, 200))

    def test_fail_drill_on_one_rank_fails_the_other(self):
        d = self.daemon()
        res = self.run_world(d, 2, ["--steps", "100", "--fail-at-step", "30", "--fail-rank",
                                    "1"], timeout=30)
        self.assertEqual(res[1][0], 1, res[1][2])
        self.assertIn("failing at step 30", res[1][2])
        self.assertNotEqual(res[0][0], 0, "rank 0 notices its peer is gone")
        self.assertIn("gloo", res[0][2])

    def test_sigkilled_peer_makes_the_other_exit(self):
        d = self.daemon()
        args = ["--steps", "100000000", "--log-every", "1"]
        ps = [start(SMALL + args, rank_env(r, 2, d.port)) for r in range(2)]
        # Wait until rank 0 reports training steps, then kill rank 1 outright.
        deadline = time.monotonic() + 30
        seen = b""
        while time.monotonic() < deadline and seen.count(b"\n") < 5:
            line = ps[0].stdout.readline()
            if not line:
                break
            seen += line
        self.assertGreaterEqual(seen.count(b"\n"), 5, "rank 0 never trained: %r" % seen)
        ps[1].send_signal(signal.SIGKILL)
        t0 = time.monotonic()
        rc, out, err = finish(ps[0], timeout=30)
        elapsed = time.monotonic() - t0
        self.assertNotEqual(rc, 0)
        self.assertLess(elapsed, 15, "rank 0 took %.1fs to notice" % elapsed)
        self.assertIn("gloo", err)
        self.assertIn("exiting", err)
        self.assertEqual(len([line for line in err.splitlines() if line.strip()]), 1,
                         "one clear line: %r" % err)
        finish(ps[1])

    def test_closed_stdout_ends_with_one_line(self):
        # SIGPIPE is ignored (gloo's writes to a dead peer must not kill a survivor silently), so
        # a reader that stops, as head does, ends the trainer by EPIPE with one line saying so.
        p = start(SMALL + ["--steps", "100000000", "--log-every", "1"], clean_env())
        self.assertTrue(p.stdout.readline().startswith(b"{"))
        p.stdout.close()
        t0 = time.monotonic()
        try:
            err = p.stderr.read().decode(errors="replace")
            rc = p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            rdzvtest.kill_proc(p)
            raise AssertionError("rdzv-train went on training with its standard output closed")
        self.assertLess(time.monotonic() - t0, 15)
        self.assertEqual(rc, 1, "exit status 1, not a signal: %r" % err)
        self.assertEqual(err.strip().splitlines(), ["rdzv-train: rank 0: standard output closed "
                                                    "(a reader such as head stopped reading); "
                                                    "exiting"])

    def test_nccl_backend_without_a_gpu(self):
        rc, out, err = finish(start(["--backend", "nccl", "--steps", "1"], clean_env()))
        if rc == 0:
            self.skipTest("a CUDA device is present")
        self.assertEqual(rc, 1)
        self.assertTrue(err.startswith("rdzv-train: --backend nccl needs a CUDA device: "), err)
        self.assertEqual(len(err.strip().splitlines()), 1, err)
        ver = subprocess.run([TRAIN, "--version"], capture_output=True, text=True).stdout
        if "nccl" not in ver:
            self.assertIn("built without the CUDA/NCCL backend", err)

    def test_default_backend_runs_without_gpu(self):
        # No arguments at all is a sensible job: synthetic data, auto backend, 200 steps.
        rc, out, err = finish(start([], clean_env()), timeout=120)
        if "cuda" in out:
            self.skipTest("a CUDA device is present")
        self.assertEqual(rc, 0, err)
        done = done_event(events(out))
        self.assertEqual((done["steps"], done["world"], done["backend"]), (200, 1, "cpu/single"))
        self.assertLess(done["final_loss"], 0.5 * done["first_loss"])

    def test_mnist_gz_and_plot(self):
        dd = self.tmpdir()
        n, rows, cols = 64, 28, 28
        pix = bytes(((i * 31 + k * 7) % 256) if (k % 28) < 14 else 0
                    for i in range(n) for k in range(rows * cols))
        with gzip.open(os.path.join(dd, "train-images-idx3-ubyte.gz"), "wb") as f:
            f.write(struct.pack(">IIII", 0x803, n, rows, cols) + pix)
        png = os.path.join(dd, "loss.png")
        rc, out, err = finish(start(["--data", "mnist:" + dd, "--layers", "784,32,784",
                                     "--batch-size", "16", "--steps", "30", "--loss", "rmse",
                                     "--lr", "0.003", "--betas", "0.9,0.99", "--plot", png,
                                     "--backend", "gloo"], clean_env()))
        self.assertEqual(rc, 0, err)
        done = done_event(events(out))
        self.assertLess(done["final_loss"], done["first_loss"])
        with open(png, "rb") as f:
            head = f.read(24)
        self.assertEqual(head[:8], b"\x89PNG\r\n\x1a\n")
        self.assertEqual(struct.unpack(">II", head[16:24]), (800, 500))

    def test_linear_model_and_env_options(self):
        rc, out, err = finish(start(["--layers", "1000,100,1000", "--activation", "none",
                                     "--samples", "64", "--batch-size", "16"],
                                    clean_env({"RDZV_TRAIN_STEPS": "12",
                                               "RDZV_TRAIN_LOG_EVERY": "4",
                                               "RDZV_TRAIN_BACKEND": "gloo"})))
        self.assertEqual(rc, 0, err)
        objs = events(out)
        self.assertEqual([o["step"] for o in objs if "event" not in o], [4, 8, 12])
        self.assertEqual(done_event(objs)["steps"], 12)

    def test_clear_errors(self):
        missing = os.path.join(self.tmpdir(), "nope")
        cases = [
            (["--layers", "784"], {}, "bad --layers '784'"),
            (["--layers", "784,abc,784"], {}, "bad --layers"),
            (["--layers", "100,10,50"], {}, "must start and end with the sample size 100"),
            (["--data", "mnist:" + missing], {}, "no MNIST images in '%s'" % missing),
            (["--data", "imagenet"], {}, "bad --data 'imagenet'"),
            (["--batch-size", "30", "--backend", "gloo"],
             {"WORLD_SIZE": "4", "RANK": "1", "MASTER_ADDR": "127.0.0.1",
              "MASTER_PORT": "1"}, "multiple of the world size 4"),
            (["--backend", "gloo"], {"WORLD_SIZE": "2", "RANK": "0"},
             "MASTER_ADDR is not set"),
            (["--backend", "gloo", "--precision", "bf16"], {}, "--precision bf16 needs the GPU"),
            (["--backend", "tpu"], {}, "bad --backend 'tpu'"),
            (["--betas", "0.9"], {}, "bad --betas"),
            (["--steps", "0"], {}, "nothing to do"),
            ([], {"WORLD_SIZE": "2", "RANK": "2"}, "RANK=2 is not below WORLD_SIZE=2"),
            (["--bogus"], {}, "see rdzv-train --help"),
        ]
        for args, env, want in cases:
            with self.subTest(args=args, env=env):
                rc, out, err = finish(start(args, clean_env(env)), timeout=30)
                self.assertNotEqual(rc, 0)
                self.assertIn(want, err)
                self.assertTrue(err.startswith("rdzv-train"), err)
                self.assertEqual(out, "")

    def test_unreachable_store_times_out(self):
        rc, out, err = finish(start(["--backend", "gloo", "--timeout", "1"],
                                    rank_env(0, 2, 1)), timeout=30)
        self.assertEqual(rc, 1)
        self.assertIn("cannot reach the job's store at 127.0.0.1:1", err)

    def test_help_and_version(self):
        r = subprocess.run([TRAIN, "--help"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0)
        for opt in ["--layers", "--activation", "--loss", "--precision", "--backend", "--lr",
                    "--betas", "--data", "--samples", "--batch-size", "--steps", "--epochs",
                    "--seed", "--log-every", "--ckpt-dir", "--ckpt-every", "--plot",
                    "--fail-at-step", "--fail-rank", "--timeout", "--version", "RDZV_TRAIN_"]:
            self.assertIn(opt, r.stdout)
        r = subprocess.run([TRAIN, "--version"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0)
        self.assertRegex(r.stdout, r"^rdzv-train \d+\.\d+\.\d+ \(backends: gloo( nccl)?\)\n$")


if __name__ == "__main__":
    unittest.main(verbosity=2)
