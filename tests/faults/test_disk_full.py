#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Issue 71, case 4: TCPStore clients with no token fill --state-dir (a 48 MiB tmpfs) with 60
values of 1 MiB each, first in the main store (the endpoint's, never dropped), then in the running
job's store. Each store's journal is refused past its room with a clear error, at half of the
free room it finds, and all leave the job table its reserve: every restart of the job is
recorded, and its generations 2 to 5 form. Deleting the keys gives the room back. A full job
store leaves another job's store room. A replicated rdzvd bounds its Raft log the same way. A
disk filled by something else fails the job table's record, and the log names the largest
files. Mounts a tmpfs: root only (exit 77 = skipped otherwise)."""
import os
import subprocess
import sys
import tempfile

import replicatest
from faulttest import FaultTestCase, finish, kill_quietly, main, rdzvtest

MIB = 1 << 20
TMPFS_MIB = 48
RESERVE_MIB = 8  # RDZVD_STATE_RESERVE
REPL_RESERVE_MIB = 16  # ... + RDZVD_REPL_SEGMENT_RESERVE, with --peers
VALUES = 60
REFUSED = r"SET refused: no room on disk for the store's journal"


class TestDiskFull(FaultTestCase):
    def setUp(self):
        super().setUp()
        self.state = tempfile.mkdtemp(prefix="rdzvtest-tmpfs-")
        self.addCleanup(os.rmdir, self.state)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%dm,mode=0700" % TMPFS_MIB, "tmpfs",
                        self.state], check=True)
        self.addCleanup(subprocess.run, ["umount", "-l", self.state], check=False)

    def used(self):
        st = os.statvfs(self.state)
        return (st.f_blocks - st.f_bavail) * st.f_frsize

    def fill(self, port):
        """SET VALUES values of 1 MiB into the store at port, reconnecting after each refusal
        (a refused SET closes its connection). Returns how many were stored and refused."""
        value = os.urandom(MIB)
        stored, refused, c = 0, 0, None
        for i in range(VALUES):
            try:
                c = c or rdzvtest.Client(port, timeout=20)
                c.set(b"fill/%d" % i, value)
                c.sync()
                stored += 1
            except (OSError, AssertionError):
                refused += 1
                c.close()
                c = None
        if c:
            c.close()
        return stored, refused

    def restart(self, ag, gen):
        """A worker of generation gen - 1 fails: generation gen must form."""
        kill_quietly(self.worker_pid(gen - 1, 0))
        self.wait_starts(gen, 1, agents=[ag], timeout=60)

    def test_store_clients_fill_the_state_dir_and_the_job_restarts(self):
        d = self.start_daemon("--state-dir", self.state)
        ag = self.agent("diskfull", "--nnodes", "1", "--nproc", "1", "--max-restarts", "6")
        self.wait_starts(1, 1, agents=[ag])
        figures = ["before: %.1f MiB used" % (self.used() / MIB)]
        # The main store (the endpoint's port, no token), which no restart drops; then the
        # running job's store (its workers' MASTER_PORT, no token).
        stored_main, refused_main = self.fill(d.port)
        figures.append("the main store: %d stored, %d refused, %.1f MiB used"
                       % (stored_main, refused_main, self.used() / MIB))
        stored_job, refused_job = self.fill(int(self.env_of(1, 0)["MASTER_PORT"]))
        used = self.used()
        figures.append("the job's store: %d stored, %d refused, %.1f MiB used"
                       % (stored_job, refused_job, used / MIB))
        print("; ".join(figures))
        # Workers fail four times: each restart is recorded, and generations 2 to 5 form.
        for gen in (2, 3, 4, 5):
            self.restart(ag, gen)
        self.assertIsNone(d.find_log(r"could not record"), d.log()[-3000:])
        # Each store was refused past its room, with a clear error; the reserve stayed free,
        # and the main port's clients left the job's store half of the rest, which it took.
        self.assertTrue(refused_main and refused_job, figures)
        self.assertLessEqual(used, (TMPFS_MIB - RESERVE_MIB) * MIB, figures)
        self.assertGreaterEqual(stored_job, stored_main // 2 - 1, figures)
        self.assertIsNotNone(d.find_log(REFUSED), d.log()[-3000:])
        self.assertIsNotNone(d.find_log(r"refusing its store's changes: no room on disk"))
        # Deleting the keys gives the room back.
        with rdzvtest.Client(d.port) as c:
            for i in range(stored_main):
                c.delete(b"fill/%d" % i)
            for i in range(10):
                c.set(b"again/%d" % i, os.urandom(MIB))
            c.sync()
        self.release()
        self.finish_all([ag], 0)
        d.wait_log(r"job=diskfull gen=\d+ generation 5 succeeded")
    def test_a_full_job_store_leaves_another_job_room(self):
        """Two jobs on one rdzvd: a client fills job A's store (its workers' MASTER_PORT, no
        token). Job B's store still takes a SET of 200 bytes: a full journal refuses only its own
        store's clients."""
        d = self.start_daemon("--state-dir", self.state)
        dir_b = os.path.join(self.dir, "b")
        os.mkdir(dir_b)
        ag_a = self.agent("diska", "--nnodes", "1", "--nproc", "1")
        ag_b = self.agent("diskb", "--nnodes", "1", "--nproc", "1", env={"FAULT_DIR": dir_b})
        self.wait_starts(1, 1, agents=[ag_a])
        env_b = os.path.join(dir_b, "env.1.0")
        rdzvtest.wait_until(lambda: os.path.exists(env_b), "job B's worker", timeout=20)
        with open(env_b) as f:
            port_b = int(dict(line.rstrip("\n").partition("=")[::2] for line in f)["MASTER_PORT"])
        port_a = int(self.env_of(1, 0)["MASTER_PORT"])
        stored, refused = self.fill(port_a)
        # Then smaller values, until the last KiB is taken.
        for size in (64 << 10, 4 << 10, 256):
            for i in range(32):
                try:
                    with rdzvtest.Client(port_a, timeout=20) as c:
                        c.set(b"top/%d/%d" % (size, i), b"t" * size)
                        c.sync()
                except (OSError, AssertionError):
                    break
        figures = "job A's store: %d stored, %d refused, %.1f MiB used" % (
            stored, refused, self.used() / MIB)
        print(figures)
        self.assertTrue(refused, figures)
        try:
            with rdzvtest.Client(port_b) as c:
                c.set(b"b/first", b"x" * 200)
                c.sync()
                self.assertEqual(c.get(b"b/first"), b"x" * 200)
        except (OSError, AssertionError) as e:
            self.fail("job B's first SET of 200 bytes failed (%s); %s; rdzvd: %s"
                      % (e, figures, d.find_log(r"journal .*job.*refusing")))
        self.assertEqual(ag_b.poll(), None)
        self.release()
        open(os.path.join(dir_b, "release"), "w").close()
        self.finish_all([ag_a, ag_b], 0)
        self.assertIsNotNone(d.find_log(REFUSED))

    def test_replicated_store_clients_are_refused_and_the_job_restarts(self):
        """The same clients against a replicated rdzvd (--peers, one replica here): the main
        store's changes go to the Raft log in --state-dir/raft, with the job table's. The log is
        bounded as a journal is (snapshots by bytes, refusals past its room), so the replica
        keeps committing: it does not exit 75, and the job's next generation is recorded."""
        port = replicatest.free_port_pair()
        d = self.start_daemon("--port", str(port), "--peers", "127.0.0.1:%d" % port,
                              "--replica-id", "1", "--state-dir", self.state)
        ag = self.agent("diskrepl", "--nnodes", "1", "--nproc", "1", "--max-restarts", "6")
        self.wait_starts(1, 1, agents=[ag])
        figures = ["before: %.1f MiB used" % (self.used() / MIB)]
        # 300 rounds of SET 1 MiB, DELETE: the log's dead entries go with its snapshots.
        value, done, refused, c = os.urandom(MIB), 0, 0, None
        for i in range(300):
            try:
                c = c or rdzvtest.Client(d.port, timeout=20)
                c.set(b"k", value)
                c.sync()
                c.delete(b"k")
                c.sync()
                done += 1
            except (OSError, AssertionError):
                refused += 1
                if c:
                    c.close()
                c = None
            self.assertIsNone(d.proc.poll(), "rdzvd exited: " + d.log()[-1500:])
        if c:
            c.close()
        figures.append("set and delete: %d done, %d refused, %.1f MiB used"
                       % (done, refused, self.used() / MIB))
        stored, refused_fill = self.fill(d.port)
        used = self.used()
        figures.append("the main store: %d stored, %d refused, %.1f MiB used"
                       % (stored, refused_fill, used / MIB))
        print("; ".join(figures))
        self.assertIsNone(d.proc.poll(), d.log()[-3000:])
        self.assertTrue(refused_fill, figures)
        self.assertGreater(done, 100, figures)
        self.assertLessEqual(used, (TMPFS_MIB - REPL_RESERVE_MIB) * MIB, figures)
        self.assertIsNotNone(d.find_log(REFUSED), d.log()[-3000:])
        self.assertIsNotNone(d.find_log(r"replication: refusing the store's changes: no room on "
                                        r"disk"))
        # The job restarts: its next generations are recorded in the log.
        for gen in (2, 3):
            self.restart(ag, gen)
        self.assertIsNone(d.find_log(r"could not record|not committed"), d.log()[-3000:])
        self.release()
        self.finish_all([ag], 0)
        d.wait_log(r"job=diskrepl gen=\d+ generation 3 succeeded")

    def test_a_full_disk_names_what_filled_it(self):
        """Something other than a store (a file written here) fills the disk: the job table's
        record then fails, and the log names the free space and the largest files."""
        d = self.start_daemon("--state-dir", self.state)
        ag = self.agent("diskfill", "--nnodes", "1", "--nproc", "1", "--max-restarts", "9")
        self.wait_starts(1, 1, agents=[ag])
        with open(os.path.join(self.state, "filler"), "wb") as f:
            try:
                while True:
                    f.write(b"f" * MIB)
                    f.flush()
            except OSError:
                pass
        # Each restart adds a record to jobs.journal: one finds no room (the first ones may fit
        # the end of its last page).
        for gen in range(2, 10):
            kill_quietly(self.worker_pid(gen - 1, 0))
            try:
                self.wait_starts(gen, 1, agents=[ag], timeout=60)
            except AssertionError:
                break
        line = d.wait_log(r"jobs\.journal: write failed: No space left on device \(\d+ bytes "
                          r"free of \d+; largest files: filler \(\d+ bytes\), ")
        self.assertIsNotNone(line)
        self.assertEqual(finish(ag, timeout=30)[0], 1)
        d.stop(allow_errors=(r"write failed: No space left on device",))


if __name__ == "__main__":
    if os.geteuid() != 0:
        print("skipped: mounting a tmpfs needs root")
        sys.exit(77)
    main()
