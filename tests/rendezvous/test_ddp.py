# SPDX-License-Identifier: Apache-2.0
"""Two rdzv-agents started by hand run an unmodified PyTorch gloo DDP script to completion: the
workers' env:// rendezvous goes to the generation's store on rdzvd
(TORCHELASTIC_USE_AGENT_STORE)."""
import json
import os

from agenttest import AgentTestCase, agent_cmd, finish, main, start

PYTHON = os.environ.get("RDZV_TEST_PYTHON", "/usr/bin/python3")

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts", "autoencoder_ddp.py")


class TestDDP(AgentTestCase):
    def test_two_agents_train_the_autoencoder(self):
        try:
            import torch  # noqa: F401
        except ImportError:
            self.skipTest(f"PyTorch is not installed for {PYTHON}")
        d = self.daemon()
        ep = f"127.0.0.1:{d.port}"
        out = self.outdir()
        ps = [start(agent_cmd(ep, "--nnodes", "2", "--nproc", "2", "--rdzv-id", "ddp",
                              "--node-rank", str(i), worker=[PYTHON, SCRIPT, out]))
              for i in (0, 1)]
        for p in ps:
            rc, stdout, err = finish(p, timeout=240)
            self.assertEqual(rc, 0, err[-4000:])
        res = []
        for r in range(4):
            with open(os.path.join(out, f"result.{r}.json")) as f:
                res.append(json.load(f))
        self.assertEqual([x["rank"] for x in res], [0, 1, 2, 3])
        self.assertEqual({x["world"] for x in res}, {4})
        self.assertEqual(len({x["params"] for x in res}), 1, "DDP kept every replica identical")
        self.assertEqual(len({x["last"] for x in res}), 1, "the all-reduced loss agrees")
        self.assertLess(res[0]["last"], res[0]["first"] * 0.5, "it trained")


if __name__ == "__main__":
    main()
