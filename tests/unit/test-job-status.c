/* SPDX-License-Identifier: Apache-2.0 */
/* test-job-status.c: what the job state machine shows (daemon/job/rdzvd-job-status.c), driven
 * with fake agents (jobtest.h): each node's state and the job's events, the events' ring, the
 * members left out of a long list, ended jobs kept and expired, and the progress of the longest
 * silent rank. */
#include <inttypes.h>

#include <jansson.h>
#include <stdlib.h>

#include "common/rdzv-log.h"
#include "proto/rdzv-status.h"
#include "jobtest.h"

/* Each node's state in the status: running, stopped (ready, in the generation), spare,
 * stopping (told to stop, not ready); the last 16 events; an ended job with its members still
 * there has its outcome and -1 durations. */
static void test_status_node_states_and_events(void)
{
    struct rdzvd_server_info info = {.start_ms = jt_now_ms()};
    struct rdzv_worker_exit w = {.generation = 1, .exit_code = 5};
    struct fake f[4] = {0};
    struct rdzv_status st;
    struct rdzv_join jn;
    char err[256];
    struct env e;

    env_init(&e, -1);
    join_n(&e, f, 3, join_of(0, 2, 2, 0)); /* 2 run, node 2 a spare */
    jn = resume_of(3, 1, 0, 0);
    jn.resume.node_rank = 0;
    jn.resume.rank_offset = 0;
    ASSERT_OK(join(&e, &f[3], &jn)); /* rank 0 is taken: told to stop */
    ASSERT_OK(rdzvd_status_fill(&info, &e.jobs, &jt_steps.counts, NULL, NULL, jt_clock(), &st));
    ASSERT_EQ(st.jobs[0].n_nodes, 4);
    ASSERT_TRUE(strcmp(node_of(&st.jobs[0], "host0")->state, "running") == 0);
    ASSERT_TRUE(strcmp(node_of(&st.jobs[0], "host2")->state, "spare") == 0);
    ASSERT_TRUE(node_of(&st.jobs[0], "host2")->spare);
    ASSERT_TRUE(strcmp(node_of(&st.jobs[0], "host3")->state, "stopping") == 0);
    ASSERT_TRUE(st.jobs[0].nodes[0].node_rank >= 0 && st.jobs[0].nodes[1].node_rank >= 0);
    ASSERT_TRUE(strcmp(st.jobs[0].state, "running") == 0);
    rdzv_status_free(&st);
    w.rank = f[1].round.rank_offset;
    ASSERT_OK(jt_member_worker_exit(f[1].m, &w, err, sizeof(err)));
    ASSERT_OK(rdzvd_status_fill(&info, &e.jobs, &jt_steps.counts, NULL, NULL, jt_clock(), &st));
    ASSERT_TRUE(strcmp(st.jobs[0].state, "ended") == 0);
    ASSERT_TRUE(st.jobs[0].ended);
    ASSERT_TRUE(strcmp(st.jobs[0].outcome_type, "failed") == 0);
    ASSERT_EQ(st.jobs[0].outcome_exit_code, 5);
    ASSERT_TRUE(st.jobs[0].duration_s == -1 && st.jobs[0].ended_age_s == -1);
    rdzv_status_free(&st);
    env_done(&e);
}

/* A node's failures in the status are those charged to it (the FAILURES column): a worker
 * killed by a signal from outside is the job's failure, not the node's (job-policy.md R7), and
 * counts 0; its worker's own exit 1 then counts 1. */
static void test_status_failures_are_the_charged_ones(void)
{
    struct rdzvd_server_info info = {.start_ms = jt_now_ms()};
    struct rdzv_worker_exit w = {.generation = 1, .signal = 9, .exit_code = 137};
    struct fake f[2] = {0};
    struct rdzv_status st;
    char err[256];
    struct env e;

    env_init(&e, -1);
    join_n(&e, f, 2, join_of(0, 2, 2, 5));
    w.rank = f[1].round.rank_offset;
    ASSERT_OK(jt_member_worker_exit(f[1].m, &w, err, sizeof(err)));
    ASSERT_TRUE(strstr(f[0].event.summary, "not counted against the node") != NULL);
    all_ready(f, 2, 1);
    ASSERT_EQ(f[0].round.generation, 2);
    ASSERT_OK(rdzvd_status_fill(&info, &e.jobs, &jt_steps.counts, NULL, NULL, jt_clock(), &st));
    ASSERT_EQ(node_of(&st.jobs[0], "host1")->failures, 0);
    rdzv_status_free(&st);
    w = (struct rdzv_worker_exit){.generation = 2, .exit_code = 1, .rank = f[1].round.rank_offset};
    ASSERT_OK(jt_member_worker_exit(f[1].m, &w, err, sizeof(err)));
    all_ready(f, 2, 2);
    ASSERT_OK(rdzvd_status_fill(&info, &e.jobs, &jt_steps.counts, NULL, NULL, jt_clock(), &st));
    ASSERT_EQ(node_of(&st.jobs[0], "host1")->failures, 1);
    ASSERT_EQ(node_of(&st.jobs[0], "host0")->failures, 0);
    rdzv_status_free(&st);
    env_done(&e);
}

/* Past 16 events the status keeps the newest, oldest first. */
static void test_status_event_ring(void)
{
    struct rdzvd_server_info info = {.start_ms = jt_now_ms()};
    struct rdzv_worker_exit w = {.generation = 0, .exit_code = 1};
    struct fake f[2] = {0};
    struct rdzv_status st;
    char err[256];
    struct env e;

    env_init(&e, -1);
    join_n(&e, f, 2, join_of(0, 2, 2, 20));
    for (uint64_t g = 1; g <= 12; g++) { /* a restart and a formed generation: 2 events each */
        w.generation = g;
        w.rank = f[0].round.rank_offset;
        ASSERT_OK(jt_member_worker_exit(f[0].m, &w, err, sizeof(err)));
        all_ready(f, 2, g);
        ASSERT_EQ(f[0].round.generation, g + 1);
    }
    ASSERT_OK(rdzvd_status_fill(&info, &e.jobs, &jt_steps.counts, NULL, NULL, jt_clock(), &st));
    ASSERT_EQ(st.jobs[0].n_events, RDZV_STATUS_EVENTS);
    ASSERT_TRUE(strstr(st.jobs[0].events[RDZV_STATUS_EVENTS - 1].text,
                       "generation 13 formed") != NULL);
    ASSERT_TRUE(strstr(st.jobs[0].events[RDZV_STATUS_EVENTS - 2].text, "restart 12 of 20") !=
                NULL);
    for (unsigned i = 1; i < st.jobs[0].n_events; i++)
        ASSERT_TRUE(st.jobs[0].events[i].time >= st.jobs[0].events[i - 1].time);
    rdzv_status_free(&st);
    env_done(&e);
}

/* At most 256 members listed; the rest counted. */
static void test_status_members_left_out(void)
{
    struct rdzvd_server_info info = {.start_ms = jt_now_ms()};
    int n = RDZV_STATUS_SHOW_MEMBERS + 2;
    struct fake *f = calloc((size_t)n, sizeof(*f));
    struct rdzv_status st;
    struct env e;

    ASSERT_NOT_NULL(f);
    env_init(&e, -1);
    join_n(&e, f, n, join_of(0, 2, 2, 0));
    ASSERT_OK(rdzvd_status_fill(&info, &e.jobs, &jt_steps.counts, NULL, NULL, jt_clock(), &st));
    ASSERT_EQ(st.jobs[0].n_nodes, RDZV_STATUS_SHOW_MEMBERS);
    ASSERT_EQ(st.jobs[0].members_left_out, 2);
    ASSERT_EQ(st.jobs[0].nodes_in_generation, 2);
    rdzv_status_free(&st);
    env_done(&e);
    free(f);
}

/* Ended jobs are kept (--keep-ended) after their last member left: at most max of them, the
 * oldest dropped, none when max or keep_ms is 0, and they expire. */
static void test_ended_jobs_kept_and_expire(void)
{
    struct rdzvd_server_info info = {.start_ms = jt_now_ms()};
    struct rdzv_status st;
    struct env e;

    env_init(&e, -1);
    e.h.ended = &e.ended;
    e.h.keep_ended = rdzvd_ended_jobs_add;
    rdzvd_ended_jobs_init(&e.ended, 200, 1);
    for (int k = 0; k < 2; k++) {
        struct fake f = {0};
        struct rdzv_join jn = join_of(0, 1, 1, 0);

        snprintf(jn.run_id, sizeof(jn.run_id), "job%d", k);
        ASSERT_OK(join(&e, &f, &jn));
        jt_leave(f.m, 1, true);
        ASSERT_TRUE(event_is(&f, "succeeded"));
        jt_gone(f.m);
    }
    ASSERT_EQ(e.ended.n, 1);
    ASSERT_OK(rdzvd_status_fill(&info, &e.jobs, &jt_steps.counts, &e.ended, NULL, jt_clock(), &st));
    ASSERT_EQ(st.n_jobs, 1);
    ASSERT_TRUE(strcmp(st.jobs[0].run_id, "job1") == 0);
    ASSERT_TRUE(st.jobs[0].ended && strcmp(st.jobs[0].outcome_type, "succeeded") == 0);
    ASSERT_TRUE(st.jobs[0].duration_s >= 0 && st.jobs[0].ended_age_s >= 0);
    ASSERT_EQ(st.jobs[0].n_nodes, 0);
    rdzv_status_free(&st);
    jt_advance(250);
    ASSERT_OK(rdzvd_status_fill(&info, &e.jobs, &jt_steps.counts, &e.ended, NULL, jt_clock(), &st));
    ASSERT_EQ(st.n_jobs, 0); /* expired */
    rdzv_status_free(&st);
    rdzvd_ended_jobs_free(&e.ended);
    rdzvd_ended_jobs_init(&e.ended, 0, 4); /* keep_ms 0: none kept */
    {
        struct fake f = {0};
        struct rdzv_join jn = join_of(0, 1, 1, 0);

        ASSERT_OK(join(&e, &f, &jn));
        jt_gone(f.m);
    }
    ASSERT_EQ(e.ended.n, 0);
    env_done(&e);
}

/* The status's JSON with no node id of ids in it, once hidden, and with each before. */
static void assert_hides(struct rdzv_status *st, const char *const *ids, int n)
{
    json_t *o = rdzv_status_to_json(st);
    char *before = json_dumps(o, 0), *after;

    json_decref(o);
    rdzv_status_hide_node_ids(st);
    o = rdzv_status_to_json(st);
    after = json_dumps(o, 0);
    json_decref(o);
    ASSERT_NOT_NULL(before);
    ASSERT_NOT_NULL(after);
    for (int i = 0; i < n; i++) {
        if (!strstr(before, ids[i]))
            printf("# %s not in the status to hide from\n", ids[i]);
        if (strstr(after, ids[i]))
            printf("# %s shown: %s\n", ids[i], after);
        ASSERT_NULL(strstr(after, ids[i]));
    }
    ASSERT_NOT_NULL(strstr(after, RDZV_STATUS_HIDDEN_ID));
    free(before);
    free(after);
    rdzv_status_free(st);
}

/* Case 6 of issue 71: a reader without a token is shown no node id in any text. Three nodes
 * join (one node id with spaces and a comma, one with a quote); node 1's worker fails and it is
 * put aside (bad_node_failures 1), a restart with its root cause; node 2's agent goes; the job
 * is cancelled and ends. Its events, timeline marks and outcome, live and ended, name no node
 * id once hidden. Before, only nodes[] and put_aside[] were blanked: the events said "joined
 * (node id ...)" and "put aside (node id ...)". */
static void test_tokenless_status_names_no_node_id(void)
{
    static const char *const ids[] = {"tok-a:4242:beef", "odd id, (1)", "quote'2"};
    struct rdzvd_server_info info = {.start_ms = jt_now_ms()};
    struct rdzvd_status_sel sel = {.max_live = 4, .full = 4, .max_ended = 4};
    struct rdzv_worker_exit w = {.generation = 1, .exit_code = 3};
    struct fake f[3] = {0};
    struct rdzv_status st;
    char err[256];
    struct env e;

    env_init(&e, -1);
    e.h.ended = &e.ended;
    e.h.keep_ended = rdzvd_ended_jobs_add;
    rdzvd_ended_jobs_init(&e.ended, 3600 * 1000, 4);
    for (int i = 0; i < 3; i++) {
        struct rdzv_join jn = join_of(i, 2, 3, 5);

        jn.bad_node_failures = 1;
        snprintf(jn.node_id, sizeof(jn.node_id), "%s", ids[i]);
        ASSERT_OK(join(&e, &f[i], &jn));
    }
    all_ready(f, 3, 1);
    ASSERT_EQ(f[0].round.generation, 1u);
    w.rank = f[1].round.rank_offset;
    ASSERT_OK(jt_member_worker_exit(f[1].m, &w, err, sizeof(err)));
    for (int i = 0; i < 3; i++) /* they stopped: node 1 goes (its start-up failure) */
        jt_ready(f[i].m, 1);
    ASSERT_TRUE(event_is(&f[1], "put_aside"));
    ASSERT_NULL(f[1].m); /* gone with it */
    jt_gone(f[2].m);
    ASSERT_OK(rdzvd_status_fill(&info, &e.jobs, &jt_steps.counts, &e.ended, &sel, jt_clock(), &st));
    ASSERT_EQ(st.n_jobs, 1);
    ASSERT_NOT_NULL(st.jobs[0].timeline);
    assert_hides(&st, ids, 3);
    ASSERT_OK(jt_jobs_cancel(&e.h, "job", "done", err, sizeof(err)));
    jt_gone(f[0].m);
    ASSERT_EQ(e.ended.n, 1);
    ASSERT_OK(rdzvd_status_fill(&info, &e.jobs, &jt_steps.counts, &e.ended, &sel, jt_clock(), &st));
    assert_hides(&st, ids, 3);
    env_done(&e);
}

/* Occurrences of needle in hay. */
static size_t count_of(const char *hay, const char *needle)
{
    size_t n = 0;

    for (const char *p = hay; (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    return n;
}

/* Issue 71, case 6, as the review found it left: the tokenless view replaced every standing
 * alone occurrence of a known id, so node id "0" made "node rank hidden" and "generation hidden";
 * and an id with a space that the job no longer listed was hidden up to its space only. Now
 * only what follows the words "node id " is hidden, and a text writes an id as one word. Node
 * "0" and node "sp ace 9 gpu" join (the second goes); the hidden JSON says "hidden" only after
 * "node id ", names neither id nor a piece of one, and a text with no node id is unchanged. */
static void test_tokenless_status_hides_node_ids_only(void)
{
    static const char *const ids[] = {"0", "sp ace 9 gpu"};
    struct rdzvd_server_info info = {.start_ms = jt_now_ms()};
    struct fake f[2] = {0};
    struct rdzv_status st;
    char before[RDZV_STATUS_EVENTS][RDZV_STATUS_TEXT_MAX + 1];
    unsigned n_before;
    json_t *o;
    char *after;
    struct env e;

    env_init(&e, -1);
    for (int i = 0; i < 2; i++) {
        struct rdzv_join jn = join_of(i, 1, 2, 5);

        snprintf(jn.node_id, sizeof(jn.node_id), "%s", ids[i]);
        ASSERT_OK(join(&e, &f[i], &jn));
    }
    all_ready(f, 2, 1);
    ASSERT_EQ(f[0].round.generation, 1u);
    jt_gone(f[1].m); /* its id no longer listed in nodes[] */
    ASSERT_OK(rdzvd_status_fill(&info, &e.jobs, &jt_steps.counts, &e.ended, NULL, jt_clock(), &st));
    ASSERT_EQ(st.n_jobs, 1);
    n_before = st.jobs[0].n_events;
    for (unsigned i = 0; i < n_before; i++)
        snprintf(before[i], sizeof(before[i]), "%s", st.jobs[0].events[i].text);
    rdzv_status_hide_node_ids(&st);
    ASSERT_EQ(st.jobs[0].n_events, n_before);
    for (unsigned i = 0; i < n_before; i++) {
        snprintf(tap_note, sizeof(tap_note), "event %u: \"%.100s\" shown as \"%.100s\"", i,
                 before[i], st.jobs[0].events[i].text);
        if (!strstr(before[i], "node id "))
            ASSERT_TRUE(strcmp(before[i], st.jobs[0].events[i].text) == 0);
    }
    o = rdzv_status_to_json(&st);
    after = json_dumps(o, 0);
    json_decref(o);
    ASSERT_NOT_NULL(after);
    snprintf(tap_note, sizeof(tap_note), "%.250s",
             strstr(after, "\"events\"") ? strstr(after, "\"events\"") : after);
    ASSERT_TRUE(count_of(after, RDZV_STATUS_HIDDEN_ID) > 0);
    ASSERT_EQ(count_of(after, RDZV_STATUS_HIDDEN_ID), count_of(after, "node id hidden"));
    ASSERT_NULL(strstr(after, "node id 0"));
    ASSERT_NULL(strstr(after, "ace 9"));
    ASSERT_NULL(strstr(after, "9 gpu"));
    ASSERT_NULL(strstr(after, "sp%20ace"));
    tap_note[0] = '\0';
    free(after);
    rdzv_status_free(&st);
    env_done(&e);
}

/* Issue 71, case 6: the tokenless view hides what follows "node id " and nothing else, in one
 * pass: an id as rdzv_node_id_text writes it (one word: a space or a final colon escaped), a
 * quoted one, two in a text, the colon after one kept; "by its node id, not its host" and a word
 * equal to an id ("0") are left alone. */
static void test_hide_touches_node_ids_only(void)
{
    struct rdzv_status st = {0};
    struct rdzv_status_job *j;
    char buf[RDZV_NODE_ID_TEXT_MAX + 1], id[64];
    const char *plain_id = "vm:9297:99955c4b";

    ASSERT_TRUE(rdzv_node_id_text(plain_id, buf, sizeof(buf)) == plain_id);
    ASSERT_TRUE(strcmp(rdzv_node_id_text("sp ace, (1)", buf, sizeof(buf)), "sp%20ace%2c%20%281%29")
                == 0);
    ASSERT_TRUE(strcmp(rdzv_node_id_text("ends:", buf, sizeof(buf)), "ends%3a") == 0);
    ASSERT_OK(rdzv_status_alloc_jobs(&st, 1));
    st.n_jobs = 1;
    j = &st.jobs[0];
    snprintf(id, sizeof(id), "%s", rdzv_node_id_text("old id 9 gpu", buf, sizeof(buf)));
    j->n_events = 3;
    snprintf(j->events[0].text, sizeof(j->events[0].text),
             "node=h0 joined (node id 0, 2 workers, node rank 0), generation 0 of 0 restarts");
    snprintf(j->events[1].text, sizeof(j->events[1].text),
             "node=h1 joined (node id %s) under the host name of node id %s: both", plain_id, id);
    snprintf(j->events[2].text, sizeof(j->events[2].text), "node id 'q x' of job 'j' belongs");
    snprintf(j->outcome_summary, sizeof(j->outcome_summary),
             "node h (node id n-1) is put aside by job J: it failed a health check: ecc (it never "
             "held a place in the job: put aside by its node id, not its host)");
    rdzv_status_hide_node_ids(&st);
    ASSERT_BYTES_STR(j->events[0].text, strlen(j->events[0].text),
                     "node=h0 joined (node id hidden, 2 workers, node rank 0), generation 0 of 0 "
                     "restarts");
    ASSERT_BYTES_STR(j->events[1].text, strlen(j->events[1].text),
                     "node=h1 joined (node id hidden) under the host name of node id hidden: both");
    ASSERT_BYTES_STR(j->events[2].text, strlen(j->events[2].text),
                     "node id 'hidden' of job 'j' belongs");
    ASSERT_BYTES_STR(j->outcome_summary, strlen(j->outcome_summary),
                     "node h (node id hidden) is put aside by job J: it failed a health check: ecc "
                     "(it never held a place in the job: put aside by its node id, not its host)");
    rdzv_status_free(&st);
}

/* More than 4096 ranks reported: the status keeps the longest silent, by rank, and counts the
 * rest; a spare's and an empty report are ignored. */
static void test_progress_longest_silent_kept(void)
{
    struct rdzvd_server_info info = {.start_ms = jt_now_ms()};
    struct rdzv_heartbeat *hb = calloc(1, sizeof(*hb));
    struct fake f[6] = {0};
    struct rdzv_join jn = join_of(0, 5, 5, 0);
    const struct rdzv_status_job *sj;
    struct rdzv_status st;
    struct env e;

    ASSERT_NOT_NULL(hb);
    env_init(&e, -1);
    jn.nproc = RDZV_NPROC_MAX;
    join_n(&e, f, 6, jn); /* node 5: a spare */
    ASSERT_TRUE(f[5].spare);
    hb->generation = 1;
    hb->n_progress = RDZV_PROGRESS_MAX;
    for (int i = 0; i < RDZV_PROGRESS_MAX; i++)
        hb->progress[i] = (struct rdzv_rank_progress){.local_rank = i, .step = i, .age_ms = 0};
    for (int k = 0; k < 6; k++) {
        for (int i = 0; i < RDZV_PROGRESS_MAX; i++)
            hb->progress[i].age_ms = k == 4 ? 100000 : 0;
        jt_progress(f[k].m, hb);
    }
    ASSERT_OK(rdzvd_status_fill(&info, &e.jobs, &jt_steps.counts, NULL, NULL, jt_clock(), &st));
    sj = &st.jobs[0];
    ASSERT_EQ(sj->n_ranks, RDZV_STATUS_MAX_RANKS);
    ASSERT_EQ(sj->ranks_left_out, RDZV_PROGRESS_MAX);
    ASSERT_EQ(sj->ranks[sj->n_ranks - 1].rank, 5 * RDZV_NPROC_MAX - 1); /* node 4's: silent */
    ASSERT_TRUE(sj->ranks[sj->n_ranks - 1].age_s >= 100);
    for (size_t i = 1; i < sj->n_ranks; i++)
        ASSERT_TRUE(sj->ranks[i].rank > sj->ranks[i - 1].rank);
    rdzv_status_free(&st);
    hb->n_progress = 0;
    jt_progress(f[4].m, hb); /* nothing to keep: changes nothing */
    ASSERT_OK(rdzvd_status_fill(&info, &e.jobs, &jt_steps.counts, NULL, NULL, jt_clock(), &st));
    ASSERT_EQ(st.jobs[0].ranks_left_out, RDZV_PROGRESS_MAX);
    rdzv_status_free(&st);
    free(hb);
    env_done(&e);
}

/* --abandon-after counts from the last agent leaving. A job rebuilt from its
 * record that nobody comes back to goes back to waiting with the time it had; a JOIN refused,
 * before its record is read or after the job was rebuilt for it, leaves it so (the second left
 * the rebuilt job in memory with no member, never abandoned); an agent of it that comes back
 * takes the note, and its leaving again starts a new one. */
static void test_waiting_time_runs_from_the_last_agent_leaving(void)
{
    struct rdzvd_job_record rec = jt_running_record(2);
    char path[64], id[RDZV_ID_MAX + 1];
    struct fake f[2] = {0}, odd = {0};
    struct rdzv_join jn;
    uint64_t since, first, back;
    struct env e;
    int fd = jt_state_dir(path, sizeof(path));

    jt_record_save(fd, &rec);
    env_init(&e, fd);
    e.h.ended = &e.ended;
    e.h.keep_waiting = rdzvd_waiting_jobs_add;
    e.h.take_waiting = rdzvd_waiting_jobs_take;
    jt_remember_secrets(&e, "job");
    jt_rebuild(&e.h);
    ASSERT_EQ(e.ended.n_waiting, 0); /* in memory, its agents' window running */
    run_ms(&e, 3100);
    ASSERT_NULL(rdzvd_job_view(&e.jobs, "job"));
    ASSERT_TRUE(rdzvd_waiting_jobs_first(&e.ended, id, &first));
    ASSERT_EQ(strcmp(id, "job"), 0);
    run_ms(&e, 10000);
    jn = join_of(7, 2, 2, 3);
    jn.node_rank = 5; /* past --nnodes, no hint: refused once the job is rebuilt for it */
    ASSERT_TRUE(join(&e, &odd, &jn) < 0);
    ASSERT_NULL(rdzvd_job_view(&e.jobs, "job"));
    ASSERT_TRUE(rdzvd_waiting_jobs_first(&e.ended, id, &since));
    ASSERT_EQ(since, first);
    jn = join_of(7, 1, 3, 3); /* another --nnodes: refused before its record is read */
    ASSERT_TRUE(join(&e, &odd, &jn) < 0);
    ASSERT_TRUE(rdzvd_waiting_jobs_first(&e.ended, id, &since));
    ASSERT_EQ(since, first);
    ASSERT_EQ(e.ended.n_waiting, 1);
    jn = resume_of(0, 2, 1, 3);
    ASSERT_OK(join(&e, &f[0], &jn));
    ASSERT_TRUE(f[0].resumed);
    ASSERT_EQ(e.ended.n_waiting, 0);
    ASSERT_NOT_NULL(f[0].m);
    back = jt_now_ms();
    jt_gone(f[0].m);
    run_ms(&e, 200000); /* its heartbeat's grace, and node 1's window, lapse */
    ASSERT_NULL(rdzvd_job_view(&e.jobs, "job"));
    ASSERT_TRUE(rdzvd_waiting_jobs_first(&e.ended, id, &since));
    ASSERT_TRUE(since >= back && back >= first + 10000);
    rdzvd_job_record_clear(&rec);
    env_done(&e);
    jt_state_dir_done(fd, path);
}

/* A resume's claim refused (its store cannot open), with no
 * job table, leaves no waiting note behind: it was counted against --max-jobs for good, and no
 * cancel could end it (it has no record). */
static void test_refused_claim_leaves_no_note(void)
{
    struct fake f = {0};
    struct rdzv_join jn = resume_of(0, 2, 1, 3);
    struct env e;

    env_init(&e, -1);
    e.h.ended = &e.ended;
    e.h.keep_waiting = rdzvd_waiting_jobs_add;
    e.h.take_waiting = rdzvd_waiting_jobs_take;
    e.store_fail = -EMFILE;
    ASSERT_TRUE(join(&e, &f, &jn) < 0);
    ASSERT_TRUE(rdzv_list_empty(&e.jobs));
    ASSERT_EQ(e.ended.n_waiting, 0);
    ASSERT_EQ(rdzvd_jobs_held(&e.h), 0);
    env_done(&e);
}

int main(void)
{
    rdzv_log_setup("test-job-status", RDZV_LOG_ERROR);
    TEST(test_status_node_states_and_events);
    TEST(test_status_event_ring);
    TEST(test_status_failures_are_the_charged_ones);
    TEST(test_status_members_left_out);
    TEST(test_ended_jobs_kept_and_expire);
    TEST(test_tokenless_status_names_no_node_id);
    TEST(test_tokenless_status_hides_node_ids_only);
    TEST(test_hide_touches_node_ids_only);
    TEST(test_progress_longest_silent_kept);
    TEST(test_waiting_time_runs_from_the_last_agent_leaving);
    TEST(test_refused_claim_leaves_no_note);
    return tap_done();
}
