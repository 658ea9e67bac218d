# SPDX-License-Identifier: Apache-2.0
"""rdzv-agent when the system refuses it a pipe at start-up (results of
uv_*_init not acted on). fail-pipe.so makes the Nth pipe2() of the agent fail with EMFILE. For
every N the agent must either say what failed and exit 1, or run as usual (here: say it is
joining an unreachable rdzvd, and end with 128+15 on the SIGTERM sent then). It must never exit
without a word, nor die of a signal of its own."""
import os
import select
import signal
import time
import unittest

import agenttest

FAIL_PIPE = os.environ.get("RDZV_FAIL_PIPE_SO")
ASAN_OPTIONS = ":".join(filter(None, [os.environ.get("ASAN_OPTIONS", ""),
                                      "verify_asan_link_order=0"]))


@unittest.skipUnless(FAIL_PIPE and os.path.exists(FAIL_PIPE), "fail-pipe.so not built")
class TestStartFailures(agenttest.AgentTestCase):
    def run_agent(self, n):
        p = agenttest.start(agenttest.agent_cmd("127.0.0.1:1", "--nnodes", "1", "--rdzv-id", "fp",
                                                "--connect-timeout", "30", worker=["true"]),
                            env={"LD_PRELOAD": FAIL_PIPE, "RDZV_FAIL_PIPE_AT": str(n),
                                 # An ASan build wants its runtime first; the shim is only ours.
                                 "ASAN_OPTIONS": ASAN_OPTIONS})
        # Until it exits, or says it is joining: its signal handlers are set by then, so the
        # SIGTERM is an agent's to answer (not a wall-clock guess: a busy machine may take
        # seconds to get there, and a SIGTERM before the handlers kills it plainly).
        seen = b""
        deadline = time.monotonic() + 60
        while b"joining job fp at " not in seen:
            left = deadline - time.monotonic()
            self.assertGreater(left, 0, "pipe %d failed: the agent neither exited nor joined "
                                        "within 60 s:\n%s" % (n, seen.decode(errors="replace")))
            if select.select([p.stderr], [], [], left)[0]:
                got = os.read(p.stderr.fileno(), 65536)
                if not got:
                    break  # it exited (or closed its stderr): its status says which
                seen += got
        if b"joining job fp at " in seen:
            os.kill(p.pid, signal.SIGTERM)
        rc, out, err = agenttest.finish(p, timeout=30)
        return rc, out, seen.decode(errors="replace") + err

    def test_a_failed_pipe_is_reported_or_harmless(self):
        # pipe 1 is libuv's process-wide signal lock, made by the first uv_loop_init: libuv
        # itself aborts when it cannot have it, before any agent code could act.
        outcomes = []
        for n in range(2, 9):
            rc, _, err = self.run_agent(n)
            outcomes.append((n, rc))
            self.assertIn(rc, (1, 128 + signal.SIGTERM), f"pipe {n} failed: exit {rc}\n{err}")
            if rc == 1:
                self.assertRegex(err, r"rdzv-agent.*(error|failed)",
                                 f"pipe {n} failed: exit 1 without saying why:\n{err!r}")
            else:
                self.assertIn("received SIGTERM from outside (the scheduler or someone stopped "
                              "this node)", err)
        # The sweep reached past start-up: some run got as far as waiting for rdzvd.
        self.assertIn(128 + signal.SIGTERM, [rc for _, rc in outcomes], outcomes)


if __name__ == "__main__":
    agenttest.main()
