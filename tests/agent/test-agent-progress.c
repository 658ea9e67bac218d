/* SPDX-License-Identifier: Apache-2.0 */
/* test-agent-progress.c: the workers' progress channel against real processes: the
 * descriptor and RDZV_PROGRESS_FD, reports read as they come (and the last one before an exit),
 * garbage ignored, hangs reported through on_hang after the timeout or the first-report grace,
 * and a stop from on_hang. This executable is also the reaper of the groups it makes. */
#include "agent-fixture.h"
#include "agent/session/agent-heartbeat.h"
#include "proto/rdzv-worker.h"

struct hangs {
    unsigned n;
    unsigned lr;
    bool reported;
    uint64_t step, silent_ms, t;
    bool stop; /* stop the group from on_hang */
};

static void hang_cb(struct agent_group *g, unsigned lr, bool reported, uint64_t step,
                    uint64_t silent_ms, void *ud)
{
    struct fx *f = ud;
    struct hangs *h = f->ptr;

    ASSERT_TRUE(g == f->g);
    h->n++;
    h->lr = lr;
    h->reported = reported;
    h->step = step;
    h->silent_ms = silent_ms;
    h->t = now_ms();
    if (h->stop) {
        f->t_stop = now_ms();
        agent_group_stop(g, SIGTERM);
    }
}

static void fx_progress(struct fx *f, struct hangs *h, uint64_t timeout_ms, uint64_t grace_ms)
{
    memset(h, 0, sizeof(*h));
    f->ptr = h;
    f->cfg.progress = true;
    f->cfg.progress_timeout_ms = timeout_ms;
    f->cfg.progress_grace_ms = grace_ms;
    f->cfg.on_hang = hang_cb;
}

/* Check each worker's last step (0: none) while the group still exists, then free it. */
static void hook_check_steps(struct fx *f)
{
    const uint64_t *want = (const uint64_t *)f->user_ptr;

    for (unsigned lr = 0; lr < f->cfg.nproc; lr++) {
        uint64_t step = 0, age = 0;
        int r = agent_group_progress(f->g, lr, &step, &age);

        snprintf(tap_note, sizeof(tap_note), "local rank %u", lr);
        if (want[lr] == 0) {
            ASSERT_EQ(r, -ENODATA);
        } else {
            ASSERT_OK(r);
            ASSERT_EQ(step, want[lr]);
            ASSERT_LE(age, 10000);
        }
    }
    tap_note[0] = '\0';
    ASSERT_EQ(agent_group_progress(f->g, f->cfg.nproc, NULL, NULL), -EINVAL);
    agent_group_free(f->g, fx_free_done, f);
}

/* Every worker exited 0 and printed key=value. */
static void check_all_said(struct fx *f, const char *key, const char *value)
{
    struct lines l;

    for (unsigned lr = 0; lr < f->cfg.nproc; lr++) {
        ASSERT_EQ(f->status[lr], 0);
        lines_of(&f->out, lr, &l);
        ASSERT_VALUE(&l, key, value);
        lines_free(&l);
    }
}

/* Reports arrive, the last one just before the exit too; anything that is not "step N" (and an
 * overlong line) is ignored without disturbing later reports. RDZV_PROGRESS_FD names the fd. */
static void test_progress_reports(void)
{
    char *argv[] = {HELPER,
                    "env",
                    "progress=5",
                    "r1:progress=12",
                    "r1:progress-raw=garbage",
                    "r1:progress-raw=step",
                    "r1:progress-raw=step -1",
                    "r1:progress-raw=step 1x",
                    "r1:progress-long=300",
                    "r1:progress=13",
                    NULL};
    const uint64_t want[] = {5, 13};
    struct hangs h;
    struct fx f;

    setenv("RDZV_PROGRESS_FD", "9", 1); /* an agent's above ours: not passed on */
    fx_init(&f, 2, argv);
    fx_progress(&f, &h, 0, 0);
    f.user_ptr = want;
    f.on_all = hook_check_steps;
    fx_start(&f);
    fx_run_finish(&f);
    unsetenv("RDZV_PROGRESS_FD");
    ASSERT_EQ(f.n_all, 1);
    ASSERT_EQ(h.n, 0);
    check_all_said(&f, "RDZV_PROGRESS_FD", "3");
    check_all_said(&f, "RDZV_PROGRESS_WAIT_MS", "<unset>"); /* no timeout: no "wait" needed */
    fx_done(&f);
}

/* Local rank 0's last step said its compute time, 40 ms; rank 1's did not (its last line with
 * one was past the bound, ignored, and a plain step came after): the HEARTBEAT carries just
 * rank 0's. */
static void hook_check_compute(struct fx *f)
{
    struct rdzv_heartbeat *h = calloc(1, sizeof(*h));
    uint32_t ms = 0;

    ASSERT_NOT_NULL(h);
    ASSERT_OK(agent_group_compute_ms(f->g, 0, &ms));
    ASSERT_EQ(ms, 40);
    ASSERT_EQ(agent_group_compute_ms(f->g, 1, &ms), -ENODATA);
    ASSERT_EQ(agent_group_compute_ms(f->g, 2, &ms), -EINVAL);
    agent_heartbeat_fill(h, 1, f->g, f->cfg.nproc, NULL);
    ASSERT_EQ(h->n_progress, 2);
    ASSERT_EQ(h->progress[0].step, 5);
    ASSERT_TRUE(h->progress[0].has_compute);
    ASSERT_EQ(h->progress[0].compute_ms, 40);
    ASSERT_EQ(h->progress[1].step, 14);
    ASSERT_FALSE(h->progress[1].has_compute);
    free(h);
    agent_group_free(f->g, fx_free_done, f);
}

/* nproc workers of argv run their lines; hook checks the group once every one is done. */
static void run_lines(char **argv, unsigned nproc, void (*hook)(struct fx *f))
{
    struct hangs h;
    struct fx f;

    fx_init(&f, nproc, argv);
    fx_progress(&f, &h, 0, 0);
    f.on_all = hook;
    fx_start(&f);
    fx_run_finish(&f);
    ASSERT_EQ(f.n_all, 1);
    ASSERT_EQ(h.n, 0);
    fx_done(&f);
}

/* "step N compute_ms M": the step and its compute time read; one past the bound ignored. */
static void test_progress_compute(void)
{
    char *argv[] = {HELPER,
                    "r0:progress=4",
                    "r0:progress-raw=step 5 compute_ms 40",
                    "r1:progress-raw=step 12 compute_ms 30",
                    "r1:progress-raw=step 13 compute_ms 3600001",
                    "r1:progress-raw=step 13 compute_ms",
                    "r1:progress=14",
                    NULL};

    run_lines(argv, 2, hook_check_compute);
}

/* A stall that hits every other step (a node stopped 60 ms in each 100 ms): its steps' compute
 * times alternate, and the HEARTBEAT carries their mean since the last one, the longest left out
 * (a checkpoint's step is no slowdown): (20 + 80 + 20 + 80) / 4 = 50 ms, not the last step's; the
 * next HEARTBEAT, with no step since, the last step's (rdzvd takes a sample per new step only).
 * Before, each HEARTBEAT carried the last step's alone: a draw of which step the stall hit, so
 * that rdzvd's median of them sat on the line and a slowed node was judged late or never (issue
 * 45, item 5). */
static void hook_check_compute_mean(struct fx *f)
{
    struct rdzv_heartbeat *h = calloc(1, sizeof(*h));

    ASSERT_NOT_NULL(h);
    agent_heartbeat_fill(h, 1, f->g, f->cfg.nproc, NULL);
    ASSERT_EQ(h->n_progress, 1);
    ASSERT_EQ(h->progress[0].step, 5);
    ASSERT_TRUE(h->progress[0].has_compute);
    ASSERT_EQ(h->progress[0].compute_ms, 50);
    agent_heartbeat_fill(h, 1, f->g, f->cfg.nproc, NULL);
    ASSERT_EQ(h->progress[0].compute_ms, 900);
    free(h);
    agent_group_free(f->g, fx_free_done, f);
}

static void test_progress_compute_mean(void)
{
    char *argv[] = {HELPER,
                    "r0:progress-raw=step 1 compute_ms 20",
                    "r0:progress-raw=step 2 compute_ms 80",
                    "r0:progress-raw=step 3 compute_ms 20",
                    "r0:progress-raw=step 4 compute_ms 80",
                    "r0:progress-raw=step 5 compute_ms 900",
                    NULL};

    run_lines(argv, 1, hook_check_compute_mean);
}

/* A worker stopped 300 ms (SIGSTOP, then SIGCONT) between its steps: the take counts its stopped
 * time, shared by the steps since, where it is more than their compute time (the worker did not
 * see it); the next take, with no stop since, does not. */
static void hook_check_compute_stopped(struct fx *f)
{
    struct rdzv_heartbeat *h = calloc(1, sizeof(*h));

    ASSERT_NOT_NULL(h);
    agent_heartbeat_fill(h, 1, f->g, f->cfg.nproc, NULL);
    ASSERT_EQ(h->n_progress, 1);
    ASSERT_EQ(h->progress[0].step, 3);
    ASSERT_TRUE(h->progress[0].has_compute);
    /* 300 / 3, less the time SIGCHLD took to reach the loop, more a loaded machine's */
    ASSERT_TRUE(h->progress[0].compute_ms >= 250 / 3);
    ASSERT_TRUE(h->progress[0].compute_ms <= 3000 / 3);
    agent_heartbeat_fill(h, 1, f->g, f->cfg.nproc, NULL);
    ASSERT_EQ(h->progress[0].compute_ms, 20);
    free(h);
    agent_group_free(f->g, fx_free_done, f);
}

static void test_progress_compute_stopped(void)
{
    char *argv[] = {HELPER,
                    "r0:progress-raw=step 1 compute_ms 20",
                    "r0:stop-for=300",
                    "r0:progress-raw=step 2 compute_ms 20",
                    "r0:progress-raw=step 3 compute_ms 20",
                    NULL};

    run_lines(argv, 1, hook_check_compute_stopped);
}

/* A stop within a step's compute is in the compute time the worker reports already (rdzv-train
 * measures its steps by the wall clock): counted once, not twice. */
static void hook_check_compute_stopped_within(struct fx *f)
{
    struct rdzv_heartbeat *h = calloc(1, sizeof(*h));

    ASSERT_NOT_NULL(h);
    agent_heartbeat_fill(h, 1, f->g, f->cfg.nproc, NULL);
    ASSERT_EQ(h->n_progress, 1);
    ASSERT_EQ(h->progress[0].step, 1);
    ASSERT_EQ(h->progress[0].compute_ms, 5000); /* not 5000 + the 300 ms stop */
    free(h);
    agent_group_free(f->g, fx_free_done, f);
}

static void test_progress_compute_stopped_within(void)
{
    char *argv[] = {HELPER, "r0:stop-for=300", "r0:progress-raw=step 1 compute_ms 5000", NULL};

    run_lines(argv, 1, hook_check_compute_stopped_within);
}

/* Without cfg.progress there is no channel and no variable (an inherited one is dropped). */
static void test_progress_off(void)
{
    char *argv[] = {HELPER, "env", "fds", NULL};
    const uint64_t want[] = {0};
    char fds[1100];
    struct lines l;
    struct fx f;

    setenv("RDZV_PROGRESS_FD", "9", 1);
    fx_init(&f, 1, argv);
    f.user_ptr = want;
    f.on_all = hook_check_steps;
    fx_start(&f);
    fx_run_finish(&f);
    unsetenv("RDZV_PROGRESS_FD");
    lines_of(&f.out, 0, &l);
    ASSERT_VALUE(&l, "RDZV_PROGRESS_FD", "<unset>");
    snprintf(fds, sizeof(fds), "%s", inherited_fds);
    ASSERT_VALUE(&l, "OPEN_FDS", fds);
    lines_free(&l);
    fx_done(&f);
}

/* Run argv on nproc workers with the channel, timeout and grace; check the steps (want) at the
 * end, that exactly one hang was reported, of local rank 0, and return its time since the start. */
static uint64_t run_one_hang(char **argv, unsigned nproc, uint64_t timeout_ms, uint64_t grace_ms,
                             const uint64_t *want, struct hangs *h)
{
    uint64_t t0;
    struct fx f;

    fx_init(&f, nproc, argv);
    fx_progress(&f, h, timeout_ms, grace_ms);
    f.user_ptr = want;
    f.on_all = hook_check_steps;
    t0 = now_ms();
    fx_start(&f);
    fx_run_finish(&f);
    ASSERT_EQ(h->n, 1);
    ASSERT_EQ(h->lr, 0);
    for (unsigned lr = 0; lr < nproc; lr++)
        ASSERT_EQ(f.status[lr], 0); /* the group itself kills nobody */
    fx_done(&f);
    return h->t - t0;
}

/* A worker silent for progress_timeout_ms after a report is reported once; one that keeps
 * reporting is not; one that never reports is not either when there is no grace. */
static void test_hang_after_report(void)
{
    char *argv[] = {HELPER,           "r0:progress=1", "r0:sleep=1500",
                    "r1:tick=15/100", "r2:sleep=1500", NULL};
    const uint64_t want[] = {1, 15, 0};
    struct hangs h;
    uint64_t t = run_one_hang(argv, 3, 400, 0, want, &h);

    ASSERT_TRUE(h.reported);
    ASSERT_EQ(h.step, 1);
    ASSERT_TRUE(h.silent_ms >= 400);
    ASSERT_LE(h.silent_ms, 1200);
    ASSERT_TRUE(t >= 400);
}

/* A hang stalls the ranks blocked on the hung one too: a worker that says "wait" (alive, blocked
 * on its peers) is not failed while those lines come, so the one reported is the silent one
 * (r0), though r1 made no step for longer. Both know the period: timeout / 4. */
static void test_hang_blames_the_silent(void)
{
    char *argv[] = {HELPER, "env", "progress=1", "r0:sleep=1500", "r1:waits=14/100", NULL};
    const uint64_t want[] = {1, 1};
    struct hangs h;
    uint64_t t;
    struct fx f;

    fx_init(&f, 2, argv);
    fx_progress(&f, &h, 400, 0);
    f.user_ptr = want;
    f.on_all = hook_check_steps;
    t = now_ms();
    fx_start(&f);
    fx_run_finish(&f);
    ASSERT_EQ(h.n, 1);
    ASSERT_EQ(h.lr, 0);
    ASSERT_TRUE(h.t - t >= 400);
    check_all_said(&f, "RDZV_PROGRESS_WAIT_MS", "100");
    fx_done(&f);
}

/* A worker that waits on its peers for AGENT_PROGRESS_WAIT_MAX timeouts without a step (the
 * collective hangs everywhere) is failed all the same. */
static void test_hang_wait_max(void)
{
    char *argv[] = {HELPER, "progress=1", "r0:waits=30/100", NULL};
    const uint64_t want[] = {1};
    struct hangs h;
    uint64_t t = run_one_hang(argv, 1, 400, 0, want, &h);

    ASSERT_TRUE(h.reported);
    ASSERT_TRUE(h.silent_ms >= AGENT_PROGRESS_WAIT_MAX * 400);
    ASSERT_LE(h.silent_ms, AGENT_PROGRESS_WAIT_MAX * 400 + 800);
    ASSERT_TRUE(t >= AGENT_PROGRESS_WAIT_MAX * 400);
}

/* Before the first report the grace applies, not the (shorter) timeout; a worker that never
 * reports is reported when the grace is over. */
static void test_hang_grace(void)
{
    char *argv[] = {HELPER, "r0:sleep=1600", "r1:sleep=500", "r1:tick=10/100", NULL};
    const uint64_t want[] = {0, 10};
    struct hangs h;
    uint64_t t = run_one_hang(argv, 2, 300, 800, want, &h);

    ASSERT_FALSE(h.reported);
    ASSERT_EQ(h.step, 0);
    ASSERT_TRUE(h.silent_ms >= 800);
    ASSERT_TRUE(t >= 800);
    ASSERT_LE(t, 1500);
}

/* The caller fails a hung worker like a crash: a stop from on_hang ends the start promptly. */
static void test_hang_stop(void)
{
    char *argv[] = {HELPER, "progress=7", "sleep=20000", NULL};
    struct hangs h;
    struct fx f;

    fx_init(&f, 2, argv);
    fx_progress(&f, &h, 300, 0);
    h.stop = true;
    fx_start(&f);
    fx_run_finish(&f);
    ASSERT_TRUE(h.n >= 1 && h.n <= 2); /* both hang at about the same time */
    ASSERT_EQ(h.step, 7);
    ASSERT_EQ(f.n_all, 1);
    for (unsigned lr = 0; lr < 2; lr++)
        ASSERT_EQ(f.sig[lr], SIGTERM);
    ASSERT_LE(f.t_all - f.t_stop, 3000);
    fx_done(&f);
}

/* A group of 2 workers running argv (/usr/bin/python3 with python/rdzv on its path), the progress
 * timeout timeout_ms; false (skipped) without that python. */
static bool python_group(struct fx *f, struct hangs *h, char **argv, uint64_t timeout_ms)
{
    if (access(argv[0], X_OK) != 0) {
        printf("# skipped: no /usr/bin/python3\n");
        return false;
    }
    setenv("PYTHONPATH", RDZV_PYTHON_DIR, 1);
    fx_init(f, 2, argv);
    fx_progress(f, h, timeout_ms, 0);
    return true;
}

/* The Python module (python/rdzv) under the real worker group: rdzv.progress(step) reaches the
 * agent; outside an agent (no channel) it is a no-op and the script still succeeds. */
static void test_progress_python(void)
{
    char *argv[] = {
        "/usr/bin/python3", "-c",
        "import os, rdzv\n"
        "for i in range(1, 10): rdzv.progress(i * int(os.environ['LOCAL_RANK'] + '1'))\n"
        "print('PYOK=%s' % rdzv.progress_fd())\n",
        NULL};
    const uint64_t want[] = {9, 99};
    const uint64_t none[] = {0};
    struct hangs h;
    struct fx f;

    if (!python_group(&f, &h, argv, 0))
        return;
    f.user_ptr = want;
    f.on_all = hook_check_steps;
    fx_start(&f);
    fx_run_finish(&f);
    check_all_said(&f, "PYOK", "3");
    fx_done(&f);

    fx_init(&f, 1, argv);
    f.user_ptr = none;
    f.on_all = hook_check_steps;
    fx_start(&f);
    fx_run_finish(&f);
    check_all_said(&f, "PYOK", "None");
    fx_done(&f);
    unsetenv("PYTHONPATH");
}

/* A Python worker that has finished says "done" at exit (rdzv's atexit), and from then on it is
 * not watched: r1 stays 1.2 s in a later atexit callback (as an interpreter's shutdown can),
 * three times the timeout, and is not reported; r0 stays as long in its script after its last
 * report, and is. */
static void test_done_python(void)
{
    char *argv[] = {"/usr/bin/python3", "-c",
                    "import atexit, os, time\n"
                    "late = os.environ['LOCAL_RANK'] == '1'\n"
                    "if late: atexit.register(time.sleep, 1.2)\n"
                    "import rdzv\n"
                    "rdzv.progress(5)\n"
                    "if not late: time.sleep(1.2)\n"
                    "print('PYOK=1')\n",
                    NULL};
    const uint64_t want[] = {5, 5};
    struct hangs h;
    struct fx f;

    if (!python_group(&f, &h, argv, 400))
        return;
    f.user_ptr = want;
    f.on_all = hook_check_steps;
    fx_start(&f);
    fx_run_finish(&f);
    ASSERT_EQ(h.n, 1);
    ASSERT_EQ(h.lr, 0);
    ASSERT_EQ(h.step, 5);
    check_all_said(&f, "PYOK", "1");
    fx_done(&f);
    unsetenv("PYTHONPATH");
}

/* Worker 0 dies of an error whose line is the longest the channel takes ("error " and
 * RDZV_PROGRESS_ERROR_MAX bytes, as rdzv's hooks cut a long one); worker 1's line is a byte
 * longer, ignored. Each exit's error is read while the group exists. */
static char long_error[RDZV_PROGRESS_ERROR_MAX + 2];

static void hook_check_long_error(struct fx *f)
{
    ASSERT_EQ(strlen(agent_group_worker_error(f->g, 0)), RDZV_PROGRESS_ERROR_MAX);
    ASSERT_EQ(strncmp(agent_group_worker_error(f->g, 0), long_error, RDZV_PROGRESS_ERROR_MAX), 0);
    ASSERT_EQ(agent_group_worker_error(f->g, 1)[0], '\0');
    agent_group_free(f->g, fx_free_done, f);
}

static void test_error_line_of_the_longest_text(void)
{
    char max_line[sizeof(long_error) + 32], over_line[sizeof(long_error) + 32];
    char *argv[] = {HELPER, max_line, over_line, "exit=1", NULL};
    struct hangs h;
    struct fx f;

    memset(long_error, 'E', sizeof(long_error) - 1);
    long_error[sizeof(long_error) - 1] = '\0';
    snprintf(max_line, sizeof(max_line), "r0:progress-raw=error %.*s", RDZV_PROGRESS_ERROR_MAX,
             long_error);
    snprintf(over_line, sizeof(over_line), "r1:progress-raw=error %s", long_error);
    fx_init(&f, 2, argv);
    fx_progress(&f, &h, 0, 0);
    f.on_all = hook_check_long_error;
    fx_start(&f);
    fx_run_finish(&f);
    ASSERT_EQ(f.n_all, 1);
    ASSERT_EQ(f.status[0], 1);
    fx_done(&f);
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--reaper") == 0)
        return agent_reaper_main(argc, argv);
    proc_setup("test-agent-progress");
    fx_setup_process();
    TEST(test_progress_reports);
    TEST(test_error_line_of_the_longest_text);
    TEST(test_progress_compute);
    TEST(test_progress_compute_mean);
    TEST(test_progress_compute_stopped);
    TEST(test_progress_compute_stopped_within);
    TEST(test_progress_off);
    TEST(test_hang_after_report);
    TEST(test_hang_blames_the_silent);
    TEST(test_hang_wait_max);
    TEST(test_hang_grace);
    TEST(test_hang_stop);
    TEST(test_progress_python);
    TEST(test_done_python);
    rm_tree(tmp_root);
    return tap_done();
}
