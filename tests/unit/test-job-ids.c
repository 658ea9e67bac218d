/* SPDX-License-Identifier: Apache-2.0 */
/* test-job-ids.c: a job's node ids (daemon/job/rdzvd-job-persist.c): which it keeps, which it
 * forgets, and when a new one is refused (docs/design/job-policy.md, rows E0-10 and F17; issue
 * 62 case 3), driven with fake agents (jobtest.h). */
#include "common/rdzv-log.h"
#include "jobtest.h"
#include "daemon/data/rdzvd-config.h"
#include "daemon/job/rdzvd-job-impl.h"

static const struct rdzvd_job *job_of(struct env *e)
{
    return rdzvd_job_view(&e->jobs, "job");
}

/* The job's state, or -1: not in memory. */
static int state_of(struct env *e)
{
    const struct rdzvd_job *j = job_of(e);

    return j ? (int)j->state : -1;
}

/* Row E0-10: when the node ids of a job's members and of its running generation alone fill the
 * bound (here two of them), a new node id's JOIN is refused, in one line that says so and what
 * to do: it is not admitted, nothing is forgotten, and the running job hears nothing. */
static void test_join_past_the_node_ids_limit_is_refused(void)
{
    char err[512], want[256];
    struct fake f[2] = {0}, late = {0};
    struct rdzv_join jn = join_of(0, 2, 2, 3);
    struct env e;

    jt_bounds.ids_bytes_max = 2 * sizeof("node-0"); /* node-0 and node-1, with their NULs */
    env_init(&e, -1);
    join_n(&e, f, 2, jn);
    assert_heard(&f[0], 0, 1); /* generation 1 runs */
    jn = join_of(5, 2, 2, 3); /* a spare */
    ASSERT_EQ(join_err(&e, &late, &jn, err, sizeof(err)), -ENOSPC);
    snprintf(want, sizeof(want), "job 'job' cannot take node id 'node-5': the node ids of its "
             "members and its running generation fill the %zu bytes a job keeps; stop some of "
             "its spares, or start a new job with a new --rdzv-id", 2 * sizeof("node-0"));
    if (!strstr(err, want))
        fprintf(stderr, "refused: %s\n", err);
    ASSERT_TRUE(strstr(err, want) != NULL);
    ASSERT_EQ(late.njoined, 0);
    ASSERT_FALSE(admitted(&e, "node-5"));
    ASSERT_TRUE(admitted(&e, "node-0"));
    ASSERT_TRUE(admitted(&e, "node-1"));
    assert_heard(&f[0], 0, 1);
    assert_heard(&f[1], 0, 1);
    ASSERT_EQ(job_of(&e)->nmembers, 2);
    env_done(&e);
    jt_bounds.ids_bytes_max = RDZVD_JOB_IDS_BYTES_MAX;
}

/* E0-10 as the simulator's S3 judges it: a JOIN meets the members as they are when it is read.
 * node-1's connection closed right after rdzvd stalled: it is kept away until its deadline. A
 * JOIN read once that deadline passed, before its timer ran, still finds node-1's id promised:
 * refused. The pass runs the timer (node-1 lost), and the same JOIN is then taken. */
static void test_member_past_its_deadline_holds_its_id_until_its_timer(void)
{
    struct fake f[2] = {0}, late = {0}, again = {0};
    struct rdzv_join jn;
    char err[512];
    struct env e;

    jt_bounds.ids_bytes_max = 2 * sizeof("node-0"); /* node-0 and node-1, with their NULs */
    env_init(&e, -1);
    for (int i = 0; i < 2; i++) {
        jn = join_of(i, 2, 2, 3);
        jn.heartbeat_timeout_ms = 40;
        ASSERT_OK(join(&e, &f[i], &jn));
    }
    ASSERT_EQ(f[0].nrounds, 1);
    jt_stall_ms(&e, 200); /* rdzvd stalled */
    ASSERT_EQ(jt_heartbeat(f[0].m), 1);
    jt_gone(f[1].m); /* closed right after the stall: kept away for 40 ms */
    jt_advance(30);
    ASSERT_EQ(jt_heartbeat(f[0].m), 1);
    jt_advance(11); /* node-1's deadline passed, its timer not run */
    jn = join_of(5, 2, 2, 3);
    ASSERT_EQ(join_err(&e, &late, &jn, err, sizeof(err)), -ENOSPC);
    ASSERT_TRUE(strstr(err, "cannot take node id 'node-5'") != NULL);
    ASSERT_TRUE(admitted(&e, "node-1"));
    jt_run_pass(); /* node-1 lost: the job restarts without it */
    ASSERT_TRUE(event_is(&f[0], "restart"));
    if (join_err(&e, &again, &jn, err, sizeof(err)) < 0)
        fprintf(stderr, "refused after the pass: %s\n", err);
    ASSERT_EQ(err[0], '\0');
    ASSERT_TRUE(admitted(&e, "node-5"));
    ASSERT_FALSE(admitted(&e, "node-1"));
    env_done(&e);
    jt_bounds.ids_bytes_max = RDZVD_JOB_IDS_BYTES_MAX;
}

/* E0-10: the job's node ids full of nodes that held a place and
 * left (each lost in turn, its replacement placed), the next replacement is still taken: the
 * oldest ids that are neither a member's nor the running generation's are forgotten
 * (FORGOTTEN, journaled before JOINED), and the journal replayed holds the same ids. A forgotten
 * node whose agent comes back is a new node: its old secret proves nothing, it holds no place. */
static void test_ids_of_nodes_that_ran_make_room_for_a_replacement(void)
{
    struct fake f[8] = {0}, back = {0};
    struct rdzv_join jn = join_of(0, 2, 2, 20);
    char path[64];
    int fd = jt_state_dir(path, sizeof(path));
    struct env e;

    jt_bounds.ids_bytes_max = 4 * sizeof("node-0"); /* four ids */
    env_init(&e, fd);
    join_n(&e, f, 2, jn);
    run_ms(&e, 1000);
    ASSERT_EQ(state_of(&e), JOB_RUNNING);
    for (int k = 2; k < 8; k++) { /* node k-1 lost, node k its replacement */
        char err[512] = "";

        jt_gone(f[k - 1].m);
        all_ready(f, 1, (uint64_t)k - 1);
        jn = join_of(k, 2, 2, 20);
        if (join_err(&e, &f[k], &jn, err, sizeof(err)) < 0)
            fprintf(stderr, "replacement node-%d refused: %s\n", k, err);
        ASSERT_EQ(err[0], '\0');
        run_ms(&e, 1000);
        ASSERT_EQ(f[k].nrounds, 1);
        ASSERT_EQ(f[k].round.generation, (uint64_t)k);
    }
    /* Kept: the members (node-0, node-7) and the newest that ran; forgotten: the oldest. */
    ASSERT_TRUE(admitted(&e, "node-0"));
    ASSERT_TRUE(admitted(&e, "node-7"));
    ASSERT_TRUE(admitted(&e, "node-5"));
    ASSERT_FALSE(admitted(&e, "node-4"));
    ASSERT_FALSE(admitted(&e, "node-1"));
    /* node-1's agent, back with its old secret, resumes generation 1: a new node to the job. */
    jn = resume_of(1, 1, 0, 20);
    snprintf(jn.secret, sizeof(jn.secret), "%s", f[1].secret);
    ASSERT_OK(join(&e, &back, &jn));
    ASSERT_FALSE(rdzvd_member_held_place(back.m));
    ASSERT_EQ(back.nrounds, 0);
    ASSERT_TRUE(strcmp(back.secret, f[1].secret) != 0);
    ASSERT_TRUE(admitted(&e, "node-1"));
    ASSERT_FALSE(admitted(&e, "node-5")); /* the oldest of those that left, to make room */
    env_done(&e);
    /* The journal replayed: the same ids. */
    env_init(&e, fd);
    ASSERT_TRUE(admitted(&e, "node-0"));
    ASSERT_TRUE(admitted(&e, "node-7"));
    ASSERT_TRUE(admitted(&e, "node-6"));
    ASSERT_TRUE(admitted(&e, "node-1"));
    ASSERT_FALSE(admitted(&e, "node-5"));
    ASSERT_FALSE(admitted(&e, "node-2"));
    env_done(&e);
    env_forget_table(fd);
    jt_state_dir_done(fd, path);
    jt_bounds.ids_bytes_max = RDZVD_JOB_IDS_BYTES_MAX;
}

/* Spares that JOIN and close, 3,000 of them under 128-byte node ids (past
 * 256 KiB had each been kept), leave no node id behind: a member is then lost, and its
 * replacement (a new node id) is taken; so, after it, is a restarted agent on a healthy node.
 * With --state-dir, the journal replayed keeps the same ids: the nodes that ran. */
static void test_spares_that_come_and_go_fill_no_table(void)
{
    struct fake f[2] = {0}, spare, repl = {0}, again = {0};
    struct rdzv_join jn = join_of(0, 2, 2, 3);
    char path[64], hash[RDZVD_SECRET_HASH_HEX + 1], err[512];
    int fd = jt_state_dir(path, sizeof(path));
    struct env e;

    env_init(&e, fd);
    join_n(&e, f, 2, jn);
    ASSERT_EQ(state_of(&e), JOB_RUNNING);
    for (int k = 0; k < 3000; k++) {
        memset(&spare, 0, sizeof(spare));
        jn = join_of(5, 2, 2, 3);
        snprintf(jn.node_id, sizeof(jn.node_id), "%0128d", k);
        if (join(&e, &spare, &jn) < 0)
            break; /* the table full: the replacement below is refused too */
        ASSERT_TRUE(spare.spare);
        jt_gone(spare.m);
    }
    jt_gone(f[1].m); /* node 1 lost: the job restarts without it */
    all_ready(f, 1, 1);
    jn = join_of(7, 2, 2, 3); /* its replacement */
    if (join_err(&e, &repl, &jn, err, sizeof(err)) < 0)
        fprintf(stderr, "the replacement is refused: %s\n", err);
    ASSERT_EQ(err[0], '\0');
    snprintf(jn.node_id, sizeof(jn.node_id), "%0128d", 2999);
    ASSERT_FALSE(admitted(&e, jn.node_id));
    ASSERT_TRUE(admitted(&e, "node-7"));
    ASSERT_TRUE(admitted(&e, "node-1")); /* it ran: its agent may come back */
    run_ms(&e, 1000);
    ASSERT_EQ(repl.nrounds, 1);
    ASSERT_EQ(repl.round.generation, 2);
    jt_gone(f[0].m); /* node 0's agent restarted: a new process, a new node id */
    all_ready(&repl, 1, 2);
    jn = join_of(8, 2, 2, 3);
    ASSERT_OK(join(&e, &again, &jn));
    run_ms(&e, 1000);
    ASSERT_EQ(again.nrounds, 1);
    env_done(&e);
    /* The journal replayed: the same ids, and none of the spares'. */
    env_init(&e, fd);
    ASSERT_OK(rdzvd_job_secret_hash_get(e.h.secret_table, "job", "node-7", hash));
    ASSERT_OK(rdzvd_job_secret_hash_get(e.h.secret_table, "job", "node-0", hash));
    snprintf(jn.node_id, sizeof(jn.node_id), "%0128d", 0);
    ASSERT_EQ(rdzvd_job_secret_hash_get(e.h.secret_table, "job", jn.node_id, hash), -ENOENT);
    env_done(&e);
    env_forget_table(fd);
    jt_state_dir_done(fd, path);
}

/* E0-10: of the ids that may go, those with a failure history go last: node-1's workers
 * failed before it was lost, node-2 only ran; node-4's JOIN needs one id's room, and node-2's
 * goes though node-1's is older. node-1's history stays, its id or not. */
static void test_ids_with_a_failure_history_go_last(void)
{
    struct rdzv_worker_exit w = {.generation = 1, .exit_code = 7};
    struct fake f[5] = {0};
    struct rdzv_join jn = join_of(0, 2, 2, 20);
    struct env e;

    jt_bounds.ids_bytes_max = 4 * sizeof("node-0");
    env_init(&e, -1);
    join_n(&e, f, 2, jn);
    jt_worker_exit(&f[1], &w); /* node-1's own failure: a restart, charged to node-1 */
    all_ready(f, 2, 1);
    ASSERT_EQ(f[1].round.generation, 2);
    for (int k = 2; k < 5; k++) { /* node k-1 lost after it ran, node k its replacement */
        jt_advance((uint64_t)rdzvd_job_startup_fail_ms(&jt_steps)); /* it ran, by rdzvd's clock */
        jt_gone(f[k - 1].m);
        all_ready(f, 1, (uint64_t)k);
        jn = join_of(k, 2, 2, 20);
        ASSERT_OK(join(&e, &f[k], &jn));
        run_ms(&e, 1000);
        ASSERT_EQ(f[k].round.generation, (uint64_t)k + 1);
    }
    ASSERT_TRUE(admitted(&e, "node-1"));
    ASSERT_FALSE(admitted(&e, "node-2"));
    ASSERT_TRUE(admitted(&e, "node-3"));
    ASSERT_TRUE(admitted(&e, "node-4"));
    ASSERT_NOT_NULL(rdzvd_job_hist_find(job_of(&e), "node-1"));
    env_done(&e);
    jt_bounds.ids_bytes_max = RDZVD_JOB_IDS_BYTES_MAX;
}

/* FORGOTTEN takes one node id's hash and its bytes of the job's node ids, the others kept in
 * their order; of an id not kept it changes nothing; ENDED still forgets the rest. */
static void test_forgotten_takes_one_node_id(void)
{
    static const struct rdzv_limits lim = RDZV_LIMITS_DEFAULT;
    struct rdzvd_job_record rec = {.run_id = "job"};
    char hash[RDZVD_SECRET_HASH_HEX + 1];
    struct rdzvd_store *t = NULL;
    const uint8_t *val;
    size_t vlen;

    ASSERT_OK(rdzvd_store_new(&lim, NULL, &t));
    rdzvd_store_set_decision_fn(t, rdzvd_decision_apply, NULL);
    memset(rec.admitted.hash, 'a', RDZVD_SECRET_HASH_HEX);
    for (int i = 0; i < 3; i++) {
        snprintf(rec.admitted.node_id, sizeof(rec.admitted.node_id), "n%d", i);
        ASSERT_OK(rdzvd_job_decide(t, RDZVD_DECIDE_ADMITTED, &rec));
    }
    snprintf(rec.admitted.node_id, sizeof(rec.admitted.node_id), "n1");
    ASSERT_OK(rdzvd_job_decide(t, RDZVD_DECIDE_FORGOTTEN, &rec));
    ASSERT_EQ(rdzvd_job_secret_hash_get(t, "job", "n1", hash), -ENOENT);
    ASSERT_OK(rdzvd_job_secret_hash_get(t, "job", "n0", hash));
    ASSERT_OK(rdzvd_store_get(t, "ids/job", 7, &val, &vlen));
    ASSERT_EQ(vlen, 6);
    ASSERT_TRUE(memcmp(val, "n0\0n2\0", 6) == 0);
    ASSERT_OK(rdzvd_job_decide(t, RDZVD_DECIDE_FORGOTTEN, &rec)); /* none: nothing */
    ASSERT_OK(rdzvd_job_decide(t, RDZVD_DECIDE_ADMITTED, &rec)); /* a new node of that id */
    ASSERT_OK(rdzvd_job_decide(t, RDZVD_DECIDE_ENDED, &rec));
    ASSERT_EQ(rdzvd_job_secret_hash_get(t, "job", "n2", hash), -ENOENT);
    ASSERT_EQ(rdzvd_job_secret_hash_get(t, "job", "n1", hash), -ENOENT);
    ASSERT_EQ(rdzvd_store_get(t, "ids/job", 7, &val, &vlen), -ENOENT);
    rec.admitted.node_id[0] = '\0';
    ASSERT_EQ(rdzvd_job_decide(t, RDZVD_DECIDE_FORGOTTEN, &rec), -EINVAL);
    rdzvd_store_free(t);
}

int main(void)
{
    rdzv_log_setup("test-job-ids", RDZV_LOG_ERROR);
    TEST(test_join_past_the_node_ids_limit_is_refused);
    TEST(test_spares_that_come_and_go_fill_no_table);
    TEST(test_ids_of_nodes_that_ran_make_room_for_a_replacement);
    TEST(test_ids_with_a_failure_history_go_last);
    TEST(test_forgotten_takes_one_node_id);
    TEST(test_member_past_its_deadline_holds_its_id_until_its_timer);
    return tap_done();
}
