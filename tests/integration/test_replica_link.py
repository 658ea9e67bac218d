#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# test_replica_link.py: a peer that passes the replica link's handshake (it holds the key) and then
# sends libraft messages crafted to hurt (four malformed messages, and a seeded fuzzer). Three
# real rdzvd replicas on 127.0.0.1, with and without --token-file, each message sent to the leader
# and to a follower. Each of these once crashed or bricked a replica:
#   1. an InstallSnapshot of 73 bytes whose configuration claims 2^62 bytes (SEGV in libraft);
#   2. an AppendEntries at the leader's own term (libraft wrote follower fields over its leader
#      state and called through a pointer the sender chose);
#   3. an AppendEntries of term 2^64-1 (the next term wraps to 0: no vote ever again);
#   4. an AppendEntries that contradicts a committed entry (RAFT_UNAVAILABLE: up, silent, useless).
# Now 1-3 close that link with one log line, the replica lives, a leader serves within 2 s and
# every acknowledged key reads back; 4 passes every check a single message allows and makes the
# replica exit 75 with a line saying why (a supervisor restarts it), the others serve on.
# Also (test_a_batch_*, test_stale_payloads_*, test_silent_strangers_*, test_fuzzer_sequences):
# messages batched in one
# write are checked as libraft processes each; stale-term payloads are dropped, not allocated; a
# member's address always gets a handshake slot; the fuzzer sends sequences per write.
import hashlib
import hmac
import os
import random
import select
import tempfile
import socket
import struct
import threading
import time

from authtest import JOIN, JOINED, Peer, join_body, mac
from raftmsg import AE, AER, COMMAND, IS, RV, RVR, TN, append_entries, conf, le, msg
from rdzvtest import HOST, main
from replicatest import ClusterCase

TOKEN = "replica-link-token-0123456789abcdef"
FUZZ_SEED = int(os.environ.get("RDZV_FUZZ_SEED", "27"))
FUZZ_MESSAGES = int(os.environ.get("RDZV_FUZZ_MESSAGES", "300"))
FUZZ_WRITES = int(os.environ.get("RDZV_FUZZ_WRITES", "60"))

def replica_mac(key, side, sn, cn, rid, addr):
    """The replica link's MAC with a replica key (daemon/repl/rdzvd-repl-net.h), in Python's
    hmac."""
    return hmac.new(key, b"rdzv-replica-v1 " + side.encode() + sn + cn + le(rid) + addr.encode(),
                    hashlib.sha256).digest()


def snapshot_bomb():
    """73 bytes, a configuration length of 2^62."""
    m = le(IS, 57) + le(1, 1, 1, 1, 1 << 62) + b"\x01" + b"\0" * 16
    assert len(m) == 73
    return m


class RaftLink:
    """A peer on replica port + 1 that claims to be replica `rid` at `addr`, proves it holds the
    token (zeros when there is none), or with `key` the replicas' own key (rdzvd
    --replica-key-file: MACs over each side's id and address; `server` is the (id, address) of
    the replica it connects to), and then speaks libraft's wire format."""

    def __init__(self, port, rid, addr, token=None, key=None, server=None):
        self.s = socket.create_connection((HOST, port), timeout=5)
        cn = os.urandom(32)
        self.s.sendall(b"RDZVRPL1" + le(rid) + bytes([len(addr)]) + addr.encode() + cn)
        self.server_proved = False
        try:
            ch = self._exact(64)
        except (ConnectionError, OSError):
            self.refused_at_hello = True  # closed before its challenge: closed_within says so
            return
        self.refused_at_hello = False
        sn = ch[:32]
        if key:
            sid, saddr = server
            self.server_proved = ch[32:] == replica_mac(key, "server", sn, cn, sid, saddr)
            self.s.sendall(replica_mac(key, "client", sn, cn, rid, addr))
        elif token:
            self.server_proved = ch[32:] == mac(token.encode(), "server", sn, cn)
            self.s.sendall(mac(token.encode(), "client", sn, cn))
        else:
            self.s.sendall(b"\0" * 32)

    def _exact(self, n):
        b = b""
        while len(b) < n:
            c = self.s.recv(n - len(b))
            if not c:
                raise ConnectionError("closed in the handshake")
            b += c
        return b

    def send(self, data):
        try:
            self.s.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def closed_within(self, timeout):
        """True when the replica closes the link within timeout seconds."""
        self.s.settimeout(timeout)
        try:
            while self.s.recv(4096):
                pass
            return True
        except ConnectionResetError:
            return True
        except socket.timeout:
            return False

    def close(self):
        self.s.close()


class ReplicaLink(ClusterCase):

    def term_of(self, r):
        """The term replica r last said it leads."""
        terms = [int(line.split("(term ")[1].split(")")[0]) for line in r.text().splitlines()
                 if " leads (term " in line]
        self.assertTrue(terms, r.text()[-2000:])
        return terms[-1]

    def member(self, cl, r, other):
        """(raft id, Raft address) of replica `other` as r's configuration has it."""
        p = cl.r[other].port
        return other + 1, "%s:%d" % (HOST, p + 1)

    def serves_within(self, cl, keys, limit=2.0):
        """A leader serves within limit seconds of now and every key in keys reads back."""
        t0 = time.monotonic()
        lead, c = cl.leader(timeout=limit + 8.0)
        took = time.monotonic() - t0
        self.assertLess(took, limit, "no leader served within %.1f s" % limit)
        for k, v in keys.items():
            self.assertEqual(c.get(k), v, "%r; logs:\n%s" % (
                k, "\n".join(r.text()[-2500:] for r in cl.r)))
        return lead, c

    def malformed_messages(self, token):
        cl = self.cluster(token=token)
        lead, c = cl.leader()
        keys = {b"k%d" % i: b"v%d" % i for i in range(20)}
        for k, v in keys.items():
            c.set(k, v)
        for role in ("leader", "follower"):
            lead, c = cl.leader()
            target = lead if role == "leader" else next(r for r in cl.r if r is not lead)
            # The claimed sender: a member, never the leader (whose AppendEntries are its own).
            other = next(i for i, r in enumerate(cl.r) if r is not target and r is not lead)
            rid, addr = self.member(cl, target, other)
            term = self.term_of(lead)
            for name, m in (("1: snapshot bomb", snapshot_bomb()),
                            ("2: AppendEntries at the leader's term", append_entries(term)),
                            ("3: term 2^64-1", append_entries(2**64 - 1))):
                with self.subTest(token=bool(token), role=role, message=name):
                    link = RaftLink(target.port + 1, rid, addr, token)
                    link.send(m)
                    self.assertTrue(link.closed_within(5.0), "the link stayed open")
                    link.close()
                    self.assertTrue(target.alive(), target.text()[-3000:])
                    self.serves_within(cl, keys)
                    c2 = cl.leader()[1]
                    c2.set(b"after-" + name.encode(), b"1")
                    keys[b"after-" + name.encode()] = b"1"
            self.assertIn("a message that fails its checks", target.text())
        # One log line a minute per peer: three bad messages from one id, one line each target.
        for r in cl.r:
            self.assertLessEqual(r.text().count("a message that fails its checks"), 2)
        self.assertTrue(all(r.alive() for r in cl.r))

    def test_malformed_messages_with_token(self):
        self.malformed_messages(TOKEN)

    def test_malformed_messages_without_token(self):
        self.malformed_messages(None)

    def test_contradicting_a_committed_entry(self):
        """An AppendEntries of a new term whose entry 1 is not the committed entry 1: libraft
        turns RAFT_UNAVAILABLE; the replica says so and exits 75; the other two serve on."""
        for role in ("follower", "leader"):
            with self.subTest(role=role):
                cl = self.cluster(token=TOKEN)
                lead, c = cl.leader()
                c.set(b"k", b"v")
                target = lead if role == "leader" else next(r for r in cl.r if r is not lead)
                other = next(i for i, r in enumerate(cl.r) if r is not target)
                rid, addr = self.member(cl, target, other)
                term = self.term_of(lead) + 1000
                link = RaftLink(target.port + 1, rid, addr, TOKEN)
                link.send(append_entries(term, 0, 0, 0, [(term, 1, b"\0" * 16)]))
                deadline = time.monotonic() + 10
                while target.alive() and time.monotonic() < deadline:
                    time.sleep(0.05)
                link.close()
                self.assertFalse(target.alive(), "still up: " + target.text()[-2000:])
                self.assertEqual(target.proc.returncode, 75, target.text()[-2000:])
                self.assertIn("is unavailable (libraft gave up", target.text())
                self.serves_within(cl, {b"k": b"v"}, limit=5.0)
                # Restarted on its --state-dir it serves or follows again.
                target.log.close()
                target.start()
                time.sleep(1.0)  # the behaviour: once restarted, it stays up
                self.assertTrue(target.alive(), target.text()[-2000:])

    def test_a_batch_is_checked_as_libraft_processes_it(self):
        """One write, as a configured member holding the replicas' key:
        AppendEntries(T'), TimeoutNows for every last index up to 1,500 (the one that matches
        makes the receiver a candidate of T'+1), RequestVoteResult(T'+1, granted) (it leads),
        AppendEntries(T'+1): the same-term AppendEntries the guard refuses when sent alone. The
        guard checked all of them against the state before libraft had applied any: libraft
        wrote follower fields over its leader state (SEGV in tickLeader), on the follower and on
        the leader. Now each message is checked again as libraft processes it: the last one
        closes the link, the replica lives, a leader serves within 2 s, every key reads back."""
        key = "replicas-only-batch-0123456789abcdef"
        cl = self.cluster(token=TOKEN, extra=["--replica-key-file", self.key_file(key)])
        lead, c = cl.leader()
        keys = {b"b%d" % i: b"v%d" % i for i in range(10)}
        for k, v in keys.items():
            c.set(k, v)
        addrs = ["%s:%d" % (HOST, r.port + 1) for r in cl.r]
        for role in ("follower", "leader"):
            with self.subTest(role=role):
                lead, c = cl.leader()
                t = cl.r.index(lead) if role == "leader" else next(
                    i for i, r in enumerate(cl.r) if r is not lead)
                other = next(i for i, r in enumerate(cl.r) if i != t and r is not lead)
                term = self.term_of(lead)
                t1 = term + 1
                batch = (append_entries(t1, 10**6, 1, 0) +
                         b"".join(msg(TN, le(t1, i, term)) for i in range(1, 1500)) +
                         msg(RVR, le(t1 + 1, 1, 0)) + append_entries(t1 + 1, 10**6, 1, 0))
                self.assertLess(len(batch), 64 << 10)  # one read of the guard's
                link = RaftLink(cl.r[t].port + 1, other + 1, addrs[other], key=key.encode(),
                                server=(t + 1, addrs[t]))
                self.assertTrue(link.server_proved)
                link.send(batch)
                self.assertTrue(link.closed_within(5.0), "the link stayed open")
                link.close()
                time.sleep(0.5)  # libraft crashed at its next tick
                self.assertTrue(cl.r[t].alive(), cl.r[t].text()[-3000:])
                self.assertIn("a second leader in our own term", cl.r[t].text())
                self.serves_within(cl, keys)
        self.assertTrue(all(r.alive() for r in cl.r))

    def test_stale_payloads_are_not_allocated(self):
        """Memory: an InstallSnapshot and an AppendEntries of a term older
        than the receiver's, each claiming 1 GiB of payload, from a configured member: the guard
        passed them and libraft allocated the whole claim as the first bytes came (600 MiB held
        from one link, 64 links allowed). Now libraft gets only an AppendEntries of that term
        with no entries (it answers with its own term), and the guard reads and drops the
        payload: the follower's address space grows by far less than the claims, the links stay
        open (an honest deposed leader is answered, not cut off), a leader serves."""
        key = "replicas-only-stale-0123456789abcdef"
        cl = self.cluster(token=TOKEN, extra=["--replica-key-file", self.key_file(key)])
        lead, c = cl.leader()
        c.set(b"k", b"v")
        term = self.term_of(lead)
        self.assertGreaterEqual(term, 2)
        old = term - 1
        addrs = ["%s:%d" % (HOST, r.port + 1) for r in cl.r]
        t = next(i for i, r in enumerate(cl.r) if r is not lead)
        other = next(i for i, r in enumerate(cl.r) if i != t and r is not lead)
        one = conf((1, addrs[0]))
        gib = 1 << 30
        snapshot = msg(IS, le(old, 9, old, 1, len(one)) + one + le(gib, 0))
        h = le(old, 10**6, 1, 0, 4)
        for _ in range(4):
            h += le(old) + bytes([COMMAND, 0, 0, 0]) + struct.pack("<I", 256 << 20)
        append = msg(AE, h + le(0))

        def vm_kib():
            with open("/proc/%d/status" % cl.r[t].proc.pid) as f:
                return next(int(x.split()[1]) for x in f if x.startswith("VmSize:"))

        before = vm_kib()
        links = []
        for m in (snapshot, append):
            link = RaftLink(cl.r[t].port + 1, other + 1, addrs[other], key=key.encode(),
                            server=(t + 1, addrs[t]))
            self.assertTrue(link.server_proved)
            links.append(link)
            link.send(m + b"\0" * (8 << 20))
        time.sleep(1.0)  # the claims arrive; what the follower allocated for them is measured
        grown = (vm_kib() - before) << 10
        self.assertTrue(cl.r[t].alive(), cl.r[t].text()[-3000:])
        self.assertLess(grown, 256 << 20, "the follower allocated the stale claims")
        for link in links:
            self.assertFalse(link.closed_within(0.2), "a stale message closed its link")
            link.close()
        self.serves_within(cl, {b"k": b"v"})

    def test_silent_strangers_leave_members_a_slot(self):
        """Slots: strangers (from 127.0.0.2, no member's address) keep
        40 silent connections open to the Raft link of the leader and of one follower, reopened
        as soon as they are closed. The other follower is restarted; then the follower they
        hold is killed, so the leader can acknowledge a write only with the restarted one's
        answers. Its connections to the leader were closed at accept for as long as strangers
        held the 32 handshake slots; now a connection from a member's IP address always gets a
        slot of its own, and the write is acknowledged."""
        cl = self.cluster(token=TOKEN)
        lead, c = cl.leader()
        c.set(b"k", b"v")
        victim, held = [r for r in cl.r if r is not lead]
        victim.kill()
        stop = threading.Event()

        def hold(port):
            socks = {}  # socket: when it was opened
            retry = 0.0
            while not stop.is_set():
                while len(socks) < 40 and time.monotonic() >= retry and not stop.is_set():
                    s = socket.socket()
                    try:
                        s.bind(("127.0.0.2", 0))
                        s.connect((HOST, port))
                        socks[s] = time.monotonic()
                    except OSError:
                        s.close()
                        break
                ready = select.select(list(socks), [], [], 0.005)[0]
                for s in ready:
                    try:
                        if s.recv(64):
                            continue
                    except OSError:
                        pass
                    if time.monotonic() - socks.pop(s) < 0.5:
                        retry = time.monotonic() + 0.2  # closed at accept: not a storm
                    s.close()
            for s in socks:
                s.close()

        threads = [threading.Thread(target=hold, args=(r.port + 1,), daemon=True)
                   for r in (lead, held)]
        for t in threads:
            t.start()
        self.addCleanup(lambda: [stop.set()] + [t.join() for t in threads])
        time.sleep(0.5)  # writes in flight before the restart
        victim.log.close()
        victim.start()
        time.sleep(2.0)  # and while the restarted replica catches up
        held.kill()
        deadline = time.monotonic() + 10.0
        while True:  # a leader may still step down once (the restarted one is catching up)
            try:
                lead2, c2 = cl.leader(timeout=10.0)
                c2.set(b"k2", b"v2")  # acknowledged only with the restarted follower's answers
                self.assertEqual(c2.get(b"k2"), b"v2")
                self.assertEqual(c2.get(b"k"), b"v")
                break
            except AssertionError as e:
                if time.monotonic() > deadline:
                    raise AssertionError("%s; logs:\n%s" % (e, "\n".join(
                        r.text()[-2500:] for r in (lead, victim))))
                time.sleep(0.2)
        stop.set()
        for t in threads:
            t.join()
        self.assertIn("connections are in their handshake", lead.text())

    def key_file(self, secret):
        d = tempfile.mkdtemp(prefix="rdzv-replica-key-")
        self.addCleanup(lambda: [os.unlink(os.path.join(d, f)) for f in os.listdir(d)]
                        or os.rmdir(d))
        path = os.path.join(d, "replica.key")
        with open(path, "w") as f:
            f.write(secret)
        os.chmod(path, 0o600)
        return path

    def test_replica_key(self):
        """Replicas with --replica-key-file form a cluster and replicate; the
        agents' token no longer opens their links (closed before a Raft byte: the server's
        proof does not verify with it either); the key opens them only for a member's own id
        and address; a replica id outside the configuration is refused before any MAC."""
        key = "replicas-only-0123456789abcdef"
        cl = self.cluster(token=TOKEN, extra=["--replica-key-file", self.key_file(key)])
        lead, c = cl.leader()
        c.set(b"k", b"v")
        target = next(r for r in cl.r if r is not lead)
        t_id, t_addr = cl.r.index(target) + 1, "%s:%d" % (HOST, target.port + 1)
        rid, addr = self.member(cl, target, cl.r.index(lead))
        # The agents' token: refused.
        link = RaftLink(target.port + 1, rid, addr, token=TOKEN)
        self.assertFalse(link.server_proved, "the replica proved itself with the agents' token")
        link.send(msg(AER, le(1, 0, 0)))
        self.assertTrue(link.closed_within(5.0))
        link.close()
        # The key, but another member's address for the id claimed, or an id outside the
        # configuration: refused at the hello, before any MAC.
        other = next(r for r in cl.r if r is not lead and r is not target)
        for claim in ((rid, "%s:%d" % (HOST, other.port + 1)), (9, "127.0.0.1:4242")):
            time.sleep(1.1)  # refusals are logged at most once a second
            link = RaftLink(target.port + 1, *claim, key=key.encode(), server=(t_id, t_addr))
            self.assertTrue(link.refused_at_hello, claim)
            link.close()
        text = target.text()
        self.assertIn("wrong replica key", text)
        self.assertIn("not in our configuration", text)
        self.assertNotIn("a message that fails its checks", text)
        self.assertIn("before any Raft message", text)
        # The key and a member's own id and address: in, and its messages are checked.
        link = RaftLink(target.port + 1, rid, addr, key=key.encode(), server=(t_id, t_addr))
        self.assertTrue(link.server_proved)
        link.send(snapshot_bomb())
        self.assertTrue(link.closed_within(5.0))
        link.close()
        self.assertIn("a message that fails its checks", target.text())
        self.assertNotIn("every agent-token holder can reach them", target.text())
        self.serves_within(cl, {b"k": b"v"})
        self.assertTrue(all(r.alive() for r in cl.r))

    def test_token_without_key_is_warned(self):
        cl = self.cluster(token=TOKEN)
        cl.leader()
        for r in cl.r:
            self.assertIn("every agent-token holder can reach them", r.text())

    def test_replica_exit_reports_are_not_a_flood(self):
        """An agent that keeps saying that the replica on its host exited
        (REPLICA {id, error}, unasked) made the leader log a line each time (5,432 in 60 s). Now
        the report is noted once while it is checked, and such lines are rate limited; the
        replica, which answers its heartbeats, stays a voter."""
        cl = self.cluster(extra=["--replicas", "3"])
        lead, c = cl.leader()
        c.set(b"k", b"v")
        victim = next(r for r in cl.r if r is not lead)
        p = Peer(lead.port)
        self.addCleanup(p.close)
        p.hello()
        body = join_body("replica-flood", "n0", 2)
        body["host_replica"] = True
        p.send(JOIN, body)
        op, reply = p.recv_json()
        self.assertEqual(op, JOINED, reply)
        for _ in range(3000):
            p.send(0xB2, {"id": cl.r.index(victim) + 1, "error": "exited (status 1)"})
        time.sleep(3.0)  # the leader checks the replica, which answers: it stays
        said = lead.text().count("says replica %d exited" % (cl.r.index(victim) + 1))
        self.assertGreaterEqual(said, 1, lead.text()[-3000:])
        self.assertLessEqual(said, 5, "a line per report")
        self.assertTrue(all(r.alive() for r in cl.r))
        self.assertNotIn("is not voting: removing it", lead.text())
        self.serves_within(cl, {b"k": b"v"})

    def restart_if_gave_up(self, cl, i, sent):
        """Replica i is down: it must have exited 75 (libraft gave up, RAFT_UNAVAILABLE, as
        for a contradicted entry), never anything else; restarted on its --state-dir, as a
        supervisor would.
        sent: its last messages, hex, for a failure's message."""
        r = cl.r[i]
        self.assertEqual(r.proc.returncode, 75, "replica %d died after these messages "
                         "(hex, last last):\n%s\n%s" % (i + 1, "\n".join(sent), r.text()[-3000:]))
        r.log.close()
        r.start()

    def test_fuzzer(self):
        """Seeded, bounded: valid messages of every type mutated (bytes flipped, fields set to
        edge values, lengths cut or grown), sent by a peer holding the replicas' key (and the
        agents' token) as a configured member, to each replica in turn, a fresh link per
        message; then a leader serves within 2 s and every key the cluster acknowledged reads
        back, no replica died, no sanitizer spoke. RDZV_FUZZ_SEED and RDZV_FUZZ_MESSAGES replay
        or lengthen a run; the guard's checks replay a corpus of their own
        (tests/fuzz/fuzz-raft-wire.c)."""
        key = b"replicas-only-fuzz-0123456789abcdef"
        cl = self.cluster(token=TOKEN, extra=["--replica-key-file", self.key_file(key.decode())])
        lead, c = cl.leader()
        keys = {b"f%d" % i: os.urandom(8) for i in range(10)}
        for k, v in keys.items():
            c.set(k, v)
        # The messages carry a stale term (below the leader's) or one the guard refuses (past
        # the jump bound, at the ceiling): a message of a current or newer term that passes
        # every check is a forgery by a Byzantine member, which no Raft survives (the key is for
        # replicas only), not malformed input. So a mutation that lands a term in between is
        # put back to the stale one; every other field, and the term's other values, are fair.
        now = self.term_of(lead)
        term = max(1, now - 1)
        rng = random.Random(FUZZ_SEED)
        addrs = [("%s:%d" % (HOST, r.port + 1)) for r in cl.r]
        far = 10**6  # a previous index no log has: libraft refuses to append after it
        seeds = [
            append_entries(term, far, 1, 1),
            append_entries(term, far, term, 2, [(term, 1, b"\0" * 24), (term, 2, b"\0" * 8)]),
            append_entries(term, far, term, 2, [(term, 3, conf((1, addrs[0]), (2, addrs[1])))]),
            msg(AER, le(term, 0, 5)),
            msg(RV, le(term, 2, 5, term, 1)),
            msg(RVR, le(term, 1, 0)),
            msg(IS, le(term, 9, term, 1, len(conf((1, addrs[0])))) + conf((1, addrs[0])) + le(8, 0))
            + b"\0" * 8,
            msg(TN, le(term, 5, term)),
        ]
        edges = [0, 1, 2**63, 2**64 - 1, 2**32, far, term + 2**20 + 1]
        closed = restarted = 0
        sent = [[], [], []]  # each replica's last messages, for a failure's message

        for n in range(FUZZ_MESSAGES):
            m = bytearray(rng.choice(seeds))
            for _ in range(rng.randint(1, 4)):
                op = rng.randrange(4) if len(m) > 1 else 3
                if op == 0:
                    m[rng.randrange(len(m))] ^= 1 << rng.randrange(8)
                elif op == 1 and len(m) >= 8:
                    at = rng.randrange(0, len(m) - 7) & ~7
                    m[at:at + 8] = struct.pack("<Q", rng.choice(edges))
                elif op == 2:
                    del m[rng.randrange(1, len(m)):]
                else:
                    m += os.urandom(rng.randrange(1, 64))
            if len(m) >= 24 and term < struct.unpack("<Q", m[16:24])[0] <= now + 2**20:
                m[16:24] = le(term)
            i = n % 3
            target = cl.r[i]
            if not target.alive():
                self.restart_if_gave_up(cl, i, sent[i])
                restarted += 1
                continue
            other = (i + 1 + rng.randrange(2)) % 3
            try:
                link = RaftLink(target.port + 1, other + 1, addrs[other], key=key,
                                server=(i + 1, addrs[i]))
            except (ConnectionError, OSError):
                continue
            sent[i] = (sent[i] + [bytes(m).hex()])[-4:]
            link.send(bytes(m))
            if link.closed_within(0.05):
                closed += 1
            link.close()
        self.assertGreater(closed, FUZZ_MESSAGES // 4, "most mutations must be refused")
        # A mutation may make libraft give up for good (RAFT_UNAVAILABLE, as a contradicted entry
        # does): that replica exits 75, never anything else, and is restarted on its --state-dir.
        for i, r in enumerate(cl.r):
            if not r.alive():
                self.restart_if_gave_up(cl, i, sent[i])
                restarted += 1
        print("fuzzer: seed %d, %d messages, %d links closed by the guard, %d restarts" % (
            FUZZ_SEED, FUZZ_MESSAGES, closed, restarted), flush=True)
        self.serves_within(cl, keys)


    def test_fuzzer_sequences(self):
        """Sequences of messages in one write, not only single ones. Seeded,
        bounded (RDZV_FUZZ_WRITES writes, 60 by default; RDZV_FUZZ_SEED replays): each write
        holds 2 to 6 messages of every type at terms around the cluster's (older, its own, the
        next two), votes granted or not, TimeoutNows for a sweep of last indexes (so that one
        matches and makes the receiver a candidate), some mutated as test_fuzzer mutates, from
        a configured member holding the replicas' key, to each replica in turn. Messages of a
        newer term act as a leader or a voter would: a Byzantine member, which Raft does not
        survive for its data, but no sequence may crash a replica: each one lives or exits 75
        (libraft gave up; restarted on its --state-dir), no sanitizer speaks, and at the end a
        leader serves. On the code before, the sweep made a follower lead and the next
        AppendEntries of its term killed it (attack 8)."""
        key = b"replicas-only-seq-0123456789abcdef"
        cl = self.cluster(token=TOKEN, extra=["--replica-key-file", self.key_file(key.decode())])
        lead, c = cl.leader()
        c.set(b"s", b"1")
        rng = random.Random(FUZZ_SEED)
        addrs = [("%s:%d" % (HOST, r.port + 1)) for r in cl.r]
        far = 10**6
        sent = [[], [], []]
        restarted = closed = 0

        def term_now():
            return max([int(x.split("(term ")[1].split(")")[0]) for r in cl.r
                        for x in r.text().splitlines() if " leads (term " in x] or [1])

        def one(t, last, base):
            """A message of term t; TimeoutNows name the log's last term as base or t - 1."""
            k = rng.choice("AAARVVWWITTN")
            if k == "A":
                return append_entries(t, far if rng.random() < 0.7 else last, max(1, t - 1),
                                      rng.choice((0, 1, last)),
                                      [(t, rng.choice((1, 2)), b"\0" * 8)] * rng.randrange(2))
            if k == "R":
                return msg(AER, le(t, rng.choice((0, last)), last))
            if k == "V":
                return msg(RV, le(t, 0, last, t - 1, 0))  # candidate filled in below
            if k == "W":
                return msg(RVR, le(t, int(rng.random() < 0.7), 0))
            if k == "I":
                one_conf = conf((1, addrs[0]))
                return (msg(IS, le(t, last, max(1, t - 1), 1, len(one_conf)) + one_conf +
                            le(8, 0)) + b"\0" * 8)
            lt = rng.choice((base, t - 1))
            if k == "T":  # a sweep: the one that matches the log makes a candidate of t + 1
                return b"".join(msg(TN, le(t, i, lt)) for i in range(1, 300))
            return msg(TN, le(t, last, lt))

        for n in range(FUZZ_WRITES):
            if n % 6 == 0 and all(r.alive() for r in cl.r):
                cl.leader(timeout=15.0)  # settled now and then: the scripts' terms then match
            base = term_now()  # the log's last term, as far as the logs tell
            i = n % 3
            target = cl.r[i]
            if not target.alive():
                self.restart_if_gave_up(cl, i, sent[i])
                restarted += 1
                continue
            other = (i + 1 + rng.randrange(2)) % 3
            parts = []
            if rng.random() < 0.5:
                # A script through Raft's roles, each step kept at 85%, its term off by one at
                # 15%, and a random message somewhere at 50%: follow the sender at a newer term,
                # a TimeoutNow sweep (candidate of the next term), its vote granted (leader),
                # and an AppendEntries of that term.
                t = base + 1
                for j in range(4):
                    if rng.random() < 0.15:
                        t = max(1, t + rng.choice((-1, 1)))
                    m = (append_entries(t, far, 1, 0),
                         b"".join(msg(TN, le(t, i, base)) for i in range(1, 1500)),
                         msg(RVR, le(t + 1, 1, 0)), append_entries(t + 1, far, 1, 0))[j]
                    if rng.random() < 0.85:
                        parts.append(m)
                if rng.random() < 0.5:
                    parts.insert(rng.randrange(len(parts) + 1),
                                 one(base + rng.choice((-1, 0, 1, 2)), rng.randrange(1, 200), base))
            run = base + rng.choice((0, 1))  # the term the messages so far would lead to
            for _ in range(0 if parts else rng.randint(2, 6)):
                t = max(1, run + rng.choice((-1, 0, 0, 0, 1)))
                m = bytearray(one(t, rng.randrange(1, 200), base))
                if m[:8] == le(TN) or (m[:8] == le(AE) and t > run):
                    run = t + 1 if m[:8] == le(TN) else t
                if m[:8] == le(RV):
                    m[24:32] = le(other + 1)
                if rng.random() < 0.2:  # a mutation as test_fuzzer's, once in a while
                    at = rng.randrange(0, len(m) - 7) & ~7
                    m[at:at + 8] = le(rng.choice((0, 1, t + 1, 2**63)))
                parts.append(bytes(m))
            data = b"".join(parts)
            try:
                link = RaftLink(target.port + 1, other + 1, addrs[other], key=key,
                                server=(i + 1, addrs[i]))
            except (ConnectionError, OSError):
                continue
            sent[i] = (sent[i] + [data[:4096].hex()])[-3:]
            link.send(data)
            if link.closed_within(0.05):
                closed += 1
            link.close()
        time.sleep(0.5)  # the behaviour: a replica that gave up has exited by now, 75
        for i, r in enumerate(cl.r):
            if not r.alive():
                self.restart_if_gave_up(cl, i, sent[i])
                restarted += 1
        print("sequence fuzzer: seed %d, %d writes, %d links closed, %d restarts" % (
            FUZZ_SEED, FUZZ_WRITES, closed, restarted), flush=True)
        cl.leader(timeout=15.0)
        self.assertTrue(all(r.alive() for r in cl.r))


if __name__ == "__main__":
    main()
