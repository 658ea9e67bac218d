# SPDX-License-Identifier: Apache-2.0
"""rdzv-train's recovery in place on gloo, with this test playing the agent's part by
hand: ranks with a progress and a control channel against a real rdzvd's TCPStore; one rank
SIGKILLed (or a whole node's two), the survivors told the next generation on a fresh store
through their control channel, a replacement started fresh (no state, no checkpoint). Checks:
the survivors are the same processes and finish, the state comes from a survivor by broadcast
(the "reformed" event names it), no checkpoint is read, and the final loss and step count equal
an uninterrupted run's within floating-point noise (same seed). Also a node lost (4 -> 2 ranks)
and a node joining (2 -> 4)."""
import json
import os
import signal
import socket
import time
import unittest

import test_train as tt

STEPS = 150
ARGS = ["--steps", str(STEPS), "--log-every", "50"]


class Rank:
    """One rdzv-train process with its two channels (our ends: ctl_w, prog_r)."""

    def __init__(self, rank, world, port, generation, restart=0, args=ARGS):
        ctl_r, self.ctl_w = os.pipe()
        self.prog_r, prog_w = os.pipe()
        os.set_inheritable(ctl_r, True)
        os.set_inheritable(prog_w, True)
        env = tt.rank_env(rank, world, port, {
            "RDZV_CONTROL_FD": str(ctl_r), "RDZV_PROGRESS_FD": str(prog_w),
            "RDZV_GENERATION": str(generation),
            "TORCHELASTIC_RESTART_COUNT": str(restart),
            # An ASan build only: ASan's own teardown of a thread that libgloo (not instrumented)
            # started and ends when its context is replaced trips over its alternate signal stack
            # (a false stack-buffer-overflow in sigaltstack). Without one it is clean.
            "ASAN_OPTIONS": ":".join(filter(None, [os.environ.get("ASAN_OPTIONS", ""),
                                                   "use_sigaltstack=0"]))})
        self.p = tt.start(tt.SMALL + args, env, pass_fds=(ctl_r, prog_w))
        os.close(ctl_r)
        os.close(prog_w)
        self.pid = self.p.pid
        self.buf = b""

    def wait_step(self, step, timeout=60):
        """Read the progress channel until it reports step (or later)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            b = os.read(self.prog_r, 4096)
            if not b:
                break
            self.buf += b
            lines = [ln for ln in self.buf.split(b"\n")[:-1] if ln.startswith(b"step ")]
            if lines and int(lines[-1].split()[1]) >= step:
                return
        raise AssertionError("no progress report of step %d: %r" % (step, self.buf[-200:]))

    def tell(self, gen, rank, world, port):
        line = json.dumps({"op": "generation", "generation": gen, "rank": rank,
                           "world_size": world, "local_rank": rank,
                           "master_addr": "127.0.0.1", "master_port": port,
                           "restart_count": gen - 1})
        os.write(self.ctl_w, line.encode() + b"\n")

    def finish(self, timeout=120):
        try:
            res = tt.finish(self.p, timeout)
            while True:  # the rest of the progress reports (the writer has exited)
                b = os.read(self.prog_r, 65536)
                if not b:
                    break
                self.buf += b
            return res
        finally:
            os.close(self.ctl_w)
            os.close(self.prog_r)

    def steps(self):
        """The steps reported; the channel's first line is "control" (it follows the control
        channel, said before any step)."""
        lines = self.buf.decode().splitlines()
        assert lines[:1] == ["control"], lines[:3]
        return [int(line.split()[1]) for line in lines if line.startswith("step ")]


class InplaceTest(tt.rdzvtest.DaemonTestCase):
    def setUp(self):
        if not os.access(tt.TRAIN, os.X_OK):
            self.skipTest("rdzv-train not built at %s" % tt.TRAIN)

    def baseline(self, world):
        d = self.daemon()
        ps = [tt.start(tt.SMALL + ARGS, tt.rank_env(r, world, d.port)) for r in range(world)]
        res = [tt.finish(p, 120) for p in ps]
        for rank, (rc, out, err) in enumerate(res):
            self.assertEqual(rc, 0, "baseline rank %d: %s" % (rank, err))
        return tt.done_event(tt.events(res[0][1]))

    def run_inplace(self, world, killed, new_world):
        """world ranks on store 1; kill the ranks in killed once rank 0 reported step 20; tell
        the survivors generation 2 on store 2 with new_world ranks (survivors first, in
        order), and start the missing ones fresh. Returns (done event, reformed events, ranks)."""
        d1, d2 = self.daemon(), self.daemon()
        ranks = [Rank(r, world, d1.port, 1) for r in range(world)]
        survivors = [r for r in ranks if ranks.index(r) not in killed]
        ranks[0].wait_step(20)
        for k in killed:
            ranks[k].p.send_signal(signal.SIGKILL)
        for new_rank, r in enumerate(survivors):
            r.tell(2, new_rank, new_world, d2.port)
        fresh = [Rank(nr, new_world, d2.port, 2, restart=1)
                 for nr in range(len(survivors), new_world)]
        results = {}
        for r in ranks:
            rc, out, err = r.finish()
            results[r.pid] = (rc, out, err)
        for r in fresh:
            results[r.pid] = r.finish()
        for r in survivors + fresh:
            rc, out, err = results[r.pid]
            self.assertEqual(rc, 0, "pid %d: %s" % (r.pid, err))
            self.assertNotIn("resumed", out)
        for r in survivors:
            # The same process trained from step 1 to the end, across the failure: its
            # progress channel saw every step (a discarded one is reported once, when done).
            self.assertEqual(sorted(set(r.steps())), list(range(1, STEPS + 1)))
        for r in fresh:
            self.assertGreater(r.steps()[0], 19, "the replacement started where it failed")
            self.assertEqual(r.steps()[-1], STEPS)
        for k in killed:
            self.assertEqual(results[ranks[k].pid][0], -signal.SIGKILL)
        out0 = results[survivors[0].pid][1]
        objs = tt.events(out0)
        reformed = [o for o in objs if o.get("event") == "reformed"]
        return tt.done_event(objs), reformed, survivors

    def check_same_run(self, got, want):
        self.assertEqual(got["step"], want["step"])
        self.assertEqual(got["step"], STEPS)
        self.assertAlmostEqual(got["final_loss"], want["final_loss"],
                               delta=1e-4 * abs(want["final_loss"]) + 1e-7)

    def test_replace_one_worker(self):
        want = self.baseline(4)
        done, reformed, survivors = self.run_inplace(4, [1], 4)
        self.assertEqual(len(reformed), 1, reformed)
        self.assertEqual(reformed[0]["generation"], 2)
        self.assertEqual(reformed[0]["world"], 4)
        self.assertGreaterEqual(reformed[0]["step"], 19)
        self.assertIn(reformed[0]["source"], (0, 1, 2), "a survivor sent the state")
        self.check_same_run(done, want)

    def test_shrink_four_to_two(self):
        want = self.baseline(4)
        done, reformed, survivors = self.run_inplace(4, [2, 3], 2)
        self.assertEqual(len(reformed), 1, reformed)
        self.assertEqual(reformed[0]["world"], 2)
        self.assertEqual(done["world"], 2)
        self.check_same_run(done, want)

    def test_grow_two_to_four(self):
        # A node joins: nobody failed; the survivors see the new generation between steps.
        want = self.baseline(2)
        done, reformed, survivors = self.run_inplace(2, [], 4)
        self.assertEqual(len(reformed), 1, reformed)
        self.assertEqual(reformed[0]["world"], 4)
        self.assertIn(reformed[0]["source"], (0, 1))
        self.assertEqual(done["world"], 4)
        self.check_same_run(done, want)

    def test_hung_peer_is_left_at_once(self):
        # A peer that hangs (SIGSTOP: its sockets stay open, so no pair sees a closed socket)
        # blocks the others inside a collective. The new generation on the control channel
        # must take them out of it at once (gloo: every pair failed with an exception), not at
        # the collective's 60 s timeout.
        want = self.baseline(4)
        d1, d2 = self.daemon(), self.daemon()
        ranks = [Rank(r, 4, d1.port, 1) for r in range(4)]
        hung = ranks[3]
        try:
            ranks[0].wait_step(20)
            hung.p.send_signal(signal.SIGSTOP)
            time.sleep(0.5)  # the others are in a collective with it now
            stuck = ranks[0].steps()[-1]
            for r in (0, 1, 2):
                ranks[r].tell(2, r, 4, d2.port)
            fresh = Rank(3, 4, d2.port, 2, restart=1)
            t0 = time.monotonic()
            fresh.wait_step(stuck + 3, timeout=20)
            self.assertLess(time.monotonic() - t0, 20)
            results = [r.finish() for r in ranks[:3] + [fresh]]
        finally:
            hung.p.kill()
            hung.finish()
        for rc, out, err in results:
            self.assertEqual(rc, 0, err)
        self.assertIn("interrupted: the agent started a new generation",
                      "".join(err for rc, out, err in results[:3]))
        objs = tt.events(results[0][1])
        reformed = [o for o in objs if o.get("event") == "reformed"]
        self.assertEqual(len(reformed), 1, reformed)
        self.assertIn(reformed[0]["source"], (0, 1, 2))
        self.check_same_run(tt.done_event(objs), want)

    def test_store_left_behind_is_abandoned(self):
        # The job moved on while ranks were still forming a generation: a replacement still
        # connecting to a store that is gone (its generation ended), a survivor waiting in that
        # generation's rendezvous for a peer that never comes. Told the next generation, both
        # leave the old store at once (the control watcher cancels the store client), not after
        # their 60 s store timeout.
        want = self.baseline(2)
        d1, d3 = self.daemon(), self.daemon()
        with socket.socket() as s:  # a port nobody listens on: generation 2's closed store
            s.bind(("127.0.0.1", 0))
            gone = s.getsockname()[1]
        ranks = [Rank(r, 2, d1.port, 1) for r in range(2)]
        ranks[0].wait_step(20)
        ranks[1].p.send_signal(signal.SIGKILL)
        ranks[0].tell(2, 0, 2, gone)
        fresh = Rank(1, 2, gone, 2, restart=1)
        time.sleep(1.0)  # both are in generation 2's store waits now
        t0 = time.monotonic()
        ranks[0].tell(3, 0, 2, d3.port)
        fresh.tell(3, 1, 2, d3.port)
        fresh.wait_step(25, timeout=20)
        self.assertLess(time.monotonic() - t0, 20, "generation 3 formed without a store timeout")
        results = [ranks[0].finish(), fresh.finish()]
        self.assertEqual(ranks[1].finish()[0], -signal.SIGKILL)
        for rc, out, err in results:
            self.assertEqual(rc, 0, err)
        objs = tt.events(results[0][1])
        reformed = [o for o in objs if o.get("event") == "reformed"]
        self.assertEqual([o["generation"] for o in reformed], [3], objs)
        self.assertEqual(reformed[0]["source"], 0)
        self.check_same_run(tt.done_event(objs), want)


if __name__ == "__main__":
    unittest.main()
