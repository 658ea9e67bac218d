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
#include "jobexplore.h"

static const char *const inv_name[N_INV] = {
    "I1: a job ends only by its members' outcomes, every member signalled, or the operator; a "
    "node that never ran moves nobody else",
    "I2: a node is put aside only on its own evidence",
    "I3: every node failing alike at start-up puts none aside; a used budget ends the job "
    "'failed'; no agent waits without a timer",
    "I4: every connected agent of an ended job gets one outcome; one that never ran is told it "
    "ran nothing, never that the job's workers all exited 0; a cancelled job ends",
    "I5: memory equals the record; an ended job keeps none",
};

static char g_path[64];
static bool g_keep_going;
static char g_first[N_INV][1024]; /* the first (shortest) violating sequence per invariant */
static uint64_t g_nviol[N_INV];
static const void *g_checks[64][2]; /* (check, variant) that found one, each reported once */
static unsigned g_nchecks;

/* The state before a step, which the checks compare with. */
struct pre {
    bool exists;
    enum job_state st;
    uint64_t gen;
    int64_t restarts, cancelled;
    int64_t rank[NODES]; /* each node's member's node rank, -2: no member */
    int unsignalled;     /* members not signalled, the event's node left out */
    int64_t nmembers;
    int nevents[NODES], nrounds[NODES], naside[NODES], nhist_aside;
    bool ended; /* the job was seen to end */
};

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

static void bad(struct model *md, int inv, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void bad(struct model *md, int inv, const char *fmt, ...)
{
    va_list ap;

    if (md->bad[inv][0])
        return; /* the first one of the step says enough */
    md->check[inv] = fmt;
    va_start(ap, fmt);
    vsnprintf(md->bad[inv], sizeof(md->bad[inv]), fmt, ap);
    va_end(ap);
}

/* ---- the invariants ---- */

static int hist_aside(struct rdzvd_job *j)
{
    int n = 0;

    for (unsigned k = 0; j && k < j->n_hist; k++)
        n += j->hist[k].aside;
    return n;
}

static void take_pre(struct model *md, int node, struct pre *p)
{
    struct rdzvd_job *j = the_job(md);
    struct rdzv_list *pos, *tmp;
    struct rdzvd_member *m;

    memset(p, 0, sizeof(*p));
    p->ended = md->ended_seen;
    if ((p->exists = j != NULL)) {
        p->st = j->state;
        p->gen = j->generation;
        p->restarts = j->restart_count;
        p->cancelled = j->cancelled;
        p->nmembers = j->nmembers;
        p->nhist_aside = hist_aside(j);
        /* A node whose put-aside waits for the stop goes on with nobody (P4's verdict). */
        for_each_member(j, m, pos, tmp) p->unsignalled +=
            !m->signalled && !m->aside_pending && (node < 0 || m != member_of(j, node));
    }
    for (int i = 0; i < NODES; i++) {
        m = member_of(j, i);
        p->rank[i] = m ? m->node_rank : -2;
        p->nevents[i] = md->a[i].f.nevents;
        p->nrounds[i] = md->a[i].f.nrounds;
        p->naside[i] = md->a[i].naside;
    }
}

/* I1, for a step whose event (kind, node i) ended the job: may it? A failure only with the
 * budget used (or the job cancelled), or the job's last node gone without a record to wait for
 * it (issue 62, case 6); a CANCEL only when the others signalled or too few are left; LEAVE
 * (succeeded) and READY (a cancelled job stopped), timers and the operator. */
static void check_end_cause(struct model *md, int kind, int i, const struct pre *p)
{
    bool budget = p->restarts >= md->v->max_restarts, ok = p->cancelled != 0;
    struct rdzvd_job *j = the_job(md);

    if (kind == EV_OP_CANCEL || kind == EV_TIMER || kind == EV_ABANDON)
        ok = true;
    else if ((kind >= EV_EXIT_START && kind <= EV_EXIT_KILL) || kind == EV_ALL_FAIL)
        ok = budget;
    else if (kind == EV_GONE || kind == EV_UNHEALTHY)
        ok |= (p->rank[i] >= 0 && p->st == JOB_RUNNING && budget) ||
              (kind == EV_GONE && p->nmembers == 1 && p->gen > 0 && !md->v->state_dir);
    else if (kind == EV_LEAVE)
        ok = p->st == JOB_RUNNING;
    else if (kind == EV_CANCEL)
        ok |= p->st == JOB_FORMING ? p->unsignalled == 0 : p->unsignalled < md->v->min;
    else if (kind == EV_JOIN)
        ok = md->a[i].left; /* a resume that says its workers were done */
    else if (kind != EV_READY)
        ok = false;
    if (!ok)
        bad(md, I1, "the job ended '%s' on this event: %s", j ? j->outcome.type : "?",
            j ? j->outcome.summary : "(freed)");
}

/* After the event, before the agents told the outcome go. */
static void check_step(struct model *md, int kind, int i, const struct pre *p)
{
    struct rdzvd_job *j = the_job(md);
    bool ended_now = g_freed_ended || (j && j->state == JOB_ENDED);

    for (int k = 0; k < NODES; k++)
        ended_now |= md->a[k].f.nevents > p->nevents[k] && is_outcome(md->a[k].f.event.type);
    md->ended_seen |= ended_now || (kind == EV_OP_CANCEL && md->op_cancelled && !j) ||
                      (kind == EV_ABANDON && md->abandoned);
    ended_now &= p->exists && p->st != JOB_ENDED;
    if (ended_now)
        check_end_cause(md, kind, i, p);
    /* I1: a spare that never ran, or a stranger, moves nobody else. */
    if ((kind == EV_CANCEL || kind == EV_UNHEALTHY) && !md->a[i].ranked && p->exists &&
        p->gen > 0) {
        if (ended_now)
            bad(md, I1, "node-%d, which never ran, ended the job", i);
        for (int k = 0; k < NODES; k++)
            if (k != i && (md->a[k].f.nevents != p->nevents[k] ||
                           md->a[k].f.nrounds != p->nrounds[k]))
                bad(md, I1, "node-%d, which never ran, moved node-%d (now its event '%s')", i,
                    k, md->a[k].f.event.type);
    }
    /* I2: each node put aside (told so, in the history, or refused) gave its own evidence; a
     * refusal by host needs evidence from a node of that host that held a rank. */
    if (kind == EV_JOIN && md->refused == -EACCES && !md->a[i].evidence) {
        bool suspect = false;

        for (int k = 0; k < NODES; k++)
            suspect |= md->a[k].host_proof && host_of(k) == host_of(i);
        if (!suspect)
            bad(md, I2, "node-%d (host%d) refused with nothing of its own against it: %s", i,
                host_of(i), md->refused_err);
    }
    for (int k = 0; k < NODES; k++)
        if (md->a[k].naside > p->naside[k] && !md->a[k].evidence)
            bad(md, I2, "node-%d told put_aside on no evidence of its own: %s", k,
                md->a[k].f.event.summary);
    for (unsigned k = 0; j && k < j->n_hist; k++) {
        int n = -1;

        if (j->hist[k].aside && sscanf(j->hist[k].node_id, "node-%d", &n) == 1 && n >= 0 &&
            n < NODES && !md->a[n].evidence)
            bad(md, I2, "node-%d is put aside in the history on no evidence of its own: %s", n,
                j->hist[k].reason);
    }
    /* I3: a failure of every node alike is the job's; a used budget ends it. */
    if (kind == EV_ALL_FAIL && hist_aside(j) > p->nhist_aside)
        bad(md, I3, "every node failed alike at start-up, yet a node was put aside");
    if (((kind >= EV_EXIT_START && kind <= EV_EXIT_KILL) || kind == EV_ALL_FAIL) &&
        p->st == JOB_RUNNING && p->restarts >= md->v->max_restarts &&
        !(j && j->state == JOB_ENDED && !strcmp(j->outcome.type, "failed")))
        bad(md, I3, "a worker failed with the budget used (%" PRId64 " of %" PRId64 "), and the "
            "job did not end 'failed' (%s)", p->restarts, md->v->max_restarts,
            j ? rdzvd_job_state_names[j->state] : "gone");
    /* I4 (P6): an agent of the job that ended, coming back (its workers ran it), is told so. */
    if (kind == EV_JOIN && p->ended && md->refused == 0 && md->a[i].resume)
        bad(md, I4, "node-%d, an agent of the job that ended, resumed and was taken back", i);
    /* I4: one outcome each; "succeeded" only to an agent that ran; no ROUND after a cancel. */
    for (int k = 0; k < NODES; k++) {
        struct agent *a = &md->a[k];

        if (a->noutcome > 1)
            bad(md, I4, "node-%d got %d outcomes", k, a->noutcome);
        if (j && j->state == JOB_ENDED && a->st == A_IN && a->f.m && !a->f.closed &&
            a->noutcome != 1)
            bad(md, I4, "the job ended '%s' and connected node-%d got no outcome",
                j->outcome.type, k);
        if (a->nsucceeded && !a->f.nrounds)
            bad(md, I4, "node-%d, which never got a ROUND, was told the job succeeded, not that "
                "it ran nothing", k);
        if (md->op_cancelled && kind != EV_OP_CANCEL && a->f.nrounds > p->nrounds[k])
            bad(md, I4, "node-%d got a ROUND (generation %" PRIu64 ") after the operator "
                "cancelled the job", k, a->f.round.generation);
    }
}

/* I5: the job's memory against its record (test-job-model.c's check); an ended job keeps none. */
static void check_record(struct model *md)
{
    struct rdzvd_job *j = the_job(md);
    struct rdzvd_job_record rec;
    int r = record_of(md, &rec);
    bool same = r < 0 || !j || j->state == JOB_ENDED || rec.n_hist == j->n_hist;
    uint64_t last;

    for (unsigned k = 0; same && r == 0 && j && j->state != JOB_ENDED && k < j->n_hist; k++)
        same = !strcmp(rec.hist[k].node_id, j->hist[k].node_id) &&
               rec.hist[k].failures == j->hist[k].failures &&
               rec.hist[k].aside == j->hist[k].aside &&
               !strcmp(rec.hist[k].reason, j->hist[k].reason);
    if (!same)
        bad(md, I5, "the history in memory (%u entries) is not the record's (%u)", j->n_hist,
            rec.n_hist);
    if (!j || j->state == JOB_ENDED) {
        if (r == 0 && (j || md->ended_seen))
            bad(md, I5, "the job ended, yet its record stays");
    } else if (j->state == JOB_RUNNING || j->state == JOB_STOPPING) {
        same = r == 0 && rec.running == (j->state == JOB_RUNNING) &&
               rec.generation == j->generation && rec.restart_count == j->restart_count;
    } else { /* the record is the last stopped generation's; NCCL is one past it */
        last = j->generation - (j->state == JOB_NCCL);
        same = r < 0 ? last == 0
                     : !rec.running && rec.generation == last &&
                           rec.restart_count == j->restart_count;
    }
    if (!same)
        bad(md, I5, "%s at generation %" PRIu64 " restart %" PRId64 " in memory; the record: "
            "%s generation %" PRIu64 " restart %" PRId64, rdzvd_job_state_names[j->state],
            j->generation, j->restart_count, r < 0 ? "none" : rec.running ? "running" : "stopped",
            rec.generation, rec.restart_count);
    rdzvd_job_record_clear(&rec);
}

/* A connected member of j told to stop its workers and yet to answer READY: the job waits for
 * that agent, which will answer. */
static bool awaits_ready(struct rdzvd_job *j)
{
    struct rdzv_list *pos, *tmp;
    struct rdzvd_member *m;

    for_each_member(j, m, pos, tmp) if (!m->ready && m->peer && !m->away) return true;
    return false;
}

static void check_after_reap(struct model *md, int kind, const struct pre *p)
{
    struct rdzvd_job *j = the_job(md);

    md->ended_seen |= j && j->state == JOB_ENDED;
    if (p->exists && p->cancelled && p->st != JOB_ENDED && !j && !md->ended_seen &&
        kind != EV_RESTART)
        bad(md, I4, "the job, cancelled while %s, left memory without an outcome",
            rdzvd_job_state_names[p->st]);
    if (j && (j->state == JOB_FORMING || j->state == JOB_NCCL) && j->nmembers > 0 &&
        !j->timer_armed && !awaits_ready(j))
        bad(md, I3, "%" PRId64 " agent(s) wait in a %s job with no timer armed", j->nmembers,
            rdzvd_job_state_names[j->state]);
    if (md->v->state_dir && md->checking)
        check_record(md);
}

static void apply(struct model *md, uint8_t code)
{
    int kind = code < EV_NODE_KINDS * NODES ? code / NODES : code - JOB_EV(EV_NODE_KINDS) +
                                                                  EV_NODE_KINDS;
    int i = code < EV_NODE_KINDS * NODES ? code % NODES : -1;
    struct agent *a = i >= 0 ? &md->a[i] : NULL;
    struct pre p;
    char err[256];

    memset(md->bad, 0, sizeof(md->bad));
    md->label[0] = '\0';
    g_freed_ended = false;
    if (i >= 0)
        say(md, "node-%d ", i);
    say(md, "%s", kind_names[kind]);
    take_pre(md, i, &p);
    switch (kind) {
    case EV_JOIN:
        ev_join(md, i);
        break;
    case EV_BLIP:
        rdzvd_member_mark_stall(a->f.m);
        /* fall through */
    case EV_GONE:
        rdzvd_member_gone(a->f.m);
        a->f.m = NULL;
        a->st = A_LOST;
        break;
    case EV_EXIT_START:
    case EV_EXIT_LATE:
    case EV_EXIT_KILL:
        ev_exit(md, i, kind);
        break;
    case EV_UNHEALTHY:
        a->evidence = true;
        a->host_proof |= a->ranked;
        rdzvd_member_unhealthy(a->f.m, "disk gone");
        break;
    case EV_CANCEL:
        a->cancel_sent = true;
        rdzvd_member_cancel(a->f.m, SIGTERM, "");
        break;
    case EV_LEAVE:
        a->left = true;
        a->workers = false;
        rdzvd_member_leave(a->f.m, a->f.round.generation, true);
        break;
    case EV_ALL_FAIL:
        ev_all_fail(md);
        break;
    case EV_READY:
        ev_ready(md);
        break;
    case EV_TIMER:
        ev_timer(md);
        break;
    case EV_OP_CANCEL:
        md->op_cancelled = rdzvd_jobs_cancel(&md->e.h, "job", "op", err, sizeof(err)) == 0;
        break;
    case EV_RESTART:
        ev_restart(md);
        break;
    case EV_ABANDON:
        md->abandoned = rdzvd_jobs_end_waiting(&md->e.h, "job", "abandoned", 1, "abandoned",
                                               err, sizeof(err)) == 0;
        if (!md->abandoned)
            bad(md, I5, "the job waiting in its record was not ended: %s", err);
        break;
    }
    check_step(md, kind, i, &p);
    reap(md);
    check_after_reap(md, kind, &p);
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

/* A set of 64-bit keys (never 0), open addressing. */
struct keyset {
    uint64_t *k;
    size_t n, cap;
};

static bool keyset_add(struct keyset *ks, uint64_t key)
{
    size_t i;

    if (2 * (ks->n + 1) > ks->cap) {
        struct keyset big = {.cap = ks->cap ? 2 * ks->cap : 1 << 16};

        ASSERT_NOT_NULL(big.k = calloc(big.cap, sizeof(*big.k)));
        for (size_t k = 0; k < ks->cap; k++)
            if (ks->k[k])
                keyset_add(&big, ks->k[k]);
        free(ks->k);
        *ks = big;
    }
    for (i = key & (ks->cap - 1); ks->k[i]; i = (i + 1) & (ks->cap - 1))
        if (ks->k[i] == key)
            return false;
    ks->k[i] = key;
    ks->n++;
    return true;
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
    /* In memory where it can be: each replay creates the job table's journal afresh, and its
     * creation syncs the directory. */
    snprintf(g_path, sizeof(g_path), "/dev/shm/rdzv-test-job-explore-XXXXXX");
    if (!mkdtemp(g_path)) {
        snprintf(g_path, sizeof(g_path), "/tmp/rdzv-test-job-explore-XXXXXX");
        ASSERT_NOT_NULL(mkdtemp(g_path));
    }
    g_fd = open(g_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    ASSERT_TRUE(g_fd >= 0);
    TEST(test_explore_fixed);
    TEST(test_explore_elastic);
    TEST(test_explore_state_dir);
    TEST(test_no_violation);
    printf("# %.1f s in all\n", (double)(real_ms() - t0) / 1000);
    jt_state_dir_done(g_fd, g_path);
    return tap_done();
}
