/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-job-ranks.c: a job's node ranks: the tables of who asked for and who holds each node
 * rank of the generation (by_req, by_rank), grown on demand up to --nnodes MAX, and a member's
 * place in them. It calls nothing of the machine. */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/job/rdzvd-job-sm.h"
#include "common/rdzv-assert.h"
#include "common/rdzv-log.h"
#include "daemon/job/rdzvd-job-impl.h"
#include "proto/rdzv-status.h"

int rdzvd_job_ranks_reserve(struct rdzvd_job *j, int64_t n)
{
    struct rdzvd_member **req, **rank;
    bool *done;
    int64_t cap = j->rank_cap ? j->rank_cap : 8;

    rdzv_assert(n <= j->max);
    if (n <= j->rank_cap)
        return 0;
    while (cap < n)
        cap *= 2;
    if (cap > j->max)
        cap = j->max;
    req = realloc(j->by_req, (size_t)cap * sizeof(*req));
    if (!req)
        return -ENOMEM;
    j->by_req = req;
    rank = realloc(j->by_rank, (size_t)cap * sizeof(*rank));
    if (!rank)
        return -ENOMEM; /* by_req is larger, rank_cap not: still consistent */
    j->by_rank = rank;
    done = realloc(j->rank_done, (size_t)cap * sizeof(*done));
    if (!done)
        return -ENOMEM; /* by_req and by_rank are larger, rank_cap not: still consistent */
    j->rank_done = done;
    memset(req + j->rank_cap, 0, (size_t)(cap - j->rank_cap) * sizeof(*req));
    memset(rank + j->rank_cap, 0, (size_t)(cap - j->rank_cap) * sizeof(*rank));
    memset(done + j->rank_cap, 0, (size_t)(cap - j->rank_cap) * sizeof(*done));
    j->rank_cap = cap;
    return 0;
}

struct rdzvd_member *rdzvd_member_by_rank(struct rdzvd_job *j, int64_t rank)
{
    return rank >= 0 && rank < j->rank_cap ? j->by_rank[rank] : NULL;
}

struct rdzvd_member *rdzvd_member_by_req(struct rdzvd_job *j, int64_t rank)
{
    return rank >= 0 && rank < j->rank_cap ? j->by_req[rank] : NULL;
}

void rdzvd_member_unrank(struct rdzvd_member *m)
{
    struct rdzvd_job *j = m->job;

    if (m->node_rank < 0)
        return;
    if (rdzvd_member_by_rank(j, m->node_rank) == m)
        j->by_rank[m->node_rank] = NULL;
    m->node_rank = -1;
    j->nin_round--;
}

void rdzvd_member_set_rank(struct rdzvd_member *m, int64_t rank)
{
    struct rdzvd_job *j = m->job;

    if (rank < 0 || rank >= j->rank_cap) { /* every caller checked it: never past by_rank */
        log_error("job=%s: node rank %" PRId64 " is out of 0..%" PRId64 "; not set", j->run_id,
                  rank, j->rank_cap - 1);
        return;
    }
    rdzvd_member_unrank(m);
    m->node_rank = rank;
    j->by_rank[rank] = m;
    j->nin_done -= j->rank_done[rank]; /* its node is back */
    j->rank_done[rank] = false;
    j->nin_round++;
}
