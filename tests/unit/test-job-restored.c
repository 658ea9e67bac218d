/* SPDX-License-Identifier: Apache-2.0 */
/* test-job-restored.c: a job restored from its record between generations (job-policy W2), driven
 * with fake agents (jobtest.h). The record of a generation that stopped names its nodes; the job
 * restored after an rdzvd restart on its --state-dir waits for them, within the rebuild window,
 * before it forms the next generation. Before, the first nodes back formed the next generation
 * alone, and the others waited as spares. */
#include <string.h>

#include "common/rdzv-log.h"
#include "jobtest.h"

enum { N = 4, HB_MS = 40 };

static struct rdzv_join join4(int i)
{
    struct rdzv_join jn = join_of(i, 2, N, 3);

    jn.heartbeat_timeout_ms = HB_MS;
    jn.last_call_ms = 10; /* once the wait is over, a round of those ready is soon due */
    return jn;
}

/* Nodes from..to-1 come back, their agents' workers stopped: a JOIN each. */
static void back(struct env *e, struct fake *f, int from, int to)
{
    for (int i = from; i < to; i++) {
        struct rdzv_join jn = join4(i);

        ASSERT_OK(join(e, &f[i], &jn));
    }
}

/* n rounds of 10 ms, nodes 0..k-1 heartbeating, or until node 0 has its second ROUND. */
static void beat(struct env *e, struct fake *f, int k, int n)
{
    for (int t = 0; t < n && f[0].nrounds == 1; t++) {
        for (int i = 0; i < k; i++)
            jt_heartbeat(f[i].m);
        run_ms(e, 10);
    }
}

/* An rdzvd on state directory fd: a job its agents all left waits in its record (W1). */
static void as_rdzvd(struct env *e, int fd)
{
    env_init(e, fd);
    e->h.ended = &e->ended;
    e->h.keep_waiting = rdzvd_waiting_jobs_add;
    e->h.take_waiting = rdzvd_waiting_jobs_take;
}

/* A test's rdzvd, its fake agents and its state directory. */
struct run {
    struct env e;
    struct fake f[N];
    char path[64];
    int fd;
};

/* Generation 1 of four nodes (--nnodes 2:4) in a state directory of its own (r->fd); node 3's
 * worker fails, so the generation stops (its STOPPED record names the four, by node rank).
 * rdzvd restarts on that directory before any READY, or, when all_left, once every agent's
 * connection has closed; or, with all_left and not restart, it goes on. */
static void stopped_then(struct run *r, bool all_left, bool restart)
{
    struct env *e = &r->e;
    struct fake *f = r->f;
    int fd = r->fd = jt_state_dir(r->path, sizeof(r->path));

    struct rdzv_worker_exit w = {.generation = 1, .exit_code = 1};
    char secrets[N][RDZV_SECRET_HEX + 1];
    struct rdzvd_job_record rec;

    as_rdzvd(e, fd);
    join_n(e, f, N, join4(0));
    ASSERT_EQ(f[0].round.nnodes, N);
    jt_worker_exit(&f[3], &w);
    ASSERT_TRUE(event_is(&f[0], "restart"));
    ASSERT_OK(rdzvd_job_record_get(e->table, "job", &rec));
    ASSERT_TRUE(!rec.running && rec.n_stopped == N);
    for (int i = 0; i < N; i++) {
        ASSERT_BYTES_STR(rec.stopped[f[i].round.node_rank], strlen(f[i].m->join.node_id),
                         f[i].m->join.node_id);
        memcpy(secrets[i], e->secrets[i], sizeof(secrets[i]));
    }
    rdzvd_job_record_clear(&rec);
    for (int i = 0; all_left && i < N; i++)
        jt_gone(f[i].m);
    if (!restart)
        return;
    env_done(e);
    as_rdzvd(e, fd); /* rdzvd restarts on its state directory, */
    jt_rebuild(&e->h); /* and rebuilds its job table's jobs as it starts */
    for (int i = 0; i < N; i++)
        memcpy(e->secrets[i], secrets[i], sizeof(secrets[i]));
}

static void stopped_then_restart(struct run *r, bool all_left)
{
    stopped_then(r, all_left, true);
}

/* The end of a test of r: its rdzvd stops, its state directory goes. */
static void run_done(struct run *r)
{
    env_done(&r->e);
    env_forget_table(r->fd);
    jt_state_dir_done(r->fd, r->path);
}

/* Their agents' workers stopped, the nodes come back with a JOIN each: the first three form
 * nothing; the last one back forms generation 2 of all four. Its record names no stopped node
 * any more. */
static void test_stopped_generation_waits_for_its_nodes(void)
{
    struct rdzvd_job_record rec;
    static struct run r;
    struct fake *f = r.f;
    struct env *e = &r.e;

    stopped_then_restart(&r, false);
    back(e, f, 0, N - 1);
    ASSERT_EQ(f[0].nrounds, 1);
    {
        struct rdzv_wait w; /* what the agents are told: 3 of the 4 nodes back */

        jt_wait(f[0].m, &w);
        ASSERT_TRUE(w.what == RDZV_WAIT_REBUILD && w.nodes == N - 1 && w.need == N);
        ASSERT_TRUE(w.left_ms > 0);
    }
    back(e, f, N - 1, N);
    beat(e, f, N, 20);
    for (int i = 0; i < N; i++) {
        ASSERT_EQ(f[i].nrounds, 2);
        ASSERT_EQ(f[i].round.generation, 2);
        ASSERT_EQ(f[i].round.nnodes, N);
    }
    ASSERT_OK(rdzvd_job_record_get(e->table, "job", &rec));
    ASSERT_TRUE(rec.running && rec.generation == 2 && rec.n_stopped == 0);
    rdzvd_job_record_clear(&rec);
    run_done(&r);
}

/* The first node back leaves again: the job waits in its record for the others, its list kept
 * (its agents did not all leave). Node 3 comes back next with a resume, its workers still
 * stopping, then the others: the round waits for the READY of node 3 too. */
static void test_an_early_leaver_and_a_node_stopping_keep_the_wait(void)
{
    struct rdzv_join jn = join4(3);
    static struct run r;
    struct fake *f = r.f;
    struct env *e = &r.e;

    stopped_then_restart(&r, false);
    back(e, f, 0, 1);
    jt_gone(f[0].m);
    jn.resume = (struct rdzv_resume){.generation = 1, .node_rank = f[3].round.node_rank,
                                     .nnodes = N, .rank_offset = f[3].round.rank_offset,
                                     .world_size = f[3].round.world_size, .restart_count = 0,
                                     .master_port = f[3].round.master_port};
    ASSERT_OK(join(e, &f[3], &jn));
    back(e, f, 0, N - 1);
    beat(e, f, N, 3); /* past the last call, within the window */
    ASSERT_EQ(f[0].nrounds, 1);
    jt_ready(f[3].m, 1);
    beat(e, f, N, 20);
    ASSERT_EQ(f[0].round.generation, 2);
    ASSERT_EQ(f[0].round.nnodes, N);
    run_done(&r);
}

/* A node that does not come back is waited for until the rebuild window ends: the next round
 * then forms without it. */
static void test_window_end_forms_without_a_node_not_back(void)
{
    static struct run r;
    struct fake *f = r.f;
    struct env *e = &r.e;

    stopped_then_restart(&r, false);
    back(e, f, 0, N - 1);
    beat(e, f, N - 1, HB_MS / 10);
    ASSERT_EQ(f[0].nrounds, 1); /* the window runs */
    beat(e, f, N - 1, 50);
    for (int i = 0; i < N - 1; i++) {
        ASSERT_EQ(f[i].round.generation, 2);
        ASSERT_EQ(f[i].round.nnodes, N - 1);
    }
    run_done(&r);
}

/* Every agent's connection closed as the generation stopped (a network blip), so the job left
 * memory to wait in its record (W1). Its agents reconnect, with rdzvd restarted meanwhile or
 * not: the first two back form nothing within the window; the last back forms generation 2 of
 * all four. */
static void test_agents_whose_connections_all_closed_are_waited_for(void)
{
    for (int restart = 0; restart < 2; restart++) {
        static struct run r;
        struct fake *f = r.f;
        struct env *e = &r.e;

        memset(&r, 0, sizeof(r));
        stopped_then(&r, true, restart);
        back(e, f, 0, 2);
        run_ms(e, 10);
        ASSERT_EQ(f[0].nrounds, 1);
        back(e, f, 2, N);
        beat(e, f, N, 20);
        for (int i = 0; i < N; i++) {
            ASSERT_EQ(f[i].round.generation, 2);
            ASSERT_EQ(f[i].round.nnodes, N);
        }
        run_done(&r);
    }
}

/* A node back whose workers take longer to stop than the rebuild window (a checkpoint written
 * on SIGTERM) is waited for past the window, as a stopping generation waits for each READY;
 * the node not back at all is not. Its agent back on a new connection is told to stop again. */
static void test_a_node_back_still_stopping_is_waited_for_past_the_window(void)
{
    struct rdzv_join jn = join4(2);
    static struct fake again;
    static struct run r;
    struct fake *f = r.f;
    struct env *e = &r.e;
    struct rdzv_wait w;

    stopped_then_restart(&r, false);
    back(e, f, 0, 2);
    jn.resume = (struct rdzv_resume){.generation = 1, .node_rank = f[2].round.node_rank,
                                     .nnodes = N, .rank_offset = f[2].round.rank_offset,
                                     .world_size = f[2].round.world_size, .restart_count = 0,
                                     .master_port = f[2].round.master_port};
    ASSERT_OK(join(e, &f[2], &jn));
    beat(e, f, N - 1, 50); /* the window, then the last call, run out: node 3 never came */
    ASSERT_EQ(f[0].nrounds, 1);
    jt_wait(f[0].m, &w); /* 2 of the 3 back ready, no time bound */
    ASSERT_TRUE(w.what == RDZV_WAIT_REBUILD && w.nodes == 2 && w.need == 3 && w.left_ms == -1);
    /* Its agent, on a new connection (the old one's EVENT may be lost), is told again. */
    ASSERT_OK(join(e, &again, &jn));
    ASSERT_TRUE(f[2].closed);
    ASSERT_TRUE(event_is(&again, "restart"));
    ASSERT_EQ(again.event.generation, 1);
    jt_ready(again.m, 1);
    beat(e, f, N - 1, 20);
    for (int i = 0; i < N - 1; i++) {
        const struct fake *x = i == 2 ? &again : &f[i];

        ASSERT_EQ(x->round.generation, 2);
        ASSERT_EQ(x->round.nnodes, N - 1);
    }
    run_done(&r);
}

/* The record's part: a STOPPED record's "stopped_nodes" are read back, "" for a rank none held;
 * a list longer than the job's MAX is no record, nor is a generation larger than MAX (rebuilt,
 * it would stop rdzvd at an assertion). */
static void test_stopped_nodes_in_the_record(void)
{
    static const struct rdzv_limits lim = RDZV_LIMITS_DEFAULT;
    char ids[2][RDZV_ID_MAX + 1] = {"a", ""}, text[1024], *at;
    struct rdzvd_job_record rec = {.min = 1, .max = 2, .generation = 1, .restart_count = 1,
                                   .n_stopped = 2, .stopped = ids},
                            got;
    struct rdzvd_store *t = NULL;
    const uint8_t *val;
    size_t vlen;

    ASSERT_OK(rdzvd_store_new(&lim, NULL, &t));
    rdzvd_store_set_decision_fn(t, rdzvd_decision_apply, NULL);
    snprintf(rec.run_id, sizeof(rec.run_id), "s");
    ASSERT_OK(rdzvd_job_decide(t, RDZVD_DECIDE_STOPPED, &rec));
    ASSERT_OK(rdzvd_job_record_get(t, "s", &got));
    ASSERT_TRUE(got.n_stopped == 2 && !strcmp(got.stopped[0], "a") && !got.stopped[1][0]);
    rdzvd_job_record_clear(&got);
    ASSERT_TRUE(got.stopped == NULL && got.n_stopped == 0);
    ASSERT_OK(rdzvd_store_get(t, "job/s", 5, &val, &vlen));
    ASSERT_TRUE(vlen + 8 < sizeof(text));
    memcpy(text, val, vlen);
    text[vlen] = '\0';
    ASSERT_NOT_NULL(at = strstr(text, "\"stopped_nodes\":[\"a\",\"\"]"));
    memmove(at + 24, at + 20, strlen(at + 20) + 1); /* a third id: past MAX 2 */
    memcpy(at + 20, ",\"b\"", 4);
    ASSERT_OK(rdzvd_store_set(t, "job/s", 5, text, strlen(text)));
    ASSERT_EQ(rdzvd_job_record_get(t, "s", &got), -EBADMSG);
    rec = (struct rdzvd_job_record){.min = 1, .max = 2, .generation = 1, .running = true,
                                    .nnodes = 3, .world_size = 3}; /* more nodes than MAX */
    snprintf(rec.run_id, sizeof(rec.run_id), "s");
    ASSERT_EQ(rdzvd_job_record_put(t, &rec), -EINVAL);
    rdzvd_store_free(t);
}

int main(void)
{
    rdzv_log_setup("test-job-restored", RDZV_LOG_ERROR);
    TEST(test_stopped_generation_waits_for_its_nodes);
    TEST(test_an_early_leaver_and_a_node_stopping_keep_the_wait);
    TEST(test_window_end_forms_without_a_node_not_back);
    TEST(test_agents_whose_connections_all_closed_are_waited_for);
    TEST(test_a_node_back_still_stopping_is_waited_for_past_the_window);
    TEST(test_stopped_nodes_in_the_record);
    return tap_done();
}
