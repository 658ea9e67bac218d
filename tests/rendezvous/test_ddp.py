# SPDX-License-Identifier: Apache-2.0
"""Two rdzv-agents started by hand run an unmodified PyTorch gloo DDP script to completion: the
workers' env:// rendezvous goes to the generation's store on rdzvd
(TORCHELASTIC_USE_AGENT_STORE), or, with --store-front, to their own agent, which serves them
through one connection to it."""
import json
import os
import re

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


if __name__ == "__main__":
    main()
