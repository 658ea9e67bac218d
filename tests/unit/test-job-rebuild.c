/* SPDX-License-Identifier: Apache-2.0 */
/* test-job-rebuild.c: a job rdzvd rebuilds after a restart (daemon/job/rdzvd-job-join.c), from
 * its record in --state-dir (as it starts, for a running generation) or from its agents'
 * resumes, driven with fake members (jobtest.h): the generation and restart count kept, spares
 * placed only once the members are back, the record's settings, the rebuild window, and the
 * nodes that do not come back; the resume claims checked against the job, its record (the nodes
 * it names by node rank) and the members' secrets. */
#include <errno.h>
#include <inttypes.h>

#include "common/rdzv-log.h"
#include "daemon/job/rdzvd-job-ends.h"
#include "daemon/job/rdzvd-job-impl.h"
#include "jobtest.h"

static void test_resume_after_daemon_restart_keeps_generation_and_restarts(void)
{
    struct env e;
    struct fake f[2] = {0};
    struct rdzv_worker_exit w = {.generation = 5, .exit_code = 1};

    env_init(&e, -1);
    for (int i = 0; i < 2; i++) {
        struct rdzv_join jn = resume_of(i, 5, 2, 3);

        ASSERT_OK(join(&e, &f[i], &jn));
        ASSERT_TRUE(f[i].resumed);
        ASSERT_FALSE(f[i].spare);
        ASSERT_EQ(f[i].joined_gen, 5);
        ASSERT_EQ(f[i].nevents, 0); /* not told to stop */
    }
    ASSERT_EQ(e.stores_open, 1);
    ASSERT_EQ(e.asked_port, 41000); /* the store back where its workers look */
    jt_worker_exit(&f[0], &w);
    ASSERT_EQ(f[1].event.generation, 5);
    all_ready(f, 2, 5);
    ASSERT_EQ(f[0].round.generation, 6);
    ASSERT_EQ(f[0].round.restart_count, 3);
    ASSERT_EQ(f[0].round.node_rank, 0);
    ASSERT_EQ(f[1].round.node_rank, 1);
    env_done(&e);
}

/* A state dir holding the record of job "job" (--nnodes 2:2, 4 workers, store port 41000). */
static int state_dir_with_record(char *path, size_t len, uint64_t gen, int64_t restarts,
                                 int64_t max_restarts, bool running)
{
    struct rdzvd_job_record rec = {.min = 2,
                                   .max = 2,
                                   .max_restarts = max_restarts,
                                   .generation = gen,
                                   .restart_count = restarts,
                                   .running = running,
                                   .nnodes = running ? 2 : 0,
                                   .world_size = running ? 4 : 0,
                                   .store_port = running ? 41000 : 0};
    int fd = jt_state_dir(path, len);

    snprintf(rec.run_id, sizeof(rec.run_id), "job");
    jt_record_save(fd, &rec);
    return fd;
}

/* The spare reconnects to a restarted rdzvd before the members do. */
static void test_spare_first_after_restart_waits_for_the_members(void)
{
    struct rdzvd_job_record rec;
    struct fake f[3] = {0};
    struct rdzv_join jn;
    char path[64];
    struct env e;
    int fd = state_dir_with_record(path, sizeof(path), 1, 0, 0, true);

    env_init(&e, fd);
    jt_remember_secrets(&e, "job");
    jn = join_of(2, 2, 2, 0);
    ASSERT_OK(join(&e, &f[2], &jn));
    ASSERT_TRUE(f[2].spare);
    ASSERT_EQ(f[2].joined_gen, 1);
    ASSERT_EQ(e.asked_port, 41000);
    for (int i = 0; i < 2; i++) {
        jn = resume_of(i, 1, 0, 0);
        ASSERT_OK(join(&e, &f[i], &jn));
        ASSERT_TRUE(f[i].resumed);
        ASSERT_FALSE(f[i].spare);
        ASSERT_EQ(f[i].nevents, 0); /* its workers keep running */
    }
    ASSERT_EQ(e.stores_open, 1);
    ASSERT_EQ(f[2].nrounds, 0);
    jt_leave(f[0].m, 1, true);
    jt_leave(f[1].m, 1, true);
    for (int i = 0; i < 3; i++)
        ASSERT_BYTES_STR(f[i].event.type, strlen(f[i].event.type), "succeeded");
    ASSERT_EQ(rdzvd_job_record_get(e.table, "job", &rec), -ENOENT); /* over: forgotten */
    env_done(&e);
    jt_state_dir_done(fd, path);
}

/* P1, P2: rdzvd restarted on its --state-dir and rebuilt a running job; before its
 * agents are back, a stranger with the agents' token JOINs it (a spare) and sends CANCEL. It
 * leaves, and the job keeps its record: the nodes' agents resume into their generation with the
 * secrets the record holds. Before, the job was ended "cancelled" and its record deleted (secret
 * hashes, restart count, nodes put aside); the members then resumed into a job rebuilt from
 * their own claims, with newly minted secrets. */
static void test_outsider_cancel_keeps_the_record_of_a_job_away(void)
{
    struct rdzvd_job_record rec;
    struct fake f[2] = {0}, stranger = {0};
    struct rdzv_join jn;
    char path[64], secret[2][RDZV_SECRET_HEX + 1];
    struct env e;
    int fd = state_dir_with_record(path, sizeof(path), 1, 1, 3, true);

    env_init(&e, fd);
    jt_remember_secrets(&e, "job");
    jt_rebuild(&e.h);
    jn = join_of(9, 2, 2, 3);
    ASSERT_OK(join(&e, &stranger, &jn));
    ASSERT_TRUE(stranger.spare);
    jt_member_cancel(stranger.m, 15, "", "");
    ASSERT_TRUE(event_is(&stranger, "left"));
    ASSERT_OK(rdzvd_job_record_get(e.table, "job", &rec));
    ASSERT_EQ(rec.generation, 1);
    ASSERT_EQ(rec.restart_count, 1);
    rdzvd_job_record_clear(&rec);
    for (int i = 0; i < 2; i++) {
        snprintf(secret[i], sizeof(secret[i]), "%s", e.secrets[i]);
        jn = resume_of(i, 1, 1, 3);
        ASSERT_OK(join(&e, &f[i], &jn));
        ASSERT_TRUE(f[i].resumed);
        ASSERT_FALSE(f[i].spare);
        ASSERT_EQ(f[i].nevents, 0); /* its workers keep running */
        ASSERT_BYTES_STR(f[i].secret, strlen(f[i].secret), secret[i]); /* the recorded one */
    }
    env_done(&e);
    env_forget_table(fd);
    jt_state_dir_done(fd, path);
}

/* Found by the explorer (depth 7, --state-dir): the operator cancels a job while it stops (node
 * 0's connection dropped, node 1 still stopping its workers). The job ends at once, its end
 * recorded before anyone hears it; rdzvd restarting then rebuilds nothing, so no new node forms
 * a generation of it. Before, the cancel lived in memory until every member stopped: the restart
 * rebuilt the job from its record, and the next nodes to JOIN formed generation 2. */
static void test_operator_cancel_while_stopping_is_recorded_at_once(void)
{
    struct rdzvd_job_record rec;
    struct fake f[2] = {0};
    char path[64], err[256];
    struct env e;
    int fd = jt_state_dir(path, sizeof(path));

    env_init(&e, fd);
    join_n(&e, f, 2, join_of(0, 2, 2, 3));
    jt_gone(f[0].m); /* the job stops; node 1 sends no READY yet */
    ASSERT_TRUE(event_is(&f[1], "restart"));
    ASSERT_OK(jt_jobs_cancel(&e.h, "job", "maintenance", err, sizeof(err)));
    ASSERT_TRUE(event_is(&f[1], "cancelled"));
    ASSERT_TRUE(strstr(f[1].event.summary, "cancelled by the operator: maintenance") != NULL);
    ASSERT_EQ(f[1].nrounds, 1);
    ASSERT_EQ(rdzvd_job_record_get(e.table, "job", &rec), -ENOENT);
    jt_ready(f[1].m, 1); /* its workers stopped: the job has ended */
    ASSERT_EQ(f[1].nrounds, 1);
    env_done(&e);
    env_init(&e, fd); /* rdzvd restarts on its state directory */
    jt_rebuild(&e.h);
    ASSERT_EQ(njobs(&e), 0);
    env_done(&e);
    env_forget_table(fd);
    jt_state_dir_done(fd, path);
}

struct end_count {
    int n;
    char first[RDZV_ID_MAX + 1], last[RDZV_ID_MAX + 1];
};

/* For rdzvd_job_ends_foreach: count the ends, the first and the last run id. */
static int count_end(const struct rdzvd_job_end *e, void *ud)
{
    struct end_count *c = ud;

    if (!c->n++)
        snprintf(c->first, sizeof(c->first), "%s", e->run_id);
    snprintf(c->last, sizeof(c->last), "%s", e->run_id);
    return 0;
}

/* e on the state directory fd, keeping ended jobs as rdzvd does (--keep-ended 1 h) and reading
 * its recorded ends back; with f, a job (--nnodes 2) runs on f[0] and f[1]. */
static void env_keeping_ended(struct env *e, int fd, struct fake f[2])
{
    env_init(e, fd);
    rdzvd_ended_jobs_free(&e->ended);
    rdzvd_ended_jobs_init(&e->ended, 3600 * 1000, 16);
    e->h.ended = &e->ended;
    e->h.keep_ended = rdzvd_ended_jobs_add;
    e->h.keep_end = rdzvd_ended_jobs_add_recorded;
    if (f)
        join_n(e, f, 2, join_of(0, 2, 2, 3));
    else
        jt_rebuild(&e->h);
}

/* Policy W6 (P6 across a restart): a job ends (the operator cancels it) while node 1's agent is
 * cut off; rdzvd restarts on its state directory. Node 1's agent, back, resumes its generation:
 * it is told how the job ended, not taken back into a job rebuilt from its word, and the job is
 * listed as ended. An agent started after that end (a requeue under the same id) runs a new
 * job. Before, the ENDED decision deleted the record and the ended jobs lived in memory only: the
 * resume rebuilt the job from its claim. */
static void test_ended_job_stays_ended_across_a_restart(void)
{
    struct fake f[2] = {0}, back = {0};
    struct rdzv_join jn;
    char path[64], err[512];
    struct env e;
    int fd = jt_state_dir(path, sizeof(path));

    env_keeping_ended(&e, fd, f);
    ASSERT_OK(jt_jobs_cancel(&e.h, "job", "maintenance", err, sizeof(err)));
    ASSERT_TRUE(event_is(&f[0], "cancelled"));
    env_done(&e);
    env_keeping_ended(&e, fd, NULL); /* rdzvd restarts */
    ASSERT_EQ(njobs(&e), 1); /* listed as ended */
    jn = resume_of(1, 1, 0, 3);
    jn.age_ms = 60000; /* started before the end */
    ASSERT_TRUE(join_err(&e, &back, &jn, err, sizeof(err)) < 0);
    ASSERT_TRUE(strstr(err, "has ended") != NULL);
    ASSERT_TRUE(strstr(err, "cancelled by the operator: maintenance") != NULL);
    ASSERT_EQ(back.nrounds, 0);
    run_ms(&e, 1000);
    jn = join_of(0, 2, 2, 3); /* a requeue: its agent started after the end */
    jn.age_ms = 500;
    memset(&back, 0, sizeof(back));
    ASSERT_OK(join(&e, &back, &jn));
    env_done(&e);
    env_forget_table(fd);
    jt_state_dir_done(fd, path);
}

/* Found by the explorer (the job's agents coming back after its end, P6): a job whose agents
 * all went waits for its nodes, its record kept; the operator cancels it; node 0's agent comes
 * back and resumes generation 1. It is told the job was cancelled, not taken back into a job
 * rebuilt from its word; so after an rdzvd restart too. Before, the cancel deleted the record and
 * kept no outcome anywhere. */
static void test_cancelled_waiting_job_stays_ended(void)
{
    struct fake f[2] = {0}, back = {0};
    struct rdzv_join jn = resume_of(0, 1, 0, 3);
    struct rdzvd_job_record rec;
    char path[64], err[512];
    struct env e;
    int fd = jt_state_dir(path, sizeof(path));

    env_keeping_ended(&e, fd, f);
    jt_gone(f[0].m);
    jt_gone(f[1].m); /* the job waits for its nodes, not in memory */
    ASSERT_NULL(rdzvd_job_view(&e.jobs, "job"));
    ASSERT_OK(rdzvd_job_record_get(e.table, "job", &rec));
    rdzvd_job_record_clear(&rec);
    ASSERT_OK(jt_jobs_cancel(&e.h, "job", "drained", err, sizeof(err)));
    for (int restart = 0; restart < 2; restart++) {
        if (restart) {
            env_done(&e);
            env_keeping_ended(&e, fd, NULL);
        }
        memset(&back, 0, sizeof(back));
        ASSERT_TRUE(join_err(&e, &back, &jn, err, sizeof(err)) < 0);
        ASSERT_TRUE(strstr(err, "has ended: it cancelled") != NULL);
        ASSERT_TRUE(strstr(err, "cancelled by the operator: drained") != NULL);
        ASSERT_EQ(back.nrounds, 0);
    }
    env_done(&e);
    env_forget_table(fd);
    jt_state_dir_done(fd, path);
}

/* The job table keeps the newest RDZVD_JOB_ENDS_KEPT ends, oldest first; one run id ending again
 * is kept once, as the newest. */
static void test_ended_jobs_kept_are_bounded(void)
{
    static const struct rdzv_limits lim = RDZV_LIMITS_DEFAULT;
    struct rdzvd_job_end end = {.type = "failed", .exit_code = 1, .generation = 2};
    struct rdzvd_store *t;
    struct end_count c = {0};

    ASSERT_OK(rdzvd_store_new(&lim, NULL, &t));
    for (int i = 0; i < RDZVD_JOB_ENDS_KEPT + 10; i++) {
        snprintf(end.run_id, sizeof(end.run_id), "job%d", i);
        end.ended_s = 1000 + i;
        ASSERT_OK(rdzvd_job_end_keep(t, &end, RDZVD_JOB_ENDS_KEPT));
    }
    snprintf(end.run_id, sizeof(end.run_id), "job20"); /* again: the newest */
    ASSERT_OK(rdzvd_job_end_keep(t, &end, RDZVD_JOB_ENDS_KEPT));
    ASSERT_OK(rdzvd_job_ends_foreach(t, count_end, &c));
    ASSERT_EQ(c.n, RDZVD_JOB_ENDS_KEPT);
    ASSERT_BYTES_STR(c.first, strlen(c.first), "job10"); /* 0..9 dropped; 20 moved last */
    ASSERT_BYTES_STR(c.last, strlen(c.last), "job20");
    rdzvd_store_free(t);
}

/* A record of a stopped generation: the next one numbers on from it, with the restart count,
 * and its store never replays a journal left under its name. */
static void test_restore_numbers_on_and_drops_stale_journals(void)
{
    struct rdzvd_job_record rec;
    struct fake f[2] = {0};
    char path[64], stale[96];
    struct env e;
    int fd = state_dir_with_record(path, sizeof(path), 3, 2, 5, false), sfd;

    ASSERT_OK(rdzvd_job_state_name("job", 4, stale, sizeof(stale)));
    strcat(stale, ".journal");
    sfd = openat(fd, stale, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    ASSERT_TRUE(sfd >= 0);
    close(sfd);
    env_init(&e, fd);
    for (int i = 0; i < 2; i++) {
        struct rdzv_join jn = join_of(i, 2, 2, 5);

        ASSERT_OK(join(&e, &f[i], &jn));
    }
    ASSERT_EQ(f[0].round.generation, 4);
    ASSERT_EQ(f[0].round.restart_count, 2);
    ASSERT_TRUE(faccessat(fd, stale, F_OK, 0) < 0 && errno == ENOENT);
    ASSERT_OK(rdzvd_job_record_get(e.table, "job", &rec));
    ASSERT_EQ(rec.generation, 4);
    ASSERT_TRUE(rec.running);
    rdzvd_job_record_clear(&rec);
    env_done(&e);
    jt_state_dir_done(fd, path);
}

/* A job rebuilt from its record runs by the settings it was started with, kept in the record,
 * not by those of the agent that comes back first; and its next record keeps them. An agent with
 * another --recovery is refused, as it would be by the job in memory. A record of an older rdzvd
 * (no settings) takes the agent's, as before. */
static void test_rebuilt_job_runs_by_its_recorded_settings(void)
{
    struct rdzvd_job_record rec = {.min = 2, .max = 2, .max_restarts = 3, .generation = 2,
                                   .has_settings = true,
                                   .settings = {.last_call_ms = 1500,
                                                .heartbeat_timeout_ms = 7000,
                                                .join_timeout_ms = 90000,
                                                .bad_node_failures = 4,
                                                .bad_node_window_s = 600,
                                                .restart_backoff_s = 9,
                                                .straggler_factor = 2.5,
                                                .straggler_window_ms = 20000,
                                                .straggler_aside = true}};
    struct fake f[2] = {0};
    const struct rdzvd_job *j;
    struct rdzv_join jn;
    char path[64], err[512];
    struct env e;
    int fd = jt_state_dir(path, sizeof(path));

    snprintf(rec.run_id, sizeof(rec.run_id), "job");
    jt_record_save(fd, &rec);
    env_init(&e, fd);
    jn = join_of(0, 2, 2, 3);
    jn.inplace = true;
    ASSERT_EQ(join_err(&e, &f[0], &jn, err, sizeof(err)), -EINVAL);
    ASSERT_TRUE(strstr(err, "was started with --recovery restart") != NULL);
    ASSERT_EQ(njobs(&e), 0);
    for (int i = 0; i < 2; i++) { /* the defaults of join_of: other settings than the record's */
        jn = join_of(i, 2, 2, 3);
        ASSERT_OK(join(&e, &f[i], &jn));
    }
    j = rdzvd_job_view(&e.jobs, "job");
    ASSERT_NOT_NULL(j);
    ASSERT_EQ(j->last_call_ms, 1500);
    ASSERT_EQ(j->hb_timeout_ms, 7000);
    ASSERT_EQ(j->join_timeout_ms, 90000);
    ASSERT_EQ(j->bad_node_failures, 4);
    ASSERT_EQ(j->bad_node_window_ms, 600000);
    ASSERT_EQ(j->backoff_max_ms, 9000);
    ASSERT_TRUE(j->straggler_factor == 2.5 && j->straggler_window_ms == 20000);
    ASSERT_TRUE(j->straggler_aside);
    ASSERT_EQ(f[0].round.generation, 3);
    rdzvd_job_record_clear(&rec);
    ASSERT_OK(rdzvd_job_record_get(e.table, "job", &rec));
    ASSERT_TRUE(rec.has_settings);
    ASSERT_EQ(rec.settings.heartbeat_timeout_ms, 7000);
    ASSERT_EQ(rec.settings.restart_backoff_s, 9);
    rdzvd_job_record_clear(&rec);
    env_done(&e);
    jt_state_dir_done(fd, path);

    fd = state_dir_with_record(path, sizeof(path), 2, 0, 3, false); /* no settings */
    env_init(&e, fd);
    jn = join_of(0, 2, 2, 3);
    ASSERT_OK(join(&e, &f[0], &jn));
    j = rdzvd_job_view(&e.jobs, "job");
    ASSERT_NOT_NULL(j);
    ASSERT_EQ(j->hb_timeout_ms, jn.heartbeat_timeout_ms);
    ASSERT_EQ(j->last_call_ms, jn.last_call_ms);
    env_done(&e);
    jt_state_dir_done(fd, path);
}

/* rdzvd starts (or a replica leads) with the record of a running generation: the job is in
 * memory at once, running that generation, before any agent is back; its store reopens on its
 * recorded port when the first agent is back (no descriptor held before any agent comes), which
 * cuts the window to two heartbeat timeouts, and the
 * node that does not come back within it is lost. A record between generations waits for its
 * agents. */
static void test_running_record_is_rebuilt_at_start(void)
{
    struct rdzvd_job_record rec = jt_running_record(4);
    struct rdzv_join jn;
    struct fake f = {0};
    const struct rdzvd_job *j;
    char path[64], err[256], journal[96];
    struct env e;
    int fd = jt_state_dir(path, sizeof(path)), jfd;

    jt_record_save(fd, &rec);
    snprintf(rec.run_id, sizeof(rec.run_id), "cancelled");
    jt_record_save(fd, &rec);
    snprintf(rec.run_id, sizeof(rec.run_id), "idle"); /* dropped with no member by env_done */
    jt_record_save(fd, &rec);
    snprintf(rec.run_id, sizeof(rec.run_id), "between");
    rec.running = false;
    jt_record_save(fd, &rec);
    ASSERT_OK(rdzvd_job_state_name("cancelled", 4, journal, sizeof(journal)));
    strcat(journal, ".journal");
    jfd = openat(fd, journal, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    ASSERT_TRUE(jfd >= 0);
    close(jfd);
    env_init(&e, fd);
    jt_remember_secrets(&e, "job");
    jt_rebuild(&e.h);
    ASSERT_EQ(njobs(&e), 3);
    ASSERT_NULL(rdzvd_job_view(&e.jobs, "between"));
    /* The operator cancels one nobody came back to: it ends, leaves memory and its record, and
     * the journal of its store, never reopened, goes with it. */
    ASSERT_OK(faccessat(fd, journal, F_OK, 0));
    ASSERT_OK(jt_jobs_cancel(&e.h, "cancelled", "", err, sizeof(err)));
    ASSERT_TRUE(faccessat(fd, journal, F_OK, 0) < 0 && errno == ENOENT);
    ASSERT_NULL(rdzvd_job_view(&e.jobs, "cancelled"));
    ASSERT_EQ(rdzvd_job_record_get(e.table, "cancelled", &rec), -ENOENT);
    ASSERT_EQ(njobs(&e), 2);
    j = rdzvd_job_view(&e.jobs, "job");
    ASSERT_NOT_NULL(j);
    ASSERT_EQ(j->state, JOB_RUNNING);
    ASSERT_EQ(j->generation, 4);
    ASSERT_EQ(j->restart_count, 1);
    ASSERT_EQ(j->nmembers, 0);
    ASSERT_EQ(e.stores_open, 0); /* none until an agent of the job is back */
    ASSERT_TRUE(jt_timer_due_in(&j->timer) > 60); /* two heartbeat timeouts and 3 s */
    jt_rebuild(&e.h); /* in memory already: not built twice */
    ASSERT_EQ(njobs(&e), 2);
    jn = resume_of(0, 4, 1, 3);
    ASSERT_OK(join(&e, &f, &jn));
    ASSERT_TRUE(f.resumed);
    ASSERT_EQ(f.nevents, 0);
    ASSERT_EQ(e.stores_open, 1); /* its store, on the port its record names */
    ASSERT_EQ(e.asked_port, 41000);
    ASSERT_TRUE(jt_timer_due_in(&j->timer) <= 60);
    {
        struct rdzv_wait w; /* what its agent's HEARTBEAT answer says: 1 of 2 nodes back */

        jt_wait(f.m, &w);
        ASSERT_TRUE(w.what == RDZV_WAIT_REBUILD && w.nodes == 1 && w.need == 2);
        ASSERT_TRUE(w.left_ms > 0 && w.left_ms <= 60);
    }
    for (int t = 0; t < 50 && !f.nevents; t++) {
        jt_heartbeat(f.m);
        run_ms(&e, 10);
    }
    ASSERT_EQ(f.nevents, 1); /* node rank 1 did not come back: the generation stops */
    ASSERT_BYTES_STR(f.event.type, strlen(f.event.type), "restart");
    ASSERT_TRUE(strstr(f.event.summary, "did not come back") != NULL);
    rdzvd_job_record_clear(&rec);
    env_done(&e);
    jt_state_dir_done(fd, path);
}

/* No agent of a generation rebuilt at rdzvd's start comes back within the window: the job leaves
 * memory as its record has it, the generation store's journal kept (its workers' keys), and its
 * agents' resumes later rebuild it on the same port. */
static void test_nobody_back_leaves_record_and_store(void)
{
    struct rdzvd_job_record rec = jt_running_record(2);
    struct rdzv_join jn;
    struct fake f[2] = {0};
    char path[64];
    struct env e;
    int fd = jt_state_dir(path, sizeof(path));

    jt_record_save(fd, &rec);
    env_init(&e, fd);
    jt_remember_secrets(&e, "job");
    jt_rebuild(&e.h);
    ASSERT_EQ(njobs(&e), 1);
    run_ms(&e, 3000);
    ASSERT_NOT_NULL(rdzvd_job_view(&e.jobs, "job")); /* within the window */
    run_ms(&e, 100);
    ASSERT_NULL(rdzvd_job_view(&e.jobs, "job"));
    ASSERT_EQ(e.stores_open, 0); /* nobody came: its store never reopened, its journal kept */
    ASSERT_EQ(e.stores_dropped, 0);
    rdzvd_job_record_clear(&rec);
    ASSERT_OK(rdzvd_job_record_get(e.table, "job", &rec));
    ASSERT_TRUE(rec.running && rec.generation == 2 && rec.restart_count == 1);
    for (int i = 0; i < 2; i++) {
        jn = resume_of(i, 2, 1, 3);
        ASSERT_OK(join(&e, &f[i], &jn));
        ASSERT_TRUE(f[i].resumed);
        ASSERT_EQ(f[i].nevents, 0);
    }
    ASSERT_EQ(e.stores_open, 1);
    ASSERT_EQ(e.asked_port, 41000);
    rdzvd_job_record_clear(&rec);
    env_done(&e);
    jt_state_dir_done(fd, path);
}

/* A record of a running generation whose agents never come back (they went with the old rdzvd:
 * a new launch under the same run_id): after the rebuild window the job forms the next
 * generation from those present, numbering on, without charging the restart budget. */
static void test_record_nobody_back_forms_next_generation_uncounted(void)
{
    struct fake f[2] = {0};
    char path[64];
    struct env e;
    int fd = state_dir_with_record(path, sizeof(path), 2, 0, 0, true);

    env_init(&e, fd);
    for (int i = 0; i < 2; i++) {
        struct rdzv_join jn = join_of(i, 2, 2, 0);

        jn.heartbeat_timeout_ms = 30; /* rebuild window: 2 x this */
        ASSERT_OK(join(&e, &f[i], &jn));
        ASSERT_TRUE(f[i].spare);
    }
    for (int t = 0; t < 50 && !f[0].nrounds; t++) {
        for (int i = 0; i < 2; i++)
            jt_heartbeat(f[i].m);
        run_ms(&e, 10);
    }
    for (int i = 0; i < 2; i++) {
        ASSERT_EQ(f[i].nevents, 0); /* not failed */
        ASSERT_EQ(f[i].nrounds, 1);
        ASSERT_EQ(f[i].round.generation, 3);
        ASSERT_EQ(f[i].round.restart_count, 0);
    }
    env_done(&e);
    jt_state_dir_done(fd, path);
}

/* Resume claims are checked before anything is made of them: a generation past 2^53-1, a node
 * rank or size past the job's MAX, ranks outside the world, a restart count past the budget.
 * Refused with the field named, and no job is left behind; the same against a job in memory. */
static void test_resume_claims_refused(void)
{
    struct rdzv_join bad[6];
    const char *why[6] = {"past the largest", "does not fit job", "does not fit job",
                          "do not fit a world", "do not fit a world", "past --max-restarts"};
    struct fake f[2] = {0}, x = {0};
    char err[512];
    struct env e;

    for (int k = 0; k < 6; k++)
        bad[k] = resume_of(0, 2, 1, 3);
    bad[0].resume.generation = RDZV_GENERATION_MAX + 1;
    bad[1].resume.nnodes = 3;
    bad[2].resume.node_rank = 2;
    bad[3].resume.world_size = 2 * RDZV_NPROC_MAX + 1;
    bad[4].resume.rank_offset = 3;
    bad[5].resume.restart_count = 4;
    env_init(&e, -1);
    for (int k = 0; k < 6; k++) {
        ASSERT_EQ(join_err(&e, &x, &bad[k], err, sizeof(err)), -EINVAL);
        ASSERT_TRUE(strstr(err, why[k]) != NULL);
        ASSERT_EQ(njobs(&e), 0);
    }
    for (int i = 0; i < 2; i++) {
        struct rdzv_join jn = resume_of(i, 2, 1, 3);

        ASSERT_OK(join(&e, &f[i], &jn));
        ASSERT_TRUE(f[i].resumed);
    }
    for (int k = 0; k < 6; k++) {
        snprintf(bad[k].node_id, sizeof(bad[k].node_id), "node-9");
        ASSERT_EQ(join_err(&e, &x, &bad[k], err, sizeof(err)), -EINVAL);
        ASSERT_TRUE(strstr(err, why[k]) != NULL);
        ASSERT_NULL(x.m);
    }
    ASSERT_EQ(f[0].nevents + f[1].nevents, 0);
    env_done(&e);
}

/* rec (of run id "job") left in state directory fd by an earlier rdzvd, whose agents hold the
 * secrets it gave them; e on that directory, as the next rdzvd. */
static void record_env_init(struct env *e, int fd, struct rdzvd_job_record *rec)
{
    snprintf(rec->run_id, sizeof(rec->run_id), "job");
    jt_record_save(fd, rec);
    env_init(e, fd);
    jt_remember_secrets(e, "job");
}

/* With a record in --state-dir the record decides: a resume past it, or of its generation
 * with another restart count or size, is refused; a JOIN with other --nnodes is refused; an
 * older generation's agent is told to stop and rejoins as a new member. */
static void test_resume_against_record(void)
{
    struct rdzvd_job_record rec = {.min = 2, .max = 2, .max_restarts = 3, .generation = 3,
                                   .restart_count = 1, .running = true, .nnodes = 2,
                                   .world_size = 4, .store_port = 41000};
    struct fake x = {0}, old = {0};
    struct rdzv_join jn;
    char path[64], err[512];
    int fd = jt_state_dir(path, sizeof(path));
    struct env e;

    record_env_init(&e, fd, &rec);
    jn = resume_of(0, 4, 1, 3);
    ASSERT_EQ(join_err(&e, &x, &jn, err, sizeof(err)), -EINVAL);
    ASSERT_TRUE(strstr(err, "as its record has it (generation 3, restart 1, 2 nodes)") != NULL);
    jn = resume_of(0, 3, 0, 3);
    ASSERT_EQ(join_err(&e, &x, &jn, err, sizeof(err)), -EINVAL);
    ASSERT_TRUE(strstr(err, "as its record has it") != NULL);
    jn = join_of(0, 1, 2, 3);
    ASSERT_EQ(join_err(&e, &x, &jn, err, sizeof(err)), -EINVAL);
    ASSERT_TRUE(strstr(err, "was started with --nnodes 2:2 --max-restarts 3") != NULL);
    ASSERT_EQ(njobs(&e), 0);
    ASSERT_EQ(e.stores_open, 0);
    jn = resume_of(1, 2, 1, 3);
    ASSERT_OK(join(&e, &old, &jn));
    ASSERT_TRUE(old.spare);
    ASSERT_FALSE(old.resumed);
    ASSERT_EQ(old.joined_gen, 3);
    ASSERT_TRUE(event_is(&old, "restart"));
    ASSERT_EQ(old.event.generation, 2);
    ASSERT_TRUE(strstr(old.event.summary, "generation 2 is over") != NULL);
    ASSERT_EQ(e.asked_port, 41000);
    env_done(&e);
    jt_state_dir_done(fd, path);
}

/* A node's secret is random, and its hash is kept in the job table at its first JOIN: after
 * rdzvd restarts (on the same --state-dir), a JOIN that names the node id must carry the secret;
 * without it, or with another, it is refused, and a job made for a claim goes again. */
static void test_resume_needs_the_recorded_secret(void)
{
    struct fake a = {0}, b = {0}, x = {0};
    char first[RDZV_SECRET_HEX + 1], err[512], path[64];
    int fd = jt_state_dir(path, sizeof(path));
    struct rdzv_join jn;
    struct env e;

    env_init(&e, fd);
    jn = join_of(0, 2, 2, 3);
    ASSERT_OK(join(&e, &a, &jn));
    snprintf(first, sizeof(first), "%s", a.secret);
    ASSERT_EQ(strlen(first), RDZV_SECRET_HEX);
    jt_drop_all(&e.jobs); /* rdzvd restarts */
    for (int k = 0; k < 2; k++) {
        jn = k ? resume_of(0, 1, 0, 3) : join_of(0, 2, 2, 3);
        snprintf(jn.secret, sizeof(jn.secret), "%s", first);
        jn.secret[0] = jn.secret[0] == '0' ? '1' : '0';
        ASSERT_EQ(join_err(&e, &x, &jn, err, sizeof(err)), -EPERM);
        ASSERT_TRUE(strstr(err, "belongs to a member of job 'job' (its record knows it)") != NULL);
        ASSERT_NULL(x.m);
    }
    ASSERT_EQ(njobs(&e), 0);
    snprintf(e.secrets[0], sizeof(e.secrets[0]), "%s", first);
    /* With the secret: a resume of a generation its job table never recorded is refused (the
     * job never ran it), a JOIN is taken, and given back its own secret. */
    jn = resume_of(0, 1, 0, 3);
    ASSERT_EQ(join_err(&e, &x, &jn, err, sizeof(err)), -ESTALE);
    ASSERT_TRUE(strstr(err, "job 'job' has ended, or ran on another rdzvd") != NULL);
    ASSERT_EQ(njobs(&e), 0);
    jn = join_of(0, 2, 2, 3);
    ASSERT_OK(join(&e, &b, &jn));
    ASSERT_FALSE(b.resumed);
    ASSERT_TRUE(strcmp(b.secret, first) == 0);
    env_done(&e);
    env_forget_table(fd);
    jt_state_dir_done(fd, path);
}

/* A member dropped while its job goes on (its connection closed): another JOIN naming its node
 * id is refused without its secret, and gets none; a new node id gets a secret of its own. */
static void test_dropped_member_keeps_its_identity(void)
{
    struct fake f[3] = {0}, x = {0};
    struct rdzv_join jn;
    char err[512];
    struct env e;

    env_init(&e, -1);
    join_n(&e, f, 3, join_of(0, 2, 3, 3));
    jt_gone(f[2].m);
    jn = join_of(2, 2, 3, 3);
    ASSERT_EQ(jt_job_join(&e.h, &x, &jn, err, sizeof(err), &x.m), -EPERM);
    ASSERT_TRUE(strstr(err, "belongs to a member") != NULL);
    ASSERT_NULL(x.m);
    ASSERT_EQ(x.secret[0], 0);
    jn = join_of(9, 2, 3, 3);
    ASSERT_OK(join(&e, &x, &jn));
    ASSERT_EQ(strlen(x.secret), RDZV_SECRET_HEX);
    ASSERT_TRUE(strcmp(x.secret, f[2].secret) != 0);
    env_done(&e);
}

/* A resume of a live member takes it over only with its secret: the old connection is closed;
 * while the job stops, the new connection is told to stop that generation too. */
static void test_takeover_needs_secret_and_repeats_restart(void)
{
    struct rdzv_worker_exit w = {.generation = 1, .exit_code = 1};
    struct fake f[2] = {0}, g = {0}, h = {0};
    struct rdzv_join jn;
    char err[512];
    struct env e;

    env_init(&e, -1);
    join_n(&e, f, 2, join_of(0, 2, 2, 3));
    jn = resume_of(0, 1, 0, 3);
    memset(jn.secret, 'f', RDZV_SECRET_HEX);
    ASSERT_EQ(join_err(&e, &g, &jn, err, sizeof(err)), -EPERM);
    ASSERT_TRUE(strstr(err, "belongs to a member") != NULL);
    ASSERT_FALSE(f[0].closed);
    jn = resume_of(0, 1, 0, 3);
    ASSERT_OK(join(&e, &g, &jn));
    ASSERT_TRUE(f[0].closed);
    ASSERT_TRUE(strstr(f[0].close_reason, "replaced by the agent's new connection") != NULL);
    ASSERT_TRUE(g.resumed);
    ASSERT_FALSE(g.spare);
    ASSERT_EQ(g.nevents, 0);
    w.rank = f[1].round.rank_offset;
    ASSERT_OK(jt_member_worker_exit(f[1].m, &w, err, sizeof(err)));
    ASSERT_TRUE(event_is(&g, "restart"));
    jn = resume_of(0, 1, 0, 3);
    ASSERT_OK(join(&e, &h, &jn));
    ASSERT_TRUE(g.closed);
    ASSERT_TRUE(event_is(&h, "restart"));
    ASSERT_EQ(h.event.generation, 1);
    ASSERT_TRUE(strstr(h.event.summary, "root cause: worker rank") != NULL);
    all_ready(f, 2, 1);
    jt_ready(h.m, 1);
    ASSERT_EQ(h.round.generation, 2);
    ASSERT_EQ(h.round.restart_count, 1);
    env_done(&e);
}

/* A generation rebuilt from its record that only some agents come back to: the missing ones
 * count as lost after the rebuild window (charged to the budget), and the job goes on with
 * those back. (Rebuilt from a resume alone, the job ends: test-job-claims.c, R26a.) */
static void test_rebuild_partial_comeback_is_a_failure(void)
{
    struct rdzvd_job_record rec = {.min = 1, .max = 2, .max_restarts = 3, .generation = 5,
                                   .restart_count = 2, .running = true, .nnodes = 2,
                                   .world_size = 4, .store_port = 41000};
    struct fake f = {0};
    struct rdzv_join jn = resume_of(0, 5, 2, 3);
    char path[64];
    int fd = jt_state_dir(path, sizeof(path));
    struct env e;

    record_env_init(&e, fd, &rec);
    jn.min = 1;
    jn.heartbeat_timeout_ms = 30;
    ASSERT_OK(join(&e, &f, &jn));
    ASSERT_TRUE(f.resumed);
    for (int t = 0; t < 50 && !f.nevents; t++) {
        jt_heartbeat(f.m);
        run_ms(&e, 10);
    }
    ASSERT_TRUE(event_is(&f, "restart"));
    ASSERT_TRUE(strstr(f.event.summary, "1 of 2 nodes of generation 5 did not come back") != NULL);
    jt_ready(f.m, 5);
    ASSERT_EQ(f.round.generation, 6);
    ASSERT_EQ(f.round.restart_count, 3);
    ASSERT_EQ(f.round.nnodes, 1);
    env_done(&e);
    jt_state_dir_done(fd, path);
}

/* A record that names its generation's nodes decides who resumes each node rank: the node it
 * names there, with its workers at the same global ranks; another node's claim to that place (a
 * stale or confused agent, with a valid secret of its own) is told to stop its workers and waits
 * as a new member, and cannot take the place from its holder. The rebuild window's end names
 * the nodes that did not come back. */
static void test_rebuild_by_the_record_nodes(void)
{
    struct rdzvd_job_record_node nodes[2] = {{"node-0", 2}, {"node-2", 2}};
    struct rdzvd_job_record rec = {.min = 2, .max = 2, .max_restarts = 3, .generation = 3,
                                   .restart_count = 1, .running = true, .nnodes = 2,
                                   .world_size = 4, .store_port = 41000, .nodes = nodes};
    struct fake a = {0}, b = {0}, c = {0};
    struct rdzv_join jn;
    char path[64];
    int fd = jt_state_dir(path, sizeof(path));
    struct env e;

    record_env_init(&e, fd, &rec);
    jn = resume_of(0, 3, 1, 3);
    jn.heartbeat_timeout_ms = 40;
    ASSERT_OK(join(&e, &a, &jn));
    ASSERT_TRUE(a.resumed);
    ASSERT_FALSE(a.spare);
    /* node-1 claims node rank 1, which the record gives node-2 */
    jn = resume_of(1, 3, 1, 3);
    jn.heartbeat_timeout_ms = 40;
    ASSERT_OK(join(&e, &b, &jn));
    ASSERT_TRUE(b.spare);
    ASSERT_FALSE(b.resumed);
    ASSERT_TRUE(event_is(&b, "restart"));
    ASSERT_TRUE(strstr(b.event.summary, "the job's record gives node rank 1 of generation 3 to "
                                        "node id 'node-2', not to 'node-1'") != NULL);
    /* node-2 at node rank 1, but with node rank 0's global ranks */
    jn = resume_of(2, 3, 1, 3);
    jn.heartbeat_timeout_ms = 40;
    jn.resume.node_rank = 1;
    jn.resume.rank_offset = 0;
    ASSERT_OK(join(&e, &c, &jn));
    ASSERT_TRUE(c.spare);
    ASSERT_TRUE(strstr(c.event.summary, "run ranks 2..3, not 0..1") != NULL);
    /* Nobody else came back: the window ends naming node rank 1's node. */
    for (int t = 0; t < 50 && !a.nevents; t++) {
        jt_heartbeat(a.m);
        jt_heartbeat(b.m);
        jt_heartbeat(c.m);
        run_ms(&e, 10);
    }
    ASSERT_TRUE(event_is(&a, "restart"));
    ASSERT_TRUE(strstr(a.event.summary, "1 of 2 nodes of generation 3 did not come back") != NULL);
    ASSERT_TRUE(strstr(a.event.summary, ": node rank 1 (node id node-2)") != NULL);
    env_done(&e);
    jt_state_dir_done(fd, path);
}

/* The store of a rebuilt generation: back on its port when it can be, else on any port; a job
 * whose store cannot be opened at all is refused and not kept. */
static void test_rebuild_store_port_fallback(void)
{
    for (int any = 0; any < 2; any++) {
        struct fake f = {0};
        struct rdzv_join jn = resume_of(0, 5, 0, 1);
        char err[512];
        struct env e;

        env_init(&e, -1);
        e.store_fail = -EADDRINUSE;
        e.store_fail_port = !any;
        if (any) {
            ASSERT_EQ(join_err(&e, &f, &jn, err, sizeof(err)), -EADDRINUSE);
            ASSERT_TRUE(strstr(err, "could not reopen the job's store") != NULL);
            ASSERT_EQ(njobs(&e), 0);
        } else {
            ASSERT_OK(join(&e, &f, &jn));
            ASSERT_TRUE(f.resumed);
            ASSERT_EQ(e.asked_port, 0); /* after 41000 was refused */
            ASSERT_EQ(e.stores_open, 1);
        }
        env_done(&e);
    }
}

int main(void)
{
    rdzv_log_setup("test-job-rebuild", RDZV_LOG_ERROR);
    TEST(test_resume_after_daemon_restart_keeps_generation_and_restarts);
    TEST(test_spare_first_after_restart_waits_for_the_members);
    TEST(test_outsider_cancel_keeps_the_record_of_a_job_away);
    TEST(test_operator_cancel_while_stopping_is_recorded_at_once);
    TEST(test_ended_job_stays_ended_across_a_restart);
    TEST(test_ended_jobs_kept_are_bounded);
    TEST(test_cancelled_waiting_job_stays_ended);
    TEST(test_restore_numbers_on_and_drops_stale_journals);
    TEST(test_rebuilt_job_runs_by_its_recorded_settings);
    TEST(test_running_record_is_rebuilt_at_start);
    TEST(test_nobody_back_leaves_record_and_store);
    TEST(test_record_nobody_back_forms_next_generation_uncounted);
    TEST(test_resume_claims_refused);
    TEST(test_resume_against_record);
    TEST(test_rebuild_by_the_record_nodes);
    TEST(test_resume_needs_the_recorded_secret);
    TEST(test_dropped_member_keeps_its_identity);
    TEST(test_takeover_needs_secret_and_repeats_restart);
    TEST(test_rebuild_partial_comeback_is_a_failure);
    TEST(test_rebuild_store_port_fallback);
    return tap_done();
}
