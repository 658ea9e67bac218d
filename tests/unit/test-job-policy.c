/* SPDX-License-Identifier: Apache-2.0 */
/* test-job-policy.c: rows of docs/design/job-policy.md (a job's state x event x sender ->
 * what changes, what is recorded, what each node is told) that no other test showed, driven
 * with fake agents (jobtest.h). Each test names its row's id. */
#include "common/rdzv-log.h"
#include "jobtest.h"
#include "daemon/data/rdzvd-config.h"
#include "daemon/job/rdzvd-job-impl.h"

static struct rdzvd_job *job_of(struct env *e)
{
    return rdzvd_job_find(&e->jobs, "job");
}

/* The job's state, or -1: not in memory. */
static int state_of(struct env *e)
{
    struct rdzvd_job *j = job_of(e);

    return j ? (int)j->state : -1;
}

static char state_path[64]; /* env_with_table's directory */

/* e with a job table, journaled in a fresh state directory (as rdzvd with --state-dir). */
static void env_with_table(struct env *e)
{
    env_init(e, jt_state_dir(state_path, sizeof(state_path)));
}

/* The end of an env_with_table (or of a later env on its directory): the directory goes. */
static void env_done_table(struct env *e)
{
    int fd = e->h.state_dirfd;

    env_done(e);
    env_forget_table(fd);
    jt_state_dir_done(fd, state_path);
}

/* The job's record in e's job table says generation gen, restart count restarts, running. */
static void assert_record(struct env *e, uint64_t gen, int64_t restarts, bool running)
{
    struct rdzvd_job_record rec;

    ASSERT_OK(rdzvd_job_record_get(e->table, "job", &rec));
    ASSERT_EQ(rec.generation, gen);
    ASSERT_EQ(rec.restart_count, restarts);
    ASSERT_EQ(rec.running, running);
    rdzvd_job_record_clear(&rec);
}

/* The job has a record in e's job table. */
static bool has_record(struct env *e)
{
    struct rdzvd_job_record rec;
    int r = rdzvd_job_record_get(e->table, "job", &rec);

    if (r == 0)
        rdzvd_job_record_clear(&rec);
    return r == 0;
}

/* Every fake of f[0..n) was told the job ended as type, with exit code code and a summary
 * that says what. */
static void assert_outcome(const struct fake *f, int n, const char *type, int64_t code,
                           const char *what)
{
    for (int i = 0; i < n; i++) {
        ASSERT_TRUE(event_is(&f[i], type));
        ASSERT_EQ(f[i].event.exit_code, code);
        ASSERT_TRUE(strstr(f[i].event.summary, what) != NULL);
    }
}

/* ms of the injected clock, the agents of f[0..n) sending a HEARTBEAT every second. */
static void run_beating(struct env *e, struct fake *f, int n, uint64_t ms)
{
    for (uint64_t t = 0; t < ms; t += 1000) {
        for (int i = 0; i < n; i++)
            if (f[i].m)
                rdzvd_member_heartbeat(f[i].m);
        run_ms(e, 1000);
    }
}

/* f's worker (local rank 0) failed in generation gen: its agent's WORKER_EXIT. */
static void fail_gen(struct fake *f, uint64_t gen)
{
    struct rdzv_worker_exit w = {.generation = gen, .exit_code = 1};

    jt_worker_exit(f, &w);
}

/* The job jn (--nnodes 2:2) on f[0] and f[1], spares f[2..n), runs generation 1; f[0]'s worker
 * fails: the job stops. */
static void stopping(struct env *e, struct fake *f, int n, struct rdzv_join jn)
{
    join_n(e, f, n, jn);
    ASSERT_EQ(f[0].nrounds, 1);
    fail_gen(&f[0], 1);
    ASSERT_TRUE(event_is(&f[1], "restart"));
    ASSERT_EQ(state_of(e), JOB_STOPPING);
}

/* The job jn, with NCCL ids, on f[0..n): node rank 0 (f[0]) is asked for generation 1's ids. */
static void join_nccl(struct env *e, struct fake *f, int n, struct rdzv_join jn)
{
    jn.nccl = RDZV_NCCL_AUTO;
    join_n(e, f, n, jn);
    ASSERT_EQ(state_of(e), JOB_NCCL);
    ASSERT_EQ(f[0].nnccl, 1);
}

/* A job (--nnodes 2:2, heartbeat timeout 5 s) on f[0] and f[1], spares f[2] and f[3]: node
 * rank 0 asked for its NCCL ids (nccl), or generation 1 running. Then spare f[3]'s connection
 * closes, and spare f[2] sends no heartbeat while f[0] and f[1] do: each goes, f[2]'s
 * connection closed, saying why. */
static void spares_lost(struct env *e, struct fake *f, bool nccl)
{
    struct rdzv_join jn = join_of(0, 2, 2, 3);

    jn.heartbeat_timeout_ms = 5000;
    if (nccl)
        join_nccl(e, f, 4, jn);
    else
        join_n(e, f, 4, jn);
    rdzvd_member_gone(f[3].m);
    ASSERT_EQ(job_of(e)->nmembers, 3);
    run_beating(e, f, 2, 6000);
    ASSERT_TRUE(f[2].closed);
    ASSERT_NULL(f[2].m);
    ASSERT_TRUE(strstr(f[2].close_reason, "sent no heartbeat for 5.0 s") != NULL);
    ASSERT_EQ(job_of(e)->nmembers, 2);
    ASSERT_EQ(state_of(e), nccl ? JOB_NCCL : JOB_RUNNING);
}

/* Node rank 0 (f[0]) sends generation gen's id: f[0] and f[1] get their nrounds-th ROUND, of
 * gen on 2 nodes. */
static void ids_sent(struct fake *f, uint64_t gen, int nrounds)
{
    char ids[1][RDZV_NCCL_HEX_LEN + 1];

    fill_id(ids[0], (char)('a' + gen));
    rdzvd_member_nccl_ids(f[0].m, ids, 1);
    for (int i = 0; i < 2; i++) {
        ASSERT_EQ(f[i].nrounds, nrounds);
        ASSERT_EQ(f[i].round.generation, gen);
        ASSERT_EQ(f[i].round.nnodes, 2);
    }
}

/* As stopping, with NCCL ids: generation 1 ran; once stopped, node rank 0 (f[0]) is asked for
 * generation 2's ids: the job is in NCCL. */
static void nccl_again(struct env *e, struct fake *f, int n, struct rdzv_join jn)
{
    join_nccl(e, f, n, jn);
    ids_sent(f, 1, 1);
    fail_gen(&f[0], 1);
    all_ready(f, n, 1);
    ASSERT_EQ(state_of(e), JOB_NCCL);
    ASSERT_EQ(f[0].nnccl, 2);
    ASSERT_EQ(f[0].nccl_gen, 2);
}

/* f[0] and f[1] run a job (--nnodes 2:2, --restart-backoff 2), f[2] the spare; f[0]'s workers
 * fail in generations 1 and 2: the second restart's round waits its backoff (1 s), the job
 * forming generation 3 with every node ready; with n 4, a new node f[3] joins meanwhile (a
 * candidate of the round). Its record: generation 2 stopped, 2 restarts. */
static void forming_in_backoff(struct env *e, struct fake *f, int n)
{
    struct rdzv_join jn = join_of(0, 2, 2, 3);

    jn.restart_backoff_s = 2;
    join_n(e, f, 3, jn);
    for (uint64_t gen = 1; gen <= 2; gen++) {
        fail_gen(&f[0], gen);
        all_ready(f, 3, gen);
    }
    if (n == 4) {
        jn = join_of(3, 2, 2, 3);
        jn.restart_backoff_s = 2;
        ASSERT_OK(join(e, &f[3], &jn));
        ASSERT_FALSE(f[3].spare);
    }
    ASSERT_EQ(state_of(e), JOB_FORMING);
    ASSERT_EQ(f[1].nrounds, 2);
    ASSERT_EQ(f[1].nevents, 2);
}

/* Row E0-9: a node's own agent (with its secret) sends JOIN a second time while its member is
 * connected: refused, "node id 'X' has already joined job 'J'"; its member, a running one or
 * a spare, keeps its connection and place, and nobody hears anything. */
static void test_second_join_of_a_connected_node_is_refused(void)
{
    struct fake f[3] = {0};
    struct env e;
    char err[512];

    env_init(&e, -1);
    join_n(&e, f, 3, join_of(0, 2, 2, 3)); /* node 2 waits as the spare */
    ASSERT_TRUE(f[2].spare);
    for (int i = 0; i < 3; i += 2) {
        struct rdzv_join jn = join_of(i, 2, 2, 3);
        struct fake again = {0};
        char want[128];

        ASSERT_EQ(join_err(&e, &again, &jn, err, sizeof(err)), -EEXIST);
        snprintf(want, sizeof(want), "node id 'node-%d' has already joined job 'job'", i);
        ASSERT_TRUE(strstr(err, want) != NULL);
        ASSERT_EQ(again.njoined, 0);
        ASSERT_NULL(again.m);
    }
    assert_heard(&f[0], 0, 1);
    assert_heard(&f[1], 0, 1);
    assert_heard(&f[2], 0, 0);
    ASSERT_EQ(f[0].njoined + f[2].njoined, 2);
    ASSERT_EQ(job_of(&e)->nmembers, 3);
    ASSERT_EQ(state_of(&e), JOB_RUNNING);
    env_done(&e);
}

/* Row F3, on a healthy rdzvd: while the job (--nnodes 3) forms, node 0's connection closes with
 * no stall of rdzvd before it: the node goes at once (F17), and its agent's JOIN back, with the
 * secret it was given, makes it a candidate again; the round then forms with it. */
static void test_close_while_forming_then_back_is_a_candidate(void)
{
    struct fake f[3] = {0}, back = {0};
    struct rdzv_join jn = join_of(0, 3, 3, 3);
    struct env e;

    env_init(&e, -1);
    join_n(&e, f, 2, jn);
    rdzvd_member_gone(f[0].m);
    ASSERT_EQ(job_of(&e)->nmembers, 1);
    ASSERT_OK(join(&e, &back, &jn)); /* node-0's agent, with its secret */
    ASSERT_EQ(back.njoined, 1);
    ASSERT_FALSE(back.spare);
    ASSERT_EQ(job_of(&e)->nmembers, 2);
    jn = join_of(2, 3, 3, 3);
    ASSERT_OK(join(&e, &f[2], &jn));
    run_ms(&e, 1000); /* the last call */
    ASSERT_EQ(back.nrounds, 1);
    ASSERT_EQ(back.round.nnodes, 3);
    ASSERT_EQ(f[1].round.generation, 1);
    env_done(&e);
}

/* Row F4: while the job forms (here after a restart, in its backoff), a WORKER_EXIT from a
 * member of the last generation, a spare or a new node changes nothing: no restart, nothing
 * charged (the record keeps its restart count), nobody told. */
static void test_worker_exit_while_forming_changes_nothing(void)
{
    struct fake f[4] = {0};
    struct env e;

    env_with_table(&e);
    forming_in_backoff(&e, f, 4);
    assert_record(&e, 2, 2, false);
    for (int i = 0; i < 4; i++)
        for (uint64_t gen = 2; gen <= 3; gen++)
            fail_gen(&f[i], gen);
    ASSERT_EQ(state_of(&e), JOB_FORMING);
    assert_record(&e, 2, 2, false);
    assert_heard(&f[0], 2, 2);
    assert_heard(&f[1], 2, 2);
    assert_heard(&f[2], 0, 0);
    assert_heard(&f[3], 0, 0);
    run_ms(&e, 1500); /* the backoff ends: the round forms, charged nothing more */
    ASSERT_EQ(f[0].nrounds, 3);
    ASSERT_EQ(f[0].round.generation, 3);
    ASSERT_EQ(f[0].round.restart_count, 2);
    assert_record(&e, 3, 2, true);
    env_done_table(&e);
}

/* Row F9: while the job forms, a LEAVE (succeeded, of the last generation or the next) from a
 * member or a spare changes nothing: the round forms as it would, and the job runs on rather
 * than ending "succeeded". */
static void test_leave_while_forming_changes_nothing(void)
{
    struct fake f[3] = {0};
    struct env e;

    env_init(&e, -1);
    forming_in_backoff(&e, f, 3);
    for (int i = 0; i < 3; i++)
        for (uint64_t gen = 2; gen <= 3; gen++)
            rdzvd_member_leave(f[i].m, gen, true);
    ASSERT_EQ(state_of(&e), JOB_FORMING);
    assert_heard(&f[0], 2, 2);
    assert_heard(&f[2], 0, 0);
    run_ms(&e, 1500);
    ASSERT_EQ(state_of(&e), JOB_RUNNING);
    for (int i = 0; i < 2; i++)
        assert_heard(&f[i], 2, 3);
    ASSERT_EQ(f[0].round.generation, 3);
    env_done(&e);
}

/* Row F13: the operator's CANCEL_JOB while the job forms: it ends "cancelled" (exit 143), its
 * end recorded (the record and the admitted node ids go), and every member (the spare and a
 * new candidate too) is told "cancelled by the operator: REASON"; the reply says cancelled. */
static void test_operator_cancel_while_forming(void)
{
    struct fake f[4] = {0};
    char err[256];
    struct env e;

    env_with_table(&e);
    forming_in_backoff(&e, f, 4);
    ASSERT_TRUE(has_record(&e));
    ASSERT_TRUE(admitted(&e, "node-3"));
    ASSERT_OK(rdzvd_jobs_cancel(&e.h, "job", "maintenance", err, sizeof(err)));
    ASSERT_EQ(state_of(&e), JOB_ENDED);
    assert_outcome(f, 4, "cancelled", 143, "cancelled by the operator: maintenance");
    ASSERT_FALSE(has_record(&e));
    ASSERT_FALSE(admitted(&e, "node-0"));
    ASSERT_FALSE(admitted(&e, "node-3"));
    run_ms(&e, 2000); /* the backoff's timer is stopped: no round */
    ASSERT_EQ(f[0].nrounds, 2);
    ASSERT_EQ(f[0].nevents, 3);
    env_done_table(&e);
}

/* Row N1: a new node's JOIN while node rank 0 is asked for the NCCL ids: it is admitted and
 * told JOINED (spare); it waits for the next generation: the ROUNDs go to the round's two
 * nodes only, and node rank 0 is not asked again. */
static void test_join_while_nccl_is_a_spare(void)
{
    struct fake f[2] = {0}, late = {0};
    struct rdzv_join jn = join_of(5, 2, 2, 3);
    struct env e;

    env_with_table(&e);
    join_nccl(&e, f, 2, join_of(0, 2, 2, 3));
    jn.nccl = RDZV_NCCL_AUTO;
    ASSERT_OK(join(&e, &late, &jn));
    ASSERT_EQ(late.njoined, 1);
    ASSERT_TRUE(late.spare);
    ASSERT_FALSE(late.resumed);
    ASSERT_TRUE(admitted(&e, "node-5"));
    ASSERT_EQ(state_of(&e), JOB_NCCL);
    ASSERT_EQ(f[0].nnccl + f[1].nnccl + late.nnccl, 1);
    ids_sent(f, 1, 1);
    assert_heard(&late, 0, 0);
    ASSERT_EQ(job_of(&e)->nmembers, 3);
    env_done_table(&e);
}

/* Row N2: a member's agent resumes (its workers ran generation 1) on a new connection while
 * generation 2 waits for its NCCL ids: its member is taken over, the old connection closed,
 * JOINED (resumed) on the new one; nothing recorded; the ROUND goes to the new connection. */
static void test_resume_while_nccl_takes_the_member_over(void)
{
    char ids[1][RDZV_NCCL_HEX_LEN + 1];
    struct fake f[2] = {0}, back = {0};
    struct rdzv_join jn = resume_of(1, 1, 0, 3);
    struct env e;

    env_with_table(&e);
    nccl_again(&e, f, 2, join_of(0, 2, 2, 3));
    assert_record(&e, 1, 1, false);
    ASSERT_OK(join(&e, &back, &jn));
    ASSERT_EQ(back.njoined, 1);
    ASSERT_TRUE(back.resumed);
    ASSERT_FALSE(back.spare);
    ASSERT_EQ(back.nevents, 0);
    ASSERT_TRUE(f[1].closed);
    ASSERT_NULL(f[1].m);
    ASSERT_TRUE(strstr(f[1].close_reason, "replaced by the agent's new connection") != NULL);
    ASSERT_EQ(job_of(&e)->nmembers, 2);
    ASSERT_EQ(state_of(&e), JOB_NCCL);
    assert_record(&e, 1, 1, false);
    fill_id(ids[0], 'c');
    rdzvd_member_nccl_ids(f[0].m, ids, 1);
    ASSERT_EQ(f[0].round.generation, 2);
    ASSERT_EQ(back.nrounds, 1);
    ASSERT_EQ(back.round.generation, 2);
    ASSERT_EQ(back.round.node_rank, 1);
    ASSERT_EQ(f[1].nrounds, 1); /* the old connection heard nothing more */
    assert_record(&e, 2, 1, true);
    env_done_table(&e);
}

/* Row N13: the operator's CANCEL_JOB while node rank 0 is asked for the NCCL ids: the job ends
 * "cancelled" (exit 143), its record goes, every member (the spare too) is told; its NCCL id
 * timer is stopped (no "failed" after). */
static void test_operator_cancel_while_nccl(void)
{
    struct fake f[3] = {0};
    char err[256];
    struct env e;

    env_with_table(&e);
    nccl_again(&e, f, 3, join_of(0, 2, 2, 3));
    ASSERT_TRUE(has_record(&e));
    ASSERT_OK(rdzvd_jobs_cancel(&e.h, "job", "", err, sizeof(err)));
    ASSERT_EQ(state_of(&e), JOB_ENDED);
    assert_outcome(f, 3, "cancelled", 143, "cancelled by the operator");
    ASSERT_FALSE(has_record(&e));
    ASSERT_FALSE(admitted(&e, "node-2"));
    run_ms(&e, RDZVD_JOB_NCCL_ID_TIMEOUT_MS + 1000);
    for (int i = 0; i < 3; i++)
        ASSERT_TRUE(event_is(&f[i], "cancelled"));
    ASSERT_EQ(f[2].nevents, 1);
    env_done_table(&e);
}

/* Row N7: while node rank 0 is asked for generation 2's NCCL ids, a WORKER_EXIT and a LEAVE of
 * the generation that stopped, and a READY of it again (a late or repeated one) change nothing:
 * the placed members stay placed and not ready. Then generation 2 runs; node 1's worker fails and
 * only node 1 stops: the job waits for node 0's READY. Before, the repeated READY marked node 0
 * ready while it was placed, and at the next restart the job counted it as stopped: it asked node
 * rank 0 for generation 3's ids while node 0's generation-2 workers still ran. */
static void test_stale_reports_while_nccl_change_nothing(void)
{
    struct rdzv_worker_exit w = {.generation = 1, .exit_code = 1};
    struct fake f[2] = {0};
    char err[256];
    struct env e;

    env_init(&e, -1);
    nccl_again(&e, f, 2, join_of(0, 2, 2, 3));
    w.rank = f[1].round.rank_offset;
    (void)rdzvd_member_worker_exit(f[1].m, &w, err, sizeof(err));
    rdzvd_member_leave(f[1].m, 1, true);
    rdzvd_member_ready(f[0].m, 1); /* again */
    ASSERT_EQ(state_of(&e), JOB_NCCL);
    ASSERT_FALSE(f[0].m->ready);
    ASSERT_EQ(job_of(&e)->nready, 0);
    assert_heard(&f[0], 1, 1);
    ids_sent(f, 2, 2);
    fail_gen(&f[1], 2);
    ASSERT_TRUE(event_is(&f[0], "restart"));
    rdzvd_member_ready(f[1].m, 2);
    ASSERT_EQ(state_of(&e), JOB_STOPPING); /* node 0 has not stopped */
    ASSERT_EQ(f[0].nnccl, 2);
    env_done(&e);
}

/* Row N14: node rank 0 sends no NCCL id within 60 s: the job ends "failed" (exit 1), its
 * record goes, and every member is told "node rank 0 (H) sent no NCCL id within 60 s"; not a
 * moment before. */
static void test_nccl_id_timeout_fails_the_job(void)
{
    struct fake f[3] = {0};
    struct rdzv_join jn = join_of(0, 2, 2, 3);
    struct env e;

    env_with_table(&e);
    jn.heartbeat_timeout_ms = 600000; /* nobody is lost meanwhile */
    nccl_again(&e, f, 3, jn);
    run_ms(&e, RDZVD_JOB_NCCL_ID_TIMEOUT_MS - 1000);
    ASSERT_EQ(state_of(&e), JOB_NCCL);
    assert_heard(&f[0], 1, 1);
    assert_heard(&f[2], 0, 0);
    run_ms(&e, 2000);
    ASSERT_EQ(state_of(&e), JOB_ENDED);
    assert_outcome(f, 3, "failed", 1, "node rank 0 (host0) sent no NCCL id within 60 s");
    ASSERT_FALSE(has_record(&e));
    ASSERT_FALSE(admitted(&e, "node-0"));
    env_done_table(&e);
}

/* Row N16: while node rank 0 is asked for the NCCL ids, a spare's connection closes, and
 * another spare sends no heartbeat for the heartbeat timeout: each goes (the silent one's
 * connection closed), and nothing else: the round is not undone, node rank 0 not asked again,
 * and the ids then reach the round's two nodes. */
static void test_spare_lost_while_nccl(void)
{
    struct fake f[4] = {0};
    struct env e;

    env_init(&e, -1);
    spares_lost(&e, f, true);
    ASSERT_EQ(job_of(&e)->generation, 1);
    ASSERT_EQ(f[0].nnccl, 1);
    assert_heard(&f[0], 0, 0);
    assert_heard(&f[1], 0, 0);
    ids_sent(f, 1, 1);
    env_done(&e);
}

/* Row R19: a spare's LEAVE (succeeded) while the job runs changes nothing but that node, which
 * goes when its connection closes (R24): it counts for no node of the generation (the job does
 * not end when one member has left), and nobody hears it. */
static void test_spare_leave_while_running(void)
{
    struct fake f[3] = {0};
    struct env e;

    env_init(&e, -1);
    join_n(&e, f, 3, join_of(0, 2, 2, 3)); /* node 2 waits as the spare */
    ASSERT_TRUE(f[2].spare);
    rdzvd_member_leave(f[2].m, 1, true);
    rdzvd_member_leave(f[0].m, 1, true);
    ASSERT_EQ(state_of(&e), JOB_RUNNING);
    for (int i = 0; i < 2; i++)
        assert_heard(&f[i], 0, 1);
    assert_heard(&f[2], 0, 0);
    rdzvd_member_gone(f[2].m); /* its connection closes: it goes */
    ASSERT_EQ(job_of(&e)->nmembers, 2);
    ASSERT_EQ(f[0].nevents + f[1].nevents, 0);
    rdzvd_member_leave(f[1].m, 1, true); /* the generation's last node: done */
    assert_outcome(f, 2, "succeeded", 0, "every worker of every node exited 0");
    env_done(&e);
}

/* Row R24: while the job runs, a spare's connection closes, and another spare sends no
 * heartbeat for the heartbeat timeout: each goes (the silent one's connection closed), and
 * nothing else: no restart, nothing recorded, the members hear nothing. */
static void test_spare_lost_while_running(void)
{
    struct fake f[4] = {0};
    struct env e;

    env_with_table(&e);
    spares_lost(&e, f, false);
    for (int i = 0; i < 2; i++)
        assert_heard(&f[i], 0, 1);
    assert_record(&e, 1, 0, true);
    env_done_table(&e);
}

/* Row S1: a new node's JOIN while the job stops: it is admitted, told JOINED (spare) and not
 * the restart, and is ready at once: the members' READYs alone complete the stop, and it takes
 * a place in the next generation (--nnodes 2:3). */
static void test_join_while_stopping_is_a_ready_spare(void)
{
    struct fake f[3] = {0};
    struct rdzv_join jn = join_of(0, 2, 3, 3);
    struct env e;

    env_with_table(&e);
    jn.last_call_ms = 10;
    join_n(&e, f, 2, jn);
    run_ms(&e, 100); /* last call: generation 1 on 2 nodes */
    ASSERT_EQ(f[0].round.nnodes, 2);
    fail_gen(&f[0], 1);
    ASSERT_EQ(state_of(&e), JOB_STOPPING);
    jn = join_of(2, 2, 3, 3);
    jn.last_call_ms = 10;
    ASSERT_OK(join(&e, &f[2], &jn));
    ASSERT_EQ(f[2].njoined, 1);
    ASSERT_TRUE(f[2].spare);
    ASSERT_TRUE(admitted(&e, "node-2"));
    assert_heard(&f[2], 0, 0);
    ASSERT_EQ(state_of(&e), JOB_STOPPING);
    all_ready(f, 2, 1); /* the members only */
    for (int i = 0; i < 3; i++) {
        ASSERT_EQ(f[i].round.generation, 2);
        ASSERT_EQ(f[i].round.nnodes, 3);
    }
    env_done_table(&e);
}

/* Row S10: while the job stops, a LEAVE (succeeded) from a member or the spare changes
 * nothing: the stop still waits for the members' READYs, and then the next generation forms
 * (the job does not end "succeeded"). */
static void test_leave_while_stopping_changes_nothing(void)
{
    struct fake f[3] = {0};
    struct env e;

    env_init(&e, -1);
    stopping(&e, f, 3, join_of(0, 2, 2, 3));
    for (int i = 0; i < 3; i++)
        for (uint64_t gen = 1; gen <= 2; gen++)
            rdzvd_member_leave(f[i].m, gen, true);
    ASSERT_EQ(state_of(&e), JOB_STOPPING);
    for (int i = 0; i < 2; i++)
        assert_heard(&f[i], 1, 1);
    assert_heard(&f[2], 0, 0);
    rdzvd_member_ready(f[0].m, 1);
    ASSERT_EQ(state_of(&e), JOB_STOPPING);
    rdzvd_member_ready(f[1].m, 1);
    ASSERT_EQ(state_of(&e), JOB_RUNNING);
    for (int i = 0; i < 2; i++) {
        assert_heard(&f[i], 1, 2);
        ASSERT_EQ(f[i].round.generation, 2);
    }
    env_done(&e);
}

/* Row S15: while the job stops (not cancelled), its last member is lost (one connection
 * closes, the other falls silent). With a job table the job leaves memory, told to nobody: its
 * record (and the node ids it admitted) waits for its nodes, listed "waiting". Without one
 * it ends "failed" with its last node, told to that node, and its end is kept (listed ended):
 * a late resume is told the end, never rebuilds the job from its word. */
static void test_last_member_lost_while_stopping(void)
{
    for (int table = 0; table < 2; table++) {
        struct fake f[2] = {0};
        struct rdzv_join jn = join_of(0, 2, 2, 3);
        struct env e;

        if (table)
            env_with_table(&e);
        else
            env_init(&e, -1);
        e.h.ended = &e.ended;
        e.h.keep_waiting = rdzvd_waiting_jobs_add;
        e.h.keep_ended = rdzvd_ended_jobs_add;
        rdzvd_ended_jobs_free(&e.ended);
        rdzvd_ended_jobs_init(&e.ended, 3600 * 1000, 16);
        jn.heartbeat_timeout_ms = 5000;
        stopping(&e, f, 2, jn);
        rdzvd_member_gone(f[0].m);
        ASSERT_EQ(state_of(&e), JOB_STOPPING);
        run_ms(&e, 5000 * RDZVD_JOB_INIT_GRACE_FACTOR + 1000); /* node 1's heartbeat lapses */
        ASSERT_TRUE(f[1].closed);
        ASSERT_TRUE(strstr(f[1].close_reason, "sent no heartbeat") != NULL);
        ASSERT_EQ(f[0].nevents, 1); /* the restart only */
        ASSERT_EQ(f[1].nevents, table ? 1 : 2); /* the restart; without a table, the end */
        if (!table) {
            ASSERT_TRUE(event_is(&f[1], "failed"));
            ASSERT_TRUE(strstr(f[1].event.summary, "sent no heartbeat for 5.0 s; it was the "
                                                   "job's last node") != NULL);
        }
        ASSERT_EQ(njobs(&e), !table); /* listed ended, or (below) waiting in its record */
        ASSERT_TRUE(rdzv_list_empty(&e.jobs));
        ASSERT_EQ(admitted(&e, "node-0"), table);
        if (table) {
            struct rdzv_status st = {0};

            assert_record(&e, 1, 1, false);
            ASSERT_OK(rdzvd_status_add_waiting(&st, e.table, &e.jobs, &e.ended, jt_now_ms()));
            ASSERT_EQ(st.n_jobs, 1);
            ASSERT_EQ(strcmp(st.jobs[0].state, "waiting"), 0);
            ASSERT_EQ(st.jobs[0].generation, 1);
            ASSERT_EQ(st.jobs[0].restart_count, 1);
            rdzv_status_free(&st);
        }
        if (table)
            env_done_table(&e);
        else
            env_done(&e);
    }
}

/* Row S17: an NCCL_ID while the job stops is stale whoever sends it, of the generation that
 * stops or the next: not taken (rdzvd-job-wire.c drops what rdzvd_member_nccl_wanted
 * refuses); once the next round closes, node rank 0's answer for it is. */
static void test_nccl_id_while_stopping_is_stale(void)
{
    struct fake f[3] = {0};
    struct env e;

    env_init(&e, -1);
    join_nccl(&e, f, 3, join_of(0, 2, 2, 3));
    ids_sent(f, 1, 1);
    fail_gen(&f[0], 1);
    ASSERT_EQ(state_of(&e), JOB_STOPPING);
    for (int i = 0; i < 3; i++)
        for (uint64_t gen = 0; gen <= 2; gen++)
            ASSERT_FALSE(rdzvd_member_nccl_wanted(f[i].m, gen));
    ASSERT_EQ(state_of(&e), JOB_STOPPING);
    ASSERT_EQ(f[0].nnccl, 1);
    all_ready(f, 3, 1);
    ASSERT_EQ(state_of(&e), JOB_NCCL);
    ASSERT_TRUE(rdzvd_member_nccl_wanted(f[0].m, 2));
    env_done(&e);
}

/* Row W0: rdzvd restarts while the job forms its first round: nothing is rebuilt (there is no
 * record), but the node ids it admitted are kept: a JOIN naming one without its secret is
 * refused, and its agents' JOINs, with their secrets, make the job anew (JOINED, the same
 * secrets) and its round forms. */
static void test_restart_while_forming_keeps_admitted_ids(void)
{
    char err[512], secrets[JT_NODES][RDZV_SECRET_HEX + 1];
    struct fake f[3] = {0};
    struct rdzv_join jn = join_of(0, 3, 3, 3);
    struct env e;
    int fd;

    env_with_table(&e);
    fd = e.h.state_dirfd;
    join_n(&e, f, 2, jn); /* 2 of 3: forming */
    ASSERT_EQ(state_of(&e), JOB_FORMING);
    memcpy(secrets, e.secrets, sizeof(secrets)); /* what the agents hold */
    env_done(&e);
    env_init(&e, fd);
    rdzvd_jobs_rebuild(&e.h);
    ASSERT_EQ(njobs(&e), 0);
    ASSERT_FALSE(has_record(&e));
    ASSERT_TRUE(admitted(&e, "node-0") && admitted(&e, "node-1"));
    memset(&f[0], 0, sizeof(f[0]));
    ASSERT_EQ(join_err(&e, &f[0], &jn, err, sizeof(err)), -EPERM); /* no secret */
    ASSERT_TRUE(strstr(err, "node id 'node-0'") != NULL);
    ASSERT_EQ(njobs(&e), 0);
    memcpy(e.secrets, secrets, sizeof(secrets));
    memset(f, 0, sizeof(f));
    join_n(&e, f, 3, jn);
    for (int i = 0; i < 3; i++) {
        ASSERT_EQ(f[i].njoined, 1);
        ASSERT_FALSE(f[i].spare);
        ASSERT_EQ(f[i].nrounds, 1);
        ASSERT_EQ(f[i].round.generation, 1);
    }
    for (int i = 0; i < 2; i++)
        ASSERT_EQ(strcmp(f[i].secret, secrets[i]), 0);
    env_done_table(&e);
}

int main(void)
{
    rdzv_log_setup("test-job-policy", RDZV_LOG_ERROR);
    TEST(test_second_join_of_a_connected_node_is_refused);
    TEST(test_close_while_forming_then_back_is_a_candidate);
    TEST(test_worker_exit_while_forming_changes_nothing);
    TEST(test_leave_while_forming_changes_nothing);
    TEST(test_operator_cancel_while_forming);
    TEST(test_join_while_nccl_is_a_spare);
    TEST(test_resume_while_nccl_takes_the_member_over);
    TEST(test_operator_cancel_while_nccl);
    TEST(test_stale_reports_while_nccl_change_nothing);
    TEST(test_nccl_id_timeout_fails_the_job);
    TEST(test_spare_lost_while_nccl);
    TEST(test_spare_leave_while_running);
    TEST(test_spare_lost_while_running);
    TEST(test_join_while_stopping_is_a_ready_spare);
    TEST(test_leave_while_stopping_changes_nothing);
    TEST(test_last_member_lost_while_stopping);
    TEST(test_nccl_id_while_stopping_is_stale);
    TEST(test_restart_while_forming_keeps_admitted_ids);
    return tap_done();
}
