#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# test_rdzvd_cli.py: rdzvd's command line and start-up. A user mistake (a bad value, an
# unknown option, options that contradict each other, a file that can't be used) gets a
# one-line message that says what to do and a non-zero exit; a file rdzvd merely reports to
# (--port-file, --metrics-port-file, --ready-fd) that can't be written is a warning, and rdzvd
# serves anyway; the limits rdzvd derives from the open-file limit are the ones it says.

import os
import re
import resource
import select
import signal
import socket
import subprocess
import tempfile
import time

from rdzvtest import (HOST, RDZVD, Client, DaemonTestCase, Daemon, die_with_parent,
                      fresh_client_works, kill_proc, main, track)

LOG_RE = Daemon.LOG_RE
T_EXIT = 30.0  # generous: a loaded 2-core machine, maybe under ASan


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("RDZVD_")}
    env.update(extra)
    return env


class Started:
    """An rdzvd started here (not through Daemon: some of these tests take --port-file or
    --ready-fd away from it). The port comes from its stdout line 'rdzvd listening on ...'."""

    LISTEN_RE = re.compile(r"^rdzvd listening on \S+ port (\d+)$", re.M)

    def __init__(self, testcase, args, preexec=None, pass_fds=(), env=None):
        self.dir = tempfile.mkdtemp(prefix="rdzvtest-cli-")
        self.err_path = os.path.join(self.dir, "err")
        self.out_path = os.path.join(self.dir, "out")
        self._err = open(self.err_path, "wb")
        self._out = open(self.out_path, "wb")

        def pre():
            die_with_parent()()
            if preexec:
                preexec()
        self.proc = track(subprocess.Popen(
            [RDZVD, "--bind", HOST, "-l", "info"] + list(args), stdin=subprocess.DEVNULL,
            stdout=self._out, stderr=self._err, env=env or clean_env(), preexec_fn=pre,
            pass_fds=pass_fds))
        testcase.addCleanup(self.cleanup)
        self.port = None

    def cleanup(self):
        kill_proc(self.proc)
        for f in (self._err, self._out):
            if not f.closed:
                f.close()
        for name in os.listdir(self.dir):
            os.unlink(os.path.join(self.dir, name))
        os.rmdir(self.dir)

    def err(self):
        self._err.flush()
        with open(self.err_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def wait_port(self, timeout=T_EXIT):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with open(self.out_path) as f:
                m = self.LISTEN_RE.search(f.read())
            if m:
                self.port = int(m.group(1))
                return self.port
            if self.proc.poll() is not None:
                raise AssertionError("rdzvd exited with %s before listening:\n%s"
                                     % (self.proc.returncode, self.err()))
            time.sleep(0.02)
        raise AssertionError("rdzvd did not listen within %.0fs:\n%s" % (timeout, self.err()))

    def wait_log(self, level, pattern, timeout=T_EXIT):
        deadline = time.monotonic() + timeout
        rx = re.compile(pattern)
        while True:
            for line in self.err().splitlines():
                m = LOG_RE.match(line)
                if m and m.group(1) == level and rx.search(m.group(2)):
                    return line
            if time.monotonic() >= deadline:
                raise AssertionError("no %s line matching %r within %.0fs:\n%s"
                                     % (level, pattern, timeout, self.err()))
            time.sleep(0.02)

    def stop(self):
        """SIGTERM: it must exit 0."""
        self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(timeout=T_EXIT)
        if rc != 0:
            raise AssertionError("rdzvd exited %d after SIGTERM:\n%s" % (rc, self.err()))


class PortOnly:
    """What fresh_client_works needs of a daemon: connect()."""

    def __init__(self, port):
        self.port = port

    def connect(self, dialect="modern"):
        return Client(self.port, dialect=dialect)


class CommandLine(DaemonTestCase):

    def run_rdzvd(self, *args, env=None, pass_fds=()):
        """Run rdzvd expecting it to exit by itself; (rc, stdout, stderr)."""
        p = subprocess.run([RDZVD] + list(args), stdin=subprocess.DEVNULL, capture_output=True,
                           text=True, env=env or clean_env(), timeout=T_EXIT, pass_fds=pass_fds)
        return p.returncode, p.stdout, p.stderr

    def assert_usage_error(self, args, needle, env=None, rc=2, pass_fds=()):
        """rdzvd args: exit rc, nothing on stdout, one stderr line naming the problem (needle)
        and what to do (see rdzvd --help, or the option to change)."""
        code, out, err = self.run_rdzvd(*args, env=env, pass_fds=pass_fds)
        self.assertEqual(code, rc, "rdzvd %r: exit %d, stderr %r" % (args, code, err))
        self.assertEqual(out, "", args)
        # (A coverage build's libgcov may add its own complaints; they are not rdzvd's.)
        lines = [ln for ln in err.splitlines() if not ln.startswith(("libgcov", "profiling:"))]
        self.assertEqual(len(lines), 1, "rdzvd %r: expected one line, got %r" % (args, err))
        self.assertIn(needle, lines[0], args)
        self.assertTrue(lines[0].startswith("rdzvd: "), lines[0])
        self.assertNotIn("Usage", err)
        return lines[0]

    # ---- values rdzvd.c checks itself ----

    def test_bad_legacy_dialect(self):
        for val in ("3.0", "modern", "", "2.0x"):
            with self.subTest(val=val):
                line = self.assert_usage_error(["--legacy", val], "expected 2.0, 2.1 or none")
                self.assertIn("--legacy '%s'" % val, line)
                self.assertIn("rdzvd --help", line)

    def test_legacy_none_and_21_are_reported(self):
        d = self.daemon("--legacy", "none")
        d.wait_log(r"legacy clients: refused\)")
        d = self.daemon("--legacy", "2.1")
        d.wait_log(r"legacy clients: 2\.1\)")

    def test_bad_metrics_port(self):
        for val in ("65536", "-1", "http", "80x"):
            with self.subTest(val=val):
                self.assert_usage_error(["--metrics-port", val], "expected 0..65535")

    def test_bad_fsync_mode(self):
        line = self.assert_usage_error(["--fsync", "sometimes"], "expected always, everysec or no")
        self.assertIn("'sometimes'", line)
        for mode in ("always", "everysec", "no"):  # the valid ones are taken
            self.daemon("--fsync", mode).stop()

    def test_bad_exit_when_idle(self):
        for val in ("0", "-5", "abc", "5:", ":5", "5:0", "5:-1", "5:2x", "5x", "2e6",
                    "5:2e6", "nan", "inf"):
            with self.subTest(val=val):
                self.assert_usage_error(["--exit-when-idle", val],
                                        "expected SEC or SEC:FIRST_SEC, each > 0")

    def test_exit_when_idle_first_deadline(self):
        # SEC above the default first deadline (180 s): the first one is SEC too.
        d = self.daemon("--exit-when-idle", "500")
        d.wait_log(r"exiting once no agent has been connected for 500\.0 s "
                   r"\(none came: 500\.0 s\)")
        d = self.daemon("--exit-when-idle", "7:3.5")
        d.wait_log(r"for 7\.0 s \(none came: 3\.5 s\)")
        d = self.daemon("--exit-when-idle", "7")
        d.wait_log(r"for 7\.0 s \(none came: 180\.0 s\)")

    def test_exit_when_idle_below_a_millisecond_still_exits(self):
        # 0.1 ms rounds to 0 ms; rdzvd makes it 1 ms (0 would mean never) and exits by itself.
        s = Started(self, ["--port", "0", "--exit-when-idle", "0.0001:0.0001"])
        rc = s.proc.wait(timeout=T_EXIT)
        self.assertEqual(rc, 0, s.err())
        s.wait_log("info", r"no agent connected for 0\.0 s: the job is over, exiting")

    def test_bad_ready_fd(self):
        # An fd number that is surely not open in rdzvd (the test's are closed in the child).
        for val in ("x", "-1", "4294967296", "1000"):
            with self.subTest(val=val):
                self.assert_usage_error(["--ready-fd", val], "expected an open file descriptor")

    def test_ready_fd_gets_the_port_then_eof(self):
        r, w = os.pipe()
        s = Started(self, ["--port", "0", "--ready-fd", str(w)], pass_fds=(w,))
        os.close(w)
        got = b""
        deadline = time.monotonic() + T_EXIT
        while time.monotonic() < deadline:
            rd, _, _ = select.select([r], [], [], 0.5)
            if rd:
                chunk = os.read(r, 64)
                if not chunk:
                    break
                got += chunk
        os.close(r)
        port = s.wait_port()
        self.assertEqual(got, b"%d\n" % port)  # the line, then EOF: rdzvd closed it
        s.stop()

    def test_ready_fd_that_cannot_be_written_is_a_warning(self):
        # The read end of a pipe: open, so accepted, but write() fails (EBADF).
        r, w = os.pipe()
        self.addCleanup(os.close, w)
        s = Started(self, ["--port", "0", "--ready-fd", str(r)], pass_fds=(r,))
        os.close(r)
        port = s.wait_port()
        s.wait_log("warn", r"cannot write to --ready-fd %d" % r)
        fresh_client_works(self, PortOnly(port))  # still serving
        s.stop()

    def test_size_limits_that_contradict(self):
        self.assert_usage_error(["--max-frame", "1K"],
                                "--max-frame must be at least --max-key-len + --max-value-len + 32")
        self.assert_usage_error(["--max-frame", "64M", "--max-input-bytes", "1M"],
                                "--max-input-bytes must be at least --max-frame")
        self.assert_usage_error(["--max-keys", "0"], "expected a positive number")

    def test_replica_options_that_contradict(self):
        state = tempfile.mkdtemp(prefix="rdzvtest-cli-state-")
        self.addCleanup(os.rmdir, state)
        self.assert_usage_error(["--replica-id", "1"], "--replica-id needs --peers")
        peers = "127.0.0.1:29400,127.0.0.1:29410,127.0.0.1:29420"
        self.assert_usage_error(["--peers", peers], "--peers needs --state-dir DIR")
        self.assert_usage_error(["--peers", peers, "--state-dir", state, "--port", "0"],
                                "--peers needs a fixed --port")
        # A list rdzvd can't use: the message comes from the peer-list parser (or says this
        # build has no replication).
        code, out, err = self.run_rdzvd("--peers", "nonsense", "--state-dir", state,
                                        "--port", "29400")
        self.assertEqual(code, 2, err)
        self.assertEqual(len([ln for ln in err.splitlines() if ln.startswith("rdzvd: ")]), 1, err)
        self.assertTrue(err.startswith("rdzvd: "), err)

    def test_unexpected_argument(self):
        line = self.assert_usage_error(["--port", "0", "extra"], "unexpected argument 'extra'")
        self.assertIn("see rdzvd --help", line)

    def test_unknown_option_and_missing_value(self):
        self.assert_usage_error(["--no-such-option"], "unknown option '--no-such-option'")
        self.assert_usage_error(["--metrics-port"], "missing value for")

    def test_bad_value_from_the_environment_names_the_variable(self):
        code, out, err = self.run_rdzvd(env=clean_env(RDZVD_METRICS_PORT="many"))
        self.assertEqual(code, 2, err)
        self.assertIn("expected 0..65535", err)
        self.assertIn("RDZVD_METRICS_PORT", err)

    def test_help_and_version_exit_0(self):
        code, out, err = self.run_rdzvd("--help")
        self.assertEqual((code, err), (0, ""))
        self.assertTrue(out.startswith("Usage: rdzvd"), out[:200])
        for opt in ("--metrics-port", "--exit-when-idle", "--ready-fd", "--peers"):
            self.assertIn(opt, out)
        code, out, err = self.run_rdzvd("--version")
        self.assertEqual(code, 0, err)
        self.assertRegex(out, r"^rdzvd \S+\n$")

    # ---- security options ----

    def test_missing_token_file(self):
        path = os.path.join(tempfile.gettempdir(), "rdzv-no-such-token-%d" % os.getpid())
        line = self.assert_usage_error(["--token-file", path], "--token-file")
        self.assertIn(path, line)

    def test_bad_allow_store_from(self):
        line = self.assert_usage_error(["--allow-store-from", "10.0.0.0/99"],
                                       "invalid --allow-store-from '10.0.0.0/99'")
        self.assertIn("see rdzvd --help", line)

    # ---- start-up failures: exit 1, and the log says what to change ----

    def test_main_port_in_use(self):
        d = self.daemon()
        s = Started(self, ["--port", str(d.port)])
        rc = s.proc.wait(timeout=T_EXIT)
        self.assertEqual(rc, 1, s.err())
        s.wait_log("error", r"cannot listen on .* port %d.*use --port 0" % d.port)
        fresh_client_works(self, d)

    def test_bind_not_an_address(self):
        s = Started(self, ["--port", "0", "--bind", "not-an-address"])
        self.assertEqual(s.proc.wait(timeout=T_EXIT), 1, s.err())
        s.wait_log("error", r"--bind not-an-address is not an IPv4 or IPv6 address")

    def test_state_dir_that_is_a_file(self):
        f = tempfile.NamedTemporaryFile(prefix="rdzvtest-cli-")
        self.addCleanup(f.close)
        s = Started(self, ["--port", "0", "--state-dir", f.name])
        self.assertEqual(s.proc.wait(timeout=T_EXIT), 1, s.err())
        s.wait_log("error", r"cannot use --state-dir %s" % re.escape(f.name))

    def test_metrics_port_in_use(self):
        busy = socket.socket()
        self.addCleanup(busy.close)
        busy.bind((HOST, 0))
        busy.listen(1)
        mport = busy.getsockname()[1]
        s = Started(self, ["--port", "0", "--metrics-port", str(mport)])
        self.assertEqual(s.proc.wait(timeout=T_EXIT), 1, s.err())
        s.wait_log("error", r"cannot serve metrics on 127\.0\.0\.1 port %d: .*\(check "
                   r"--metrics-port and --metrics-bind\)" % mport)

    def test_metrics_bind_not_an_address(self):
        s = Started(self, ["--port", "0", "--metrics-port", "0", "--metrics-bind", "localhost"])
        self.assertEqual(s.proc.wait(timeout=T_EXIT), 1, s.err())
        s.wait_log("error", r"cannot serve metrics on localhost port 0: .*check --metrics-port "
                   r"and --metrics-bind")

    def test_metrics_default_to_the_bind_address(self):
        # No --metrics-bind: the metrics follow --bind (here 127.0.0.1, set by Started).
        s = Started(self, ["--port", "0", "--metrics-port", "0"])
        s.wait_port()
        line = s.wait_log("info", r"metrics and status page on http://127\.0\.0\.1:(\d+)/")
        mport = int(re.search(r":(\d+)/", line).group(1))
        with socket.create_connection((HOST, mport), timeout=T_EXIT) as c:
            c.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
            c.settimeout(T_EXIT)
            self.assertTrue(c.recv(64).startswith(b"HTTP/1.1 200 "))
        s.stop()

    # ---- files rdzvd reports to: a warning, and it serves anyway ----

    def test_port_files_that_cannot_be_written(self):
        missing = os.path.join(tempfile.gettempdir(), "rdzv-no-such-dir-%d" % os.getpid(), "p")
        too_long = "/tmp/" + "d" * 4200
        s = Started(self, ["--port", "0", "--port-file", missing, "--metrics-port", "0",
                           "--metrics-port-file", too_long])
        port = s.wait_port()
        s.wait_log("warn", r"cannot write --port-file %s" % re.escape(missing))
        s.wait_log("warn", r"cannot write --metrics-port-file /tmp/d+: .*too long")
        self.assertFalse(os.path.exists(os.path.dirname(missing)))
        fresh_client_works(self, PortOnly(port))
        s.stop()

    def test_port_file_that_is_a_directory_leaves_no_temporary_file(self):
        parent = tempfile.mkdtemp(prefix="rdzvtest-cli-pf-")
        target = os.path.join(parent, "port")
        os.mkdir(target)
        os.mkdir(os.path.join(target, "keep"))  # not empty: rename() over it must fail
        self.addCleanup(lambda: (os.rmdir(os.path.join(target, "keep")), os.rmdir(target),
                                 os.rmdir(parent)))
        s = Started(self, ["--port", "0", "--port-file", target])
        port = s.wait_port()
        s.wait_log("warn", r"cannot write --port-file %s" % re.escape(target))
        self.assertEqual(sorted(os.listdir(parent)), ["port"])  # the .tmp file was removed
        fresh_client_works(self, PortOnly(port))
        s.stop()

    def test_metrics_without_any_bind_address_are_on_loopback(self):
        # Neither --metrics-bind nor --bind: the status server stays on 127.0.0.1.
        r, w = os.pipe()
        self.addCleanup(os.close, r)
        p = track(subprocess.Popen([RDZVD, "--port", "0", "--metrics-port", "0", "--ready-fd",
                                    str(w)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.PIPE, env=clean_env(), pass_fds=(w,),
                                   preexec_fn=die_with_parent()))
        self.addCleanup(kill_proc, p)
        os.close(w)
        rd, _, _ = select.select([r], [], [], T_EXIT)
        self.assertTrue(rd and os.read(r, 64).endswith(b"\n"), "rdzvd did not get ready")
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=T_EXIT)
        self.assertEqual(p.returncode, 0, err)
        self.assertRegex(err.decode(), r"metrics and status page on http://127\.0\.0\.1:\d+/")

    # ---- limits derived from the open-file limit ----

    def limits(self, soft, hard, *args):
        def lower():
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        s = Started(self, ["--port", "0"] + list(args), preexec=lower)
        s.wait_port()
        line = s.wait_log("info", r"listening on .*\(open-file limit \d+, max \d+ connections")
        m = re.search(r"open-file limit (\d+), max (\d+) connections", line)
        hs = s.wait_log("info", r"handshake timeout: ")
        mh = re.search(r"handshake timeout: ([\d.]+) s \(connections before it: (\d+) bytes, "
                       r"\d+ each and their input(?:; at most (\d+) connections)?\)", hs)
        self.assertTrue(mh, hs)
        s.stop()
        self.hs_bytes = int(mh.group(2))
        return (int(m.group(1)), int(m.group(2)), float(mh.group(1)),
                mh.group(3) and int(mh.group(3)))

    def test_open_file_limit_is_raised_to_the_hard_limit(self):
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        if hard == resource.RLIM_INFINITY or hard < 1024:
            self.skipTest("hard open-file limit %s" % hard)
        nofile, conns, _, handshaking = self.limits(256, 1024)
        self.assertEqual(nofile, 1024)
        self.assertEqual(conns, 1024 - 64)
        # Connections before their handshake: a budget in bytes, no count unless one is set.
        self.assertEqual((handshaking, self.hs_bytes), (None, 32 << 20))

    def test_small_open_file_limit(self):
        nofile, conns, _, handshaking = self.limits(100, 100)
        self.assertEqual((nofile, conns, handshaking), (100, 64, None))

    def test_max_conns_and_handshaking(self):
        _, conns, _, handshaking = self.limits(1024, 1024, "--max-conns", "1")
        self.assertEqual((conns, handshaking), (1, None))
        _, conns, _, handshaking = self.limits(1024, 1024, "--max-conns", "10",
                                               "--max-handshaking", "7",
                                               "--max-handshaking-bytes", "1M")
        self.assertEqual((conns, handshaking, self.hs_bytes), (10, 7, 1 << 20))
        _, _, hto, _ = self.limits(1024, 1024, "--handshake-timeout", "2.5",
                                   "--request-timeout", "3", "--keep-ended", "0")
        self.assertEqual(hto, 2.5)

    def test_sigint_stops_cleanly(self):
        s = Started(self, ["--port", "0"])
        s.wait_port()
        s.proc.send_signal(signal.SIGINT)
        self.assertEqual(s.proc.wait(timeout=T_EXIT), 0, s.err())
        s.wait_log("info", r"received Interrupt, shutting down")
        s.wait_log("info", r"stopped \(\d+ connections served")


if __name__ == "__main__":
    main()
