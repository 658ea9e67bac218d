# SPDX-License-Identifier: Apache-2.0
"""rdzv-agent --standalone speaks like torchrun: at the default level its stderr has
the agent's own lines, not the embedded daemon's connection and job lifecycle, which is logged at
debug instead (and shows with --log-level debug). A plain rdzvd keeps logging it at info."""
import re
import unittest

import agenttest
from agenttest import AGENT, finish, start

# What the embedded daemon said at info before: connections, job events, shutdown.
LIFECYCLE = [r"conn \d+ \(", r"accepted on main listener", r"job=\S+ gen=\d+ created",
             r"job=\S+ gen=\d+ .*joined", r"generation \d+ formed", r"job=\S+ gen=\d+ removed",
             r"shutting down: closing \d+ connections"]


def run(*extra):
    p = start([AGENT, "--standalone", "--nproc", "2", *extra, "--", "/bin/echo", "hi"])
    return finish(p, timeout=60)


class TestStandaloneQuiet(agenttest.AgentTestCase):
    def test_default_level_hides_the_daemon_lifecycle(self):
        rc, out, err = run()
        self.assertEqual(rc, 0, err)
        self.assertEqual(out.count("hi"), 2, out)
        self.assertIn("standalone: embedded rdzvd on", err)
        self.assertRegex(err, r"job \S+ succeeded")
        for pat in LIFECYCLE:
            self.assertIsNone(re.search(pat, err), f"{pat!r} at the default level:\n{err}")

    def test_debug_level_shows_it(self):
        rc, _, err = run("--log-level", "debug")
        self.assertEqual(rc, 0, err)
        for pat in LIFECYCLE:
            self.assertRegex(err, r"\[debug\]: .*" + pat)

    def test_plain_rdzvd_still_logs_it_at_info(self):
        d = self.daemon()
        p = start(agenttest.agent_cmd(f"127.0.0.1:{d.port}", "--nnodes", "1", "--nproc", "1",
                                      "--rdzv-id", "loud", worker=["true"]))
        rc, _, err = finish(p, timeout=60)
        self.assertEqual(rc, 0, err)
        log = d.stop()
        for pat in (r"\[info\]: conn \d+ \(.*accepted on main listener",
                    r"\[info\]: job=loud gen=0 created"):
            self.assertRegex(log, pat)


if __name__ == "__main__":
    agenttest.main()
