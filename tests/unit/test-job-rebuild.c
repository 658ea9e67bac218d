/* SPDX-License-Identifier: Apache-2.0 */
/* test-job-rebuild.c: a job rdzvd rebuilds after a restart (daemon/job/rdzvd-job-join.c), from
 * its record in --state-dir (as it starts, for a running generation) or from its agents'
 * resumes, driven with fake members (jobtest.h): the generation and restart count kept, spares
 * placed only once the members are back, the record's settings, the rebuild window, and the
 * nodes that do not come back. */
#include <errno.h>
#include <inttypes.h>

#include "common/rdzv-log.h"
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
    rdzvd_member_leave(f[0].m, 1, true);
    rdzvd_member_leave(f[1].m, 1, true);
    for (int i = 0; i < 3; i++)
        ASSERT_BYTES_STR(f[i].event.type, strlen(f[i].event.type), "succeeded");
    ASSERT_EQ(rdzvd_job_record_get(e.table, "job", &rec), -ENOENT); /* over: forgotten */
    env_done(&e);
    jt_state_dir_done(fd, path);
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
    struct rdzvd_job *j;
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
    j = rdzvd_job_find(&e.jobs, "job");
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
    j = rdzvd_job_find(&e.jobs, "job");
    ASSERT_NOT_NULL(j);
    ASSERT_EQ(j->hb_timeout_ms, jn.heartbeat_timeout_ms);
    ASSERT_EQ(j->last_call_ms, jn.last_call_ms);
    env_done(&e);
    jt_state_dir_done(fd, path);
}

/* rdzvd starts (or a replica leads) with the record of a running generation: the job is in
 * memory at once, running that generation on its recorded store port, before any agent is back;
 * the first agent back cuts the window to two heartbeat timeouts, and the node that does not
 * come back within it is lost. A record between generations waits for its agents. */
static void test_running_record_is_rebuilt_at_start(void)
{
    struct rdzvd_job_record rec = {.min = 2, .max = 2, .max_restarts = 3, .generation = 4,
                                   .restart_count = 1, .running = true, .nnodes = 2,
                                   .world_size = 4, .store_port = 41000, .has_settings = true};
    struct rdzv_join jn = join_of(0, 2, 2, 3);
    struct fake f = {0};
    struct rdzvd_job *j;
    char path[64], err[256];
    struct env e;
    int fd = jt_state_dir(path, sizeof(path));

    snprintf(rec.run_id, sizeof(rec.run_id), "job");
    jn.heartbeat_timeout_ms = 30; /* from the first back: 60 ms */
    rdzvd_job_settings_of_join(&jn, &rec.settings);
    jt_record_save(fd, &rec);
    snprintf(rec.run_id, sizeof(rec.run_id), "cancelled");
    jt_record_save(fd, &rec);
    snprintf(rec.run_id, sizeof(rec.run_id), "idle"); /* dropped with no member by env_done */
    jt_record_save(fd, &rec);
    snprintf(rec.run_id, sizeof(rec.run_id), "between");
    rec.running = false;
    jt_record_save(fd, &rec);
    env_init(&e, fd);
    jt_remember_secrets(&e, "job");
    rdzvd_jobs_rebuild(&e.h);
    ASSERT_EQ(njobs(&e), 3);
    ASSERT_NULL(rdzvd_job_find(&e.jobs, "between"));
    /* The operator cancels one nobody came back to: it ends, leaves memory and its record. */
    ASSERT_OK(rdzvd_jobs_cancel(&e.h, "cancelled", "", err, sizeof(err)));
    ASSERT_NULL(rdzvd_job_find(&e.jobs, "cancelled"));
    ASSERT_EQ(rdzvd_job_record_get(e.table, "cancelled", &rec), -ENOENT);
    ASSERT_EQ(njobs(&e), 2);
    j = rdzvd_job_find(&e.jobs, "job");
    ASSERT_NOT_NULL(j);
    ASSERT_EQ(j->state, JOB_RUNNING);
    ASSERT_EQ(j->generation, 4);
    ASSERT_EQ(j->restart_count, 1);
    ASSERT_EQ(j->nmembers, 0);
    ASSERT_EQ(e.asked_port, 41000);
    ASSERT_EQ(e.stores_open, 3); /* each rebuilt job's, on the port its record names */
    ASSERT_TRUE(uv_timer_get_due_in(&j->timer) > 60); /* two heartbeat timeouts and 3 s */
    rdzvd_jobs_rebuild(&e.h); /* in memory already: not built twice */
    ASSERT_EQ(njobs(&e), 2);
    jn = resume_of(0, 4, 1, 3);
    ASSERT_OK(join(&e, &f, &jn));
    ASSERT_TRUE(f.resumed);
    ASSERT_EQ(f.nevents, 0);
    ASSERT_TRUE(uv_timer_get_due_in(&j->timer) <= 60);
    for (int t = 0; t < 50 && !f.nevents; t++) {
        rdzvd_member_heartbeat(f.m);
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
    struct rdzvd_job_record rec = {.min = 2, .max = 2, .max_restarts = 3, .generation = 2,
                                   .restart_count = 1, .running = true, .nnodes = 2,
                                   .world_size = 4, .store_port = 41000, .has_settings = true};
    struct rdzv_join jn = join_of(0, 2, 2, 3);
    struct fake f[2] = {0};
    char path[64];
    struct env e;
    int fd = jt_state_dir(path, sizeof(path));

    snprintf(rec.run_id, sizeof(rec.run_id), "job");
    jn.heartbeat_timeout_ms = 30; /* the window: 2 x 30 ms + 3 s */
    rdzvd_job_settings_of_join(&jn, &rec.settings);
    jt_record_save(fd, &rec);
    env_init(&e, fd);
    jt_remember_secrets(&e, "job");
    rdzvd_jobs_rebuild(&e.h);
    ASSERT_EQ(njobs(&e), 1);
    run_ms(&e, 3000);
    ASSERT_NOT_NULL(rdzvd_job_find(&e.jobs, "job")); /* within the window */
    run_ms(&e, 100);
    ASSERT_NULL(rdzvd_job_find(&e.jobs, "job"));
    ASSERT_EQ(e.stores_closed, 1);
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
    ASSERT_EQ(e.stores_open, 2);
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
            rdzvd_member_heartbeat(f[i].m);
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

int main(void)
{
    rdzv_log_setup("test-job-rebuild", RDZV_LOG_ERROR);
    TEST(test_resume_after_daemon_restart_keeps_generation_and_restarts);
    TEST(test_spare_first_after_restart_waits_for_the_members);
    TEST(test_restore_numbers_on_and_drops_stale_journals);
    TEST(test_rebuilt_job_runs_by_its_recorded_settings);
    TEST(test_running_record_is_rebuilt_at_start);
    TEST(test_nobody_back_leaves_record_and_store);
    TEST(test_record_nobody_back_forms_next_generation_uncounted);
    return tap_done();
}
