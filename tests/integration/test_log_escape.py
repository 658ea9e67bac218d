#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# test_log_escape.py: a run id, node id or host with newlines and terminal controls cannot forge
# or split rdzvd's log lines: every event is one line, with the peer's
# strings escaped (\n, \r, \xNN); rdzvctl status prints them escaped too, the status page
# HTML-escaped (control characters as the text \xNN), /metrics as Prometheus label values.

import re
import subprocess

from authtest import JOIN, JOINED, Peer
from metricstest import daemon_with_metrics, http_get
from rdzvtest import RDZVCTL, DaemonTestCase, main

FORGED = "\n2026-01-01T00:00:00.000Z rdzvd[error]: forged by "
LINE_RE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z "
                     r"rdzvd\[(error|warn|info|debug|trace)\]: ")


def evil_join(suffix=""):
    return {"run_id": "run" + FORGED + "run_id" + suffix, "node_id": "node" + FORGED + "node_id",
            "host": "host\r\x1b[2K<b>&" + FORGED + "host", "nproc": 1, "node_rank": -1,
            "min": 2, "max": 2, "last_call_ms": 100, "max_restarts": 0, "nccl": "off",
            "nccl_ids": 1, "rank_hint": False, "heartbeat_timeout_ms": 60000,
            "join_timeout_ms": 600000, "scale_up_now": False}


class LogEscape(DaemonTestCase):

    def test_status_outputs_escape_peer_strings(self):
        d, mport = daemon_with_metrics(self)
        p = Peer(d.port)
        self.addCleanup(p.close)
        p.hello()
        p.send(JOIN, evil_join('"\\'))
        op, joined = p.recv_json()
        self.assertEqual(op, JOINED, joined)

        out = subprocess.run([RDZVCTL, "-e", f"127.0.0.1:{d.port}", "status"],
                             capture_output=True, timeout=10)
        self.assertEqual(out.returncode, 0, out.stderr)
        text = out.stdout.decode()
        self.assertNotRegex(text, r"[\x00-\x09\x0b-\x1f\x7f]", "a raw control character")
        for line in text.splitlines():
            self.assertFalse(line.startswith("2026-01-01"), "a forged line: " + line)
        self.assertIn("job run\\n2026-01-01T00:00:00.000Z rdzvd[error]: forged by run_id", text)
        self.assertIn("host\\r\\x1b[2K<b>&", text)

        page = http_get(mport, "/")
        self.assertNotIn("<b>", page)
        # Control characters visible as \xNN, never raw (they reached the HTML raw).
        self.assertNotRegex(page, r"[\x00-\x09\x0b-\x1f\x7f]", "a raw control character")
        self.assertIn("host\\x0d\\x1b[2K&lt;b&gt;&amp;\\x0a2026-01-01", page)
        self.assertIn("run\\x0a2026-01-01T00:00:00.000Z rdzvd[error]: forged by run_id", page)
        metrics = http_get(mport, "/metrics")
        for line in metrics.splitlines():
            self.assertTrue(line.startswith(("#", "rdzvd_")), "a broken metrics line: " + line)
        self.assertIn('job="run\\n2026-01-01T00:00:00.000Z rdzvd[error]: forged by run_id\\"'
                      '\\\\"', metrics)

    def test_join_with_control_characters_logs_one_escaped_line_per_event(self):
        d = self.daemon()
        body = evil_join()
        p = Peer(d.port)
        self.addCleanup(p.close)
        p.hello()
        p.send(JOIN, body)
        op, joined = p.recv_json()
        self.assertEqual(op, JOINED, joined)
        mark = d.mark()
        p.close()  # the member is gone: another event naming the job and the host
        d.wait_log(r"forged by host", since=mark)
        d.stop()
        text = d.log()
        for line in text.splitlines():
            self.assertRegex(line, LINE_RE, "a log line that rdzvd did not start")
            self.assertNotRegex(line, r"[\x00-\x1f\x7f]", "a raw control character")
            self.assertFalse(line.startswith("2026-01-01T00:00:00.000Z"), "a forged line")
        self.assertEqual(text.count("\n"), len(text.splitlines()))
        self.assertIn("job=run\\n2026-01-01T00:00:00.000Z rdzvd[error]: forged by run_id", text)
        self.assertIn("host\\r\\x1b[2K<b>&\\n2026-01-01T00:00:00.000Z rdzvd[error]: forged by "
                      "host", text)


if __name__ == "__main__":
    main()
