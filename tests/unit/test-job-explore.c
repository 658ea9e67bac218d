/* SPDX-License-Identifier: Apache-2.0 */
/* test-job-explore.c: an exhaustive, bounded, breadth-first exploration of the job state machine.
 * A small job (jobexplore.h: node-0 and node-1 its members, node-2 a spare, or its third node in
 * the 2..3 variant; node-3 a stranger that joins once the job formed, naming node-0's host) is
 * driven by every sequence of abstract events up to a depth: JOINs and reconnects (a resume
 * while the agent's workers run), connections closed (plainly, or after rdzvd stalled: the
 * member is kept), worker exits (at start-up, after progress, killed from outside), every node
 * failing at start-up, UNHEALTHY, CANCEL, LEAVE, READY, the next timer, the operator's
 * CANCEL_JOB and (with a state directory) rdzvd restarted on its record, and --abandon-after
 * ending the job while it waits in its record.
 *
 * The machine lives on a uv loop with timers, so a state cannot be copied: each sequence is
 * replayed from a fresh host. After it, an abstract key of the state is made (the job's state,
 * generation and restart count, each node's member and agent, the failure history, the record);
 * a sequence whose key was seen before is not extended, so equal states are explored once and
 * the first sequence to reach a state is a shortest one. After every step the invariants I1..I5
 * (inv_name) are checked; a violation prints the sequence that reached it, event by event. By
 * default the first fails the test; RDZV_EXPLORE_KEEP_GOING=1 goes on, prints the shortest
 * sequence of each check that fails in each variant, and fails at the end. RDZV_EXPLORE_DEPTH=N
 * sets every variant's depth; RDZV_EXPLORE_SECONDS=S (default 60) is the wall time after which
 * it stops extending and says how far it got. tests/bench/explore-deep.sh goes deeper. */
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/syscall.h>
#include <time.h>

#include "common/rdzv-log.h"
#include "jobcheck.h"

static char g_path[64];
static bool g_keep_going;
static char g_first[N_INV][1024]; /* the first (shortest) violating sequence per invariant */
static uint64_t g_nviol[N_INV];
static const void *g_checks[64][2]; /* (check, variant) that found one, each reported once */
static unsigned g_nchecks;

static bool check_new(const char *fmt, const void *v)
{
    for (unsigned k = 0; k < g_nchecks; k++)
        if (g_checks[k][0] == fmt && g_checks[k][1] == v)
            return false;
    if (g_nchecks < 64) {
        g_checks[g_nchecks][0] = fmt;
        g_checks[g_nchecks++][1] = v;
    }
    return true;
}

static uint64_t real_ms(void)
{
    struct timespec ts;

    syscall(SYS_clock_gettime, CLOCK_MONOTONIC, &ts); /* the real clock, not the injected one */
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* ---- replay and breadth-first search ---- */

struct seq {
    uint8_t ev[MAX_DEPTH];
    uint8_t len;
    uint64_t enabled; /* the events enabled after it, one bit per code */
};

struct seqs {
    struct seq *s;
    size_t n, cap;
};

static void seqs_push(struct seqs *q, const struct seq *s)
{
    if (q->n == q->cap) {
        q->cap = q->cap ? 2 * q->cap : 1024;
        q->s = realloc(q->s, q->cap * sizeof(*q->s));
        ASSERT_NOT_NULL(q->s);
    }
    q->s[q->n++] = *s;
}

/* Fail the test on what invariant inv found, leaving no state directory behind. */
static void fail(int inv)
{
    (void)rdzvd_journal_unlink(g_fd, "jobs");
    close(g_fd);
    rmdir(g_path);
    tap_fail(__FILE__, __LINE__, "%s", g_first[inv]);
}

/* Print the sequence s replayed, with what each event did, after what check inv found. */
static void report(const struct variant *v, const struct seq *s, int inv, const char *what)
{
    struct model *md = calloc(1, sizeof(*md));
    size_t used = g_first[inv][0] ? sizeof(g_first[inv])
                                  : (size_t)snprintf(g_first[inv], sizeof(g_first[inv]),
                                                     "%s: %s (variant %s)", inv_name[inv], what,
                                                     v->name);

    ASSERT_NOT_NULL(md);
    printf("# VIOLATION %.2s: %s\n#   after %u events (variant %s):\n", inv_name[inv], what,
           s->len, v->name);
    model_begin(md, v);
    md->verbose = true;
    for (unsigned k = 0; k < s->len; k++) {
        apply(md, s->ev[k]);
        printf("#     %2u. %s\n", k + 1, md->label);
        if (used < sizeof(g_first[inv]))
            used += (size_t)snprintf(g_first[inv] + used, sizeof(g_first[inv]) - used,
                                     "\n  %u. %s", k + 1, md->label);
    }
    model_end(md);
    free(md);
    fflush(stdout);
}

/* Explore v breadth-first to depth, or until the deadline (real ms). */
static void explore(const struct variant *v, int depth, uint64_t deadline)
{
    struct model *md = calloc(1, sizeof(*md));
    struct seqs cur = {0}, next = {0};
    struct keyset seen = {0};
    struct seq root = {.len = 0};
    uint64_t nseq = 0, t0 = real_ms(), viol_before[N_INV];
    int reached = 0;
    bool stopped = false;

    ASSERT_NOT_NULL(md);
    memcpy(viol_before, g_nviol, sizeof(viol_before));
    model_begin(md, v);
    keyset_add(&seen, state_key(md));
    root.enabled = enabled(md);
    model_end(md);
    seqs_push(&cur, &root);
    for (int d = 0; d < depth && cur.n && !stopped; d++) {
        for (size_t q = 0; q < cur.n && !stopped; q++) {
            for (uint8_t code = 0; code < N_CODES && !stopped; code++) {
                struct seq c = cur.s[q];
                bool fresh;

                if (!(c.enabled >> code & 1))
                    continue;
                if ((stopped = real_ms() > deadline))
                    break;
                c.ev[c.len++] = code;
                model_begin(md, v);
                for (unsigned k = 0; k < c.len; k++) {
                    md->checking = k + 1 == c.len;
                    apply(md, c.ev[k]);
                }
                nseq++;
                fresh = keyset_add(&seen, state_key(md));
                c.enabled = fresh ? enabled(md) : 0;
                model_end(md);
                for (int inv = 0; inv < N_INV; inv++) {
                    if (!md->bad[inv][0])
                        continue;
                    g_nviol[inv]++;
                    if (check_new(md->check[inv], v)) {
                        report(v, &c, inv, md->bad[inv]);
                        if (!g_keep_going)
                            fail(inv);
                    }
                }
                if (fresh && c.enabled)
                    seqs_push(&next, &c);
            }
        }
        reached = stopped ? d : d + 1;
        free(cur.s);
        cur = next;
        next = (struct seqs){0};
    }
    if (stopped)
        printf("# stopped after %.1f s (RDZV_EXPLORE_SECONDS): depth %d done, %zu states at it "
               "left unexplored\n", (double)(real_ms() - t0) / 1000, reached, cur.n);
    printf("# explored %zu distinct states, %" PRIu64 " sequences, depth %d (variant %s, %.1f s)\n",
           seen.n, nseq, reached, v->name, (double)(real_ms() - t0) / 1000);
    for (int inv = 0; inv < N_INV; inv++)
        if (g_nviol[inv] > viol_before[inv])
            printf("#   %" PRIu64 " sequences violate %.2s\n", g_nviol[inv] - viol_before[inv],
                   inv_name[inv]);
    fflush(stdout);
    free(next.s);
    free(cur.s);
    free(seen.k);
    free(md);
}

static const struct variant variants[] = {
    {"2:2 with a spare and a stranger", 2, 2, 1, 1, false, 7},
    {"2..3 elastic with a stranger, --bad-node-failures 2 --max-restarts 2", 2, 3, 2, 2, false,
     7},
    {"2:2 with a spare and a stranger, --state-dir", 2, 2, 1, 1, true, 6},
    {.name = "2:2 with a spare that never runs and a stranger", .min = 2, .max = 2,
     .bad_node_failures = 1, .max_restarts = 1, .depth = 6, .silent_spare = true},
};
#define N_VARIANTS (int)(sizeof(variants) / sizeof(variants[0]))
static uint64_t g_deadline;

static uint64_t env_u64(const char *name, uint64_t dflt)
{
    const char *s = getenv(name);

    return s && *s ? strtoull(s, NULL, 10) : dflt;
}

static void run_variant(int k)
{
    uint64_t now = real_ms(), left = g_deadline > now ? g_deadline - now : 0;
    uint64_t depth = env_u64("RDZV_EXPLORE_DEPTH", (uint64_t)variants[k].depth);

    /* A fair share of the time left to each variant still to run. */
    explore(&variants[k], depth > MAX_DEPTH ? MAX_DEPTH : (int)depth,
            now + left / (uint64_t)(N_VARIANTS - k));
}

static void test_explore_fixed(void)
{
    run_variant(0);
}

static void test_explore_elastic(void)
{
    run_variant(1);
}

static void test_explore_state_dir(void)
{
    run_variant(2);
}

static void test_explore_silent_spare(void)
{
    run_variant(3);
}

/* With RDZV_EXPLORE_KEEP_GOING=1 the variants went on past their violations: fail here. */
static void test_no_violation(void)
{
    for (int inv = 0; inv < N_INV; inv++)
        printf("# %.2s %s\n", inv_name[inv], g_nviol[inv] ? "VIOLATED" : "holds");
    for (int inv = 0; inv < N_INV; inv++)
        if (g_nviol[inv])
            fail(inv);
}

int main(void)
{
    uint64_t t0 = real_ms();

    rdzv_log_setup("test-job-explore", RDZV_LOG_ERROR);
    g_keep_going = env_u64("RDZV_EXPLORE_KEEP_GOING", 0) != 0;
    g_deadline = t0 + 1000 * env_u64("RDZV_EXPLORE_SECONDS", 60);
    g_fd = state_dir_open(g_path, sizeof(g_path), "test-job-explore");
    TEST(test_explore_fixed);
    TEST(test_explore_elastic);
    TEST(test_explore_state_dir);
    TEST(test_explore_silent_spare);
    TEST(test_no_violation);
    printf("# %.1f s in all\n", (double)(real_ms() - t0) / 1000);
    jt_state_dir_done(g_fd, g_path);
    return tap_done();
}
