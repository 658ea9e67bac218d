/* SPDX-License-Identifier: Apache-2.0 */
/* rdzv-preflight.c: the network pre-flight's pairing and verdict (rdzv-preflight.h). */
#include "proto/rdzv-preflight.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

double rdzv_pf_link_mbps(const struct rdzv_pf_link *l)
{
    if (l->ab < 0 || l->ba < 0)
        return RDZV_PF_UNREACHABLE;
    return l->ab < l->ba ? l->ab : l->ba;
}

size_t rdzv_pf_round1_max(uint32_t n)
{
    return n / 2 + 2;
}

static void link_set(struct rdzv_pf_link *l, uint32_t a, uint32_t b, uint32_t slot)
{
    memset(l, 0, sizeof(*l));
    l->a = a;
    l->b = b;
    l->slot = slot;
}

size_t rdzv_pf_round1(uint32_t n, struct rdzv_pf_link *out)
{
    size_t k = 0;
    uint32_t pairs = n % 2 && n >= 3 ? (n - 3) / 2 : n / 2;

    for (uint32_t i = 0; i < pairs; i++)
        link_set(&out[k++], 2 * i, 2 * i + 1, 0);
    if (n % 2 && n >= 3) { /* the trio: each of its nodes in two links, one after the other */
        link_set(&out[k++], n - 3, n - 2, 0);
        link_set(&out[k++], n - 2, n - 1, 1);
        link_set(&out[k++], n - 3, n - 1, 2);
    }
    return k;
}

static void swap(double *a, double *b)
{
    double t = *a;

    *a = *b;
    *b = t;
}

/* The k-th smallest of v[0..n) (v is reordered): selection with a three-way partition around
 * the middle element, so that many equal figures cost one pass. */
static double select_kth(double *v, size_t n, size_t k)
{
    size_t lo = 0, hi = n;

    while (hi - lo > 1) {
        double pivot = v[lo + (hi - lo) / 2];
        size_t lt = lo, i = lo, gt = hi;

        while (i < gt) {
            if (v[i] < pivot)
                swap(&v[lt++], &v[i++]);
            else if (v[i] > pivot)
                swap(&v[i], &v[--gt]);
            else
                i++;
        }
        if (k < lt)
            hi = lt;
        else if (k >= gt)
            lo = gt;
        else
            return pivot;
    }
    return v[k];
}

static int node_add(struct rdzv_pf_node *nd, uint32_t peer, double mbps)
{
    if (nd->nlinks >= RDZV_PF_NODE_LINKS)
        return -EINVAL;
    nd->peer[nd->nlinks++] = peer;
    nd->reached |= mbps >= 0;
    if (mbps > nd->best)
        nd->best = mbps;
    return 0;
}

/* Which links a node's fastest link is taken from, for a median. */
enum pf_best {
    BEST_ROUND1, /* round 1's, for both of its nodes */
    BEST_PROBER, /* both rounds', for its prober only: a link's figures are its report */
};

/* The upper median of the nodes' fastest links (which: pf_best), over the nodes that have one
 * (0 if none), and *count: how many have one. A node whose every link is unreachable has no
 * figure, and does not pull the yardstick to 0. */
static int median_of_best(uint32_t n, const struct rdzv_pf_link *links, size_t nlinks,
                          enum pf_best which, double *ret, size_t *count)
{
    double *best = malloc((n ? n : 1) * sizeof(*best));
    size_t m = 0;

    if (!best)
        return -ENOMEM;
    for (uint32_t i = 0; i < n; i++)
        best[i] = RDZV_PF_UNREACHABLE;
    for (size_t i = 0; i < nlinks; i++) {
        double mbps = rdzv_pf_link_mbps(&links[i]);

        if (links[i].confirm || (links[i].round2 && which == BEST_ROUND1))
            continue;
        if (mbps > best[links[i].a])
            best[links[i].a] = mbps;
        if (which != BEST_PROBER && mbps > best[links[i].b])
            best[links[i].b] = mbps;
    }
    for (uint32_t i = 0; i < n; i++)
        if (best[i] >= 0)
            best[m++] = best[i];
    *ret = m ? select_kth(best, m, m / 2) : 0;
    *count = m;
    free(best);
    return 0;
}

/* The job's median: round 1's, where every node measures at once under the same load (round
 * 2's links run fewer at a time, so where links share CPUs they measure faster, and would
 * raise it). One prober's report raises two nodes' fastest links, its own and its peer's (a
 * trio's head, three). Where at most RDZV_PF_SMALL_JOB nodes have a figure of round 1 (a small
 * job, or one with nodes unreachable), that is about half of them: there the probers' median,
 * one figure from each, bounds it. Not past that: round 2's probers are all suspects, and a
 * slow rack's own figures would pull it down. */
static int job_median(uint32_t n, const struct rdzv_pf_link *links, size_t nlinks, double *ret)
{
    double own;
    size_t m, k;
    int r;

    if ((r = median_of_best(n, links, nlinks, BEST_ROUND1, ret, &m)) < 0 ||
        (r = median_of_best(n, links, nlinks, BEST_PROBER, &own, &k)) < 0)
        return r;
    if (m <= RDZV_PF_SMALL_JOB && own > 0 && own < *ret)
        *ret = own;
    return 0;
}

/* The confirmation's verdict: a bad node with a full probe at least fraction x the reference's
 * is cleared. Without a reference figure nothing is cleared: the full probes say nothing. */
static void confirm_clear(uint32_t n, const struct rdzv_pf_link *links, size_t nlinks,
                          double fraction, struct rdzv_pf_node *nodes)
{
    double ref = RDZV_PF_UNREACHABLE;

    for (size_t i = 0; i < nlinks; i++)
        if (links[i].confirm == 2)
            ref = rdzv_pf_link_mbps(&links[i]);
    if (!(ref > 0))
        return;
    for (size_t i = 0; i < nlinks; i++) {
        const struct rdzv_pf_link *l = &links[i];
        struct rdzv_pf_node *nd = &nodes[l->a]; /* the candidate probes */

        if (l->confirm == 1 && l->a < n && nd->bad && rdzv_pf_link_mbps(l) >= fraction * ref) {
            nd->bad = false;
            nd->cleared = true;
        }
    }
}

int rdzv_pf_judge(uint32_t n, const struct rdzv_pf_link *links, size_t nlinks, double fraction,
                  struct rdzv_pf_node *nodes, double *median)
{
    double med, threshold;
    int r;

    if (!(fraction > 0 && fraction < 1))
        return -EINVAL;
    memset(nodes, 0, n * sizeof(*nodes));
    for (size_t i = 0; i < nlinks; i++) {
        const struct rdzv_pf_link *l = &links[i];
        double mbps = rdzv_pf_link_mbps(l);

        if (l->a >= n || l->b >= n || l->a == l->b)
            return -EINVAL;
        if (l->confirm)
            continue;
        if ((r = node_add(&nodes[l->a], l->b, mbps)) < 0 ||
            (r = node_add(&nodes[l->b], l->a, mbps)) < 0)
            return r;
    }
    if ((r = job_median(n, links, nlinks, &med)) < 0)
        return r;
    if (median)
        *median = med;
    threshold = fraction * med;
    /* Each link's slowness, seen from both of its nodes (the links in order again). */
    for (uint32_t i = 0; i < n; i++)
        nodes[i].nlinks = 0;
    for (size_t i = 0; i < nlinks; i++) {
        const struct rdzv_pf_link *l = &links[i];
        double mbps = rdzv_pf_link_mbps(l);
        bool slow = med > 0 && mbps < threshold;
        struct rdzv_pf_node *a = &nodes[l->a], *b = &nodes[l->b];

        if (l->confirm)
            continue;
        a->slow[a->nlinks++] = slow;
        b->slow[b->nlinks++] = slow;
        a->nfast += !slow;
        b->nfast += !slow;
    }
    /* A slow link counts against a node when its peer is fine on another link: the peer's
     * fast link is to a third node, since this one is slow. */
    for (uint32_t i = 0; i < n; i++) {
        struct rdzv_pf_node *nd = &nodes[i];

        for (unsigned k = 0; k < nd->nlinks; k++)
            if (nd->slow[k] && nodes[nd->peer[k]].nfast > 0)
                nd->convicting++;
        nd->bad = nd->nfast == 0 && nd->convicting >= 2;
    }
    confirm_clear(n, links, nlinks, fraction, nodes);
    return 0;
}

static bool is_peer(const struct rdzv_pf_node *nd, uint32_t j)
{
    for (unsigned k = 0; k < nd->nlinks; k++)
        if (nd->peer[k] == j)
            return true;
    return false;
}

/* A fine node not yet given a link in this slot of round 2. */
static bool referee(const struct rdzv_pf_node *nd)
{
    return nd->nfast > 0 && !nd->paired2;
}

/* One slot of round 2: each suspect with one more fine node, not yet its peer nor its referee
 * of the first slot (first[s]); returns how many links. */
static size_t round2_slot(uint32_t n, struct rdzv_pf_node *nodes, uint32_t slot, bool second,
                          struct rdzv_pf_link *out)
{
    size_t k = 0;
    uint32_t cursor = 0;

    for (uint32_t i = 0; i < n; i++)
        nodes[i].paired2 = false;
    for (uint32_t s = 0; s < n; s++) {
        struct rdzv_pf_node *sus = &nodes[s];
        uint32_t j;

        if (!sus->nlinks || sus->nfast)
            continue;
        while (cursor < n && !referee(&nodes[cursor]))
            cursor++;
        if (cursor >= n)
            break; /* no fine node left: the other suspects stay unpaired */
        for (j = cursor; j < n; j++)
            if (referee(&nodes[j]) && !is_peer(sus, j) && !(second && sus->ref1 == j))
                break;
        if (j >= n)
            continue; /* each fine node left is already this suspect's peer */
        nodes[j].paired2 = true;
        if (!second)
            sus->ref1 = j;
        link_set(&out[k], s, j, slot);
        out[k++].round2 = true;
    }
    return k;
}

size_t rdzv_pf_round2(uint32_t n, struct rdzv_pf_node *nodes, uint32_t slot,
                      struct rdzv_pf_link *out)
{
    size_t k;

    for (uint32_t i = 0; i < n; i++)
        nodes[i].ref1 = UINT32_MAX;
    k = round2_slot(n, nodes, slot, false, out);
    return k + round2_slot(n, nodes, slot + 1, true, out + k);
}

/* A node with a fast link that is not bad: a referee for the confirmation. */
static bool fine(const struct rdzv_pf_node *nd)
{
    return nd->nfast > 0 && !nd->bad;
}

size_t rdzv_pf_confirm(uint32_t n, const struct rdzv_pf_node *nodes, const bool *skip,
                       uint32_t slot, struct rdzv_pf_link *out)
{
    uint32_t f1 = UINT32_MAX, f2 = UINT32_MAX, cursor = 0;
    size_t k = 0;

    for (uint32_t i = 0; i < n && f2 == UINT32_MAX; i++)
        if (fine(&nodes[i]))
            *(f1 == UINT32_MAX ? &f1 : &f2) = i;
    if (f2 == UINT32_MAX)
        return 0; /* no reference: nothing can be confirmed */
    for (uint32_t c = 0; c < n; c++) {
        if (!nodes[c].bad || !nodes[c].reached || (skip && skip[c]))
            continue;
        while (cursor < n && !fine(&nodes[cursor]))
            cursor++;
        if (cursor >= n)
            break; /* more candidates than fine nodes: the others stay bad */
        link_set(&out[k], c, cursor++, slot);
        out[k++].confirm = 1;
    }
    if (k == 0)
        return 0;
    link_set(&out[k], f1, f2, slot + 1);
    out[k++].confirm = 2;
    return k;
}
