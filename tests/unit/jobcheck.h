/* SPDX-License-Identifier: Apache-2.0 */
/* jobcheck.h: the invariants I1..I5 of the job machine, checked around each abstract event of
 * jobexplore.h's model (take_pre before it, check_step and check_after_reap after), the event
 * applied with its checks (apply), and a set of state keys. Shared by the explorer
 * (test-job-explore.c: every order, small depth) and the simulator (test-job-sim.c: random
 * events, many of them, small bounds), so that both check the same things. For those two only,
 * each includes it once, after jobexplore.h. */
#pragma once
#include "jobexplore.h"

static const char *const inv_name[N_INV] = {
    "I1: a job ends only by its members' outcomes, every member signalled, or the operator; a "
    "node that never ran moves nobody else, and its loss spends no restart of the budget",
    "I2: a node is put aside only on its own evidence",
    "I3: every node failing alike at start-up puts none aside; a used budget ends the job "
    "'failed'; no agent waits without a timer",
    "I4: every connected agent of an ended job gets one outcome; one that never ran is told it "
    "ran nothing, never that the job's workers all exited 0; a cancelled job ends",
    "I5: memory equals the record; an ended job keeps none",
};

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
    bool spent; /* the job's bound on restarts not counted was spent (job-policy.md P8) */
};

/* The node whose worker failure made the restart (the event's; for every node failing, the
 * first to report) joined late and rdzvd had not seen it run, within P8's bound: its failure is a
 * claim, not counted (P7d). */
static bool exit_unran(const struct model *md, int kind, int i, const struct pre *p)
{
    if (kind == EV_ALL_FAIL)
        for (i = 0; i < NODES && !(p->rank[i] >= 0 && md->a[i].st == A_IN); i++)
            ;
    return i >= 0 && i < NODES && md->a[i].late && !p->spent;
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

static int hist_aside(const struct rdzvd_job *j)
{
    int n = 0;

    for (unsigned k = 0; j && k < j->n_hist; k++)
        n += j->hist[k].aside;
    return n;
}

static void take_pre(struct model *md, int node, struct pre *p)
{
    const struct rdzvd_job *j = the_job(md);
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
        for (unsigned k = 0; k < j->n_uncounted; k++) /* P8's count, by the machine's clock */
            p->spent |= k + 1 >= RDZVD_JOB_UNCOUNTED_RESTARTS &&
                        (int64_t)(rdzvd_job_wall_s(&j->host) * 1000) - j->uncounted_ms[0] <
                            RDZVD_JOB_UNCOUNTED_WINDOW_MS;
        /* A node whose put-aside waits for the stop goes on with nobody (P4's verdict). */
        for_each_member(j, m, pos, tmp) p->unsignalled +=
            !m->signalled && !m->aside_pending && (node < 0 || m != member_of(j, node));
    }
    for (int i = 0; i < NODES; i++) {
        m = member_of(j, i);
        /* rdzvd sees it run: it took the ROUND, its generation past the start-up window */
        if (m && m->node_rank >= 0 && j->state == JOB_RUNNING && md->a[i].f.nrounds &&
            !md->a[i].f.silent && md->a[i].f.round.generation == j->generation &&
            !startup_window(j))
            md->a[i].late = false;
        p->rank[i] = m ? m->node_rank : -2;
        p->nevents[i] = md->a[i].f.nevents;
        p->nrounds[i] = md->a[i].f.nrounds;
        p->naside[i] = md->a[i].naside;
    }
}

/* I1, for a step whose event (kind, node i) ended the job: may it? A failure only with the
 * budget used (or the job cancelled), or the job's last node gone without a record to wait for
 * it; a CANCEL only when the others signalled or too few are left; LEAVE
 * (succeeded) and READY (a cancelled job stopped), timers and the operator. */
static void check_end_cause(struct model *md, int kind, int i, const struct pre *p)
{
    bool budget = p->restarts >= md->v->max_restarts, ok = p->cancelled != 0;
    const struct rdzvd_job *j = the_job(md);

    if (kind == EV_OP_CANCEL || kind == EV_TIMER || kind == EV_ABANDON)
        ok = true;
    else if ((kind >= EV_EXIT_START && kind <= EV_EXIT_KILL) || kind == EV_ALL_FAIL)
        ok = budget;
    else if (kind == EV_GONE || kind == EV_UNHEALTHY)
        ok |= (p->rank[i] >= 0 && p->st == JOB_RUNNING && budget) ||
              (kind == EV_GONE && p->nmembers == 1 && p->gen > 0 && !md->v->state_dir);
    else if (kind == EV_LEAVE)
        ok = p->st == JOB_RUNNING;
    else if (kind == EV_CANCEL) /* past P8's bound a node placed that never ran is charged */
        ok |= p->st == JOB_FORMING ? p->unsignalled == 0 : p->unsignalled < md->v->min ||
              (p->spent && p->rank[i] >= 0 && p->st == JOB_RUNNING && budget);
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
    const struct rdzvd_job *j = the_job(md);
    bool ended_now = g_freed_ended || (j && j->state == JOB_ENDED && this_run(j));

    /* An end told to a JOIN refused as its job had ended is no end of this one (X1, X5). */
    for (int k = 0; k < NODES; k++)
        ended_now |= md->a[k].f.nevents > p->nevents[k] && is_outcome(md->a[k].f.event.type) &&
                     !(kind == EV_JOIN && k == i && md->a[k].f.told);
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
    /* I1: a node placed and lost before it ran (it never answered its ROUND, or it went within
     * the start-up window, whatever steps it reported) costs the job a re-form, never a restart
     * of its budget. */
    if (kind == EV_GONE && (md->a[i].f.silent || md->a[i].unran) && j && p->exists &&
        j->restart_count > p->restarts && !p->spent) /* past P8's bound: charged (P8d) */
        bad(md, I1, "node-%d, lost before it ran, spent a restart (%" PRId64 " -> %" PRId64 ")",
            i, p->restarts, j->restart_count);
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
        !exit_unran(md, kind, i, p) &&
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
    const struct rdzvd_job *j = the_job(md);
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
static bool awaits_ready(const struct rdzvd_job *j)
{
    struct rdzv_list *pos, *tmp;
    struct rdzvd_member *m;

    for_each_member(j, m, pos, tmp) if (!m->ready && m->peer && !m->away) return true;
    return false;
}

static void check_after_reap(struct model *md, int kind, const struct pre *p)
{
    const struct rdzvd_job *j = the_job(md);

    md->ended_seen |= j && j->state == JOB_ENDED && this_run(j);
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
        /* A silent node that took a place, one lost within the start-up window of its
         * generation (a step reported or not), or a --scale-up now joiner that never got a
         * ROUND, goes before it ran: its own evidence, against its host too. */
        a->unran = a->f.m && a->f.m->node_rank >= 0 && the_job(md) &&
                   the_job(md)->state == JOB_RUNNING && startup_window(the_job(md));
        a->evidence |= (a->f.silent && a->ranked) || a->unran ||
                       (md->v->scale_up_now && !a->f.nrounds);
        a->host_proof |= (a->f.silent && a->ranked) || a->unran ||
                         (md->v->scale_up_now && !a->f.nrounds);
        jt_gone(a->f.m);
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
        jt_unhealthy(a->f.m, "disk gone");
        break;
    case EV_CANCEL:
        a->cancel_sent = true;
        jt_cancel(a->f.m, SIGTERM, "");
        break;
    case EV_LEAVE:
        a->left = true;
        a->workers = false;
        jt_leave(a->f.m, a->f.round.generation, true);
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
    case EV_OP_CANCEL: /* the last run's job, still in memory, is not this run's */
        md->op_cancelled = !the_job(md) || this_run(the_job(md));
        md->op_cancelled &= jt_cancel_job(&md->e, "job", "op", err, sizeof(err)) == 0;
        break;
    case EV_RESTART:
        ev_restart(md);
        break;
    case EV_ABANDON:
        md->abandoned =
            jt_end_waiting(&md->e, "job", "abandoned", 1, "abandoned", err, sizeof(err)) == 0;
        if (!md->abandoned)
            bad(md, I5, "the job waiting in its record was not ended: %s", err);
        break;
    }
    check_step(md, kind, i, &p);
    reap(md);
    check_after_reap(md, kind, &p);
}

/* A state directory for the model (path: its name, len bytes), in memory where it can be: each
 * replay creates the job table's journal afresh, and its creation syncs the directory. Its fd. */
static int state_dir_open(char *path, size_t len, const char *test)
{
    int fd;

    snprintf(path, len, "/dev/shm/rdzv-%s-XXXXXX", test);
    if (!mkdtemp(path)) {
        snprintf(path, len, "/tmp/rdzv-%s-XXXXXX", test);
        ASSERT_NOT_NULL(mkdtemp(path));
    }
    fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    ASSERT_TRUE(fd >= 0);
    return fd;
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
