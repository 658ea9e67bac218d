# SPDX-License-Identifier: Apache-2.0
"""Two rdzv-agents started by hand run an unmodified PyTorch gloo DDP script to completion: the
workers' env:// rendezvous goes to the generation's store on rdzvd
(TORCHELASTIC_USE_AGENT_STORE), or, with --store-front, to their own agent, which serves them
through one connection to it. A front full of other local processes' silent connections still
takes the workers'."""
import json
import os
import re
import select
import socket
import time

from agenttest import AgentTestCase, agent_cmd, finish, main, start

PYTHON = os.environ.get("RDZV_TEST_PYTHON", "/usr/bin/python3")

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts", "autoencoder_ddp.py")


class TestDDP(AgentTestCase):
    def train(self, *args):
        """The two agents' job (args: more of their options): their logs, once both trained."""
        try:
            import torch  # noqa: F401
        except ImportError:
            self.skipTest(f"PyTorch is not installed for {PYTHON}")
        d = self.daemon()
        ep = f"127.0.0.1:{d.port}"
        out = self.outdir()
        ps = [start(agent_cmd(ep, "--nnodes", "2", "--nproc", "2", "--rdzv-id", "ddp",
                              "--node-rank", str(i), *args, worker=[PYTHON, SCRIPT, out]))
              for i in (0, 1)]
        errs = []
        for p in ps:
            rc, stdout, err = finish(p, timeout=240)
            self.assertEqual(rc, 0, err[-4000:])
            errs.append(err)
        self.assert_trained(out)
        return errs

    def assert_trained(self, out):
        res = []
        for r in range(4):
            with open(os.path.join(out, f"result.{r}.json")) as f:
                res.append(json.load(f))
        self.assertEqual([x["rank"] for x in res], [0, 1, 2, 3])
        self.assertEqual({x["world"] for x in res}, {4})
        self.assertEqual(len({x["params"] for x in res}), 1, "DDP kept every replica identical")
        self.assertEqual(len({x["last"] for x in res}), 1, "the all-reduced loss agrees")
        self.assertLess(res[0]["last"], res[0]["first"] * 0.5, "it trained")

    def test_two_agents_train_the_autoencoder(self):
        for err in self.train():
            self.assertNotIn("store front", err)

    def test_through_the_agents_store_fronts(self):
        for err in self.train("--store-front"):
            self.assertRegex(err, r"gen=1 node=\S+ store front for generation 1 on "
                                  r"127\.0\.0\.1:\d+ \(the workers' store connections, one to ")
            m = re.search(r"store front: (\d+) worker connections, (\d+) requests \((\d+) sent "
                          r"to the store, (\d+) GETs answered with another's reply\), (\d+) "
                          r"WAITs \((\d+) sent to the store, (\d+) of them cancelled\)", err)
            self.assertTrue(m, err[-3000:])
            conns, requests, sent, shared, waits, upstream, cancels = map(int, m.groups())
            self.assertGreaterEqual(conns, 2, m.group(0))  # the node's two workers, at least
            self.assertGreater(requests, 0, m.group(0))
            self.assertLessEqual(sent + shared + waits, requests, m.group(0))
            self.assertLessEqual(upstream, waits, m.group(0))
            # every wait of a job that ends well is answered: none given up
            self.assertEqual(cancels, 0, m.group(0))


# The worker: waits for the test to fill its node's front (a FIFO opened for reading blocks until
# the test opens it), then uses the store through it with PyTorch's own client.
FRONT_WORKER = """
import os, sys
from datetime import timedelta
import torch.distributed as dist
open(sys.argv[1]).read()
st = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), None, False,
                   timedelta(seconds=20))
st.set("worker", "in")
assert st.get("worker") == b"in"
"""


class FrontSlots(AgentTestCase):
    def test_a_full_front_takes_its_workers_connection(self):
        # Any local process may connect to a node's store front (127.0.0.1). 20 connections
        # (4 x --nproc + 16) from outside the workers fill it and stay silent: the worker's own
        # connection takes the slot of one of them, and it trains. A newcomer from outside is
        # refused while every slot is a worker's or has spoken, or is younger than 3 s.
        try:
            import torch  # noqa: F401
        except ImportError:
            self.skipTest(f"PyTorch is not installed for {PYTHON}")
        d = self.daemon()
        out = self.outdir()
        fifo = os.path.join(out, "go")
        os.mkfifo(fifo)
        p = start(agent_cmd(f"127.0.0.1:{d.port}", "--nnodes", "1", "--nproc", "1", "--rdzv-id",
                            "slots", "--store-front", "--nccl", "off",
                            worker=[PYTHON, "-c", FRONT_WORKER, fifo]))
        seen, deadline = b"", time.monotonic() + 60
        while not (m := re.search(rb"store front for generation 1 on 127\.0\.0\.1:(\d+)", seen)):
            self.assertLess(time.monotonic(), deadline, seen.decode(errors="replace"))
            if select.select([p.stderr], [], [], 1)[0]:
                got = os.read(p.stderr.fileno(), 65536)
                self.assertTrue(got, "the agent ended: " + seen.decode(errors="replace"))
                seen += got
        port = int(m.group(1))
        hogs = [socket.create_connection(("127.0.0.1", port)) for _ in range(20)]
        for h in hogs:
            self.addCleanup(h.close)
        late = socket.create_connection(("127.0.0.1", port))  # the 21st, from outside: refused
        late.settimeout(10)
        self.assertEqual(late.recv(1), b"")
        late.close()
        with open(fifo, "w") as f:
            f.write("go")
        rc, _, err = finish(p, timeout=120)
        err = seen.decode(errors="replace") + err
        self.assertEqual(rc, 0, err[-4000:])
        self.assertIn("closing a worker's connection: the front is full and a worker needs the "
                      "slot of this client, which is none of the node's workers", err)
        self.assertIn("store front: more than 20 connections: refusing one", err)


if __name__ == "__main__":
    main()
