/* SPDX-License-Identifier: Apache-2.0 */
/* test-job-unran.c: a node that never ran spends nothing of the job.
 * A node placed in a generation and lost before its agent answered the ROUND (the HEARTBEAT
 * naming the generation that an agent sends as it takes the round) or within the start-up
 * window by rdzvd's clock (whatever steps its agent claims), or taken in by a scale-up
 * (--scale-up now, at its first HEARTBEAT: one gone before that moves nobody) and gone before
 * it ran, costs a restart:
 * it is not charged to the restart budget but to the node's id and host in the failure history,
 * and a host charged --bad-node-failures times is put aside; a host so charged scales the job up
 * no more (its nodes wait for the next restart). Fake agents (jobtest.h) answer each ROUND at
 * once unless silent. */
#include "common/rdzv-log.h"
#include "jobtest.h"
#include "daemon/job/rdzvd-job-impl.h"

static const struct rdzvd_job *job_of(struct env *e)
{
    return rdzvd_job_view(&e->jobs, "job");
}

/* Node id node-i's JOIN of the job (--nnodes min:max, --max-restarts 3, --bad-node-failures 2,
 * the agent's default), under host. */
static struct rdzv_join join_on(int i, int64_t min, int64_t max, const char *host)
{
    struct rdzv_join jn = join_of(i, min, max, 3);

    jn.bad_node_failures = 2;
    jn.last_call_ms = 10;
    if (host)
        snprintf(jn.host, sizeof(jn.host), "%s", host);
    return jn;
}

/* The failures in the history of host's nodes lost before they ran. */
static int unran_of(const struct rdzvd_job *j, const char *host)
{
    int n = 0;

    for (unsigned i = 0; i < j->n_hist; i++)
        for (unsigned k = 0; k < j->hist[i].n_fails && !strcmp(j->hist[i].host, host); k++)
            n += j->hist[i].fails[k].world_size == RDZVD_FAIL_UNRAN;
    return n;
}

/* The job (--nnodes 2:3) on f[0] and f[1] runs generation 1; f[0]'s worker fails once: a
 * counted restart, the members stop (restart count 1). */
static void one_failure(struct env *e, struct fake *f)
{
    struct rdzv_worker_exit w = {.generation = 1, .exit_code = 1};

    for (int i = 0; i < 2; i++) {
        struct rdzv_join jn = join_on(i, 2, 3, NULL);

        ASSERT_OK(join(e, &f[i], &jn));
    }
    run_ms(e, 100); /* last call: generation 1 on two nodes */
    ASSERT_EQ(f[0].nrounds, 1);
    jt_worker_exit(&f[0], &w);
    ASSERT_TRUE(event_is(&f[1], "restart"));
    ASSERT_EQ(job_of(e)->restart_count, 1);
    ASSERT_EQ(job_of(e)->state, JOB_STOPPING);
}

/* Case 1 as written: while A and B stop, a token holder JOINs; the re-form places it; it goes
 * at its ROUND (it never answers). Three such cycles leave the budget (3) as the one worker
 * failure left it; the nodes lost are charged, their hosts (distinct) not put aside yet. */
static void test_node_lost_before_it_ran_is_not_charged(void)
{
    struct env e;
    struct fake f[2] = {0}, s[3] = {0};

    env_init(&e, -1);
    one_failure(&e, f);
    for (int c = 0; c < 3; c++) {
        char host[32];
        struct rdzv_join jn;
        uint64_t gen = job_of(&e)->generation;

        snprintf(host, sizeof(host), "stranger%d", c);
        jn = join_on(5 + c, 2, 3, host);
        s[c].silent = true;
        ASSERT_OK(join(&e, &s[c], &jn)); /* a spare, ready at once (S1) */
        ASSERT_TRUE(s[c].spare);
        all_ready(f, 2, gen);
        ASSERT_EQ(s[c].nrounds, 1); /* placed: the round closed at MAX */
        ASSERT_EQ(s[c].round.generation, gen + 1);
        jt_gone(s[c].m); /* it closes at its ROUND */
        s[c].m = NULL;
        ASSERT_EQ(job_of(&e)->state, JOB_STOPPING);
        ASSERT_TRUE(event_is(&f[0], "restart"));
        ASSERT_EQ(f[0].event.generation, gen + 1);
        ASSERT_EQ(job_of(&e)->restart_count, 1); /* not charged */
        ASSERT_EQ(unran_of(job_of(&e), host), 1); /* its host is */
        ASSERT_FALSE(rdzvd_job_hist_find(job_of(&e), jn.node_id)->aside);
    }
    all_ready(f, 2, job_of(&e)->generation);
    ASSERT_EQ(job_of(&e)->state, JOB_RUNNING);
    ASSERT_EQ(f[0].round.restart_count, 1);
    ASSERT_EQ(f[0].round.generation, 5);
    ASSERT_EQ(f[0].round.nnodes, 2);
    env_done(&e);
}

/* The line between: a node ran when its agent answered the ROUND and its generation ran past
 * the start-up window (RDZVD_JOB_STARTUP_FAIL_MS) by rdzvd's clock; its loss is then the job's
 * failure. Lost sooner (an honest agent that crashes as its workers start: an OOM, a crash
 * loop), it costs the job an uncounted re-form and is charged to its host, even after a step
 * it reports: a step is its agent's claim. */
static void test_node_lost_after_it_ran_is_charged(void)
{
    for (int how = 0; how < 3; how++) { /* lost at once, after a step claimed, past the window */
        struct env e;
        struct fake f[2] = {0}, s = {0};
        struct rdzv_join jn = join_on(5, 2, 3, "stranger");

        env_init(&e, -1);
        one_failure(&e, f);
        ASSERT_OK(join(&e, &s, &jn));
        all_ready(f, 2, 1);
        ASSERT_EQ(s.nrounds, 1); /* it answered at once: its workers start */
        if (how == 1)
            fake_step(&s);
        if (how == 2)
            jt_advance((uint64_t)rdzvd_job_startup_fail_ms(&jt_steps));
        jt_gone(s.m);
        s.m = NULL;
        ASSERT_EQ(job_of(&e)->restart_count, how == 2 ? 2 : 1);
        ASSERT_EQ(unran_of(job_of(&e), "stranger"), how == 2 ? 0 : 1);
        env_done(&e);
    }
}

/* A host whose nodes keep going before they run (an agent that crashes as it starts, on every
 * try) is put aside at --bad-node-failures (2) such losses, recorded: its next agent is
 * refused, the job's budget untouched. */
static void test_host_that_keeps_losing_nodes_before_they_run_is_put_aside(void)
{
    struct env e;
    struct fake f[2] = {0}, s[3] = {0};
    struct rdzvd_job_record rec;
    char err[512], path[64];
    int fd;

    env_init(&e, (fd = jt_state_dir(path, sizeof(path)))); /* a job table: what is recorded */
    one_failure(&e, f);
    for (int c = 0; c < 2; c++) {
        struct rdzv_join jn = join_on(5 + c, 2, 3, "flaky");
        uint64_t gen = job_of(&e)->generation;

        s[c].silent = true;
        ASSERT_OK(join(&e, &s[c], &jn));
        all_ready(f, 2, gen);
        ASSERT_EQ(s[c].nrounds, 1);
        jt_gone(s[c].m);
        s[c].m = NULL;
    }
    ASSERT_EQ(job_of(&e)->restart_count, 1);
    ASSERT_TRUE(rdzvd_job_hist_find(job_of(&e), "node-6")->aside);
    ASSERT_TRUE(strstr(rdzvd_job_hist_find(job_of(&e), "node-6")->reason,
                       "2 of its nodes went before they ran") != NULL);
    /* Recorded with the restart (STOPPED), as rdzvd's journal has it. */
    ASSERT_OK(rdzvd_job_record_get(e.table, "job", &rec));
    ASSERT_EQ(rec.restart_count, 1);
    ASSERT_EQ(rec.n_hist, 3u);
    ASSERT_TRUE(rec.hist[2].aside);
    ASSERT_EQ(rec.hist[2].fails[0].world_size, RDZVD_FAIL_UNRAN);
    rdzvd_job_record_clear(&rec);
    {
        struct rdzv_join jn = join_on(7, 2, 3, "flaky");

        ASSERT_EQ(join_err(&e, &s[2], &jn, err, sizeof(err)), -EACCES);
        ASSERT_TRUE(strstr(err, "node flaky was put aside by job job") != NULL);
    }
    all_ready(f, 2, job_of(&e)->generation);
    ASSERT_EQ(f[0].round.restart_count, 1);
    env_done(&e);
    env_forget_table(fd);
    jt_state_dir_done(fd, path);
}

/* Case 2 as written: --scale-up now, the job below MAX; JOIN+close cycles from one host. A
 * joiner is taken in at its first HEARTBEAT, not at its JOIN: nine that close before it restart
 * nothing and are charged nothing (spares that went). A joiner that heartbeats scales it up. */
static void test_scale_up_join_and_close_restarts_nothing(void)
{
    struct env e;
    struct fake a = {0}, s[10] = {0}, b = {0};
    struct rdzv_join jn = join_on(0, 1, 3, NULL);

    jn.scale_up_now = true;
    env_init(&e, -1);
    ASSERT_OK(join(&e, &a, &jn));
    run_ms(&e, 100);
    ASSERT_EQ(a.nrounds, 1);
    for (int c = 0; c < 9; c++) {
        jn = join_on(5 + c, 1, 3, "joiner");
        ASSERT_OK(join(&e, &s[c], &jn));
        ASSERT_TRUE(s[c].spare);
        jt_gone(s[c].m); /* it closes at once */
        s[c].m = NULL;
        ASSERT_EQ(a.nevents, 0);
        ASSERT_EQ(a.nrounds, 1);
        ASSERT_EQ(job_of(&e)->state, JOB_RUNNING);
        ASSERT_EQ(job_of(&e)->restart_count, 0);
    }
    ASSERT_EQ(unran_of(job_of(&e), "joiner"), 0); /* spares that went cost nothing */
    jn = join_on(15, 1, 3, "honest");
    ASSERT_OK(join(&e, &b, &jn));
    ASSERT_EQ(a.nevents, 0);
    jt_heartbeat(b.m);
    ASSERT_EQ(a.nevents, 1);
    ASSERT_TRUE(strstr(a.event.summary, "scale up") != NULL);
    env_done(&e);
}

/* Case 2's other path: the joiner is placed by its scale-up and goes at its ROUND. The restart
 * that follows is not charged; its host is, and scales the job up no more. */
static void test_scale_up_joiner_lost_at_its_round(void)
{
    struct env e;
    struct fake a = {0}, s[2] = {0};
    struct rdzv_join jn = join_on(0, 1, 3, NULL);

    jn.scale_up_now = true;
    env_init(&e, -1);
    ASSERT_OK(join(&e, &a, &jn));
    run_ms(&e, 100);
    jn = join_on(5, 1, 3, "joiner");
    s[0].silent = true;
    ASSERT_OK(join(&e, &s[0], &jn));
    jt_heartbeat(s[0].m); /* its agent is alive: the scale-up */
    jt_ready(a.m, 1);
    ASSERT_EQ(s[0].nrounds, 1);
    ASSERT_EQ(s[0].round.generation, 2);
    jt_gone(s[0].m);
    s[0].m = NULL;
    ASSERT_TRUE(event_is(&a, "restart"));
    ASSERT_EQ(a.event.generation, 2);
    ASSERT_EQ(job_of(&e)->restart_count, 0);
    ASSERT_EQ(unran_of(job_of(&e), "joiner"), 1);
    jt_ready(a.m, 2);
    ASSERT_EQ(a.nrounds, 3);
    jn = join_on(6, 1, 3, "joiner");
    ASSERT_OK(join(&e, &s[1], &jn));
    jt_heartbeat(s[1].m);
    ASSERT_EQ(a.nevents, 2); /* no scale-up: it waits for the next restart */
    ASSERT_TRUE(s[1].spare);
    ASSERT_EQ(job_of(&e)->restart_count, 0);
    env_done(&e);
}

/* The explorer's I2 story (--bad-node-failures 1): node-0's connection closes right after rdzvd
 * stalled (kept for its agent); node-1's worker is killed from outside (the job's restart);
 * node-1 stops its workers (READY), then its connection closes too, within the stall. Its agent
 * may be reconnecting: it is kept, not placed. Before, it was placed in the next generation at
 * node-0's deadline with no connection to take its ROUND, charged for not answering it, and its
 * host put aside ("1 of its nodes went before they ran"). */
static void test_node_gone_while_stopping_is_not_placed(void)
{
    struct rdzv_worker_exit w = {.generation = 1, .exit_code = 128 + SIGKILL, .signal = SIGKILL};
    struct fake f[3] = {0};
    struct env e;

    env_init(&e, -1);
    for (int i = 0; i < 3; i++) {
        struct rdzv_join jn = join_on(i, 2, 2, NULL);

        jn.bad_node_failures = 1;
        ASSERT_OK(join(&e, &f[i], &jn));
    }
    run_ms(&e, 100);
    ASSERT_EQ(f[1].nrounds, 1);
    ASSERT_TRUE(f[2].spare);
    rdzvd_member_mark_stall(f[0].m);
    jt_gone(f[0].m); /* kept until its deadline */
    run_ms(&e, 500);
    jt_worker_exit(&f[1], &w);
    jt_ready(f[1].m, 1);
    jt_gone(f[1].m); /* within the stall: kept too */
    for (int t = 0; t < 60; t++) { /* node-0's deadline, not node-1's; the spare heartbeats */
        jt_heartbeat(f[2].m);
        run_ms(&e, t < 59 ? 1000 : 700);
    }
    ASSERT_EQ(job_of(&e)->generation, 1); /* not formed on node-1, away, and the spare */
    jt_heartbeat(f[2].m);
    run_ms(&e, 500); /* node-1's deadline */
    ASSERT_TRUE(!rdzvd_job_hist_find(job_of(&e), "node-1") ||
                !rdzvd_job_hist_find(job_of(&e), "node-1")->aside);
    ASSERT_EQ(unran_of(job_of(&e), "host1"), 0);
    env_done(&e);
}

/* --scale-up now: a joiner that comes while a generation rebuilt from its agents' resumes
 * waits for them is a spare, and its HEARTBEAT then restarts nobody. Once the generation is
 * back, below MAX, its next HEARTBEAT scales the job up, once. It asked only once, and waited
 * as a spare until the next failure. */
static void test_scale_up_joiner_during_a_rebuild_is_taken_in_after_it(void)
{
    struct fake f[3] = {0};
    struct rdzv_join jn;
    struct env e;

    env_init(&e, -1);
    jn = resume_of(0, 5, 0, 3);
    jn.max = 3;
    jn.scale_up_now = true;
    ASSERT_OK(join(&e, &f[0], &jn));
    ASSERT_TRUE(f[0].resumed);
    jn = join_of(2, 2, 3, 3);
    jn.scale_up_now = true;
    ASSERT_OK(join(&e, &f[2], &jn));
    ASSERT_TRUE(f[2].spare);
    jt_heartbeat(f[2].m); /* node 1 is not back: nothing to scale up yet */
    ASSERT_EQ(f[0].nevents, 0);
    jn = resume_of(1, 5, 0, 3);
    jn.max = 3;
    jn.scale_up_now = true;
    ASSERT_OK(join(&e, &f[1], &jn));
    ASSERT_TRUE(f[1].resumed);
    ASSERT_EQ(f[0].nevents, 0); /* rebuilt: its workers never stopped */
    jt_heartbeat(f[2].m);
    for (int i = 0; i < 2; i++) {
        ASSERT_TRUE(event_is(&f[i], "restart"));
        ASSERT_TRUE(strstr(f[i].event.summary, "scale up") != NULL);
    }
    all_ready(f, 2, 5);
    for (int i = 0; i < 3; i++) {
        ASSERT_EQ(f[i].round.generation, 6);
        ASSERT_EQ(f[i].round.nnodes, 3);
        ASSERT_EQ(f[i].round.restart_count, 0); /* a scale-up is not charged */
    }
    jt_heartbeat(f[2].m); /* placed: it asks no more */
    ASSERT_EQ(f[0].nevents, 1);
    env_done(&e);
}

/* The EVENT restarts f heard since it last counted (*seen: the events it heard then). */
static int restarts_heard(const struct fake *f, int *seen)
{
    int n = f->nevents > *seen && event_is(f, "restart") ? f->nevents - *seen : 0;

    *seen = f->nevents;
    return n;
}

/* Issue 71, case 1 as written: --scale-up now; a token holder JOINs, sends one HEARTBEAT and
 * closes, 8 times, each under a new host name and node id, 30 s apart. Before, each cycle
 * restarted every worker, uncounted (8 restarts, restart count 0): the host was charged, and
 * each host was new. The job's bound holds whatever the names: at most
 * RDZVD_JOB_UNCOUNTED_RESTARTS (4) within the window, spaced 30 s doubling. */
static void test_scale_up_under_new_names_is_bounded(void)
{
    struct env e;
    struct fake a = {0}, s[8] = {0};
    struct rdzv_join jn = join_on(0, 1, 16, NULL);
    int restarts = 0, seen = 0;

    jn.scale_up_now = true;
    env_init(&e, -1);
    ASSERT_OK(join(&e, &a, &jn));
    run_ms(&e, 100);
    ASSERT_EQ(a.nrounds, 1);
    for (int c = 0; c < 8; c++) {
        char host[32];

        snprintf(host, sizeof(host), "h%d", c + 1);
        jn = join_on(5 + c, 1, 16, host);
        jn.scale_up_now = true;
        ASSERT_OK(join(&e, &s[c], &jn));
        jt_heartbeat(s[c].m);
        jt_gone(s[c].m); /* it closes */
        s[c].m = NULL;
        restarts += restarts_heard(&a, &seen);
        if (job_of(&e)->state == JOB_STOPPING)
            jt_ready(a.m, job_of(&e)->generation);
        ASSERT_EQ(job_of(&e)->state, JOB_RUNNING);
        for (int t = 0; t < 6; t++) { /* 30 s, the honest node heartbeating */
            jt_heartbeat(a.m);
            run_ms(&e, 5000);
        }
    }
    ASSERT_TRUE(restarts >= 1);
    ASSERT_TRUE(restarts <= RDZVD_JOB_UNCOUNTED_RESTARTS);
    ASSERT_EQ(job_of(&e)->restart_count, 0);
    ASSERT_EQ(a.round.restart_count, 0);
    env_done(&e);
}

/* Issue 71, case 2 as written: --nnodes 2:3 after one honest restart. While the job stops, a
 * token holder JOINs, is placed in the round, and closes at its ROUND; the job re-forms. 12
 * cycles under new host names: before, 12 restarts of every worker, none counted. Now the job
 * takes RDZVD_JOB_UNCOUNTED_RESTARTS of them; past the bound it forms without the nodes that never
 * ran in it, and the budget is as the honest failure left it. The bound is in the job's record
 * (STOPPED), for an rdzvd restart to keep. */
static void test_reform_around_new_names_is_bounded(void)
{
    struct env e;
    struct fake f[2] = {0}, s[12] = {0};
    struct rdzvd_job_record rec;
    int restarts = 0, seen = 0, placed = 0, fd;
    char path[64];

    env_init(&e, (fd = jt_state_dir(path, sizeof(path))));
    one_failure(&e, f);
    restarts += restarts_heard(&f[1], &seen); /* the honest restart */
    ASSERT_EQ(restarts, 1);
    for (int c = 0; c < 12; c++) {
        char host[32];
        struct rdzv_join jn;

        snprintf(host, sizeof(host), "h%d", c + 1);
        jn = join_on(5 + c, 2, 3, host);
        s[c].silent = true;
        ASSERT_OK(join(&e, &s[c], &jn));
        if (job_of(&e)->state == JOB_STOPPING)
            all_ready(f, 2, job_of(&e)->generation);
        placed += s[c].nrounds;
        jt_gone(s[c].m); /* it closes at its ROUND */
        s[c].m = NULL;
        restarts += restarts_heard(&f[1], &seen);
    }
    if (job_of(&e)->state == JOB_STOPPING)
        all_ready(f, 2, job_of(&e)->generation);
    ASSERT_EQ(job_of(&e)->state, JOB_RUNNING);
    ASSERT_EQ(placed, RDZVD_JOB_UNCOUNTED_RESTARTS);
    ASSERT_TRUE(restarts <= 1 + RDZVD_JOB_UNCOUNTED_RESTARTS);
    ASSERT_EQ(job_of(&e)->restart_count, 1);
    ASSERT_EQ(f[0].round.nnodes, 2);
    ASSERT_OK(rdzvd_job_record_get(e.table, "job", &rec));
    ASSERT_EQ(rec.n_uncounted, (unsigned)RDZVD_JOB_UNCOUNTED_RESTARTS);
    rdzvd_job_record_clear(&rec);
    env_done(&e);
    env_forget_table(fd);
    jt_state_dir_done(fd, path);
}

/* Past the bound, a re-form the job cannot avoid is charged: --nnodes 2:3, the bound spent by
 * nodes lost at their ROUND; node-1 is then lost for good (a counted restart), and the job can
 * form only with a node that never ran. It goes at its ROUND: that restart is charged to the
 * budget, not free. */
static void test_unavoidable_reform_past_the_bound_is_charged(void)
{
    struct env e;
    struct fake f[2] = {0}, s[RDZVD_JOB_UNCOUNTED_RESTARTS + 1] = {0};
    struct rdzv_join jn;

    env_init(&e, -1);
    one_failure(&e, f);
    for (int c = 0; c < RDZVD_JOB_UNCOUNTED_RESTARTS; c++) {
        char host[32];

        snprintf(host, sizeof(host), "h%d", c + 1);
        jn = join_on(5 + c, 2, 3, host);
        s[c].silent = true;
        ASSERT_OK(join(&e, &s[c], &jn));
        all_ready(f, 2, job_of(&e)->generation);
        ASSERT_EQ(s[c].nrounds, 1);
        jt_gone(s[c].m);
        s[c].m = NULL;
    }
    ASSERT_EQ(job_of(&e)->restart_count, 1);
    all_ready(f, 2, job_of(&e)->generation);
    ASSERT_EQ(job_of(&e)->state, JOB_RUNNING);
    jt_advance((uint64_t)rdzvd_job_startup_fail_ms(&jt_steps)); /* its workers ran */
    jt_gone(f[1].m); /* a node that ran: counted */
    f[1].m = NULL;
    ASSERT_EQ(job_of(&e)->restart_count, 2);
    jn = join_on(5 + RDZVD_JOB_UNCOUNTED_RESTARTS, 2, 3, "h9");
    s[RDZVD_JOB_UNCOUNTED_RESTARTS].silent = true;
    ASSERT_OK(join(&e, &s[RDZVD_JOB_UNCOUNTED_RESTARTS], &jn));
    jt_ready(f[0].m, job_of(&e)->generation);
    ASSERT_EQ(s[RDZVD_JOB_UNCOUNTED_RESTARTS].nrounds, 1); /* placed: MIN needs it */
    jt_gone(s[RDZVD_JOB_UNCOUNTED_RESTARTS].m);
    s[RDZVD_JOB_UNCOUNTED_RESTARTS].m = NULL;
    ASSERT_TRUE(event_is(&f[0], "restart"));
    ASSERT_EQ(job_of(&e)->restart_count, 3); /* charged: the bound is spent */
    env_done(&e);
}

/* An honest elastic job (--nnodes 1:11, --scale-up now) gains 10 nodes over 5 minutes, one
 * every 30 s, every agent heartbeating. Joiners close together are taken in together: the
 * scale-ups are spaced (30 s doubling), a scale-up leaves one slot of the bound free, and the
 * job takes its 10 nodes in 4 restarts (at 30, 60 and 120 s, 4 nodes; the last 6 at 630 s, once
 * the first restart left the 10-minute window), not in 10. */
static void test_honest_growth_takes_few_restarts(void)
{
    struct env e;
    struct fake f[11] = {0};
    int restarts = 0, seen = 0, joined = 1;
    uint64_t acked[11] = {0};
    struct rdzv_join jn = join_on(0, 1, 11, NULL);

    jn.scale_up_now = true;
    env_init(&e, -1);
    ASSERT_OK(join(&e, &f[0], &jn));
    run_ms(&e, 100);
    for (int t = 1; t <= 11 * 60; t++) { /* 11 minutes, by the second */
        const struct rdzvd_job *j = job_of(&e);

        if (t % 30 == 0 && joined < 11) {
            jn = join_on(joined, 1, 11, NULL);
            jn.scale_up_now = true;
            ASSERT_OK(join(&e, &f[joined], &jn));
            joined++;
        }
        for (int i = 0; i < joined; i++)
            if (t % 5 == 0 || i == joined - 1)
                jt_heartbeat(f[i].m);
        restarts += restarts_heard(&f[0], &seen);
        for (int i = 0; i < joined; i++) /* each stops its workers for the restart */
            if (j->state == JOB_STOPPING && event_is(&f[i], "restart") &&
                acked[i] != f[i].event.generation) {
                acked[i] = f[i].event.generation;
                jt_ready(f[i].m, acked[i]);
            }
        run_ms(&e, 1000);
    }
    ASSERT_EQ(job_of(&e)->state, JOB_RUNNING);
    ASSERT_EQ(job_of(&e)->nin_round, 11); /* every node taken in */
    ASSERT_EQ(restarts, 4);
    ASSERT_EQ(job_of(&e)->restart_count, 0);
    env_done(&e);
}

/* rdzvd restarted on its --state-dir (fd) whose record of the job (--nnodes 1:3, --scale-up
 * now, generation 6, heartbeat timeout hb_ms) names n restarts not counted, at_ms[i] from now;
 * then f[0] resumes it (generation 7). */
static void rebuilt_with_free(struct env *e, int fd, struct fake *f, int64_t hb_ms,
                              const int64_t *at_ms, unsigned n)
{
    struct rdzvd_job_record rec = {.min = 1, .max = 3, .max_restarts = 3, .generation = 6,
                                   .restart_count = 1, .has_settings = true,
                                   .settings = {.last_call_ms = 10,
                                                .heartbeat_timeout_ms = hb_ms,
                                                .join_timeout_ms = 600000,
                                                .scale_up_now = true}};
    struct rdzv_join jn = join_on(0, 1, 3, NULL);

    env_init(e, -1); /* the clock */
    snprintf(rec.run_id, sizeof(rec.run_id), "job");
    rec.n_uncounted = n;
    for (unsigned i = 0; i < n; i++)
        rec.uncounted_ms[i] = (int64_t)(rdzvd_job_wall_s(&e->h) * 1000) + at_ms[i];
    jt_record_save(fd, &rec);
    env_done(e);
    env_init(e, fd); /* rdzvd restarted on its --state-dir */
    jn.scale_up_now = true;
    ASSERT_OK(join(e, &f[0], &jn));
    run_ms(e, 100);
}

/* An rdzvd restart keeps the bound: the job's record says when its restarts not counted were
 * (STOPPED records them), and the job rebuilt from it takes no scale-up while they are within
 * the window. Before, the bound was in memory only, and a restart of rdzvd reset it. */
static void test_bound_survives_an_rdzvd_restart(void)
{
    const int64_t at[RDZVD_JOB_UNCOUNTED_RESTARTS] = {-240000, -180000, -120000, -60000};
    struct fake f[2] = {0};
    struct rdzv_join jn;
    char path[64];
    struct env e;
    int fd = jt_state_dir(path, sizeof(path));

    rebuilt_with_free(&e, fd, f, 60000, at, RDZVD_JOB_UNCOUNTED_RESTARTS); /* the last 1 min ago */
    ASSERT_EQ(f[0].round.generation, 7);
    ASSERT_EQ(job_of(&e)->n_uncounted, (unsigned)RDZVD_JOB_UNCOUNTED_RESTARTS);
    jn = join_on(1, 1, 3, "newcomer");
    jn.scale_up_now = true;
    ASSERT_OK(join(&e, &f[1], &jn));
    jt_heartbeat(f[1].m);
    ASSERT_EQ(f[0].nevents, 0); /* no scale-up: the bound is spent */
    ASSERT_TRUE(f[1].spare);
    env_done(&e);
    env_forget_table(fd);
    jt_state_dir_done(fd, path);
}

/* A token holder whose node id held a place (--state-dir: its secret proves the id), on a 2:3
 * job. Each cycle while generation G runs: it claims a step, sends CANCEL (SIGTERM); while the
 * job stops it JOINs again, same id and secret, with a resume of G, and is READY. Before, the
 * resume counted as "it ran" (held_place) and a signal from a node that ran was never charged:
 * 20 cycles, 20 restarts of every worker, restart count 0, and the bound renewed forever.
 * Now "ran" is what rdzvd saw (this member took a ROUND): the rejoined id is a newcomer, and
 * past the bound it waits as a spare. */
static void test_signal_and_resume_do_not_renew_the_bound(void)
{
    struct env e;
    struct fake f[3] = {0};
    int restarts = 0, seen = 0, fd;
    char path[64];

    env_init(&e, (fd = jt_state_dir(path, sizeof(path))));
    for (int i = 0; i < 3; i++) {
        struct rdzv_join jn = join_on(i, 2, 3, NULL);

        ASSERT_OK(join(&e, &f[i], &jn));
    }
    run_ms(&e, 100);
    ASSERT_EQ(f[2].nrounds, 1);
    for (int c = 0; c < 20; c++) {
        const struct rdzvd_job *j = job_of(&e);
        uint64_t g = j->generation;
        struct rdzv_join jn;

        ASSERT_EQ(j->state, JOB_RUNNING);
        fake_step(&f[2]); /* a claim: its rank made a step */
        jt_cancel(f[2].m, 15, "");
        memset(&f[2], 0, sizeof(f[2]));
        jn = join_on(2, 2, 3, NULL);
        jn.resume = (struct rdzv_resume){.generation = g, .node_rank = 0, .nnodes = 1,
                                         .world_size = 2, .master_port = 41000};
        ASSERT_OK(join(&e, &f[2], &jn));
        if (j->state == JOB_STOPPING) {
            jt_ready(f[2].m, g);
            all_ready(f, 2, g);
        }
        restarts += restarts_heard(&f[0], &seen);
        run_ms(&e, 1000);
    }
    ASSERT_EQ(job_of(&e)->state, JOB_RUNNING);
    ASSERT_TRUE(restarts <= RDZVD_JOB_UNCOUNTED_RESTARTS);
    ASSERT_EQ(job_of(&e)->restart_count, 0);
    ASSERT_TRUE(f[2].spare); /* waits: the job forms without it */
    env_done(&e);
    env_forget_table(fd);
    jt_state_dir_done(fd, path);
}

/* A healthy full-size elastic job (--nnodes 2:8, --scale-up now, --max-restarts 3) on f[0] and
 * f[1]: generation 1 runs. */
static void elastic_pair(struct env *e, struct fake *f)
{
    env_init(e, -1);
    for (int i = 0; i < 2; i++) {
        struct rdzv_join jn = join_on(i, 2, 8, NULL);

        jn.scale_up_now = true;
        ASSERT_OK(join(e, &f[i], &jn));
    }
    run_ms(e, 100);
    ASSERT_EQ(f[0].nrounds, 1);
}

/* A healthy full-size elastic job (--nnodes 2:8, --scale-up now, --max-restarts 3) and a token
 * holder under a new name and node id each time: JOIN + HEARTBEAT (a scale-up when the spacing
 * allows); the first closes at once, the others are placed in the scale-up's round and close at
 * their ROUND. Before, a scale-up could take the bound's last slot, and the loss at its round
 * past the bound was charged: the budget went at 150, 600 and 780 s and the job failed at 1200 s
 * ("restart budget exhausted"), no honest node at fault. Now a scale-up needs two slots. */
static void test_scale_up_round_spends_no_budget(void)
{
    struct env e;
    struct fake f[2] = {0}, s[64] = {0};
    int c = 0;

    elastic_pair(&e, f);
    for (int t = 0; t < 40 * 60 && c < 64 && job_of(&e)->state != JOB_ENDED; t += 5) {
        const struct rdzvd_job *j = job_of(&e);

        if (j->state == JOB_RUNNING && rdzvd_job_uncounted_scale_up((struct rdzvd_job *)j)) {
            char host[32];
            struct rdzv_join jn;
            uint64_t g = j->generation;

            snprintf(host, sizeof(host), "adv%d", c);
            jn = join_on(10 + c, 2, 8, host);
            jn.scale_up_now = true;
            s[c].silent = true;
            ASSERT_OK(join(&e, &s[c], &jn));
            jt_heartbeat(s[c].m);
            if (c == 0)
                jt_gone(s[c].m); /* a scale-up alone */
            if (j->state == JOB_STOPPING) {
                all_ready(f, 2, g);
                if (c > 0)
                    jt_ready(s[c].m, g);
            }
            if (c > 0) {
                jt_gone(s[c].m); /* at its ROUND, or a spare */
                if (job_of(&e)->state == JOB_STOPPING)
                    all_ready(f, 2, job_of(&e)->generation);
            }
            c++;
        }
        for (int i = 0; i < 2; i++)
            jt_heartbeat(f[i].m);
        run_ms(&e, 5000);
    }
    ASSERT_TRUE(c > 3); /* it kept trying */
    ASSERT_EQ(job_of(&e)->state, JOB_RUNNING);
    ASSERT_EQ(job_of(&e)->restart_count, 0);
    env_done(&e);
}

/* 60 cycles, 30 s apart, of a token holder under a new host name and node id each on a healthy
 * elastic job (--nnodes 2:8, --scale-up now, --max-restarts 3): JOIN + HEARTBEAT (a scale-up
 * when the bound allows); once it took its ROUND it claims a step (exit: reports a worker
 * failure instead, an exit code or a signal from outside by turns), and closes. After each, the
 * restart count is 0 and the job runs; the restarts heard are at most RDZVD_JOB_UNCOUNTED_RESTARTS
 * within any window, and it kept being taken in. The newcomers that waited: the result. */
static int token_holder_cycles(bool exit)
{
    struct env e;
    struct fake f[2] = {0}, s[60] = {0};
    uint64_t at[60 * 2];
    int n = 0, seen = 0, taken = 0, waited = 0;

    elastic_pair(&e, f);
    for (int c = 0; c < 60; c++) {
        struct rdzv_worker_exit w = {.exit_code = c % 2 ? 128 + SIGKILL : 1,
                                     .signal = c % 2 ? SIGKILL : 0};
        struct rdzv_join jn;
        char host[32];
        uint64_t g = job_of(&e)->generation;

        snprintf(host, sizeof(host), "claim%d", c);
        jn = join_on(10 + c, 2, 8, host);
        jn.scale_up_now = true;
        ASSERT_OK(join(&e, &s[c], &jn));
        jt_heartbeat(s[c].m); /* a scale-up, when the bound allows */
        if (job_of(&e)->state == JOB_STOPPING) {
            all_ready(f, 2, g);
            jt_ready(s[c].m, g);
        }
        waited += s[c].nrounds == 0;
        taken += s[c].nrounds > 0;
        w.generation = s[c].round.generation;
        if (s[c].nrounds > 0 && exit)
            jt_worker_exit(&s[c], &w); /* at once, within the start-up window */
        else if (s[c].nrounds > 0)
            fake_step(&s[c]); /* it took its ROUND; a claim: its rank made a step */
        jt_gone(s[c].m);
        if (job_of(&e)->state == JOB_STOPPING)
            all_ready(f, 2, job_of(&e)->generation);
        for (int k = restarts_heard(&f[0], &seen); k > 0; k--)
            at[n++] = jt_now_ms();
        ASSERT_EQ(job_of(&e)->restart_count, 0);
        ASSERT_EQ(job_of(&e)->state, JOB_RUNNING);
        for (int t = 0; t < 6; t++) { /* 30 s, the honest nodes heartbeating */
            for (int i = 0; i < 2; i++)
                jt_heartbeat(f[i].m);
            run_ms(&e, 5000);
        }
    }
    ASSERT_TRUE(taken >= 2); /* it kept being taken in */
    for (int i = RDZVD_JOB_UNCOUNTED_RESTARTS; i < n; i++) /* the bound, over any window */
        ASSERT_TRUE(at[i] - at[i - RDZVD_JOB_UNCOUNTED_RESTARTS] >= RDZVD_JOB_UNCOUNTED_WINDOW_MS);
    ASSERT_EQ(f[0].round.restart_count, 0);
    env_done(&e);
    return waited;
}

/* Issue 71 (a): the token holder claims a step (token_holder_cycles). Before, the step claim
 * made its loss the job's failure: a counted restart each cycle, and the job failed on its
 * budget. A step is a claim: rdzvd sees a node run only past the start-up window by its own
 * clock. The losses are free, within the job's bound; past it the newcomers wait as spares. */
static void test_step_claim_does_not_drain_the_budget(void)
{
    ASSERT_TRUE(token_holder_cycles(false) > 0); /* past the bound, newcomers waited */
}

/* The job's record names a restart not counted 1 h in the future (written by a replica or
 * leader whose wall clock runs ahead, or this host's clock set back). Before, that entry
 * blocked every scale-up until the clock caught up (61 min). It is taken as now: the newcomer
 * is taken in once the spacing after it allows (30 s). */
static void test_bound_in_the_future_is_taken_as_now(void)
{
    const int64_t at[1] = {3600 * 1000};
    struct fake f[2] = {0};
    struct rdzv_join jn;
    char path[64];
    struct env e;
    int fd = jt_state_dir(path, sizeof(path)), s = 0;

    rebuilt_with_free(&e, fd, f, 600000, at, 1);
    jn = join_on(1, 1, 3, "newcomer");
    jn.scale_up_now = true;
    ASSERT_OK(join(&e, &f[1], &jn));
    for (s = 0; s < 90 * 60 && f[0].nevents == 0; s += 5) {
        jt_heartbeat(f[0].m);
        jt_heartbeat(f[1].m);
        run_ms(&e, 5000);
    }
    ASSERT_TRUE(f[0].nevents > 0);
    ASSERT_TRUE(s <= 60); /* the scale-up came within a minute */
    env_done(&e);
    env_forget_table(fd);
    jt_state_dir_done(fd, path);
}

/* Issue 71: the token holder takes its ROUND and at once reports a worker failure (an exit
 * code, or a signal claimed from outside), then closes (token_holder_cycles). Before, each
 * report was a counted restart, and the job failed on its budget. A failure of a node that
 * joined late, before rdzvd saw it run, is a claim (P7d): not counted, charged to its host,
 * within the job's bound (P8). */
static void test_newcomer_exit_does_not_drain_the_budget(void)
{
    token_holder_cycles(true);
}

/* elastic_pair's job, and f[2] under host taken in by a scale-up: generation 2 runs. */
static void pair_and_late_joiner(struct env *e, struct fake *f, const char *host)
{
    struct rdzv_join jn = join_on(2, 2, 8, host);

    elastic_pair(e, f);
    jn.scale_up_now = true;
    ASSERT_OK(join(e, &f[2], &jn));
    jt_heartbeat(f[2].m); /* the scale-up */
    all_ready(f, 3, 1);
}

/* A late joiner that stays and reports a worker failure at start-up of each generation it is
 * placed in (--bad-node-failures 2): each is charged to its host, not counted; at the second
 * its host is put aside and it goes once the generation stopped. The job runs on. */
static void test_late_joiner_failing_at_start_up_is_put_aside(void)
{
    struct env e;
    struct fake f[3] = {0};
    struct rdzv_worker_exit w = {.exit_code = 1};

    pair_and_late_joiner(&e, f, "flaky");
    for (int k = 1; k <= 2; k++) {
        ASSERT_EQ(f[2].nrounds, k);
        w.generation = f[2].round.generation;
        jt_worker_exit(&f[2], &w);
        ASSERT_EQ(unran_of(job_of(&e), "flaky"), k);
        all_ready(f, 3, w.generation);
    }
    ASSERT_TRUE(event_is(&f[2], "put_aside"));
    ASSERT_EQ(job_of(&e)->restart_count, 0);
    ASSERT_EQ(job_of(&e)->state, JOB_RUNNING);
    env_done(&e);
}

/* The honest counterparts. A script that crashes at start-up on the job's first generation
 * (both nodes alike, every generation) fails the job once its budget (3) is spent. A newcomer
 * whose worker fails after rdzvd saw it run (past the start-up window) costs a counted restart. */
static void test_exit_of_first_generation_or_a_running_newcomer_counts(void)
{
    struct env e;
    struct fake f[3] = {0};
    struct rdzv_worker_exit w = {.exit_code = 1};

    elastic_pair(&e, f);
    for (int r = 0; r < 4; r++) {
        uint64_t g = job_of(&e)->generation;

        ASSERT_EQ(job_of(&e)->restart_count, r);
        for (int i = 0; i < 2; i++) {
            w.generation = g;
            jt_worker_exit(&f[i], &w);
        }
        if (job_of(&e)->state == JOB_STOPPING)
            all_ready(f, 2, g);
        run_ms(&e, 60000); /* the backoff */
    }
    ASSERT_EQ(job_of(&e)->state, JOB_ENDED);
    ASSERT_TRUE(strstr(f[0].event.summary, "budget exhausted") != NULL);
    env_done(&e);

    memset(f, 0, sizeof(f));
    pair_and_late_joiner(&e, f, "late");
    ASSERT_EQ(f[2].nrounds, 1);
    for (int t = 0; t < 2; t++) { /* 10 s: past the start-up window */
        for (int i = 0; i < 3; i++)
            jt_heartbeat(f[i].m);
        run_ms(&e, 5000);
    }
    w.generation = f[2].round.generation;
    jt_worker_exit(&f[2], &w);
    ASSERT_EQ(job_of(&e)->restart_count, 1);
    env_done(&e);
}

int main(void)
{
    rdzv_log_setup("test-job-unran", RDZV_LOG_ERROR);
    TEST(test_node_lost_before_it_ran_is_not_charged);
    TEST(test_node_lost_after_it_ran_is_charged);
    TEST(test_host_that_keeps_losing_nodes_before_they_run_is_put_aside);
    TEST(test_scale_up_join_and_close_restarts_nothing);
    TEST(test_scale_up_joiner_during_a_rebuild_is_taken_in_after_it);
    TEST(test_scale_up_joiner_lost_at_its_round);
    TEST(test_node_gone_while_stopping_is_not_placed);
    TEST(test_scale_up_under_new_names_is_bounded);
    TEST(test_reform_around_new_names_is_bounded);
    TEST(test_unavoidable_reform_past_the_bound_is_charged);
    TEST(test_honest_growth_takes_few_restarts);
    TEST(test_bound_survives_an_rdzvd_restart);
    TEST(test_signal_and_resume_do_not_renew_the_bound);
    TEST(test_scale_up_round_spends_no_budget);
    TEST(test_bound_in_the_future_is_taken_as_now);
    TEST(test_step_claim_does_not_drain_the_budget);
    TEST(test_newcomer_exit_does_not_drain_the_budget);
    TEST(test_exit_of_first_generation_or_a_running_newcomer_counts);
    TEST(test_late_joiner_failing_at_start_up_is_put_aside);
    return tap_done();
}
