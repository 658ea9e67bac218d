/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-job-preflight.c: the network pre-flight in the job machine (--preflight net,
 * docs/design/preflight.md). A round about to close holds while its ready nodes not yet checked
 * in the job measure their links: rdzvd pairs them (proto/rdzv-preflight.h), sends each pair's
 * prober a PREFLIGHT, one slot after the other, and takes its PREFLIGHT_REPORT; round 2 pairs
 * the suspects with fine nodes; round 3 confirms each bad node that reached a peer (a full probe
 * to a fine node, then one between two fine nodes, rdzv_pf_confirm); the verdict puts the bad
 * nodes aside (reason network), and the round closes without them. Each slot waits on the job's
 * timer, never more than 2 x RDZVD_PF_BOUND_MS + RDZVD_PF_SLOT_MARGIN_MS: a prober that has not
 * answered by then counts as unreachable. A check has seven slots at most. A node judged fine
 * stays so: a later check (a spare that joined meanwhile) takes it as a peer, never puts it
 * aside. Part of the job
 * machine (rdzvd-job-impl.h): pure, its sends through the outbox, its clock the step's. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/rdzv-log.h"
#include "daemon/data/rdzvd-config.h"
#include "daemon/job/rdzvd-job-impl.h"
#include "daemon/job/rdzvd-job-sm-int.h"
#include "daemon/job/rdzvd-job-sm.h"
#include "proto/rdzv-preflight.h"

/* One check under way: the nodes (by node id: a member may go meanwhile), every link made so
 * far (round 1's, round 2's, then round 3's: the confirmation), the slot being measured, and the
 * reports still due in it. */
struct rdzvd_job_pf {
    uint32_t n;
    char (*ids)[RDZV_ID_MAX + 1];
    struct rdzv_pf_link *links;
    bool *reported;
    bool *judged; /* judged fine by an earlier check: this one does not put it aside */
    size_t nlinks, round1; /* round1: how many of links are round 1's */
    uint32_t round, slot, last_slot;
    size_t due;        /* reports still due in the slot */
    int64_t id_base;   /* PREFLIGHT id of links[i]: id_base + i */
    uint64_t start_ms; /* the step's clock when it began */
};

bool rdzvd_job_pf_busy(const struct rdzvd_job *j)
{
    return j->pf != NULL;
}

/* Links a check of n nodes makes at most: round 1's, round 2's (n), round 3's (n + 1). */
static size_t links_max(uint32_t n)
{
    return rdzv_pf_round1_max(n) + 2 * (size_t)n + 1;
}

static void pf_free(struct rdzvd_job *j)
{
    if (!j->pf)
        return;
    free(j->pf->ids);
    free(j->pf->links);
    free(j->pf->reported);
    free(j->pf->judged);
    free(j->pf);
    j->pf = NULL;
}

void rdzvd_job_pf_free(struct rdzvd_job *j)
{
    pf_free(j);
}

static struct rdzvd_member *member_of(struct rdzvd_job *j, const char *node_id)
{
    struct rdzv_list *pos, *tmp;
    struct rdzvd_member *m;

    for_each_member(j, m, pos, tmp)
    {
        if (strcmp(m->join.node_id, node_id) == 0)
            return m;
    }
    return NULL;
}

/* The ready members a check would take: with a listener (JOIN preflight), not leaving. */
static bool checkable(const struct rdzvd_member *m)
{
    return m->ready && m->peer && m->join.preflight.on && !m->signalled && !m->aside_pending;
}

static void slot_done(struct rdzvd_job *j);

/* Send the slot's PREFLIGHTs (to each link's node a, about node b), then wait for them. */
static void run_slot(struct rdzvd_job *j)
{
    struct rdzvd_job_pf *pf = j->pf;

    pf->due = 0;
    for (size_t i = 0; i < pf->nlinks; i++) {
        struct rdzv_pf_link *l = &pf->links[i];
        struct rdzvd_member *a, *b;
        struct rdzv_preflight msg = {.id = pf->id_base + (int64_t)i,
                                     .bound_ms = RDZVD_PF_BOUND_MS,
                                     .full = l->confirm != 0};

        if (l->slot != pf->slot || pf->reported[i])
            continue;
        a = member_of(j, pf->ids[l->a]);
        b = member_of(j, pf->ids[l->b]);
        if (!a || !b || !a->peer || !b->peer) { /* gone: nothing to measure */
            l->ab = l->ba = RDZV_PF_UNREACHABLE;
            pf->reported[i] = true;
            continue;
        }
        snprintf(msg.addr, sizeof(msg.addr), "%s", b->join.preflight.addr);
        msg.port = b->join.preflight.port;
        snprintf(msg.token, sizeof(msg.token), "%s", b->join.preflight.token);
        rdzvd_member_send_preflight(a, &msg);
        pf->due++;
    }
    if (pf->due == 0) {
        slot_done(j);
        return;
    }
    rdzvd_job_timer_start(j, T_PREFLIGHT, 2 * RDZVD_PF_BOUND_MS + RDZVD_PF_SLOT_MARGIN_MS);
    rdzvd_job_flush(j);
}

/* The worst link of node i and its figure: "link to HOST: X MB/s". */
static void node_figures(struct rdzvd_job *j, uint32_t i, double median, char *buf, size_t len)
{
    struct rdzvd_job_pf *pf = j->pf;
    double worst = -2;
    uint32_t peer = i;

    for (size_t k = 0; k < pf->nlinks; k++) {
        const struct rdzv_pf_link *l = &pf->links[k];
        double v = rdzv_pf_link_mbps(l);

        if ((l->a == i || l->b == i) && (worst == -2 || v < worst)) {
            worst = v;
            peer = l->a == i ? l->b : l->a;
        }
    }
    struct rdzvd_member *p = member_of(j, pf->ids[peer]);
    const char *name = p ? p->join.host : pf->ids[peer];

    if (worst < 0)
        snprintf(buf, len, "link to %.64s: unreachable, job median %.0f MB/s", name, median);
    else
        snprintf(buf, len, "link to %.64s: %.1f MB/s, job median %.0f MB/s", name, worst, median);
}

/* The verdict over every link: the bad nodes put aside, the others checked; then the round. */
static void finish(struct rdzvd_job *j)
{
    struct rdzvd_job_pf *pf = j->pf;
    struct rdzv_pf_node *nodes = calloc(pf->n, sizeof(*nodes));
    double median = 0;
    unsigned bad = 0, cleared = 0;
    int r = nodes ? rdzv_pf_judge(pf->n, pf->links, pf->nlinks, j->pf_fraction, nodes, &median)
                  : -ENOMEM;

    if (r < 0)
        rdzvd_job_note(j, true, "network pre-flight: no verdict (%s): nobody put aside",
                       strerror(-r));
    for (uint32_t i = 0; r == 0 && i < pf->n; i++) {
        struct rdzvd_member *m = member_of(j, pf->ids[i]);
        char text[RDZV_REASON_MAX + 1];

        if (!m)
            continue;
        m->pf_checked = true;
        m->pf_best = nodes[i].best;
        cleared += nodes[i].cleared;
        if (!nodes[i].bad || pf->judged[i])
            continue;
        node_figures(j, i, median, text, sizeof(text));
        bad++;
        if (j->handlers->put_aside)
            j->handlers->put_aside(m, RDZVD_ASIDE_NETWORK, text);
    }
    j->pf_median = median;
    j->pf_checks++;
    j->pf_ms += rdzvd_job_now_ms(&j->host) - pf->start_ms;
    rdzvd_job_note(j, false,
                   "network pre-flight: %" PRIu32 " nodes, %zu links, job median %.0f MB/s, "
                   "%u put aside, %u cleared by a full probe, in %" PRIu64 " ms",
                   pf->n, pf->nlinks, median, bad, cleared,
                   rdzvd_job_now_ms(&j->host) - pf->start_ms);
    free(nodes);
    pf_free(j);
    if (bad > 0) /* said if the job then fails to form within its join timeout */
        snprintf(j->last_cause, sizeof(j->last_cause),
                 "the network pre-flight put %u node(s) aside", bad);
    if (j->state == JOB_FORMING && j->handlers->close_checked)
        j->handlers->close_checked(j);
}

/* The links of round (2: the suspects paired with fine nodes; 3: the confirmation), judged
 * from those made so far; returns how many (0: none). */
static size_t next_links(struct rdzvd_job *j, uint32_t round)
{
    struct rdzvd_job_pf *pf = j->pf;
    struct rdzv_pf_node *nodes = calloc(pf->n, sizeof(*nodes));
    struct rdzv_pf_link *out = pf->links + pf->nlinks;
    size_t k = 0;

    if (nodes && rdzv_pf_judge(pf->n, pf->links, pf->nlinks, j->pf_fraction, nodes, NULL) == 0)
        k = round == 2 ? rdzv_pf_round2(pf->n, nodes, pf->last_slot + 1, out)
                       : rdzv_pf_confirm(pf->n, nodes, pf->judged, pf->last_slot + 1, out);
    free(nodes);
    return k;
}

/* A round's last slot is done: round 2 (suspects to pair), round 3 (bad nodes that reached a
 * peer, not judged fine before, confirmed by a full probe), each skipped without links; then
 * the verdict. */
static void round_done(struct rdzvd_job *j)
{
    struct rdzvd_job_pf *pf = j->pf;
    size_t k = 0;

    while (k == 0 && pf->round < 3)
        k = next_links(j, ++pf->round);
    if (k == 0) {
        finish(j);
        return;
    }
    pf->nlinks += k;
    pf->slot = pf->last_slot + 1;
    pf->last_slot += 2;
    run_slot(j);
}

static void slot_done(struct rdzvd_job *j)
{
    struct rdzvd_job_pf *pf = j->pf;

    if (pf->slot < pf->last_slot) {
        pf->slot++;
        run_slot(j);
    } else {
        round_done(j);
    }
}

bool rdzvd_job_pf_hold(struct rdzvd_job *j)
{
    struct rdzv_list *pos, *tmp;
    struct rdzvd_member *m;
    struct rdzvd_job_pf *pf;
    uint32_t n = 0, unchecked = 0;

    if (j->pf)
        return true;
    if (!j->pf_on)
        return false;
    for_each_member(j, m, pos, tmp)
    {
        if (checkable(m)) {
            n++;
            unchecked += !m->pf_checked;
        }
    }
    if (unchecked == 0 || n < 3) /* two nodes alone are never judged */
        return false;
    pf = calloc(1, sizeof(*pf));
    if (!pf || !(pf->ids = calloc(n, sizeof(*pf->ids))) ||
        !(pf->links = calloc(links_max(n), sizeof(*pf->links))) ||
        !(pf->reported = calloc(links_max(n), sizeof(*pf->reported))) ||
        !(pf->judged = calloc(n, sizeof(*pf->judged)))) {
        j->pf = pf;
        pf_free(j);
        rdzvd_job_note(j, true, "network pre-flight: out of memory: the round closes unchecked");
        return false;
    }
    j->pf = pf;
    pf->n = 0;
    for_each_member(j, m, pos, tmp)
    {
        if (!checkable(m))
            continue;
        pf->judged[pf->n] = m->pf_checked;
        snprintf(pf->ids[pf->n++], sizeof(pf->ids[0]), "%s", m->join.node_id);
    }
    pf->nlinks = pf->round1 = rdzv_pf_round1(n, pf->links);
    for (size_t i = 0; i < pf->nlinks; i++)
        if (pf->links[i].slot > pf->last_slot)
            pf->last_slot = pf->links[i].slot;
    pf->round = 1;
    if (j->pf_next_id < 1)
        j->pf_next_id = 1;
    pf->id_base = j->pf_next_id;
    j->pf_next_id += (int64_t)links_max(n);
    pf->start_ms = rdzvd_job_now_ms(&j->host);
    rdzvd_job_note(j, false, "network pre-flight: %" PRIu32 " nodes (%u not checked yet)", n,
                   unchecked);
    run_slot(j);
    return true; /* held, or closed already by a check that ended at once */
}

void rdzvd_member_pf_report(struct rdzvd_member *m, const struct rdzv_preflight_report *rep)
{
    struct rdzvd_job *j = m->job;
    struct rdzvd_job_pf *pf = j->pf;
    struct rdzv_pf_link *l;
    int64_t i;

    if (!pf)
        return;
    if (j->state != JOB_FORMING) { /* the job moved on (it ended): the check is void */
        pf_free(j);
        return;
    }
    i = rep->id - pf->id_base;
    /* Only the prober of a link of this slot, once: a node reports nobody else's links. */
    if (i < 0 || (size_t)i >= pf->nlinks || pf->reported[i] || pf->links[i].slot != pf->slot ||
        strcmp(pf->ids[pf->links[i].a], m->join.node_id) != 0) {
        log_debug("job %s: %s's PREFLIGHT_REPORT %" PRId64 " ignored: not a link it measures now",
                  j->run_id, m->join.host, rep->id);
        return;
    }
    l = &pf->links[i];
    l->ab = rep->up;
    l->ba = rep->down;
    pf->reported[i] = true;
    if (--pf->due == 0) {
        rdzvd_job_timer_stop(j);
        slot_done(j);
    }
}

void rdzvd_job_pf_fired(struct rdzvd_job *j)
{
    struct rdzvd_job_pf *pf = j->pf;

    if (!pf)
        return;
    if (j->state != JOB_FORMING) {
        pf_free(j);
        return;
    }
    for (size_t i = 0; i < pf->nlinks; i++)
        if (pf->links[i].slot == pf->slot && !pf->reported[i]) { /* no answer: unreachable */
            pf->links[i].ab = pf->links[i].ba = RDZV_PF_UNREACHABLE;
            pf->reported[i] = true;
        }
    slot_done(j);
}
