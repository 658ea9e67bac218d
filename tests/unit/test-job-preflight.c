/* SPDX-License-Identifier: Apache-2.0 */
/* test-job-preflight.c: the network pre-flight in the job machine (daemon/job/
 * rdzvd-job-preflight.c), driven with fake agents (jobtest.h). Four nodes with --preflight net:
 * the round holds while they measure their links; a node that reports its links slow (a liar)
 * gets itself put aside (reason network, EVENT put_aside with its figures), never its peer;
 * a prober that does not answer counts as unreachable when the slot's bound runs out, and is
 * put aside alone; honest fast links put nobody aside; with the check off nothing is sent; a
 * job rebuilt from its record keeps the check; 1,000 nodes with one slow, timed. */
#include <time.h>

#include "common/rdzv-log.h"
#include "jobtest.h"
#include "daemon/data/rdzvd-config.h"

#define NODES 4
#define PORT0 5000
#define FAST 900.0

/* Node i's JOIN: nodes 3..4 of a job, its listener on port PORT0 + i. */
static struct rdzv_join pf_join(int i, bool on)
{
    struct rdzv_join jn = join_of(i, 3, 4, 2);

    jn.preflight.on = on;
    jn.preflight.fraction = 0.25;
    snprintf(jn.preflight.addr, sizeof(jn.preflight.addr), "10.0.0.%d", i + 1);
    jn.preflight.port = PORT0 + i;
    snprintf(jn.preflight.token, sizeof(jn.preflight.token), "%032x", i);
    return jn;
}

/* Answer every PREFLIGHT not answered yet, until none is left: node liar reports 1 MB/s, node
 * mute does not answer (-1: none), the others FAST. Returns how many were answered. */
static int answer(struct fake *f, int *answered, int liar, int mute)
{
    int n = 0;

    for (bool more = true; more;) {
        more = false;
        for (int i = 0; i < NODES; i++) {
            if (f[i].closed || f[i].npf == answered[i] || i == mute)
                continue;
            answered[i] = f[i].npf;
            ASSERT_TRUE(f[i].pf.port >= PORT0 && f[i].pf.port < PORT0 + NODES);
            ASSERT_TRUE(f[i].pf.port != PORT0 + i);
            jt_pf_report(f[i].m, f[i].pf.id, i == liar ? 1.0 : FAST, i == liar ? 1.0 : FAST);
            n++;
            more = true;
        }
    }
    return n;
}

static const struct rdzvd_job *job_of(struct env *e)
{
    return rdzvd_job_view(&e->jobs, "job");
}

/* Four nodes join; checks that the round holds for the check. */
static void join_four(struct env *e, struct fake *f, bool on)
{
    memset(f, 0, sizeof(*f) * NODES);
    for (int i = 0; i < NODES; i++) {
        struct rdzv_join jn = pf_join(i, on);

        ASSERT_OK(join(e, &f[i], &jn));
    }
}

static int rounds(const struct fake *f)
{
    int n = 0;

    for (int i = 0; i < NODES; i++)
        n += f[i].nrounds;
    return n;
}

/* Node 0 lies (it probes node 1 in round 1): it is put aside, node 1 is not. */
static void test_a_liar_is_put_aside_not_its_peer(void)
{
    struct fake f[NODES];
    struct env e;
    int answered[NODES] = {0};
    uint64_t before;

    env_init(&e, -1);
    before = e.h.steps->counts.put_aside[RDZVD_ASIDE_NETWORK];
    join_four(&e, f, true);
    ASSERT_EQ(rounds(f), 0); /* held for the check */
    ASSERT_TRUE(f[0].npf == 1 && f[0].pf.port == PORT0 + 1);
    ASSERT_EQ(strcmp(f[0].pf.addr, "10.0.0.2"), 0);
    ASSERT_TRUE(answer(f, answered, 0, -1) >= 6); /* round 1, and round 2's two slots */
    ASSERT_TRUE(f[0].closed && event_is(&f[0], "put_aside"));
    ASSERT_EQ(f[0].event.exit_code, RDZV_EXIT_PUT_ASIDE);
    ASSERT_NOT_NULL(strstr(f[0].event.summary, "network pre-flight: link to host"));
    ASSERT_NOT_NULL(strstr(f[0].event.summary, "1.0 MB/s, job median 900 MB/s"));
    for (int i = 1; i < NODES; i++) {
        ASSERT_TRUE(!f[i].closed);
        ASSERT_EQ(f[i].nrounds, 1);
        ASSERT_EQ(f[i].round.nnodes, 3);
    }
    ASSERT_EQ(e.h.steps->counts.put_aside[RDZVD_ASIDE_NETWORK], before + 1);
    ASSERT_NOT_NULL(rdzvd_job_hist_find(job_of(&e), "node-0"));
    ASSERT_NULL(rdzvd_job_hist_find(job_of(&e), "node-1"));
    env_done(&e);
}

/* Node 2 never answers: when the slot's bound runs out its links are unreachable, and it alone
 * is put aside. Nothing is decided before the bound. */
static void test_a_silent_prober_counts_as_unreachable(void)
{
    struct fake f[NODES];
    struct env e;
    int answered[NODES] = {0};

    env_init(&e, -1);
    join_four(&e, f, true);
    answer(f, answered, -1, 2);
    run_ms(&e, 2 * RDZVD_PF_BOUND_MS + RDZVD_PF_SLOT_MARGIN_MS - 1);
    ASSERT_EQ(rounds(f), 0);
    for (int s = 0; s < 3; s++) { /* each slot waits for it in turn */
        run_ms(&e, 2 * RDZVD_PF_BOUND_MS + RDZVD_PF_SLOT_MARGIN_MS);
        answer(f, answered, -1, 2);
    }
    ASSERT_TRUE(f[2].closed && event_is(&f[2], "put_aside"));
    ASSERT_NOT_NULL(strstr(f[2].event.summary, "unreachable"));
    for (int i = 0; i < NODES; i++)
        if (i != 2)
            ASSERT_TRUE(!f[i].closed && f[i].nrounds == 1);
    env_done(&e);
}

/* Honest fast links: one slot, nobody put aside, every node placed or spare; a report of a
 * link that is not its own is ignored. The status shows each node's fastest link. */
static void test_fast_links_put_nobody_aside(void)
{
    struct fake f[NODES];
    struct env e;
    int answered[NODES] = {0};

    env_init(&e, -1);
    join_four(&e, f, true);
    ASSERT_EQ(f[1].npf, 0); /* node 1 is probed, it does not probe */
    jt_pf_report(f[1].m, f[0].pf.id, 0.5, 0.5); /* not its link: ignored */
    ASSERT_EQ(answer(f, answered, -1, -1), 2);
    for (int i = 0; i < NODES; i++)
        ASSERT_TRUE(!f[i].closed && f[i].nrounds == 1 && f[i].round.nnodes == 4);
    struct rdzv_status st;
    const struct rdzv_status_job *sj = status_of(&e, &st);

    for (int i = 0; i < NODES; i++) {
        char host[16];

        snprintf(host, sizeof(host), "host%d", i);
        ASSERT_NOT_NULL(node_of(sj, host));
        ASSERT_TRUE(node_of(sj, host)->preflight_mbps == FAST);
    }
    rdzv_status_free(&st);
    env_done(&e);
}

/* 1,000 nodes, one of them slow (it probes its round 1 peer, and its round 2 referees): both
 * rounds and the verdict through the machine's steps, with each fake answering at once. Only
 * the slow node is put aside; the machine's time for it all is printed (docs/BENCHMARKS.md). */
static void test_1000_nodes(void)
{
    enum { N = 1000, SLOW = 500 };
    struct fake *f = calloc(N, sizeof(*f));
    int *answered = calloc(N, sizeof(*answered)), placed = 0, slots = 0;
    struct timespec t0, t1;
    struct env e;

    ASSERT_NOT_NULL(f);
    ASSERT_NOT_NULL(answered);
    env_init(&e, -1);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < N; i++) {
        struct rdzv_join jn = pf_join(i, true);

        jn.min = N - 1;
        jn.max = N;
        jn.preflight.port = 1 + i;
        ASSERT_OK(join(&e, &f[i], &jn));
    }
    for (bool more = true; more; slots++) {
        more = false;
        for (int i = 0; i < N; i++) {
            double v = i == SLOW ? 1.0 : FAST;

            if (f[i].closed || f[i].npf == answered[i])
                continue;
            answered[i] = f[i].npf;
            jt_pf_report(f[i].m, f[i].pf.id, v, v);
            more = true;
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    for (int i = 0; i < N; i++)
        placed += f[i].nrounds;
    ASSERT_TRUE(f[SLOW].closed && event_is(&f[SLOW], "put_aside"));
    ASSERT_EQ(placed, N - 1);
    printf("# %d nodes: %d passes of reports, the joins, both rounds and the verdict in %.0f ms\n",
           N, slots - 1,
           (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6);
    env_done(&e);
    free(answered);
    free(f);
}

/* rdzvd restarts on its --state-dir while a generation of a --preflight net job runs: the job
 * rebuilt from its record at start (no JOIN yet) keeps the check on, with its fraction, so its
 * next rounds are checked. The record keeps the setting; one without it (an older rdzvd's, or a
 * job without the check) reads as off. */
static void test_a_rebuilt_job_keeps_its_preflight(void)
{
    struct rdzvd_job_record rec = jt_running_record(4), got;
    const struct rdzvd_job *j;
    char path[64];
    struct env e;
    int fd = jt_state_dir(path, sizeof(path));

    rec.settings.preflight_fraction = 0.3; /* as a JOIN with --preflight-fraction 0.3 sets it */
    jt_record_save(fd, &rec);
    snprintf(rec.run_id, sizeof(rec.run_id), "plain");
    rec.settings.preflight_fraction = 0;
    jt_record_save(fd, &rec);
    env_init(&e, fd);
    jt_rebuild(&e.h);
    ASSERT_NOT_NULL(j = job_of(&e));
    ASSERT_TRUE(j->pf_on);
    ASSERT_TRUE(j->pf_fraction == 0.3);
    ASSERT_OK(rdzvd_job_record_get(e.table, "job", &got));
    ASSERT_TRUE(got.has_settings && got.settings.preflight_fraction == 0.3);
    rdzvd_job_record_clear(&got);
    ASSERT_NOT_NULL(j = rdzvd_job_view(&e.jobs, "plain"));
    ASSERT_FALSE(j->pf_on);
    env_done(&e);
    rdzvd_job_record_clear(&rec);
    jt_state_dir_done(fd, path);
}

/* Off (no JOIN preflight): no PREFLIGHT, the round closes at once. */
static void test_off_sends_nothing(void)
{
    struct fake f[NODES];
    struct env e;

    env_init(&e, -1);
    join_four(&e, f, false);
    for (int i = 0; i < NODES; i++)
        ASSERT_TRUE(f[i].npf == 0 && f[i].nrounds == 1);
    struct rdzv_status st;
    const struct rdzv_status_job *sj = status_of(&e, &st);

    ASSERT_TRUE(node_of(sj, "host0")->preflight_mbps == -1); /* not checked */
    rdzv_status_free(&st);
    env_done(&e);
}

/* Nodes 0, 1 and 2 of a job of --nnodes 3 join: the check (a trio) starts. */
static void join_three(struct env *e, struct fake *f, int64_t join_timeout_ms)
{
    memset(f, 0, sizeof(*f) * NODES);
    for (int i = 0; i < 3; i++) {
        struct rdzv_join jn = pf_join(i, true);

        jn.max = 3;
        jn.join_timeout_ms = join_timeout_ms;
        ASSERT_OK(join(e, &f[i], &jn));
    }
}

/* Answer each PREFLIGHT due now once, node slow at 1 MB/s, the others FAST; how many. */
static int answer_once(struct fake *f, int n, int *answered, int slow)
{
    int k = 0;

    for (int i = 0; i < n; i++) {
        if (f[i].closed || f[i].npf == answered[i])
            continue;
        answered[i] = f[i].npf;
        jt_pf_report(f[i].m, f[i].pf.id, i == slow ? 1.0 : FAST, i == slow ? 1.0 : FAST);
        k++;
    }
    return k;
}

/* --nnodes 3 and a late spare (issue 75's bench, where a job never formed). Node 0 is put aside
 * by the first check; node 3 joins during it, so a second check takes nodes 1, 2 and 3. There
 * node 1's links measure slow (two namespaces of one busy host). Node 1 was judged fine by the
 * first check: the second does not put it aside, so two checks never leave the job under MIN.
 * The round forms within the two checks' bound: seven slots each. */
static void test_a_late_spare_puts_no_checked_node_aside(void)
{
    const uint64_t slot = 2 * RDZVD_PF_BOUND_MS + RDZVD_PF_SLOT_MARGIN_MS;
    struct fake f[NODES];
    struct env e;
    int answered[NODES] = {0};

    env_init(&e, -1);
    join_three(&e, f, 600000);
    ASSERT_TRUE(answer_once(f, 3, answered, 0) >= 1); /* the trio's first slots */
    ASSERT_TRUE(!f[0].closed && rounds(f) == 0);        /* its last slot still due */
    struct rdzv_join jn = pf_join(3, true);

    jn.max = 3;
    ASSERT_OK(join(&e, &f[3], &jn)); /* the spare, during the check */
    uint64_t t0 = jt_now_ms();
    ASSERT_EQ(answer_once(f, 1, answered, 0), 1); /* the last slot: node 0 probes node 2 */
    ASSERT_TRUE(!f[0].closed && f[0].pf.full);    /* the confirmation: node 0's full probe */
    ASSERT_EQ(answer_once(f, 1, answered, 0), 1);
    ASSERT_EQ(answer_once(f, 3, answered, 0), 1); /* the reference: node 1 probes node 2 */
    ASSERT_TRUE(f[0].closed && event_is(&f[0], "put_aside"));
    ASSERT_EQ(rounds(f), 0); /* the second check: nodes 1, 2 and 3 */
    for (int s = 0; s < 10 && rounds(f) == 0; s++) {
        if (answer_once(f, NODES, answered, 1) == 0)
            run_ms(&e, slot);
    }
    for (int i = 1; i < NODES; i++) {
        ASSERT_TRUE(!f[i].closed);
        ASSERT_EQ(f[i].nrounds, 1);
        ASSERT_EQ(f[i].round.nnodes, 3);
    }
    ASSERT_TRUE(jt_now_ms() - t0 <= 2 * 7 * slot);
    ASSERT_NULL(rdzvd_job_hist_find(job_of(&e), "node-1"));
    env_done(&e);
}

/* Issue 75's noise at the default fraction: three namespaces of one 2-CPU host, where the link
 * whose two ends share a CPU measures 6.5 GB/s in 16 MiB, and node 2's links 1.3 GB/s. Both rounds
 * find node 2 bad; its full probe and the reference (the whole window) measure alike, so the
 * confirmation clears it: nobody is put aside, and the round forms with all three. */
static void test_a_noisy_honest_node_is_cleared_by_its_full_probe(void)
{
    struct fake f[NODES];
    struct env e;
    int answered[NODES] = {0};
    int full = 0;

    env_init(&e, -1);
    join_three(&e, f, 600000);
    for (bool more = true; more;) {
        more = false;
        for (int i = 0; i < 3; i++) {
            double v = i == 2 || f[i].pf.port == PORT0 + 2 ? 1300 : 6500;

            if (f[i].closed || f[i].npf == answered[i])
                continue;
            answered[i] = f[i].npf;
            full += f[i].pf.full;
            if (f[i].pf.full)
                v = 1500;
            jt_pf_report(f[i].m, f[i].pf.id, v, v);
            more = true;
        }
    }
    for (int i = 0; i < 3; i++)
        ASSERT_TRUE(!f[i].closed && f[i].nrounds == 1 && f[i].round.nnodes == 3);
    ASSERT_EQ(full, 2); /* node 2's full probe, and the reference */
    ASSERT_NULL(rdzvd_job_hist_find(job_of(&e), "node-2"));
    env_done(&e);
}

/* Every prober silent: the check ends within seven slot bounds (three for the trio here), nobody
 * is put aside (no link measured: no median), and the round forms. */
static void test_a_silent_check_ends_within_its_bound(void)
{
    struct fake f[NODES];
    struct env e;

    env_init(&e, -1);
    join_three(&e, f, 600000);
    run_ms(&e, 5 * (2 * RDZVD_PF_BOUND_MS + RDZVD_PF_SLOT_MARGIN_MS));
    for (int i = 0; i < 3; i++)
        ASSERT_TRUE(!f[i].closed && f[i].nrounds == 1);
    env_done(&e);
}

/* --nnodes 3, three nodes, one put aside: the round waits under MIN for the join timeout, as
 * --nnodes says, then the job fails, and its reason names the pre-flight. */
static void test_under_min_after_the_check_fails_with_its_reason(void)
{
    struct fake f[NODES];
    struct env e;
    int answered[NODES] = {0};

    env_init(&e, -1);
    join_three(&e, f, 30000); /* a join timeout within the heartbeat timeout */
    while (answer_once(f, 3, answered, 0) > 0)
        ;
    ASSERT_TRUE(f[0].closed && rounds(f) == 0);
    run_ms(&e, 30000);
    ASSERT_TRUE(event_is(&f[1], "failed"));
    ASSERT_NOT_NULL(strstr(f[1].event.summary, "the network pre-flight put 1 node(s) aside"));
    env_done(&e);
}

int main(void)
{
    rdzv_log_setup("test-job-preflight", RDZV_LOG_ERROR);
    TEST(test_a_liar_is_put_aside_not_its_peer);
    TEST(test_a_silent_prober_counts_as_unreachable);
    TEST(test_fast_links_put_nobody_aside);
    TEST(test_off_sends_nothing);
    TEST(test_a_rebuilt_job_keeps_its_preflight);
    TEST(test_1000_nodes);
    TEST(test_a_late_spare_puts_no_checked_node_aside);
    TEST(test_a_noisy_honest_node_is_cleared_by_its_full_probe);
    TEST(test_a_silent_check_ends_within_its_bound);
    TEST(test_under_min_after_the_check_fails_with_its_reason);
    return tap_done();
}
