# SPDX-License-Identifier: Apache-2.0
"""rdzvctl status (text and --json), rdzvd --metrics-port (Prometheus text, /status.json) and the
status page rendered by a real headless Chromium, during a real job with a restart; and each
rank's last step and its age during a real rdzv-train job and with a stopped worker."""
import signal
import json
import socket
import os
import re
import shutil
import subprocess
import tempfile
import time
import unittest
import urllib.error
import urllib.request

from agenttest import AGENT, AgentTestCase, agent_cmd, finish, main, start

TRAIN = os.path.join(os.environ.get("RDZV_BUILD_ROOT", "build"), "train", "rdzv-train")
RDZVCTL = os.environ.get("RDZVCTL", os.path.join(os.path.dirname(os.path.dirname(
    os.environ.get("RDZVD", "build/daemon/rdzvd"))), "ctl", "rdzvctl"))

# Rank 1 fails on the first attempt, then every worker sleeps so the job stays observable.
WORKER = ["/bin/sh", "-c",
          'if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ] && [ "$RANK" = 1 ]; then exit 3; fi; '
          'sleep "${RDZV_TEST_SLEEP:-30}"']

# Reports a step every 0.1 s (and says its pid): a stopped one falls silent, the others go on.
REPORTER = ["bash", "-c", 'echo $$ > "$RDZV_TEST_OUT/pid.$RANK"; i=1; '
            'while :; do echo "step $i" >&$RDZV_PROGRESS_FD; i=$((i+1)); sleep 0.1; done']

PROM_LINE = re.compile(r'^[a-zA-Z_:][a-zA-Z0-9_:]*'
                       r'(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\]|\\.)*",?)*\})?'
                       r' -?[0-9.eE+-]+$')


def get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.headers.get("Content-Type"), r.read().decode()


class StatusTest(AgentTestCase):
    def start_job(self, run_id, nodes=2, extra=(), worker=WORKER, env=None):
        d, self.mport = self.daemon_with_metrics()
        ep = f"127.0.0.1:{d.port}"
        agents = [start(agent_cmd(ep, "--rdzv-id", run_id, "--nnodes", str(nodes), "--nproc", "2",
                                  "--max-restarts", "2", "--nccl", "off", "--grace", "1",
                                  "--last-call", "0.2", *extra, worker=worker), env=env)
                  for _ in range(nodes)]
        for a in agents:
            self.addCleanup(a.kill)
        return d, ep, agents

    def ctl_status(self, ep, *args):
        p = subprocess.run([RDZVCTL, "-e", ep, "status", *args], capture_output=True, text=True,
                           timeout=10)
        self.assertEqual(p.returncode, 0, p.stderr)
        return p.stdout

    def wait_generation(self, ep, run_id, gen, timeout=20):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            st = json.loads(self.ctl_status(ep, "--json"))
            for j in st["jobs"]:
                if j["run_id"] == run_id and j["generation"] >= gen and j["state"] == "running":
                    return st
            time.sleep(0.1)
        self.fail(f"job {run_id} did not reach generation {gen}: {st}")

    def test_status_json_and_text_show_jobs_nodes_restarts_events(self):
        d, ep, agents = self.start_job("status-job")
        st = self.wait_generation(ep, "status-job", 2)
        job = next(j for j in st["jobs"] if j["run_id"] == "status-job")
        self.assertEqual(job["restart_count"], 1)
        self.assertEqual(job["max_restarts"], 2)
        self.assertEqual(job["nodes_in_generation"], 2)
        self.assertEqual(job["world_size"], 4)
        self.assertEqual(sorted(n["node_rank"] for n in job["nodes"]), [0, 1])
        for n in job["nodes"]:
            self.assertEqual(n["workers"], 2)
            self.assertLess(n["last_heartbeat_age_s"], 5)
            self.assertTrue(n["connected"])
        self.assertEqual(sum(n["failures"] for n in job["nodes"]), 1, "the one failure, once")
        texts = [e["text"] for e in job["events"]]
        self.assertTrue(any("restarting generation 1" in t and "exited with code 3" in t
                            for t in texts), texts)
        self.assertTrue(any(t.startswith("generation 2 formed") for t in texts), texts)
        self.assertGreater(st["uptime_s"], 0)
        self.assertGreaterEqual(st["stats"]["connections"], 2)

        text = self.ctl_status(ep)
        self.assertIn("job status-job: running, generation 2, restarts 1 of 2", text)
        self.assertRegex(text, r"(?m)^\s+\S+\s+0 running\s+\d+\.\ds\s+2\s+\d+$")
        self.assertIn("restarting generation 1", text)

    def job_ranks(self, ep, run_id, want, timeout=30):
        """The job's "ranks" once want of them have reported a step >= 1: {rank: entry}."""
        deadline = time.monotonic() + timeout
        while True:
            st = json.loads(self.ctl_status(ep, "--json"))
            job = next((j for j in st["jobs"] if j["run_id"] == run_id), None)
            ranks = {r["rank"]: r for r in (job or {}).get("ranks", []) if r["step"] >= 1}
            if len(ranks) == want or time.monotonic() > deadline:
                self.assertEqual(sorted(ranks), list(range(want)), job)
                self.assertEqual(job["ranks_left_out"], 0)
                return ranks
            time.sleep(0.1)

    @unittest.skipUnless(os.access(TRAIN, os.X_OK), "rdzv-train is not built")
    def test_ranks_progress_of_a_training_job(self):
        # A real rdzv-train job (gloo, 2 nodes x 2 workers): every rank's step goes up between two
        # reads and was reported a moment ago; rdzvctl, /metrics and the page all show it.
        d, ep, agents = self.start_job("progress-job", worker=[
            TRAIN, "--backend", "gloo", "--steps", "100000000", "--log-every", "100000000"])
        first = self.job_ranks(ep, "progress-job", 4)
        time.sleep(1.5)
        second = self.job_ranks(ep, "progress-job", 4)
        for rank, r in second.items():
            self.assertGreater(r["step"], first[rank]["step"], (first, second))
            self.assertLess(r["age_s"], 3, second)
            self.assertEqual(r["node_rank"], rank // 2)
            self.assertTrue(r["host"])
            # Its compute time: rdzv-train says it, its agent carries it.
            self.assertIsInstance(r.get("compute_ms"), int, second)
            self.assertTrue(0 <= r["compute_ms"] <= 3600000, second)
        st = json.loads(self.ctl_status(ep, "--json"))
        job = next(j for j in st["jobs"] if j["run_id"] == "progress-job")
        for n in job["nodes"]:  # each node: its slowest rank's
            self.assertIsInstance(n.get("compute_ms"), int, job)
            self.assertTrue(0 <= n["compute_ms"] <= 3600000, job)
        text = self.ctl_status(ep)
        self.assertIn("progress: 4 rank(s) reported, step ", text)
        self.assertRegex(text, r"(?m)^\s+RANK .* AGE\s+COMPUTE_MS$")
        for rank in range(4):
            self.assertRegex(text, rf"(?m)^\s+{rank}\s+{rank // 2} \S+\s+\d+\s+\d+\.\ds\s+\d+$")
        _, _, body = get(f"http://127.0.0.1:{self.mport}/metrics")
        for rank in range(4):
            for name in ("rdzvd_rank_last_step", "rdzvd_rank_progress_age_seconds"):
                self.assertRegex(body, rf'(?m)^{name}{{job="progress-job",rank="{rank}",'
                                       rf'node_rank="{rank // 2}",host="[^"]+"}} [0-9.]+$')
        for node_rank in range(2):
            self.assertRegex(body, rf'(?m)^rdzvd_node_compute_ms{{job="progress-job",'
                                   rf'host="[^"]+",node_rank="{node_rank}"}} \d+$')
        _, _, page = get(f"http://127.0.0.1:{self.mport}/")
        self.assertEqual(len(re.findall(r"<tr><td>\d</td><td>[01]</td><td>[^<]+</td><td>\d+</td>"
                                        r"<td>\d+\.\d s ago</td></tr>", page)), 4, page)

    def test_a_stopped_worker_shows_a_growing_age(self):
        # Rank 1 SIGSTOPped: its age grows and its step stays while the others' go on; after
        # SIGCONT it reports again.
        out = self.outdir()
        d, ep, agents = self.start_job("stopped-job", worker=REPORTER,
                                       env={"RDZV_TEST_OUT": out})
        self.job_ranks(ep, "stopped-job", 4)
        with open(os.path.join(out, "pid.1")) as f:
            pid = int(f.read())
        os.kill(pid, signal.SIGSTOP)
        try:
            # Past a heartbeat (1 s): its last report before the stop has reached rdzvd.
            time.sleep(1.5)
            before = self.job_ranks(ep, "stopped-job", 4)
            time.sleep(3)
            after = self.job_ranks(ep, "stopped-job", 4)
            # rdzvctl's table while rank 1 is still stopped: after SIGCONT its next report may
            # come before rdzvctl (slow to start in a sanitizer build) asks.
            text = self.ctl_status(ep)
        finally:
            os.kill(pid, signal.SIGCONT)
        self.assertGreater(after[1]["age_s"], 3, after)
        self.assertGreater(after[1]["age_s"], before[1]["age_s"] + 2, (before, after))
        self.assertEqual(after[1]["step"], before[1]["step"])
        for rank in (0, 2, 3):
            self.assertLess(after[rank]["age_s"], 2.5, after)
            self.assertGreater(after[rank]["step"], before[rank]["step"], (before, after))
        self.assertRegex(text, r"(?m)^\s+1\s+0 \S+\s+\d+\s+[3-9]\.\ds$")
        deadline = time.monotonic() + 10
        while self.job_ranks(ep, "stopped-job", 4)[1]["age_s"] > 2.5:
            self.assertLess(time.monotonic(), deadline, "rank 1 did not report again")
            time.sleep(0.2)

    def test_progress_timeout_auto_is_shown(self):
        # --progress-timeout auto:FLOOR: once a rank is warmed up (20 steps of 0.1 s), its own
        # timeout (here the floor: 10 x 0.1 s is less) is in STATUS and in rdzvctl's TIMEOUT.
        out = self.outdir()
        d, ep, agents = self.start_job("auto-job", worker=REPORTER, env={"RDZV_TEST_OUT": out},
                                       extra=("--progress-timeout", "auto:7"))
        deadline = time.monotonic() + 30
        while True:
            ranks = self.job_ranks(ep, "auto-job", 4)
            if all(r.get("timeout_s") == 7 for r in ranks.values()):
                break
            self.assertLess(time.monotonic(), deadline, ranks)
            time.sleep(0.2)
        text = self.ctl_status(ep)
        self.assertRegex(text, r"(?m)^\s+RANK\s+NODE_RANK\s+HOST\s+STEP\s+AGE\s+TIMEOUT$")
        for rank in range(4):
            self.assertRegex(text, rf"(?m)^\s+{rank}\s+{rank // 2} \S+\s+\d+\s+\d+\.\ds\s+7\.0s$")

    def test_metrics_are_valid_prometheus_text(self):
        d, ep, agents = self.start_job("metrics-job")
        self.wait_generation(ep, "metrics-job", 2)
        code, ctype, body = get(f"http://127.0.0.1:{self.mport}/metrics")
        self.assertEqual(code, 200)
        self.assertTrue(ctype.startswith("text/plain; version=0.0.4"), ctype)
        samples = {}
        for line in body.splitlines():
            if line.startswith("#"):
                self.assertRegex(line, r"^# (HELP|TYPE) [a-z_]+ .+$")
                continue
            self.assertRegex(line, PROM_LINE)
            name, _, value = line.rpartition(" ")
            samples[name] = float(value)
        self.assertEqual(samples['rdzvd_job_generation{job="metrics-job"}'], 2)
        self.assertEqual(samples['rdzvd_job_restarts_total{job="metrics-job"}'], 1)
        self.assertEqual(samples['rdzvd_job_world_size{job="metrics-job"}'], 4)
        self.assertEqual(samples['rdzvd_job_state{job="metrics-job",state="running"}'], 1)
        self.assertEqual(samples['rdzvd_job_state{job="metrics-job",state="ended"}'], 0)
        # The failure's recovery: its first phases counted; its first step never comes (the
        # workers report no progress).
        for phase, n in (("stop", 1), ("rendezvous", 1), ("nccl", 1), ("first_step", 0),
                         ("total", 0)):
            key = f'rdzvd_recovery_phase_seconds_count{{cause="failure",phase="{phase}"}}'
            self.assertEqual(samples[key], n, key)
        self.assertGreaterEqual(samples["rdzvd_connections"], 2)
        ages = [v for k, v in samples.items() if k.startswith("rdzvd_node_heartbeat_age_seconds")]
        self.assertEqual(len(ages), 2)
        # No label without a value (node_id="": the port hides node ids).
        self.assertEqual(re.findall(r'(?m)^.*="".*$', body)[:2], [])
        self.assertRegex(body, r'(?m)^rdzvd_node_heartbeat_age_seconds\{job="metrics-job",'
                               r'host="[^"]+",node_rank="[01]"\} [0-9.]+$')

        code, ctype, body = get(f"http://127.0.0.1:{self.mport}/status.json")
        self.assertEqual(ctype, "application/json")
        self.assertEqual(json.loads(body)["jobs"][0]["run_id"], "metrics-job")
        with self.assertRaises(urllib.error.HTTPError) as cm:
            get(f"http://127.0.0.1:{self.mport}/nothing-here")
        self.assertEqual(cm.exception.code, 404)

    def read_until(self, p, pattern, timeout=20):
        """Read p's stderr line by line until pattern matches; returns the match."""
        import select
        deadline, seen = time.monotonic() + timeout, []
        while time.monotonic() < deadline:
            if not select.select([p.stderr], [], [], 0.5)[0]:
                continue
            line = p.stderr.readline().decode()
            if not line:
                break
            seen.append(line)
            m = re.search(pattern, line)
            if m:
                return m
        self.fail(f"no {pattern!r} in the agent's log:\n" + "".join(seen)[-3000:])

    def test_an_agent_serves_the_status_page_of_the_rdzvd_it_runs(self):
        """--metrics-port on the agent: the status page of its embedded rdzvd (--standalone) and
        of the rdzvd it hosts (--master-port); each says where, and the page shows the job."""
        out = self.outdir()
        release = os.path.join(out, "release")
        worker = ["/bin/sh", "-c", f'while [ ! -e {release} ]; do sleep 0.1; done']
        port = None
        for how in (["--standalone"], ["--master-port", "0"]):
            if how[0] == "--master-port":
                with socket.socket() as sk:
                    sk.bind(("127.0.0.1", 0))
                    port = sk.getsockname()[1]
                how = ["--master-port", str(port), "--rdzv-id", "hostedpage"]
            tmp = os.path.join(out, "tmp-" + how[0].strip("-"))
            os.makedirs(tmp, exist_ok=True)
            p = start([AGENT, *how, "--metrics-port", "0", "--nproc", "1", "--nccl", "off",
                       "--no-python", *worker], env={"TMPDIR": tmp})
            self.addCleanup(p.kill)
            m = self.read_until(p, r"status page(?: on|:) (http://127\.0\.0\.1:\d+/)")
            url = m.group(1)
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                code, ctype, body = get(url + "status.json")
                jobs = json.loads(body)["jobs"]
                if jobs and jobs[0]["state"] == "running":
                    break
                time.sleep(0.1)
            self.assertEqual(code, 200)
            self.assertEqual([j["state"] for j in jobs], ["running"], body[:2000])
            code, ctype, page = get(url)
            self.assertIn("text/html", ctype)
            self.assertIn("<h2 class=\"job\">job", page)
            open(release, "w").close()
            rc, _, err = finish(p, timeout=30)
            self.assertEqual(rc, 0, err[-2000:])
            os.unlink(release)

    def test_no_node_id_reaches_a_reader_without_a_token(self):
        """Case 6 of issue 71: three nodes join (--nnodes 2:3, --bad-node-failures 1); rank 1's
        worker fails, its node is put aside, and the job restarts with that root cause. `/`,
        `/job/J`, `/status.json` and `/metrics`, read without a token, name no node id in any
        text. Before, nodes[] and put_aside[] were blanked, but the events said "joined (node id
        ...)" and "put aside (node id ...)"."""
        run_id = "hidden-ids"
        d, ep, agents = self.start_job(run_id, nodes=3,
                                       extra=("--nnodes", "2:3", "--bad-node-failures", "1",
                                              "--last-call", "3"))
        d.wait_log(r"put aside \(node id", timeout=30)
        self.wait_generation(ep, run_id, 2, timeout=30)
        ids = set(re.findall(r"joined \(node id ([^,)\s]+)", d.log()))
        self.assertEqual(len(ids), 3, d.log()[-3000:])
        url = f"http://127.0.0.1:{self.mport}"
        for path in ("/", f"/job/{run_id}", "/status.json", "/metrics"):
            code, _, body = get(url + path)
            self.assertEqual(code, 200, path)
            for node_id in ids:
                self.assertNotIn(node_id, body, f"{path} names node id {node_id}")
        job = json.loads(get(url + "/status.json")[2])["jobs"][0]
        texts = [e["text"] for e in job["events"]]
        self.assertTrue(any("put aside (node id hidden)" in t for t in texts), texts)

    def test_an_agent_hosted_page_is_on_loopback_unless_told(self):
        """The rdzvd an agent hosts (--master-addr 127.0.0.2) serves its page on 127.0.0.1,
        not on the endpoint's address; with --metrics-bind 127.0.0.3, there. Before, it served
        it on the endpoint's address, which other hosts reach."""
        out = self.outdir()
        release = os.path.join(out, "release")
        worker = ["/bin/sh", "-c", f'while [ ! -e {release} ]; do sleep 0.1; done']
        for bind, want, other in ((None, "127.0.0.1", "127.0.0.2"),
                                  ("127.0.0.3", "127.0.0.3", "127.0.0.1")):
            with socket.socket() as sk:
                sk.bind(("127.0.0.2", 0))
                port = sk.getsockname()[1]
            tmp = os.path.join(out, f"tmp-{want}")
            os.makedirs(tmp, exist_ok=True)
            how = ["--metrics-bind", bind] if bind else []
            p = start([AGENT, "--master-addr", "127.0.0.2", "--master-port", str(port),
                       "--rdzv-id", "bindpage", "--metrics-port", "0", *how, "--nproc", "1",
                       "--nccl", "off", "--no-python", *worker], env={"TMPDIR": tmp})
            self.addCleanup(p.kill)
            m = self.read_until(p, r"hosted rdzvd's status page: http://([\d.]+):(\d+)/")
            self.assertEqual(m.group(1), want)
            mport = int(m.group(2))
            self.assertEqual(get(f"http://{want}:{mport}/status.json")[0], 200)
            with self.assertRaises(OSError):
                get(f"http://{other}:{mport}/status.json", timeout=2)
            open(release, "w").close()
            rc, _, err = finish(p, timeout=30)
            self.assertEqual(rc, 0, err[-2000:])
            os.unlink(release)
        p = subprocess.run([AGENT, "--metrics-bind", "somehost", "--standalone", "--nproc", "1",
                            "--", "true"], capture_output=True, text=True, timeout=10)
        self.assertEqual(p.returncode, 2)
        self.assertEqual(p.stderr.count("\n"), 1, p.stderr)
        self.assertIn("invalid --metrics-bind 'somehost': give an IP address", p.stderr)

    def test_a_bad_http_request_does_not_hurt_the_daemon(self):
        d, ep, agents = self.start_job("http-abuse", nodes=1)
        import socket
        for payload in (b"\x00" * 9000, b"POST / HTTP/1.1\r\n\r\n", b"GET\r\n\r\n", b""):
            s = socket.create_connection(("127.0.0.1", self.mport), timeout=10)
            s.sendall(payload)
            if not payload:
                s.shutdown(socket.SHUT_WR)
            reply = s.recv(4096)
            s.close()
            if payload:
                self.assertRegex(reply, rb"^HTTP/1\.1 (400|405|413) ")
        self.wait_generation(ep, "http-abuse", 1)
        self.assertEqual(get(f"http://127.0.0.1:{self.mport}/metrics")[0], 200)

    @unittest.skipUnless(shutil.which("chromium"), "chromium is not installed")
    def test_status_page_in_headless_chromium(self):
        d, ep, agents = self.start_job("page-<job>&1")
        self.wait_generation(ep, "page-<job>&1", 2)
        prof = tempfile.mkdtemp(prefix="rdzv-chromium-")
        self.addCleanup(shutil.rmtree, prof, True)
        p = subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu",
                            "--disable-dev-shm-usage", f"--user-data-dir={prof}",
                            "--dump-dom", f"http://127.0.0.1:{self.mport}/"],
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr[-2000:])
        dom = p.stdout
        # The browser parsed the page: the run id came through escaped, as text, not markup.
        self.assertIn('<span class="run-id">page-&lt;job&gt;&amp;1</span>', dom)
        self.assertNotIn("<job>", dom)
        self.assertEqual(len(re.findall(r"<tr><td>[^<]+</td><td>[01]</td><td>running</td>", dom)),
                         2, dom[:3000])
        self.assertIn("restarting generation 1", dom)
        self.assertNotIn("<script", dom)

    def test_timeline_of_a_job_that_lost_a_node(self):
        """A job of 2 nodes and a spare whose workers report a step every 0.1 s; one
        node's agent is SIGKILLed, the spare takes its place. /status.json has the timeline (two
        generations, a node_lost mark with the root cause, the spare promoted, rank 0's steps
        per second), /metrics the rate, and the status page, loaded in a real headless Chromium,
        draws it: one band per generation, the mark with the root cause in its <title>, the
        rate's polyline, and no console error. A screenshot is taken (RDZV_SCREENSHOT names
        where: docs/guide/operating.md's picture). rdzvctl status --watch shows the rate as a
        sparkline."""
        run_id = "timeline"
        out = tempfile.mkdtemp(prefix="rdzv-timeline-")
        self.addCleanup(shutil.rmtree, out, True)
        d, ep, agents = self.start_job(run_id, nodes=3, extra=("--nnodes", "2"), worker=REPORTER,
                                       env={"RDZV_TEST_OUT": out})
        self.wait_generation(ep, run_id, 1)
        time.sleep(3)  # some seconds of steps
        st = json.loads(self.ctl_status(ep, "--json"))
        job = [j for j in st["jobs"] if j["run_id"] == run_id][0]
        in_gen = [n for n in job["nodes"] if n["node_rank"] == 1]
        self.assertEqual(len(in_gen), 1, job["nodes"])
        # The agent holding node rank 1: the one whose process runs that node's workers.
        victim = None
        for a in agents:
            p = subprocess.run(["pgrep", "-P", str(a.pid)], capture_output=True, text=True)
            kids = p.stdout.split()
            ranks = []
            for r in (2, 3):
                try:
                    with open(os.path.join(out, f"pid.{r}")) as f:
                        ranks.append(f.read().strip())
                except FileNotFoundError:
                    pass
            if any(k in kids for k in ranks):
                victim = a
        self.assertIsNotNone(victim, "found the agent of node rank 1")
        killed_at = time.time()
        os.kill(victim.pid, signal.SIGKILL)
        self.wait_generation(ep, run_id, 2, timeout=30)
        time.sleep(3)  # training on the spare
        url = f"http://127.0.0.1:{self.mport}"
        sj = json.loads(get(url + "/status.json")[2])
        job = [j for j in sj["jobs"] if j["run_id"] == run_id][0]
        tl = job["timeline"]
        self.assertEqual([b["generation"] for b in tl["generations"]], [1, 2], tl)
        self.assertGreater(tl["generations"][0]["end"], 0, "generation 1 ended")
        self.assertEqual(tl["generations"][1]["end"], 0, "generation 2 runs")
        self.assertEqual(tl["generations"][1]["world_size"], 4)
        kinds = [m["kind"] for m in tl["marks"]]
        self.assertIn("node_lost", kinds, tl["marks"])
        self.assertIn("spare", kinds, tl["marks"])
        lost = [m for m in tl["marks"] if m["kind"] == "node_lost"][0]
        self.assertIn("root cause: the agent of node rank 1", lost["text"])
        rates = tl["steps_per_second"]["rates"]
        self.assertGreater(len(rates), 3, tl)
        self.assertGreater(max(rates), 3, "about 10 steps/s while it trains")
        self.assertGreater(job["steps_per_second"], 3, job)
        # Where the recovery's time went: each point reached, in order, within the time from
        # the kill to now, and the phases summed as the total.
        rec = tl["recoveries"]
        self.assertEqual(rec["total"], 1, rec)
        self.assertEqual(len(rec["list"]), 1, rec)
        r0 = rec["list"][0]
        self.assertEqual((r0["generation"], r0["kind"], r0["inplace"]), (1, "node_lost", False))
        points = [r0[p] for p in ("detected", "stopped", "rendezvous", "sent", "first_step")]
        self.assertEqual(points, sorted(points), r0)
        self.assertGreater(points[0], killed_at - 1, r0)
        self.assertLess(points[-1], time.time(), r0)
        sums = rec["phase_sum_s"]
        self.assertAlmostEqual(sums["total"], points[-1] - points[0], places=3)
        self.assertAlmostEqual(sums["total"], sum(sums[p] for p in ("stop", "rendezvous", "nccl",
                                                                    "first_step")), places=3)
        metrics = get(url + "/metrics")[2]
        for phase in ("stop", "rendezvous", "nccl", "first_step", "total"):
            self.assertRegex(metrics, r'(?m)^rdzvd_recovery_phase_seconds_count\{cause='
                                      rf'"node_lost",phase="{phase}"\}} 1$')
            self.assertRegex(metrics, r'(?m)^rdzvd_recovery_phase_seconds_bucket\{cause='
                                      rf'"node_lost",phase="{phase}",le="\+Inf"\}} 1$')
        self.assertRegex(metrics, r'(?m)^rdzvd_recovery_phase_seconds_count\{cause="failure",'
                                  r'phase="total"\} 0$')
        m = re.search(r'^rdzvd_job_steps_per_second\{job="timeline"\} ([0-9.]+)$', metrics, re.M)
        self.assertIsNotNone(m, metrics[-2000:])
        self.assertGreater(float(m.group(1)), 3)
        self.assertRegex(metrics, r'(?m)^rdzvd_job_generation\{job="timeline"\} 2$')
        # What failures cost it so far: the parts add up to the wall time, the
        # node lost cost time.
        cost = {k: float(v) for k, v in re.findall(
            r'(?m)^rdzvd_job_cost_seconds\{job="timeline",part="(\w+)"\} ([0-9.]+)$', metrics)}
        self.assertEqual(set(cost), {"wall", "startup", "trained", "redo", "lost", "detect",
                                     "stop", "rendezvous", "nccl", "first_step", "cut"}, cost)
        self.assertAlmostEqual(cost["startup"] + cost["trained"] + cost["lost"], cost["wall"],
                               delta=0.01)
        self.assertGreater(cost["lost"], 0, cost)
        self.assertGreater(cost["wall"], 6, cost)
        # rdzvctl status --watch: refreshed views (one after the other: not a terminal), each
        # with the job's steps per second as a sparkline, the node lost as an 'x' in it.
        p = subprocess.run([RDZVCTL, "-e", ep, "status", "--watch", "0.3", "--count", "2"],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout.count("job timeline: running, generation 2"), 2, p.stdout)
        self.assertRegex(p.stdout, r"(?m)^  recoveries: 1, time in each phase summed: stop "
                                   r"[0-9.]+ s, rendezvous [0-9.]+ s, nccl [0-9.]+ s, first step "
                                   r"[0-9.]+ s \(total [0-9.]+ s\)$")
        self.assertRegex(p.stdout, r"(?m)^    1 +node_lost( +[0-9.]+s){5}$")
        self.assertRegex(p.stdout, r"(?m)^  what failures cost so far: wall [0-9.]+ s: start-up "
                                   r"[0-9.]+ s \([0-9]+%\), training [0-9.]+ s \([0-9]+%.*\), "
                                   r"1 recovery [0-9.]+ s \([0-9]+%: detect [0-9.]+, stop ")
        spark = re.findall(r"(?m)^  steps/s  (\S+)  ([0-9.]+) now, peak ([0-9.]+)", p.stdout)
        self.assertEqual(len(spark), 2, p.stdout)
        self.assertRegex(spark[-1][0], "^[\u2581-\u2588]*x[\u2581-\u2588x]*$")
        self.assertGreater(float(spark[-1][1]), 3)
        for _, now, peak in spark:  # the peak holds the rate now (issue 72, case 4)
            self.assertGreaterEqual(float(peak), float(now), p.stdout)
        # --timeout bounds each view, not the whole watch: four views 0.4 s apart under 1 s.
        p = subprocess.run([RDZVCTL, "-e", ep, "--timeout", "1", "status", "--watch", "0.4",
                            "--count", "4"], capture_output=True, text=True, timeout=30)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout.count("job timeline: running"), 4, p.stdout)
        for bad, msg in ((["--watch", "0"], "SEC must be 0.1 to 86400"),
                         (["--json", "--watch"], "do not go together"),
                         (["--count", "2"], "--count goes with --watch")):
            p = subprocess.run([RDZVCTL, "-e", ep, "status", *bad], capture_output=True,
                               text=True, timeout=30)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertEqual(len(p.stderr.splitlines()), 1, p.stderr)
            self.assertIn(msg, p.stderr)
        if not shutil.which("chromium"):
            self.skipTest("chromium is not installed (the JSON and metrics were checked)")
        prof = tempfile.mkdtemp(prefix="rdzv-chromium-")
        self.addCleanup(shutil.rmtree, prof, True)
        shot = os.environ.get("RDZV_SCREENSHOT") or os.path.join(prof, "page.png")
        base = ["chromium", "--headless", "--no-sandbox", "--disable-gpu",
                "--disable-dev-shm-usage", f"--user-data-dir={prof}", "--enable-logging=stderr",
                "--v=0", "--hide-scrollbars", "--window-size=1000,1400"]
        p = subprocess.run(base + ["--dump-dom", url + "/"], capture_output=True, text=True,
                           timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr[-2000:])
        self.assertNotRegex(p.stderr, r"CONSOLE|Uncaught", "no console error")
        dom = p.stdout
        svg = re.search(r'<svg class="timeline".*?</svg>', dom, re.S)
        self.assertIsNotNone(svg, dom[:3000])
        svg = svg.group(0)
        self.assertEqual(re.findall(r'<rect class="band" data-generation="(\d+)"', svg),
                         ["1", "2"], "one band per generation")
        mark = re.search(r'<g class="mark mark-node_lost"[^>]*><title>([^<]*)</title>', svg)
        self.assertIsNotNone(mark, svg[:3000])
        self.assertIn("root cause: the agent of node rank 1", mark.group(1))
        self.assertIn('<polyline class="rate"', svg)
        self.assertEqual(re.findall(r'<rect class="phase phase-(\w+)" data-generation="1"', svg),
                         ["stop", "rendezvous", "nccl", "first_step"], svg[:3000])
        self.assertIn("world 4", svg)
        # Every colour that means something in the SVG (bands, marks, recovery phases, the
        # rate line) has its swatch in the legend.
        used = set(re.findall(r'<rect class="(?:band|phase)[^>]*fill="(#\w+)"', svg))
        used |= set(re.findall(r'<polyline class="rate"[^>]*stroke="(#\w+)"', svg))
        for g in re.findall(r'<g class="mark mark-\w+".*?</g>', svg, re.S):
            used |= set(re.findall(r'(?:fill|stroke)="(#\w+)"', g))
        legend = re.search(r'<p class="legend">.*?</p>', dom, re.S)
        self.assertIsNotNone(legend, dom[-3000:])
        keys = set(re.findall(r"background:\s*(#\w+)", legend.group(0)))
        self.assertGreaterEqual(len(used), 8, svg[:3000])
        self.assertEqual(used - keys, set(), "colours with no legend entry: " + legend.group(0))
        p = subprocess.run(base + [f"--screenshot={shot}", url + "/"], capture_output=True,
                           text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr[-2000:])
        with open(shot, "rb") as f:
            png = f.read()
        self.assertEqual(png[:8], b"\x89PNG\r\n\x1a\n", "a screenshot was taken")
        self.assertGreater(len(png), 10000)


class Typos(unittest.TestCase):
    """A mistyped command or status option (issue 72, case 4: `rdzvctl stauts`): one line that
    names the nearest, exit 2, before any connection (port 1 has no rdzvd)."""

    def ctl(self, *args):
        p = subprocess.run([RDZVCTL, "-e", "127.0.0.1:1", *args], capture_output=True, text=True,
                           timeout=10)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertEqual(p.stdout, "")
        self.assertEqual(p.stderr.count("\n"), 1, p.stderr)
        return p.stderr

    def test_mistyped_command_gets_did_you_mean(self):
        for typed, meant in (("stauts", "status"), ("lsit", "list"), ("relase", "release"),
                             ("num_keys", "num-keys")):
            self.assertEqual(self.ctl(typed), f"rdzvctl: unknown command '{typed}'; did you mean "
                             f"{meant}? (see rdzvctl --help)\n")
        self.assertEqual(self.ctl("frobnicate"),
                         "rdzvctl: unknown command 'frobnicate' (see rdzvctl --help)\n")

    def test_mistyped_status_option_gets_did_you_mean(self):
        self.assertEqual(self.ctl("status", "--jsno"), "rdzvctl: status: unknown option "
                         "'--jsno'; did you mean --json? (see rdzvctl --help)\n")
        self.assertIn("status takes --json, --ended, or --watch", self.ctl("status", "--bogus"))
        self.assertIn("did you mean --endpoint?", self.ctl("--endpiont", "x", "status"))


if __name__ == "__main__":
    main()
