#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# test_identity.py: a member's identity against impostors, and honest members, with real rdzvd
# processes and raw frames:
#   - a job's record lives until the job ends: a restarted rdzvd rebuilds the running job from
#      its record as it starts, before any agent is back; when its only connected member (a new
#      node's JOIN) disconnects, or none of its agents comes back within the rebuild window, it
#      keeps its record, status lists it as waiting for its nodes, and the real agent's resume is
#      taken (it was removed, the next JOIN made a new job, and the real agents were told their
#      generation was over);
#   - a node's identity is proven: a member's secret is random, minted at the node's first JOIN
#      and kept (hashed) in the job's record; a JOIN naming a node id the record knows must carry
#      it. An impostor that JOINed with the node id of a member whose connection dropped (or
#      after an rdzvd restart) was given the victim's secret (HMAC of run id and node id under
#      the token or --state-dir's key): it could then resume as the victim, or put it aside with
#      UNHEALTHY. Now it is refused and gets nothing. (After a leader change: test_replicas.py,
#      test_job_record_survives_the_leader.)

import os
import shutil
import socket
import struct
import subprocess
import tempfile
import threading
import time

from authtest import (ERROR, EVENT, HEARTBEAT, JOIN, JOINED, ROUND, STATUS, STATUS_REPLY, Peer,
                      join_body, read_token, resume, token_file)
from metricstest import daemon_with_metrics, http_get
from rdzvtest import BUILD_ROOT, HOST, RDZVCTL, DaemonTestCase, main, shut

UNHEALTHY, LEAVE, READY = 0xB4, 0xAA, 0xAB
AGENT = os.environ.get("RDZV_AGENT") or os.path.join(BUILD_ROOT, "agent", "rdzv-agent")


class LoseFirstJoined:
    """A proxy in front of rdzvd that relays every connection, except that on the first it
    drops the JOINED frame and closes both sides instead: the agent was admitted (its secret's
    hash is in the job's table) but never got the secret, as when the connection or the leader
    goes between the two."""

    def __init__(self, port):
        self.port = port
        self.lsock = socket.create_server((HOST, 0))
        self.listen_port = self.lsock.getsockname()[1]
        self.conns = 0
        self.dropped = threading.Event()
        threading.Thread(target=self.accept, daemon=True).start()

    def close(self):
        self.lsock.close()

    def accept(self):
        while True:
            try:
                a, _ = self.lsock.accept()
            except OSError:
                return
            self.conns += 1
            d = socket.create_connection((HOST, self.port))
            threading.Thread(target=self.pipe, args=(a, d, False), daemon=True).start()
            threading.Thread(target=self.pipe, args=(d, a, self.conns == 1), daemon=True).start()

    def pipe(self, src, dst, drop_joined):
        buf = b""
        try:
            while True:
                chunk = src.recv(65536)
                if not chunk:
                    break
                if not drop_joined:
                    dst.sendall(chunk)
                    continue
                buf += chunk
                while len(buf) >= 8:
                    op, _, _, n = struct.unpack("<BBHI", buf[:8])
                    if len(buf) < 8 + n:
                        break
                    if op == JOINED:
                        self.dropped.set()
                        raise OSError("JOINED dropped")
                    dst.sendall(buf[:8 + n])
                    buf = buf[8 + n:]
        except OSError:
            pass
        shut(src, dst)


class Identity(DaemonTestCase):

    token = None

    def peer(self, d):
        p = Peer(d.port)
        self.addCleanup(p.close)
        if self.token:
            p.authenticate(self.token)
        else:
            p.hello()
        return p

    def assert_impostor_refused(self, d, run_id, node_id, claim=None, mx=1):
        """JOINs naming node_id without its secret (none, a guessed one) are refused, get no
        secret, and their connection is closed: no UNHEALTHY can follow in node_id's name."""
        for secret in (None, "0" * 64):
            p, (op, body) = self.join(d, run_id, node_id, secret=secret, claim=claim, mx=mx)
            if op == JOINED:  # the old rdzvd: the victim's secret, and the victim put aside
                p.send(UNHEALTHY, {"reason": "forged"})
            self.assertEqual(op, ERROR, body)
            self.assertIn("belongs to a member", body["error"])
            self.assertTrue(p.closed_within())

    def state_dir(self):
        state = tempfile.mkdtemp(prefix="rdzv-identity-")
        self.addCleanup(shutil.rmtree, state, True)
        return state

    def join(self, d, run_id, node_id, secret=None, claim=None, mx=1, hb_ms=60000):
        """JOIN of node_id (--nnodes mx:mx, --heartbeat-timeout hb_ms): its peer and the first
        reply."""
        p = self.peer(d)
        body = join_body(run_id, node_id, mx=mx, resume=claim, heartbeat_timeout_ms=hb_ms)
        body["min"] = mx
        if secret is not None:
            body["secret"] = secret
        p.send(JOIN, body)
        return p, p.recv_json()

    def job_status(self, d, run_id):
        q = self.peer(d)
        q.send(STATUS, {})
        op, st = q.recv_json()
        self.assertEqual(op, STATUS_REPLY)
        return [j for j in st["jobs"] if j["run_id"] == run_id]

    def running_job(self, d, run_id, hb_ms=60000):
        """A one-node job at generation 1: its agent's peer, JOINED and ROUND."""
        p, (op, joined) = self.join(d, run_id, "n0", hb_ms=hb_ms)
        self.assertEqual(op, JOINED, joined)
        op, rnd = p.recv_json()
        self.assertEqual((op, rnd["generation"]), (ROUND, 1), rnd)
        return p, joined, rnd

    def test_record_outlives_its_last_connected_member(self):
        state = self.state_dir()
        d = self.daemon("--state-dir", state)
        _, joined, rnd = self.running_job(d, "keep")
        d.kill()
        d = self.daemon("--state-dir", state)
        # rdzvd rebuilds the job as it starts: generation 1 runs, and waits for n0.
        self.assertIsNotNone(d.wait_log(r"job=keep gen=1 rebuilding generation 1"))
        job = self.job_status(d, "keep")
        self.assertEqual((job[0]["state"], job[0]["generation"]), ("running", 1), job)
        # A new node's JOIN is a spare of it; then it goes, the job's last member.
        mark = d.mark()
        p, (op, body) = self.join(d, "keep", "n9")
        self.assertEqual(op, JOINED, body)
        self.assertTrue(body["spare"], body)
        p.close()
        self.assertIsNotNone(d.wait_log(r"job=keep gen=1 removed \(generation 1\)", since=mark))
        # Its record stays, listed as waiting for its nodes.
        job = self.job_status(d, "keep")
        self.assertEqual(len(job), 1, job)
        self.assertEqual((job[0]["state"], job[0]["generation"]), ("waiting", 1), job)
        self.assertIn("waiting for its nodes since", job[0]["events"][-1]["text"])
        out = subprocess.run([RDZVCTL, "-e", "127.0.0.1:%d" % d.port, "status"],
                             capture_output=True, text=True, timeout=30)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertRegex(out.stdout, r"keep\b.*waiting")
        # The next JOIN does not make a new job, and the real agent's resume is taken.
        p, (op, body) = self.join(d, "keep", "n8")
        self.assertEqual(op, JOINED, body)
        self.assertTrue(body["spare"], body)
        q, (op, body) = self.join(d, "keep", "n0", secret=joined["secret"],
                                  claim=resume(master_port=rnd["master_port"]))
        self.assertEqual(op, JOINED, body)
        self.assertTrue(body["resumed"], body)
        self.assertEqual(body["generation"], 1, body)
        self.assertEqual(self.job_status(d, "keep")[0]["state"], "running")

    def test_resume_to_the_rdzvd_that_ended_the_job_is_not_rebuilt(self):
        """A job ended with its last node is not rebuilt from its word, over the wire: no
        --state-dir, and --keep-ended 0 (no end kept). A
        one-node job's agent goes (its connection closes): the job ends with its last node.
        A resume that names the incarnation its JOINED gave (1.18) is told the job is over, not
        rebuilt: this rdzvd never restarted. One that names another (an rdzvd restarted since)
        or none (an agent before 1.18) is rebuilt from its word, as before."""
        d = self.daemon("--keep-ended", "0")
        p, joined, rnd = self.running_job(d, "over")
        self.assertIsInstance(joined.get("incarnation"), int, joined)
        self.assertGreater(joined["incarnation"], 0, joined)
        mark = d.mark()
        p.close()
        d.wait_log(r"job=over gen=1 generation 1 failed \(exit code 1\): root cause: the agent "
                   r"of node rank 0 \(host-n0\) disconnected; it was the job's last node",
                   since=mark)
        claim = dict(resume(master_port=rnd["master_port"]), incarnation=joined["incarnation"])
        _, (op, body) = self.join(d, "over", "n0", secret=joined["secret"], claim=claim)
        self.assertEqual(op, ERROR, body)
        self.assertIn("job 'over' is over: this rdzvd ran its generation 1 and has not "
                      "restarted since", body["error"])
        self.assertIsNone(d.find_log(r"job=over .*rebuilding", since=mark), d.log()[-2000:])
        for inc in (joined["incarnation"] ^ 1, None):
            claim = resume(master_port=rnd["master_port"])
            if inc is not None:
                claim["incarnation"] = inc
            q, (op, body) = self.join(d, "over", "n0", secret=joined["secret"], claim=claim)
            self.assertEqual(op, JOINED, body)
            self.assertTrue(body["resumed"], body)
            mark = d.mark()
            q.close()
            d.wait_log(r"job=over gen=1 removed", since=mark)

    def test_plain_join_to_the_rdzvd_that_ended_the_job_is_refused(self):
        """The same for a plain JOIN (1.20), over the wire: an agent whose workers ran a
        generation, stopped since (it resumes nothing), names the incarnation of the rdzvd that
        sent its last ROUND ("ran_incarnation"). Its job, ended with its last node and no end kept
        (--keep-ended 0), is over: this rdzvd never restarted, and the JOIN is refused, not
        made a new job. One that names another incarnation, or none (an agent before 1.20, or
        one whose workers never ran), makes a new job, as before."""
        d = self.daemon("--keep-ended", "0")
        p, joined, _ = self.running_job(d, "over")
        mark = d.mark()
        p.close()
        d.wait_log(r"job=over gen=1 generation 1 failed \(exit code 1\): root cause: the agent "
                   r"of node rank 0 \(host-n0\) disconnected; it was the job's last node",
                   since=mark)
        for inc, made in ((joined["incarnation"], False), (joined["incarnation"] ^ 1, True),
                          (None, True)):
            q = self.peer(d)
            body = join_body("over", "n0", mx=1, secret=joined["secret"])
            body["min"] = 1
            if inc is not None:
                body["ran_incarnation"] = inc
            q.send(JOIN, body)
            op, reply = q.recv_json()
            if not made:
                self.assertEqual(op, ERROR, reply)
                self.assertIn("job 'over' is over: this rdzvd ran a generation of it and has "
                              "not restarted since", reply["error"])
                self.assertEqual(self.job_status(d, "over"), [])
                continue
            self.assertEqual(op, JOINED, reply)
            self.assertEqual(reply["generation"], 0, reply)
            op, rnd = q.recv_json()
            self.assertEqual((op, rnd["generation"]), (ROUND, 1), rnd)
            mark = d.mark()
            q.close()
            d.wait_log(r"job=over gen=1 removed", since=mark)

    def test_rebuilt_job_nobody_back_waits_in_its_record(self):
        """No agent of the generation a restarted rdzvd rebuilt comes back within the window
        (two heartbeat timeouts and an agent's longest reconnect wait, from rdzvd's start): the
        job leaves memory, unchanged, listed as waiting; its agent's resume later is taken."""
        state = self.state_dir()
        d = self.daemon("--state-dir", state)
        _, joined, rnd = self.running_job(d, "late", hb_ms=300)
        d.kill()
        d = self.daemon("--state-dir", state)
        self.assertIsNotNone(d.wait_log(r"job=late gen=1 rebuilding generation 1"))
        self.assertEqual(self.job_status(d, "late")[0]["state"], "running")
        d.wait_log(r"job=late gen=1 no agent of generation 1 came back: its record waits",
                   timeout=30)
        job = self.job_status(d, "late")
        self.assertEqual((job[0]["state"], job[0]["generation"], job[0]["restart_count"]),
                         ("waiting", 1, 0), job)
        mark = d.mark()
        _, (op, body) = self.join(d, "late", "n0", secret=joined["secret"],
                                  claim=resume(master_port=rnd["master_port"]), hb_ms=300)
        self.assertEqual(op, JOINED, body)
        self.assertTrue(body["resumed"], body)
        self.assertEqual(body["generation"], 1, body)
        self.assertIsNotNone(d.wait_log(r"job=late gen=1 generation 1 rebuilt; its workers never",
                                        since=mark))

    def test_impostor_after_a_drop_and_a_restart(self):
        """With --state-dir: the victim's connection drops, then rdzvd restarts; neither time
        does a JOIN or resume with its node id get in without its secret, and its own resume is
        taken, not put aside."""
        state = self.state_dir()
        d = self.daemon("--state-dir", state)
        victim, joined, rnd = self.running_job(d, "vic")
        claim = resume(master_port=rnd["master_port"])
        victim.close()
        self.assertIsNotNone(d.wait_log(r"job=vic gen=1 removed"))
        self.assert_impostor_refused(d, "vic", "n0")
        self.assert_impostor_refused(d, "vic", "n0", claim=claim)
        d.kill()
        d = self.daemon("--state-dir", state)
        self.assert_impostor_refused(d, "vic", "n0")
        self.assert_impostor_refused(d, "vic", "n0", claim=claim)
        p, (op, body) = self.join(d, "vic", "n0", secret=joined["secret"], claim=claim)
        self.assertEqual(op, JOINED, body)
        self.assertTrue(body["resumed"], body)
        self.assertEqual(body["secret"], joined["secret"])
        self.assertEqual(self.job_status(d, "vic")[0].get("put_aside", []), [])

    def test_impostor_with_the_token_while_the_victim_is_away(self):
        """With a token and no --state-dir (secrets were HMAC under the token): one of two
        members drops; a token holder that JOINs with its node id is refused while the job is in
        memory, and a new node id gets a secret of its own."""
        tok = token_file(self)
        self.token = read_token(tok)
        d = self.daemon("--token-file", tok)
        peers, secrets = [], []
        for node in ("n0", "n1"):
            p, (op, body) = self.join(d, "away", node, mx=2)
            self.assertEqual(op, JOINED, body)
            peers.append(p)
            secrets.append(body["secret"])
        for p in peers:
            self.assertEqual(p.recv_json()[0], ROUND)
        peers[1].close()
        op, ev = peers[0].recv_json()
        self.assertEqual((op, ev["type"]), (EVENT, "restart"), ev)
        self.assert_impostor_refused(d, "away", "n1", mx=2)
        p, (op, body) = self.join(d, "away", "n2", mx=2)
        self.assertEqual(op, JOINED, body)
        self.assertNotIn(body["secret"], secrets)

    def test_secrets_are_random(self):
        """The same node id of the same run id gets another secret from another rdzvd (it was
        HMAC under the --state-dir key: the same)."""
        state = self.state_dir()
        got = []
        for _ in range(2):
            d = self.daemon("--state-dir", state)
            p, (op, body) = self.join(d, "rnd", "n0", mx=2)  # waits for a second node
            self.assertEqual(op, JOINED, body)
            got.append(body["secret"])
            p.close()
            self.assertIsNotNone(d.wait_log(r"job=rnd gen=0 removed"))
            d.stop()
        self.assertNotEqual(got[0], got[1])

    def test_agent_whose_joined_was_lost_joins_as_a_new_node(self):
        """The real agent: its first JOINED never arrives (the proxy drops it), while its job
        (a raw peer is the other node) goes on. It reconnects and JOINs with the same node id and
        no secret: refused, as an impostor would be; it never had workers, so it joins again
        under a new node id, and the job runs to the end."""
        d = self.daemon()
        other, (op, body) = self.join(d, "lost", "other", mx=2)
        self.assertEqual(op, JOINED, body)
        proxy = LoseFirstJoined(d.port)
        self.addCleanup(proxy.close)
        agent = subprocess.Popen([AGENT, "--endpoint", "%s:%d" % (HOST, proxy.listen_port),
                                  "--rdzv-id", "lost", "--nnodes", "2", "--nproc", "1",
                                  "--max-restarts", "3", "--nccl", "off", "--last-call", "0",
                                  "--connect-timeout", "20", "--", "/bin/true"],
                                 stderr=subprocess.PIPE, text=True)
        self.addCleanup(lambda: agent.poll() is None and agent.kill())
        # Generation 1 formed with the agent's first node id, and lost it with the connection.
        op, rnd = other.recv_json(timeout=30)
        self.assertEqual((op, rnd["generation"]), (ROUND, 1), rnd)
        op, ev = other.recv_json(timeout=30)
        self.assertEqual((op, ev["type"]), (EVENT, "restart"), ev)
        other.send(READY, {"generation": 1})
        op, rnd = other.recv_json(timeout=30)
        self.assertEqual((op, rnd["generation"]), (ROUND, 2), rnd)
        other.send(LEAVE, {"generation": 2, "status": "succeeded"})
        try:
            _, err = agent.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            agent.kill()
            _, err = agent.communicate()
            self.fail("the agent did not end:\n" + err[-3000:] + "\nrdzvd:\n" + d.log()[-3000:])
        self.assertTrue(proxy.dropped.is_set())
        self.assertEqual(agent.returncode, 0, err[-3000:])
        self.assertIn("never got its secret (its JOINED was lost): joining again as node id", err)
        self.assertIsNotNone(d.wait_log(r"job=lost gen=2 generation 2 succeeded"))

    def test_job_nobody_comes_back_to_ends_abandoned(self):
        """A job whose agents all went keeps its record for --abandon-after,
        listed as waiting with when it will end; then it ends as abandoned: its record goes
        (a restarted rdzvd rebuilds nothing of it), its agent's resume is told so, and a new
        agent's JOIN of the same id starts a new run (a scheduler's requeue)."""
        state = self.state_dir()
        d = self.daemon("--state-dir", state, "--abandon-after", "3")
        p, joined, rnd = self.running_job(d, "gone", hb_ms=300)
        mark = d.mark()
        p.close()
        self.assertIsNotNone(d.wait_log(r"job=gone gen=1 removed \(generation 1\)", since=mark))
        job = self.job_status(d, "gone")
        self.assertEqual(job[0]["state"], "waiting", job)
        self.assertRegex(job[0]["events"][-1]["text"],
                         r"ends as abandoned at \S+ \S+ UTC \(--abandon-after\)")
        self.assertIsNotNone(d.wait_log(r"job=gone ended as abandoned: no agent of it connected "
                                        r"for [34] s", since=mark, timeout=10))
        job = self.job_status(d, "gone")
        self.assertEqual((job[0]["state"], job[0]["outcome"]["type"]), ("ended", "abandoned"),
                         job)
        self.assertIn("--abandon-after", job[0]["outcome"]["summary"])
        # Across a restart: nothing rebuilt, nothing waiting; the resume is told how it ended.
        d.kill()
        d = self.daemon("--state-dir", state, "--abandon-after", "3")
        job = self.job_status(d, "gone")
        self.assertEqual([j["state"] for j in job], ["ended"], job)
        q, (op, body) = self.join(d, "gone", "n0", secret=joined["secret"],
                                  claim=resume(master_port=rnd["master_port"]), hb_ms=300)
        self.assertEqual((op, body["type"]), (EVENT, "abandoned"), body)  # 1.25: its outcome
        self.assertRegex(body["summary"], r"job 'gone' has ended: it was abandoned at")
        # A new agent's JOIN is a new run of the id.
        q, (op, body) = self.join(d, "gone", "n5", hb_ms=300)
        self.assertEqual(op, JOINED, body)
        self.assertFalse(body["spare"], body)

    def test_abandon_time_survives_a_restart(self):
        """The time a job has waited is in its record: a restarted rdzvd ends it --abandon-after
        the last agent left, not --abandon-after its own start (which a daemon restarted more
        often than that never reached). An agent that came back clears it: a job that ran on
        waits afresh from its next leaving."""
        state = self.state_dir()
        d = self.daemon("--state-dir", state, "--abandon-after", "6")
        p, joined, rnd = self.running_job(d, "left", hb_ms=300)
        back, back_joined, back_rnd = self.running_job(d, "back", hb_ms=300)
        mark = d.mark()
        p.close()
        back.close()
        self.assertIsNotNone(d.wait_log(r"job=left gen=1 removed", since=mark))
        self.assertIsNotNone(d.wait_log(r"job=back gen=1 removed", since=mark))
        # "back"'s agent comes back: the job is in memory again, running.
        back2, (op, body) = self.join(d, "back", "n0", secret=back_joined["secret"],
                                      claim=resume(master_port=back_rnd["master_port"]),
                                      hb_ms=300)
        self.assertEqual(op, JOINED, body)
        for _ in range(35):  # it runs on, its agent's heartbeats on time
            back2.send(HEARTBEAT, {"generation": 1})
            time.sleep(0.1)
        self.assertEqual(self.job_status(d, "back")[0]["state"], "running")
        d.kill()
        t_restart = time.monotonic()
        d = self.daemon("--state-dir", state, "--abandon-after", "6")
        self.assertIsNotNone(d.wait_log(r"job=left ended as abandoned: no agent of it "
                                        r"connected for [67] s", timeout=10))
        took = time.monotonic() - t_restart
        self.assertLess(took, 4.5, "ended %.1f s after the restart: its wait began again" % took)
        # "back" waits from the restart (its agent was connected then): not abandoned yet.
        job = self.job_status(d, "back")
        self.assertIn(job[0]["state"], ("running", "waiting"), job)

    def test_jobs_held_are_bounded(self):
        """--max-jobs bounds the jobs rdzvd holds, running or waiting in their
        records: a JOIN that would make one more is refused with what to do, the jobs held are
        untouched, and once the operator ends a waiting one the JOIN is taken. /metrics and
        status show the count."""
        state = self.state_dir()
        d, mport = daemon_with_metrics(self, "--state-dir", state, "--max-jobs", "2")
        a, _, _ = self.running_job(d, "a")
        b, _, _ = self.running_job(d, "b", hb_ms=300)
        mark = d.mark()
        b.close()
        self.assertIsNotNone(d.wait_log(r"job=b gen=1 removed \(generation 1\)", since=mark))
        q = self.peer(d)
        q.send(STATUS, {})
        _, st = q.recv_json()
        self.assertEqual(st["jobs_held"], {"held": 2, "waiting": 1, "limit": 2}, st)
        m = http_get(mport, "/metrics")
        for line in ("rdzvd_jobs_held 2", "rdzvd_jobs_waiting 1", "rdzvd_jobs_held_limit 2"):
            self.assertIn("\n" + line + "\n", m)
        # Every limit beside what it bounds: descriptors (the connections open here, and job a's
        # store and journal), input bytes.
        fds = int(m.split("\nrdzvd_descriptors_held ")[1].split()[0])
        self.assertTrue(3 <= fds <= st["descriptors"]["limit"], m)
        self.assertEqual(st["descriptors"]["limit"],
                         int(m.split("\nrdzvd_descriptors_held_limit ")[1].split()[0]))
        self.assertIn("\nrdzvd_input_held_bytes_limit 268435456\n", m)
        out = subprocess.run([RDZVCTL, "-e", "127.0.0.1:%d" % d.port, "status"],
                             capture_output=True, text=True, timeout=30)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("jobs: 2 held of --max-jobs 2, 1 of them waiting for their nodes", out.stdout)
        self.assertRegex(out.stdout, r"job b: waiting")
        p, (op, body) = self.join(d, "c", "n0")
        self.assertEqual(op, ERROR, body)
        self.assertIn("rdzvd holds 2 jobs, its --max-jobs: job 'c' cannot start", body["error"])
        self.assertIn("rdzvctl cancel JOB", body["error"])
        self.assertTrue(p.closed_within())
        # A resume's claim of a job rdzvd does not hold makes none (with a job table, a job with
        # no record has ended), within the bound or not.
        p, (op, body) = self.join(d, "claimed", "n0", claim=resume())
        self.assertEqual(op, ERROR, body)
        self.assertIn("job 'claimed' has ended, or ran on another rdzvd", body["error"])
        self.assertEqual(self.job_status(d, "a")[0]["state"], "running")
        self.assertEqual(self.job_status(d, "b")[0]["state"], "waiting")
        out = subprocess.run([RDZVCTL, "-e", "127.0.0.1:%d" % d.port, "cancel", "b"],
                             capture_output=True, text=True, timeout=30)
        self.assertEqual(out.returncode, 0, out.stderr)
        p, (op, body) = self.join(d, "c", "n0")
        self.assertEqual(op, JOINED, body)
        # A resume of a job held is no new job: never refused by the bound.
        self.assertEqual(self.job_status(d, "a")[0]["state"], "running")

    def test_abandoned_job_stays_ended_past_keep_ended(self):
        """A resume of an abandoned job is told so after its outcome left the ended jobs in
        memory (--keep-ended-max 0 here; an hour, or 100 ends, by default): the job table's
        ends are read (it was rebuilt from the agent's claim, and ran again)."""
        state = self.state_dir()
        d = self.daemon("--state-dir", state, "--abandon-after", "1", "--keep-ended-max", "0")
        p, joined, rnd = self.running_job(d, "late", hb_ms=300)
        mark = d.mark()
        p.close()
        self.assertIsNotNone(d.wait_log(r"job=late ended as abandoned", since=mark, timeout=10))
        _, (op, body) = self.join(d, "late", "n0", secret=joined["secret"],
                                  claim=resume(master_port=rnd["master_port"]), hb_ms=300)
        self.assertEqual((op, body["type"]), (EVENT, "abandoned"), body)  # 1.25: its outcome
        self.assertRegex(body["summary"], r"job 'late' has ended: it was abandoned at")

    def test_restart_opens_stores_as_their_agents_come_back(self):
        """rdzvd restarted on a --state-dir that records 200 running jobs holds
        no descriptor for their stores until an agent of one is back; that job's store then
        reopens on its recorded port (2,000 recorded jobs held 4,016 descriptors before any
        agent came, and 267 of them could not reopen their port: see the next test)."""
        state = self.state_dir()
        d = self.daemon("--state-dir", state)
        peers = [self.join(d, "many-%03d" % i, "n0") for i in range(200)]
        recorded = []
        for p, (op, joined) in peers:
            self.assertEqual(op, JOINED, joined)
            op, rnd = p.recv_json()
            self.assertEqual((op, rnd["generation"]), (ROUND, 1), rnd)
            recorded.append((joined["secret"], rnd["master_port"]))
        d.kill()
        d = self.daemon("--state-dir", state)
        self.assertIsNotNone(d.wait_log(r"job=many-199 gen=1 rebuilding generation 1"))
        nfd = len(os.listdir("/proc/%d/fd" % d.pid))
        self.assertLess(nfd, 40, "rdzvd holds %d descriptors with no agent back" % nfd)
        secret, port = recorded[7]
        _, (op, body) = self.join(d, "many-007", "n0", secret=secret,
                                  claim=resume(master_port=port))
        self.assertEqual(op, JOINED, body)
        self.assertTrue(body["resumed"], body)
        socket.create_connection((HOST, port), timeout=5).close()  # its store, on its port

    def test_new_stores_keep_off_recorded_ports(self):
        """1,000 jobs made one after the other, each formed and left (its
        record kept, its agent may come back to its store's port): no job's store is given a
        port an earlier job's record holds. Before, the kernel handed freed ports out again (267
        of 2,000 jobs), and the later job's store took the port the earlier one's workers
        reconnect to."""
        state = self.state_dir()
        d = self.daemon("--state-dir", state, "--max-jobs", "2000")
        ports = []
        for i in range(1000):
            p, (op, body) = self.join(d, "seq-%04d" % i, "n0")
            self.assertEqual(op, JOINED, body)
            op, rnd = p.recv_json()
            self.assertEqual(op, ROUND, rnd)
            ports.append(rnd["master_port"])
            p.close()
        dups = len(ports) - len(set(ports))
        self.assertEqual(dups, 0, "%d stores were given a port a waiting job holds" % dups)

if __name__ == "__main__":
    main()
