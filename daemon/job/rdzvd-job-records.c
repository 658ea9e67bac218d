/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-job-records.c: a job's record in the job table (rdzvd-job-record.h): what is saved of a
 * job, its encoding, and the decisions recorded before each move, applied when read back. */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/rdzv-assert.h"
#include "common/rdzv-log.h"
#include "daemon/job/rdzvd-job-impl.h"
#include "daemon/job/rdzvd-job-record.h"
#include "daemon/job/rdzvd-job-ids.h"
#include "daemon/job/rdzvd-job-identity.h"
#include "common/rdzv-auth.h"
#include "daemon/job/rdzvd-job-ends.h"

/* The nodes of j's running generation by node rank (malloc'd, round.nnodes of them), or NULL
 * when a node rank has no member (a job made from an agent's claim) or out of memory (logged). */
static struct rdzvd_job_record_node *job_round_nodes(struct rdzvd_job *j)
{
    struct rdzvd_job_record_node *nodes;
    int64_t n = j->round.nnodes;

    /* by_rank read here, not through rdzvd_member_by_rank: the files that move a job call this
     * one, and no call goes back (tests/layering.py) */
    if (n < 1 || n > j->rank_cap)
        return NULL;
    for (int64_t i = 0; i < n; i++)
        if (!j->by_rank[i])
            return NULL;
    if (!(nodes = calloc((size_t)n, sizeof(*nodes)))) {
        log_warn("job=%s gen=%" PRIu64 " out of memory: its record names no node", j->run_id,
                 j->generation);
        return NULL;
    }
    for (int64_t i = 0; i < n; i++) {
        nodes[i] = (struct rdzvd_job_record_node){.nproc = j->by_rank[i]->join.nproc,
                                                  .newcomer = j->by_rank[i]->newcomer};
        memcpy(nodes[i].node_id, j->by_rank[i]->join.node_id, sizeof(nodes[i].node_id));
    }
    return nodes;
}

/* The node ids of j's members with a node rank, by node rank (calloc'd, round.nnodes of them,
 * "" for a rank none holds), for the record of the generation stopped; NULL when none holds one
 * or out of memory (logged: the job restored from the record then waits for nobody). */
static char (*job_stopped_nodes(struct rdzvd_job *j))[RDZV_ID_MAX + 1]
{
    char(*ids)[RDZV_ID_MAX + 1];
    int64_t n = j->round.nnodes, held = 0;

    if (n < 1 || n > j->rank_cap || n > j->max)
        return NULL;
    for (int64_t i = 0; i < n; i++) /* one put aside is not coming back */
        held += j->by_rank[i] && !j->by_rank[i]->aside_pending;
    if (!held)
        return NULL;
    if (!(ids = calloc((size_t)n, sizeof(*ids)))) {
        log_warn("job=%s gen=%" PRIu64 " out of memory: its record names no node stopped",
                 j->run_id, j->generation);
        return NULL;
    }
    for (int64_t i = 0; i < n; i++)
        if (j->by_rank[i] && !j->by_rank[i]->aside_pending)
            memcpy(ids[i], j->by_rank[i]->join.node_id, sizeof(ids[i]));
    return ids;
}

/* j's record as a decision makes it: its identity, generation and history (borrowed), the
 * restart count given, not running. */
static struct rdzvd_job_record job_record(const struct rdzvd_job *j, int64_t restart_count)
{
    struct rdzvd_job_record rec = {.min = j->min,
                                   .max = j->max,
                                   .max_restarts = j->max_restarts,
                                   .generation = j->generation,
                                   .restart_count = restart_count,
                                   .n_hist = j->n_hist,
                                   .hist = j->hist,
                                   .has_settings = true,
                                   .n_uncounted = j->n_uncounted};

    memcpy(rec.run_id, j->run_id, sizeof(rec.run_id));
    memcpy(rec.uncounted_ms, j->uncounted_ms, sizeof(rec.uncounted_ms));
    rdzvd_job_settings_get(j, &rec.settings);
    return rec;
}

void rdzvd_job_settings_of_join(const struct rdzv_join *jn, struct rdzvd_job_settings *st)
{
    *st = (struct rdzvd_job_settings){
        .last_call_ms = jn->last_call_ms, .heartbeat_timeout_ms = jn->heartbeat_timeout_ms,
        .join_timeout_ms = jn->join_timeout_ms, .scale_up_now = jn->scale_up_now,
        .inplace = jn->inplace, .bad_node_failures = jn->bad_node_failures,
        .bad_node_window_s = jn->bad_node_window_s, .restart_backoff_s = jn->restart_backoff_s,
        .straggler_factor = jn->straggler_factor, .straggler_window_ms = jn->straggler_window_ms,
        .straggler_aside = jn->straggler_aside,
        .preflight_fraction = jn->preflight.on ? jn->preflight.fraction : 0};
    memcpy(st->command, jn->command, sizeof(st->command));
}

void rdzvd_job_settings_get(const struct rdzvd_job *j, struct rdzvd_job_settings *st)
{
    *st = (struct rdzvd_job_settings){
        .last_call_ms = j->last_call_ms, .heartbeat_timeout_ms = j->hb_timeout_ms,
        .join_timeout_ms = j->join_timeout_ms, .scale_up_now = j->scale_up_now,
        .inplace = j->inplace, .bad_node_failures = j->bad_node_failures,
        .bad_node_window_s = (int64_t)(j->bad_node_window_ms / 1000),
        .restart_backoff_s = (int64_t)(j->backoff_max_ms / 1000),
        .straggler_factor = j->straggler_factor, .straggler_window_ms = j->straggler_window_ms,
        .straggler_aside = j->straggler_aside, .preflight_fraction = j->pf_on ? j->pf_fraction : 0};
    memcpy(st->command, j->command, sizeof(st->command));
}

void rdzvd_job_settings_set(struct rdzvd_job *j, const struct rdzvd_job_settings *st)
{
    j->last_call_ms = st->last_call_ms;
    j->hb_timeout_ms = st->heartbeat_timeout_ms;
    j->join_timeout_ms = st->join_timeout_ms;
    j->scale_up_now = st->scale_up_now;
    j->inplace = st->inplace;
    j->bad_node_failures = st->bad_node_failures;
    j->bad_node_window_ms = st->bad_node_window_s * 1000;
    j->backoff_max_ms = st->restart_backoff_s * 1000;
    j->straggler_factor = st->straggler_factor;
    j->straggler_window_ms = st->straggler_window_ms;
    j->straggler_aside = st->straggler_aside;
    j->pf_on = st->preflight_fraction > 0;
    j->pf_fraction = st->preflight_fraction;
    memcpy(j->command, st->command, sizeof(j->command));
}

/* r, the result of a decision applied to the table: 0 or a negative errno. Its record is
 * written when the step's Ready is carried out, before anything the step sends; one not written
 * comes back as the input RDZVD_IN_UNRECORDED. */
static int decision_written(int r)
{
    return r < 0 ? r : 0;
}

/* The job table (journaled in --state-dir, or a replica's, replicated): decide the job's
 * generation and restart count (rdzvd-job-record.h: a generation formed, or stopped), so that a
 * restarted rdzvd (or the next leader) rebuilds it instead of starting it over. running: the
 * generation's workers run (ROUND sent), and the record names its nodes by node rank and its
 * NCCL ids: a restarted rdzvd waits for those nodes' agents before it places anyone. Once per
 * generation. A decision refused is not made: the caller sends nothing of it. */
int rdzvd_job_save(struct rdzvd_job *j, bool running, int64_t restart_count)
{
    struct rdzvd_job_record rec = job_record(j, restart_count);
    int r;

    if (!j->host.record_table)
        return 0;
    rec.running = running;
    if (running) {
        rec.nnodes = j->round.nnodes;
        rec.world_size = j->round.world_size;
        rec.store_port = j->store || j->store_addr[0] ? j->store_port : 0;
        memcpy(rec.store_addr, j->store_addr, sizeof(rec.store_addr));
        rec.nodes = job_round_nodes(j);
        rec.n_ids = j->round.n_ids;
        rec.ids = j->round.ids;
    } else if (j->state == JOB_RUNNING && (rec.stopped = job_stopped_nodes(j))) {
        rec.n_stopped = j->round.nnodes; /* the generation that stops now: its nodes (W2) */
    }
    r = rdzvd_job_host_decide(&j->host, j->host.record_table,
                         running ? RDZVD_DECIDE_FORMED : RDZVD_DECIDE_STOPPED, &rec);
    if (r == -EINVAL && running) {
        /* Its nodes do not add up to its world, or an id is not one (a bug): keep the rest. */
        log_warn("job=%s gen=%" PRIu64 " its nodes or NCCL ids do not fit its world of %" PRId64
                 "; recorded without them",
                 j->run_id, j->generation, rec.world_size);
        free(rec.nodes);
        rec.nodes = NULL;
        rec.n_ids = 0;
        r = rdzvd_job_host_decide(&j->host, j->host.record_table, RDZVD_DECIDE_FORMED, &rec);
    }
    r = decision_written(r);
    if (r < 0)
        log_warn_errno(r, "job=%s gen=%" PRIu64 " cannot record the decision (generation %s) "
                       "in its job table",
                       j->run_id, j->generation, running ? "formed" : "stopped");
    free(rec.nodes);
    free(rec.stopped);
    return r < 0 ? r : 0;
}

/* Only the job's history changed (a node put aside with no restart): the record keeps the rest,
 * or, with none yet, is made at the job's generation, not running. 0 or a negative errno. */
int rdzvd_job_save_aside(struct rdzvd_job *j)
{
    struct rdzvd_job_record rec = job_record(j, j->restart_count);
    int r;

    if (!j->host.record_table)
        return 0;
    /* A record made now names the last generation sent: a round that awaits its NCCL ids has
     * not been. */
    rec.generation -= j->state == JOB_NCCL;
    r = rdzvd_job_host_decide(&j->host, j->host.record_table, RDZVD_DECIDE_ASIDE, &rec);
    r = decision_written(r);
    if (r < 0)
        log_warn_errno(r, "job=%s cannot record a node put aside in its job table", j->run_id);
    return r;
}

int rdzvd_job_save_done(struct rdzvd_job *j, int64_t node_rank)
{
    struct rdzvd_job_record rec = {.generation = j->generation, .done_rank = node_rank};
    int r;

    rdzv_assert(node_rank >= 0 && node_rank < j->round.nnodes);
    if (!j->host.record_table)
        return 0;
    memcpy(rec.run_id, j->run_id, sizeof(rec.run_id));
    r = decision_written(
        rdzvd_job_host_decide(&j->host, j->host.record_table, RDZVD_DECIDE_DONE, &rec));
    if (r < 0)
        log_warn_errno(r, "job=%s gen=%" PRIu64 " cannot record node rank %" PRId64 " done in "
                       "its job table: rebuilt, the generation would wait for it",
                       j->run_id, j->generation, node_rank);
    return r;
}

/* The job is over (or gone while rdzvd runs on): nothing to rebuild after a restart, and its
 * nodes' secrets go with it. */

/* ENDED for j, with how it ended when mv says (the move END). */
static int job_forget(struct rdzvd_job *j, const struct rdzvd_job_move *mv)
{
    struct rdzvd_job_record rec = {.generation = 0};
    struct rdzvd_store *t = j->host.record_table ? j->host.record_table : j->host.secret_table;
    int r;

    if (!t)
        return 0;
    memcpy(rec.run_id, j->run_id, sizeof(rec.run_id));
    if (mv && mv->end_type && j->host.record_table) { /* kept where records are */
        rec.has_end = true;
        rdzvd_job_end_set(&rec.end, j->run_id, mv->end_type, mv->end_exit_code, mv->end_summary,
                          mv->end_s, j->generation, j->restart_count);
    }
    r = rdzvd_job_host_decide(&j->host, t, RDZVD_DECIDE_ENDED, &rec);
    if (r < 0)
        log_warn_errno(r, "job=%s cannot delete its record", j->run_id);
    return r < 0 ? r : 0;
}

int rdzvd_job_decide_ended(struct rdzvd_job *j)
{
    return job_forget(j, NULL);
}

int rdzvd_job_record_move(struct rdzvd_job *j, enum rdzvd_decision_kind kind,
                          const struct rdzvd_job_move *mv)
{
    switch (kind) {
    case RDZVD_DECIDE_FORMED:
        return rdzvd_job_save(j, true, j->restart_count);
    case RDZVD_DECIDE_STOPPED:
        return rdzvd_job_save(j, false, j->restart_count + mv->counted);
    case RDZVD_DECIDE_ENDED:
        return job_forget(j, mv);
    default: /* no move needs another (a bug) */
        log_error("job=%s: a move names decision '%s', which no move takes; not moved",
                  j->run_id, rdzvd_decision_name(kind));
        return -EINVAL;
    }
}

/* FORGOTTEN for node_id of j, written (with the job table's journal, before any reply of the
 * step leaves): 0 or a negative errno. */
static int decide_forgotten(struct rdzvd_job *j, const char *node_id)
{
    struct rdzvd_job_record rec = {.generation = 0};
    int r;

    memcpy(rec.run_id, j->run_id, sizeof(rec.run_id));
    snprintf(rec.admitted.node_id, sizeof(rec.admitted.node_id), "%s", node_id);
    r = rdzvd_job_host_decide(&j->host, j->host.secret_table, RDZVD_DECIDE_FORGOTTEN, &rec);
    return j->host.secret_table == j->host.record_table ? decision_written(r) : r;
}

/* node_id may yet come back to j with its secret: a member's (connected or away), or a node of
 * the generation j was rebuilt from (its record's). */
static bool id_promised(const struct rdzvd_job *j, const char *node_id)
{
    if (rdzvd_member_index_find(&j->by_id, node_id))
        return true;
    for (int64_t i = 0; j->rebuilt_nodes && i < j->round.nnodes; i++)
        if (strcmp(j->rebuilt_nodes[i].node_id, node_id) == 0)
            return true;
    return false;
}

/* node_id has a history in j: failures, or put aside. Its entry stays when its id goes (the
 * rules by node id and by host still see it), but such ids go last. */
static bool id_has_history(const struct rdzvd_job *j, const char *node_id)
{
    for (unsigned i = 0; i < j->n_hist; i++)
        if (strcmp(j->hist[i].node_id, node_id) == 0)
            return j->hist[i].failures > 0 || j->hist[i].n_fails > 0 || j->hist[i].aside;
    return false;
}

/* Room among j's node ids for node_id: when it would take them past the bound, the oldest ids
 * that promise nothing (id_promised) are forgotten until it fits, those with no history first,
 * each by a decision written before the JOIN is answered, so that a job can always take a
 * replacement. 0, -ENOSPC when the promised ids alone fill the bound (nothing forgotten), or
 * a negative errno. */
static int ids_make_room(struct rdzvd_job *j, const char *node_id)
{
    size_t max = rdzvd_job_bounds_of(j->host.secret_table)->ids_bytes_max;
    size_t need = strlen(node_id) + 1, len, off, kept = 0, gone = 0;
    char *ids, first[RDZV_ID_MAX + 1] = "";
    int r;

    if (rdzvd_job_ids_len(j->host.secret_table, j->run_id) + need <= max)
        return 0; /* it fits: a JOIN reads no more than that */
    if ((r = rdzvd_job_ids_get(j->host.secret_table, j->run_id, &ids, &len)) < 0)
        return r;
    for (off = 0; off < len; off += strlen(ids + off) + 1)
        kept += id_promised(j, ids + off) ? strlen(ids + off) + 1 : 0;
    if (len + need > max && kept + need > max)
        r = -ENOSPC; /* forgetting the others would not make room */
    for (int pass = 0; pass < 2 && r == 0 && len + need > max; pass++) {
        for (off = 0; off < len && r == 0 && len + need > max;) {
            const char *id = ids + off;
            size_t n = strlen(id) + 1 < len - off ? strlen(id) + 1 : len - off;

            if (id_promised(j, id) || (pass == 0 && id_has_history(j, id))) {
                off += n;
                continue;
            }
            if ((r = decide_forgotten(j, id)) < 0)
                break;
            if (!gone++)
                snprintf(first, sizeof(first), "%s", id);
            memmove(ids + off, ids + off + n, len - off - n + 1);
            len -= n;
        }
    }
    if (gone)
        log_info("job=%s: its node ids would pass %zu bytes with node id %s: forgot %zu of nodes "
                 "that left (the oldest: %s); a node of one that comes back is a new node",
                 j->run_id, max, node_id, gone, first);
    free(ids);
    return r;
}

int rdzvd_job_admit(struct rdzvd_job *j, const char *node_id, const char *secret)
{
    struct rdzvd_job_record rec = {.generation = 0};
    int r;

    if (!j->host.secret_table)
        return 0;
    memcpy(rec.run_id, j->run_id, sizeof(rec.run_id));
    snprintf(rec.admitted.node_id, sizeof(rec.admitted.node_id), "%s", node_id);
    r = rdzvd_member_secret_hash(secret, rec.admitted.hash);
    if (r == 0)
        r = ids_make_room(j, node_id);
    if (r == 0)
        r = rdzvd_job_host_decide(&j->host, j->host.secret_table, RDZVD_DECIDE_ADMITTED, &rec);
    if (j->host.secret_table == j->host.record_table)
        r = decision_written(r);
    return r;
}

void rdzvd_member_forget(struct rdzvd_member *m)
{
    struct rdzvd_job *j = m->job;
    int r;

    if (!j->host.secret_table || j->state == JOB_ENDED || rdzvd_member_held_place(m))
        return;
    if ((r = decide_forgotten(j, m->join.node_id)) < 0)
        log_warn_errno(r, "job=%s cannot forget node id %s, which left without holding a place: "
                       "it stays among the job's node ids", j->run_id, m->join.node_id);
}

/* WAITING for run_id in h's job table (since: unix ms; 0: an agent is back): 0, or a negative
 * errno. It never says "left": the agents of a job whose connections all closed may be
 * reconnecting, so a STOPPED record keeps its nodes (W2). */
static int decide_waiting(const struct rdzvd_job_host *h, const char *run_id, int64_t since)
{
    struct rdzvd_job_record rec = {.generation = 0};
    int r;

    snprintf(rec.run_id, sizeof(rec.run_id), "%s", run_id);
    rec.waiting_since_ms = since;
    r = rdzvd_job_host_decide(h, h->record_table, RDZVD_DECIDE_WAITING, &rec);
    if (r < 0)
        log_warn_errno(r, since ? "job=%s cannot record since when it waits for its agents: a "
                                  "restart counts its --abandon-after afresh"
                                : "job=%s cannot record that an agent is back: after a restart "
                                  "its --abandon-after may count from when its agents left "
                                  "before",
                       run_id);
    return r < 0 ? r : 0;
}

void rdzvd_job_save_back(struct rdzvd_job *j)
{
    if (j->host.record_table && rdzvd_job_waiting_since(j->host.record_table, j->run_id))
        (void)decide_waiting(&j->host, j->run_id, 0);
}

void rdzvd_job_save_leaving(struct rdzvd_job *j)
{
    if (j->host.record_table)
        (void)decide_waiting(&j->host, j->run_id, (int64_t)(rdzvd_job_wall_s(&j->host) * 1000));
}

uint64_t rdzvd_jobs_waiting_since(const struct rdzvd_job_host *h, const char *run_id,
                                  uint64_t since_ms, uint64_t now_ms, int64_t wall_ms)
{
    int64_t kept = h->record_table ? rdzvd_job_waiting_since(h->record_table, run_id) : 0;
    int64_t since_wall = wall_ms - (int64_t)(now_ms - since_ms);

    if (kept > 0) { /* since then, however many restarts or leaders since */
        uint64_t ago = wall_ms > kept ? (uint64_t)(wall_ms - kept) : 0;

        return ago < now_ms ? now_ms - ago : 1;
    }
    if (h->record_table)
        (void)decide_waiting(h, run_id, since_wall < 1 ? 1 : since_wall);
    return since_ms;
}

int rdzvd_job_record_load(const struct rdzvd_job_host *h, const char *run_id,
                          struct rdzvd_job_record *rec)
{
    int r;

    if (!h->record_table)
        return -ENOENT;
    r = rdzvd_job_record_get(h->record_table, run_id, rec);
    if (r < 0 && r != -ENOENT)
        log_warn_errno(r, "job=%s: its record is unreadable; ignored", run_id);
    return r == -ENOENT || r == 0 ? r : -ENOENT;
}

/* rec's nodes and ids are what rdzvd_job_record_put takes (rdzvd-job-journals.h)? */
static bool record_parts_valid(const struct rdzvd_job_record *rec)
{
    int64_t sum = 0;

    if (rec->nnodes > rec->max) /* no generation is larger than MAX */
        return false;

    if (rec->nodes) {
        if (!rec->running || rec->nnodes < 1 || rec->nnodes > rec->max)
            return false;
        for (int64_t i = 0; i < rec->nnodes; i++) {
            const struct rdzvd_job_record_node *n = &rec->nodes[i];

            if (!n->node_id[0] || strnlen(n->node_id, sizeof(n->node_id)) > RDZV_ID_MAX ||
                n->nproc < 1 || n->nproc > RDZV_NPROC_MAX)
                return false;
            sum += n->nproc;
        }
        if (sum != rec->world_size)
            return false;
    }
    if (rec->n_stopped < 0 || rec->n_stopped > rec->max ||
        (rec->n_stopped && (!rec->stopped || rec->running)))
        return false;
    for (int64_t i = 0; i < rec->n_stopped; i++)
        if (strnlen(rec->stopped[i], RDZV_ID_MAX + 1) > RDZV_ID_MAX)
            return false;
    if (rec->n_ids > RDZV_MAX_NCCL_IDS || (rec->n_ids && (!rec->ids || !rec->running)))
        return false;
    for (unsigned i = 0; i < rec->n_ids; i++)
        if (strnlen(rec->ids[i], RDZV_NCCL_HEX_LEN + 1) != RDZV_NCCL_HEX_LEN ||
            strspn(rec->ids[i], "0123456789abcdefABCDEF") != RDZV_NCCL_HEX_LEN)
            return false;
    if (rec->n_hist > RDZVD_JOB_HISTORY_MAX || (rec->n_hist && !rec->hist))
        return false;
    for (unsigned i = 0; i < rec->n_hist; i++) {
        const struct rdzvd_job_record_hist *h = &rec->hist[i];

        if (!h->node_id[0] || strnlen(h->node_id, sizeof(h->node_id)) > RDZV_ID_MAX ||
            strnlen(h->host, sizeof(h->host)) > RDZV_HOST_MAX ||
            h->failures < 0 || strnlen(h->reason, sizeof(h->reason)) > RDZVD_ASIDE_REASON_MAX ||
            !rdzv_gpu_set_valid(&h->gpus) || (h->gpus.n && !h->aside) ||
            h->n_fails > RDZVD_JOB_FAILS_KEPT)
            return false;
        for (unsigned k = 0; k < i; k++)
            if (strcmp(rec->hist[k].node_id, h->node_id) == 0)
                return false;
    }
    return true;
}

/* The GPUs of rec's nodes put aside, [[node_id, [uuid, ...]], ...] (rdzvd-job-record.h), into o
 * when there are any. 0 or -ENOMEM. */
static int record_encode_gpus(json_t *o, const struct rdzvd_job_record *rec)
{
    json_t *a = NULL;

    for (unsigned i = 0; i < rec->n_hist; i++) {
        const struct rdzvd_job_record_hist *h = &rec->hist[i];

        if (!h->gpus.n)
            continue;
        if (!a && (!(a = json_array()) || json_object_set_new(o, "aside_gpus", a) < 0))
            return -ENOMEM;
        if (json_array_append_new(a, json_pack("[s, o]", h->node_id,
                                               rdzv_gpu_set_to_json(&h->gpus))) < 0)
            return -ENOMEM;
    }
    return 0;
}

/* The dated failures of rec's history as "history_fails": one array per history entry, in its
 * order, of [ms, rank, local_rank, world_size, node, startup]. Beside "history", not in it: an
 * older rdzvd reads the history and ignores them. 0 or -ENOMEM. */
static int record_encode_fails(json_t *o, const struct rdzvd_job_record *rec)
{
    json_t *a = json_array(), *f;

    if (!a || json_object_set_new(o, "history_fails", a) < 0)
        return -ENOMEM;
    for (unsigned i = 0; i < rec->n_hist; i++) {
        const struct rdzvd_job_record_hist *h = &rec->hist[i];

        if (!(f = json_array()) || json_array_append_new(a, f) < 0)
            return -ENOMEM;
        for (unsigned k = 0; k < h->n_fails; k++) {
            const struct rdzvd_job_record_fail *x = &h->fails[k];

            if (json_array_append_new(f, json_pack("[I, I, I, I, b, b]", (json_int_t)x->ms,
                                                   (json_int_t)x->rank,
                                                   (json_int_t)x->local_rank,
                                                   (json_int_t)x->world_size, x->node,
                                                   x->startup)) < 0)
                return -ENOMEM;
        }
    }
    return 0;
}

/* "history_fails" (absent: a record of an older rdzvd, no dates) into rec's history, decoded.
 * 0 or -EBADMSG. */
static int record_decode_fails(json_t *all, struct rdzvd_job_record *rec)
{
    json_t *f, *v;
    size_t i, k;

    if (!all)
        return 0;
    if (!json_is_array(all) || json_array_size(all) != rec->n_hist)
        return -EBADMSG;
    json_array_foreach(all, i, f)
    {
        struct rdzvd_job_record_hist *h = &rec->hist[i];

        if (!json_is_array(f) || json_array_size(f) > RDZVD_JOB_FAILS_KEPT)
            return -EBADMSG;
        json_array_foreach(f, k, v)
        {
            struct rdzvd_job_record_fail *x = &h->fails[k];
            json_int_t ms, rank, lr, ws;
            int node, startup;

            if (json_unpack(v, "[I, I, I, I, b, b]", &ms, &rank, &lr, &ws, &node, &startup) < 0 ||
                ms < 0 || rank < -1 || lr < -1 || ws < -1)
                return -EBADMSG;
            *x = (struct rdzvd_job_record_fail){ms, rank, lr, ws, node != 0, startup != 0};
        }
        h->n_fails = (unsigned)json_array_size(f);
    }
    return 0;
}

/* n strings, stride bytes apart from first, into o as the list name. 0 or -ENOMEM. */
static int strings_encode(json_t *o, const char *name, const char *first, size_t stride, size_t n)
{
    json_t *a = json_array();

    if (!a || json_object_set_new(o, name, a) < 0)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++)
        if (json_array_append_new(a, json_string(first + i * stride)) < 0)
            return -ENOMEM;
    return 0;
}

/* Node rank i into o's list name ([i, ...]), which *a holds once made. 0 or -ENOMEM. */
static int rank_list_add(json_t *o, const char *name, json_t **a, int64_t i)
{
    if (!*a && (!(*a = json_array()) || json_object_set_new(o, name, *a) < 0))
        return -ENOMEM;
    return json_array_append_new(*a, json_integer((json_int_t)i)) < 0 ? -ENOMEM : 0;
}

/* rec's nodes ([[node_id, nproc], ...] by node rank; the node ranks of its newcomers and of
 * those done, if any, [i, ...]) and ids (["hex", ...]) into o. 0 or -ENOMEM. */
static int record_encode_parts(json_t *o, const struct rdzvd_job_record *rec)
{
    json_t *a, *nc = NULL, *done = NULL;

    if (rec->nodes) {
        if (!(a = json_array()) || json_object_set_new(o, "nodes", a) < 0)
            return -ENOMEM;
        for (int64_t i = 0; i < rec->nnodes; i++) {
            if (json_array_append_new(a, json_pack("[s, I]", rec->nodes[i].node_id,
                                                   (json_int_t)rec->nodes[i].nproc)) < 0)
                return -ENOMEM;
            if (rec->nodes[i].newcomer && rank_list_add(o, "newcomers", &nc, i) < 0)
                return -ENOMEM;
            if (rec->nodes[i].done && rank_list_add(o, "done", &done, i) < 0)
                return -ENOMEM;
        }
    }
    if (rec->n_stopped && strings_encode(o, "stopped_nodes", rec->stopped[0],
                                         sizeof(rec->stopped[0]), (size_t)rec->n_stopped) < 0)
        return -ENOMEM;
    if (rec->n_ids && strings_encode(o, "ids", rec->ids[0], sizeof(rec->ids[0]), rec->n_ids) < 0)
        return -ENOMEM;
    if (rec->n_hist) {
        if (!(a = json_array()) || json_object_set_new(o, "history", a) < 0)
            return -ENOMEM;
        for (unsigned i = 0; i < rec->n_hist; i++) {
            const struct rdzvd_job_record_hist *h = &rec->hist[i];

            if (json_array_append_new(a, json_pack("[s, s, I, b, s]", h->node_id, h->host,
                                                   (json_int_t)h->failures, h->aside,
                                                   h->reason)) < 0)
                return -ENOMEM;
        }
        if (record_encode_fails(o, rec) < 0)
            return -ENOMEM;
    }
    return record_encode_gpus(o, rec);
}

/* rec's settings into o as "settings" (none: nothing). 0 or -ENOMEM. */
static int record_encode_settings(json_t *o, const struct rdzvd_job_record *rec)
{
    const struct rdzvd_job_settings *st = &rec->settings;
    json_t *v;

    if (!rec->has_settings)
        return 0;
    v = json_pack("{s:I, s:I, s:I, s:b, s:s, s:I, s:I, s:I, s:f, s:I, s:b}", "last_call_ms",
                  (json_int_t)st->last_call_ms, "heartbeat_timeout_ms",
                  (json_int_t)st->heartbeat_timeout_ms, "join_timeout_ms",
                  (json_int_t)st->join_timeout_ms, "scale_up_now", st->scale_up_now, "recovery",
                  st->inplace ? "inplace" : "restart", "bad_node_failures",
                  (json_int_t)st->bad_node_failures, "bad_node_window",
                  (json_int_t)st->bad_node_window_s, "restart_backoff",
                  (json_int_t)st->restart_backoff_s, "straggler_factor", st->straggler_factor,
                  "straggler_window_ms", (json_int_t)st->straggler_window_ms, "straggler_aside",
                  st->straggler_aside);
    if (v && ((st->command[0] && json_object_set_new(v, "command", json_string(st->command)) < 0) ||
              (st->preflight_fraction > 0 &&
               json_object_set_new(v, "preflight", json_real(st->preflight_fraction)) < 0))) {
        json_decref(v);
        v = NULL;
    }
    return v && json_object_set_new(o, "settings", v) == 0 ? 0 : -ENOMEM;
}

/* o's "settings" into rec, within a JOIN's upper bounds (proto/rdzv-msg.c; the lower ones of
 * its wire are for agents: rdzvd's own tests run shorter timeouts). None (a record of an older
 * rdzvd), or settings this rdzvd does not take (a later rdzvd's: a new value): rec has none, and
 * the rest of the record (its generation, its history, the nodes put aside) still counts. */
static void record_decode_settings(json_t *o, struct rdzvd_job_record *rec)
{
    json_t *v = json_object_get(o, "settings");
    json_int_t last, hb, join, bad, win, back, sw;
    int up, aside;
    const char *recovery, *command = "";
    double f, pf = 0;

    if (!v)
        return;
    if (json_unpack(v, "{s:I, s:I, s:I, s:b, s:s, s:I, s:I, s:I, s:F, s:I, s:b, s?s, s?F}",
                    "last_call_ms", &last, "heartbeat_timeout_ms", &hb, "join_timeout_ms", &join,
                    "scale_up_now", &up, "recovery", &recovery, "bad_node_failures", &bad,
                    "bad_node_window", &win, "restart_backoff", &back, "straggler_factor", &f,
                    "straggler_window_ms", &sw, "straggler_aside", &aside, "command",
                    &command, "preflight", &pf) < 0)
        return;
    if (last < 0 || hb < 0 || hb > 3600000 || join < 0 ||
        join > 86400000 || (strcmp(recovery, "restart") && strcmp(recovery, "inplace")) ||
        bad < 0 || bad > RDZV_BAD_NODE_FAILURES_MAX || win < 0 ||
        win > RDZV_BAD_NODE_WINDOW_MAX || (win > 0 && bad > RDZV_BAD_NODE_WINDOWED_MAX) ||
        back < 0 || back > RDZV_RESTART_BACKOFF_MAX ||
        (f != 0 && (!(f > 1 && f <= RDZV_STRAGGLER_FACTOR_MAX) ||
                    sw < 1 || sw > RDZV_STRAGGLER_WINDOW_MAX_MS)) ||
        (f == 0 && (sw != 0 || aside)) || (*command && !rdzv_msg_is_command(command)) ||
        !(pf >= 0 && pf < 1))
        return;
    rec->has_settings = true;
    rec->settings = (struct rdzvd_job_settings){
        .last_call_ms = last, .heartbeat_timeout_ms = hb, .join_timeout_ms = join,
        .scale_up_now = up != 0, .inplace = strcmp(recovery, "inplace") == 0,
        .bad_node_failures = bad, .bad_node_window_s = win, .restart_backoff_s = back,
        .straggler_factor = f, .straggler_window_ms = sw, .straggler_aside = aside != 0,
        .preflight_fraction = pf};
    snprintf(rec->settings.command, sizeof(rec->settings.command), "%s", command);
}

/* rec's restarts not charged to the budget as "free_restarts" ([ms, ...], oldest first; none:
 * nothing, as an older rdzvd's record has). 0 or -ENOMEM. */
static int record_encode_free(json_t *o, const struct rdzvd_job_record *rec)
{
    json_t *a;

    if (!rec->n_uncounted)
        return 0;
    if (!(a = json_array()) || json_object_set_new(o, "free_restarts", a) < 0)
        return -ENOMEM;
    for (unsigned i = 0; i < rec->n_uncounted && i < RDZVD_JOB_UNCOUNTED_RESTARTS; i++)
        if (json_array_append_new(a, json_integer((json_int_t)rec->uncounted_ms[i])) < 0)
            return -ENOMEM;
    return 0;
}

/* "free_restarts" into rec: the newest RDZVD_JOB_UNCOUNTED_RESTARTS (a later rdzvd may keep more).
 * None, or not such an array: none (the bound counts from here). */
static void record_decode_uncounted(json_t *a, struct rdzvd_job_record *rec)
{
    size_t n = json_is_array(a) ? json_array_size(a) : 0, from;

    from = n > RDZVD_JOB_UNCOUNTED_RESTARTS ? n - RDZVD_JOB_UNCOUNTED_RESTARTS : 0;
    rec->n_uncounted = 0;
    for (size_t i = from; i < n; i++) {
        json_t *v = json_array_get(a, i);

        if (!json_is_integer(v) || json_integer_value(v) < 0) {
            rec->n_uncounted = 0;
            return;
        }
        rec->uncounted_ms[rec->n_uncounted++] = json_integer_value(v);
    }
}

/* rec as the JSON object of a record, or NULL when out of memory. */
static json_t *record_json(const struct rdzvd_job_record *rec)
{
    json_t *o = json_pack("{s:s, s:I, s:I, s:I, s:I, s:I, s:b, s:I, s:I, s:i}", "run_id",
                          rec->run_id, "min", (json_int_t)rec->min, "max", (json_int_t)rec->max,
                          "max_restarts", (json_int_t)rec->max_restarts, "generation",
                          (json_int_t)rec->generation, "restart_count",
                          (json_int_t)rec->restart_count, "running", rec->running, "nnodes",
                          (json_int_t)rec->nnodes, "world_size", (json_int_t)rec->world_size,
                          "store_port", (int)rec->store_port);

    if (o && rec->store_addr[0] &&
        json_object_set_new(o, "store_addr", json_string(rec->store_addr)) < 0) {
        json_decref(o);
        o = NULL;
    }
    if (o && (record_encode_settings(o, rec) < 0 || record_encode_parts(o, rec) < 0 ||
              record_encode_free(o, rec) < 0)) {
        json_decref(o);
        o = NULL;
    }
    return o;
}

/* rec as the JSON text of a record (malloc'd), or NULL when out of memory. */
static char *record_encode(const struct rdzvd_job_record *rec)
{
    json_t *o = record_json(rec);
    char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;

    json_decref(o);
    return text;
}

void rdzvd_job_record_clear(struct rdzvd_job_record *rec)
{
    free(rec->nodes);
    free(rec->stopped);
    free(rec->ids);
    free(rec->hist);
    rec->nodes = NULL;
    rec->stopped = NULL;
    rec->n_stopped = 0;
    rec->ids = NULL;
    rec->n_ids = 0;
    rec->hist = NULL;
    rec->n_hist = 0;
}

/* The history array of a record, if any, into rec. 0, -EBADMSG or -ENOMEM (the caller clears
 * rec's parts). */
static int record_decode_hist(json_t *hist, struct rdzvd_job_record *rec)
{
    json_t *v;
    size_t i;

    if (!hist)
        return 0;
    if (!json_is_array(hist) || json_array_size(hist) > RDZVD_JOB_HISTORY_MAX)
        return -EBADMSG;
    if (json_array_size(hist) && !(rec->hist = calloc(json_array_size(hist), sizeof(*rec->hist))))
        return -ENOMEM;
    json_array_foreach(hist, i, v)
    {
        struct rdzvd_job_record_hist *h = &rec->hist[i];
        const char *id, *host, *reason;
        json_int_t failures;
        int aside;

        if (json_unpack(v, "[s, s, I, b, s!]", &id, &host, &failures, &aside, &reason) < 0 ||
            strlen(id) > RDZV_ID_MAX || strlen(host) > RDZV_HOST_MAX ||
            strlen(reason) > RDZVD_ASIDE_REASON_MAX)
            return -EBADMSG;
        snprintf(h->node_id, sizeof(h->node_id), "%s", id);
        snprintf(h->host, sizeof(h->host), "%s", host);
        snprintf(h->reason, sizeof(h->reason), "%s", reason);
        h->failures = failures;
        h->aside = aside != 0;
        rec->n_hist = (unsigned)i + 1;
    }
    return 0;
}

/* The "aside_gpus" of a record, if any, into its history (decoded): each names a node of it put
 * aside, once. 0 or -EBADMSG. */
static int record_decode_gpus(json_t *gpus, struct rdzvd_job_record *rec)
{
    char err[128];
    json_t *v, *set;
    size_t i;

    if (!gpus)
        return 0;
    if (!json_is_array(gpus) || json_array_size(gpus) > rec->n_hist)
        return -EBADMSG;
    json_array_foreach(gpus, i, v)
    {
        struct rdzvd_job_record_hist *h = NULL;
        const char *id;

        if (json_unpack(v, "[s, o!]", &id, &set) < 0)
            return -EBADMSG;
        for (unsigned k = 0; k < rec->n_hist && !h; k++)
            if (strcmp(rec->hist[k].node_id, id) == 0)
                h = &rec->hist[k];
        if (!h || !h->aside || h->gpus.n ||
            rdzv_gpu_set_from_json(set, "aside_gpus", &h->gpus, err, sizeof(err)) < 0 ||
            !h->gpus.n)
            return -EBADMSG;
    }
    return 0;
}

/* The node ids of the generation stopped (v, NULL: none; a string each, "" for a rank not
 * held, at most the job's MAX) into rec. 0, -EBADMSG or -ENOMEM (the caller clears rec). */
static int record_decode_stopped(json_t *v, struct rdzvd_job_record *rec)
{
    json_t *k;
    size_t i;

    if (!v)
        return 0;
    if (!json_is_array(v) || !json_array_size(v) || (int64_t)json_array_size(v) > rec->max)
        return -EBADMSG;
    if (!(rec->stopped = calloc(json_array_size(v), sizeof(*rec->stopped))))
        return -ENOMEM;
    rec->n_stopped = (int64_t)json_array_size(v);
    json_array_foreach(v, i, k)
    {
        if (!json_is_string(k) || json_string_length(k) > RDZV_ID_MAX)
            return -EBADMSG;
        memcpy(rec->stopped[i], json_string_value(k), json_string_length(k) + 1);
    }
    return 0;
}

/* A list of node ranks of rec's nodes (v, NULL: none), each once, into their newcomer flags,
 * or their done flags when done. 0 or -EBADMSG. */
static int rank_list_decode(json_t *v, struct rdzvd_job_record *rec, bool done)
{
    json_t *k;
    size_t i;

    if (!v)
        return 0;
    if (!rec->nodes || !json_is_array(v))
        return -EBADMSG;
    json_array_foreach(v, i, k)
    {
        json_int_t rank = json_is_integer(k) ? json_integer_value(k) : -1;
        bool *flag;

        if (rank < 0 || rank >= rec->nnodes)
            return -EBADMSG;
        flag = done ? &rec->nodes[rank].done : &rec->nodes[rank].newcomer;
        if (*flag)
            return -EBADMSG;
        *flag = true;
    }
    return 0;
}

/* The nodes and ids of the record o, if any, into rec (its other fields decoded). 0, -EBADMSG
 * (malformed, or not what put takes: rec's parts are then cleared) or -ENOMEM. */
static int record_decode_parts(json_t *o, struct rdzvd_job_record *rec)
{
    json_t *nodes = json_object_get(o, "nodes"), *ids = json_object_get(o, "ids"), *v;
    size_t i;
    int r;

    if (nodes) {
        if (!json_is_array(nodes) || (int64_t)json_array_size(nodes) != rec->nnodes ||
            rec->nnodes < 1)
            return -EBADMSG;
        if (!(rec->nodes = calloc(json_array_size(nodes), sizeof(*rec->nodes))))
            return -ENOMEM;
        json_array_foreach(nodes, i, v)
        {
            const char *id;
            json_int_t nproc;

            if (json_unpack(v, "[s, I!]", &id, &nproc) < 0 || strlen(id) > RDZV_ID_MAX)
                goto out_bad;
            snprintf(rec->nodes[i].node_id, sizeof(rec->nodes[i].node_id), "%s", id);
            rec->nodes[i].nproc = nproc;
        }
    }
    if (rank_list_decode(json_object_get(o, "newcomers"), rec, false) < 0 ||
        rank_list_decode(json_object_get(o, "done"), rec, true) < 0)
        goto out_bad;
    if (ids) {
        if (!json_is_array(ids) || json_array_size(ids) > RDZV_MAX_NCCL_IDS)
            goto out_bad;
        if (json_array_size(ids) &&
            !(rec->ids = calloc(json_array_size(ids), sizeof(*rec->ids)))) {
            rdzvd_job_record_clear(rec);
            return -ENOMEM;
        }
        json_array_foreach(ids, i, v)
        {
            if (!json_is_string(v) || json_string_length(v) != RDZV_NCCL_HEX_LEN)
                goto out_bad;
            memcpy(rec->ids[i], json_string_value(v), RDZV_NCCL_HEX_LEN + 1);
        }
        rec->n_ids = (unsigned)json_array_size(ids);
    }
    r = record_decode_stopped(json_object_get(o, "stopped_nodes"), rec);
    if (r == 0)
        r = record_decode_hist(json_object_get(o, "history"), rec);
    if (r == 0)
        r = record_decode_fails(json_object_get(o, "history_fails"), rec);
    if (r == 0)
        r = record_decode_gpus(json_object_get(o, "aside_gpus"), rec);
    if (r == -ENOMEM) {
        rdzvd_job_record_clear(rec);
        return r;
    }
    if (r == 0 && record_parts_valid(rec))
        return 0;
out_bad:
    rdzvd_job_record_clear(rec);
    return -EBADMSG;
}

/* The record o (whose run_id the caller checked) into *rec. 0, -EBADMSG or -ENOMEM. */
static int record_decode(json_t *o, struct rdzvd_job_record *rec)
{
    const char *id, *addr = "";
    json_int_t min, max, mr, gen, rc, nn, ws;
    int running, port;

    if (json_unpack(o, "{s:s, s:I, s:I, s:I, s:I, s:I, s:b, s:I, s:I, s:i, s?s}", "run_id", &id,
                    "min", &min, "max", &max, "max_restarts", &mr, "generation", &gen,
                    "restart_count", &rc, "running", &running, "nnodes", &nn, "world_size", &ws,
                    "store_port", &port, "store_addr", &addr) < 0 ||
        strlen(id) >= sizeof(rec->run_id) || strlen(addr) > RDZV_STORE_ADDR_MAX)
        return -EBADMSG;
    if (min < 1 || max < min || mr < 0 || gen < 0 || rc < 0 || nn < 0 || ws < 0 || port < 0 ||
        port > 65535)
        return -EBADMSG;
    memset(rec, 0, sizeof(*rec));
    snprintf(rec->run_id, sizeof(rec->run_id), "%s", id);
    rec->min = min;
    rec->max = max;
    rec->max_restarts = mr;
    rec->generation = (uint64_t)gen;
    rec->restart_count = rc;
    rec->running = running != 0;
    rec->nnodes = nn;
    rec->world_size = ws;
    rec->store_port = (uint16_t)port;
    snprintf(rec->store_addr, sizeof(rec->store_addr), "%s", addr);
    record_decode_settings(o, rec);
    record_decode_uncounted(json_object_get(o, "free_restarts"), rec);
    return record_decode_parts(o, rec);
}

/* ---- the job table ---- */

#define TABLE_KEY_PREFIX "job/"

static size_t table_key(const char *run_id, char *key, size_t len)
{
    return (size_t)snprintf(key, len, TABLE_KEY_PREFIX "%s", run_id);
}

int rdzvd_job_record_put(struct rdzvd_store *t, const struct rdzvd_job_record *rec)
{
    char key[sizeof(TABLE_KEY_PREFIX) + RDZV_ID_MAX + 1];
    char *text;
    int r;

    if (!record_parts_valid(rec))
        return -EINVAL;
    if (!(text = record_encode(rec)))
        return -ENOMEM;
    r = rdzvd_store_set(t, key, table_key(rec->run_id, key, sizeof(key)), text, strlen(text));
    free(text);
    return r;
}

int rdzvd_job_record_get(struct rdzvd_store *t, const char *run_id, struct rdzvd_job_record *rec)
{
    char key[sizeof(TABLE_KEY_PREFIX) + RDZV_ID_MAX + 1];
    const uint8_t *val;
    size_t vlen;
    json_t *o;
    int r;

    if (strlen(run_id) > RDZV_ID_MAX)
        return -ENOENT; /* no record holds it, and its key would not fit in key[] */
    r = rdzvd_store_get(t, key, table_key(run_id, key, sizeof(key)), &val, &vlen);
    if (r < 0)
        return r;
    o = json_loadb((const char *)val, vlen, 0, NULL);
    r = o ? record_decode(o, rec) : -EBADMSG;
    if (r == 0 && strcmp(rec->run_id, run_id) != 0) {
        rdzvd_job_record_clear(rec);
        r = -EBADMSG;
    }
    if (r < 0) /* nothing of a record that is none is kept: no part of it is used */
        memset(rec, 0, sizeof(*rec));
    json_decref(o);
    return r;
}

int rdzvd_job_record_del(struct rdzvd_store *t, const char *run_id)
{
    char key[sizeof(TABLE_KEY_PREFIX) + RDZV_ID_MAX + 1];
    int r;

    if (strlen(run_id) > RDZV_ID_MAX)
        return 0; /* no record holds it, and its key would not fit in key[] */
    r = rdzvd_store_delete(t, key, table_key(run_id, key, sizeof(key)));
    return r < 0 ? r : 0; /* the store says 1 (deleted) or 0 (none): both are 0 here */
}

/* ---- decisions ---- */

static const char *const decision_names[] = {
    [RDZVD_DECIDE_FORMED] = "formed",
    [RDZVD_DECIDE_STOPPED] = "stopped",
    [RDZVD_DECIDE_ENDED] = "ended",
    [RDZVD_DECIDE_ASIDE] = "aside",
    [RDZVD_DECIDE_ADMITTED] = "admitted",
    [RDZVD_DECIDE_WAITING] = "waiting",
    [RDZVD_DECIDE_FORGOTTEN] = "forgotten",
    [RDZVD_DECIDE_DONE] = "done",
};

const char *rdzvd_decision_name(enum rdzvd_decision_kind kind)
{
    return (unsigned)kind < sizeof(decision_names) / sizeof(decision_names[0])
               ? decision_names[kind]
               : "?";
}

/* A decision of kind takes a record like rec? FORMED: a running generation; STOPPED: one that
 * does not run; ENDED: anything (only its run id counts). */
static bool decision_fits(enum rdzvd_decision_kind kind, const struct rdzvd_job_record *rec)
{
    switch (kind) {
    case RDZVD_DECIDE_FORMED:
        return rec->running && rec->generation >= 1 && rec->nnodes >= 1;
    case RDZVD_DECIDE_STOPPED:
    case RDZVD_DECIDE_ASIDE:
        return !rec->running && !rec->nodes && !rec->n_ids;
    case RDZVD_DECIDE_ENDED:
        return true;
    case RDZVD_DECIDE_WAITING:
        return rec->waiting_since_ms >= 0;
    case RDZVD_DECIDE_DONE:
        return rec->generation >= 1 && rec->done_rank >= 0; /* the record bounds it */
    case RDZVD_DECIDE_FORGOTTEN:
    case RDZVD_DECIDE_ADMITTED:
        return rdzvd_job_admitted_valid(&rec->admitted, kind == RDZVD_DECIDE_ADMITTED);
    }
    return false;
}

/* ---- a job's waiting, and its node ids ---- */

#define WAIT_KEY_PREFIX "wait/"

static size_t wait_key(const char *run_id, char *key, size_t len)
{
    return (size_t)snprintf(key, len, WAIT_KEY_PREFIX "%s", run_id);
}

int64_t rdzvd_job_waiting_since(struct rdzvd_store *t, const char *run_id)
{
    char key[sizeof(WAIT_KEY_PREFIX) + RDZV_ID_MAX + 1], text[24];
    const uint8_t *val;
    size_t vlen;
    long long ms;

    if (strlen(run_id) > RDZV_ID_MAX ||
        rdzvd_store_get(t, key, wait_key(run_id, key, sizeof(key)), &val, &vlen) < 0 ||
        vlen == 0 || vlen >= sizeof(text))
        return 0;
    memcpy(text, val, vlen);
    text[vlen] = '\0';
    return sscanf(text, "%lld", &ms) == 1 && ms > 0 ? (int64_t)ms : 0;
}

/* WAITING: since > 0 kept, 0 deleted (1 when there was none: nothing changed). */
static int waiting_decide(struct rdzvd_store *t, const char *run_id, int64_t since)
{
    char key[sizeof(WAIT_KEY_PREFIX) + RDZV_ID_MAX + 1], text[24];
    size_t klen = wait_key(run_id, key, sizeof(key));
    int r;

    if (!since)
        return (r = rdzvd_store_delete(t, key, klen)) < 0 ? r : !r;
    snprintf(text, sizeof(text), "%lld", (long long)since);
    return rdzvd_store_set(t, key, klen, text, strlen(text));
}

/* The JSON text of a decision (malloc'd): FORMED and STOPPED carry the record they make, with
 * "decision"; ENDED the run id, and how the job ended ("outcome") when it has one. NULL when out
 * of memory. */
static char *decision_encode(enum rdzvd_decision_kind kind, const struct rdzvd_job_record *rec)
{
    json_t *o = kind == RDZVD_DECIDE_ENDED
                    ? (rec->has_end ? json_pack("{s:s, s:o*}", "run_id", rec->run_id, "outcome",
                                                rdzvd_job_end_json(&rec->end))
                                    : json_pack("{s:s}", "run_id", rec->run_id))
                : kind == RDZVD_DECIDE_ADMITTED || kind == RDZVD_DECIDE_FORGOTTEN
                    ? rdzvd_job_admitted_json(rec->run_id, &rec->admitted,
                                              kind == RDZVD_DECIDE_ADMITTED)
                : kind == RDZVD_DECIDE_WAITING
                    ? json_pack("{s:s, s:I, s:b}", "run_id", rec->run_id, "since_ms",
                                (json_int_t)rec->waiting_since_ms, "left", rec->agents_left)
                : kind == RDZVD_DECIDE_DONE
                    ? json_pack("{s:s, s:I, s:I}", "run_id", rec->run_id, "generation",
                                (json_int_t)rec->generation, "node_rank",
                                (json_int_t)rec->done_rank)
                    : record_json(rec);
    char *text = NULL;

    if (o && json_object_set_new(o, "decision", json_string(rdzvd_decision_name(kind))) == 0)
        text = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return text;
}

/* A decoded decision, for apply_decided (rdzvd_store_change_as's fn). */
struct decided {
    enum rdzvd_decision_kind kind;
    struct rdzvd_job_record rec; /* ENDED: only run_id */
    const uint8_t *key;          /* the record's key in the table */
    size_t klen;
    const struct rdzvd_job_bounds *bounds; /* the table's */
};

/* rec would take the job cur back, or make it another job? (rdzvd-job-record.h) */
static bool decision_goes_back(const struct decided *d, const struct rdzvd_job_record *cur)
{
    const struct rdzvd_job_record *rec = &d->rec;

    if (rec->min != cur->min || rec->max != cur->max || rec->max_restarts != cur->max_restarts)
        return true;
    if (d->kind == RDZVD_DECIDE_ASIDE)
        return false; /* it keeps the record's generation and restart count */
    if (rec->restart_count < cur->restart_count)
        return true;
    return d->kind == RDZVD_DECIDE_FORMED ? rec->generation <= cur->generation
                                          : rec->generation < cur->generation;
}

/* Change the record in t as d decides: 0, 1 (an ENDED with no record: nothing), -ESTALE, or
 * the store's error. */
static int apply_decided(struct rdzvd_store *t, void *ud)
{
    const struct decided *d = ud;
    struct rdzvd_job_record cur = {.generation = 0};
    int r;

    if (d->kind == RDZVD_DECIDE_WAITING) {
        char key[sizeof(TABLE_KEY_PREFIX) + RDZV_ID_MAX + 1];
        const uint8_t *val;
        size_t vlen;

        /* Only a job with a record waits in it: none, nothing kept (1). */
        if (d->rec.waiting_since_ms &&
            rdzvd_store_get(t, key, table_key(d->rec.run_id, key, sizeof(key)), &val, &vlen) < 0)
            return 1;
        r = waiting_decide(t, d->rec.run_id, d->rec.waiting_since_ms);
        /* "left" (decided by no rdzvd now, replayed alike): the record drops its stopped
         * nodes. Not dropped (no room): a restored job waits its window for them. */
        if (r >= 0 && d->rec.agents_left && rdzvd_job_record_get(t, d->rec.run_id, &cur) == 0) {
            if (cur.n_stopped) {
                free(cur.stopped);
                cur.stopped = NULL;
                cur.n_stopped = 0;
                (void)rdzvd_job_record_put(t, &cur);
            }
            rdzvd_job_record_clear(&cur);
        }
        return r;
    }
    if (d->kind == RDZVD_DECIDE_ENDED) {
        int s = rdzvd_job_ids_forget(t, d->rec.run_id, NULL);

        (void)waiting_decide(t, d->rec.run_id, 0);
        r = rdzvd_store_delete(t, d->key, d->klen); /* 1: deleted, 0: there was none */
        /* Its outcome kept (a store full refuses it: the end stands, told to nobody later). */
        if (r >= 0 && s >= 0 && d->rec.has_end &&
            rdzvd_job_end_keep(t, &d->rec.end, d->bounds->ends_kept) == 0)
            return 0;
        return r < 0 ? r : s < 0 ? s : !r && s;
    }
    if (d->kind == RDZVD_DECIDE_ADMITTED)
        return rdzvd_job_ids_admit(t, d->rec.run_id, &d->rec.admitted,
                                   d->bounds->ids_bytes_max);
    if (d->kind == RDZVD_DECIDE_FORGOTTEN)
        return rdzvd_job_ids_forget(t, d->rec.run_id, d->rec.admitted.node_id);
    r = rdzvd_job_record_get(t, d->rec.run_id, &cur);
    if (d->kind == RDZVD_DECIDE_DONE) {
        /* Only the running generation's record changes; another's, or none, stays (1). */
        if (r == 0 && cur.running && cur.generation == d->rec.generation && cur.nodes &&
            d->rec.done_rank < cur.nnodes && !cur.nodes[d->rec.done_rank].done) {
            cur.nodes[d->rec.done_rank].done = true;
            r = rdzvd_job_record_put(t, &cur);
        } else if (r == 0 || r == -ENOENT || r == -EBADMSG) {
            r = 1;
        }
    } else if (r == 0 && decision_goes_back(d, &cur)) {
        r = -ESTALE;
    } else if (r == 0 && d->kind == RDZVD_DECIDE_ASIDE) {
        struct rdzvd_job_record next = cur;

        next.hist = d->rec.hist;
        next.n_hist = d->rec.n_hist;
        if (!cur.has_settings && d->rec.has_settings) { /* an older rdzvd's record, till now */
            next.has_settings = true;
            next.settings = d->rec.settings;
        }
        r = rdzvd_job_record_put(t, &next);
    } else if (r == 0 || r == -ENOENT || r == -EBADMSG) { /* no record, or none readable: d's */
        r = rdzvd_job_record_put(t, &d->rec);
        /* A generation formed or stopped has its agents: whatever leaving was kept is over. */
        if (r == 0)
            (void)waiting_decide(t, d->rec.run_id, 0);
    }
    rdzvd_job_record_clear(&cur);
    return r;
}

/* The decision text val into d (its record's parts allocated: rdzvd_job_record_clear). 0 or
 * -EBADMSG / -ENOMEM. */
static int decision_decode(const uint8_t *val, size_t vlen, struct decided *d)
{
    json_t *o = json_loadb((const char *)val, vlen, 0, NULL);
    const char *kind = NULL, *id = NULL;
    int r = -EBADMSG;

    memset(d, 0, sizeof(*d));
    if (!o || json_unpack(o, "{s:s, s:s}", "decision", &kind, "run_id", &id) < 0)
        goto out;
    if (strcmp(kind, "ended") == 0) {
        json_t *end = json_object_get(o, "outcome");

        d->kind = RDZVD_DECIDE_ENDED;
        if (strlen(id) > RDZV_ID_MAX ||
            (end && rdzvd_job_end_from_json(end, id, &d->rec.end) < 0))
            goto out;
        d->rec.has_end = end != NULL;
        snprintf(d->rec.run_id, sizeof(d->rec.run_id), "%s", id);
        r = 0;
        goto out;
    }
    if (strcmp(kind, "admitted") == 0 || strcmp(kind, "forgotten") == 0) {
        d->kind = kind[0] == 'a' ? RDZVD_DECIDE_ADMITTED : RDZVD_DECIDE_FORGOTTEN;
        if (strlen(id) > RDZV_ID_MAX ||
            rdzvd_job_admitted_from_json(o, kind[0] == 'a', &d->rec.admitted) < 0)
            goto out;
        snprintf(d->rec.run_id, sizeof(d->rec.run_id), "%s", id);
        r = 0;
        goto out;
    }
    if (strcmp(kind, "waiting") == 0) {
        json_int_t since;
        int left = 0;

        d->kind = RDZVD_DECIDE_WAITING;
        if (json_unpack(o, "{s:I, s?b}", "since_ms", &since, "left", &left) < 0 || since < 0 ||
            strlen(id) > RDZV_ID_MAX)
            goto out;
        snprintf(d->rec.run_id, sizeof(d->rec.run_id), "%s", id);
        d->rec.waiting_since_ms = (int64_t)since;
        d->rec.agents_left = left && since > 0;
        r = 0;
        goto out;
    }
    if (strcmp(kind, "done") == 0) {
        json_int_t gen, rank;

        d->kind = RDZVD_DECIDE_DONE;
        if (json_unpack(o, "{s:I, s:I}", "generation", &gen, "node_rank", &rank) < 0 ||
            strlen(id) > RDZV_ID_MAX)
            goto out;
        snprintf(d->rec.run_id, sizeof(d->rec.run_id), "%s", id);
        d->rec.generation = gen > 0 ? (uint64_t)gen : 0;
        d->rec.done_rank = rank;
        r = decision_fits(d->kind, &d->rec) ? 0 : -EBADMSG;
        goto out;
    }
    if (strcmp(kind, "formed") == 0)
        d->kind = RDZVD_DECIDE_FORMED;
    else if (strcmp(kind, "stopped") == 0)
        d->kind = RDZVD_DECIDE_STOPPED;
    else if (strcmp(kind, "aside") == 0)
        d->kind = RDZVD_DECIDE_ASIDE;
    else
        goto out;
    r = record_decode(o, &d->rec);
    if (r == 0 && !decision_fits(d->kind, &d->rec)) {
        rdzvd_job_record_clear(&d->rec);
        r = -EBADMSG;
    }
out:
    json_decref(o);
    return r;
}

static const struct rdzvd_job_bounds default_bounds = RDZVD_JOB_BOUNDS_DEFAULT;

const struct rdzvd_job_bounds *rdzvd_job_bounds_of(const struct rdzvd_store *t)
{
    const struct rdzvd_job_bounds *b = t ? rdzvd_store_decision_ud(t) : NULL;

    return b ? b : &default_bounds;
}

/* rdzvd_decision_apply's work; held: the store holds the change for the record the machine
 * keeps (rdzvd_store_change_held). 0 (changed), > 0 (nothing to change: no record) or a
 * negative errno. */
static int decision_apply(void *ud, struct rdzvd_store *t, const uint8_t *key, size_t klen,
                          const uint8_t *val, size_t vlen, bool held)
{
    char want[sizeof(TABLE_KEY_PREFIX) + RDZV_ID_MAX + 1];
    struct decided d;
    int r = decision_decode(val, vlen, &d);

    if (r < 0)
        return r;
    if (table_key(d.rec.run_id, want, sizeof(want)) != klen || memcmp(want, key, klen) != 0) {
        r = -EBADMSG; /* a decision of another job than the key's */
        goto out;
    }
    d.key = key;
    d.klen = klen;
    d.bounds = ud ? (const struct rdzvd_job_bounds *)ud : &default_bounds;
    r = held ? rdzvd_store_change_held(t, apply_decided, &d)
             : rdzvd_store_change_as(t, RDZVD_CHANGE_DECISION, key, klen, val, vlen,
                                     apply_decided, &d);
out:
    rdzvd_job_record_clear(&d.rec);
    return r;
}

int rdzvd_decision_apply(void *ud, struct rdzvd_store *t, const uint8_t *key, size_t klen,
                         const uint8_t *val, size_t vlen)
{
    int r = decision_apply(ud, t, key, klen, val, vlen, false);

    return r > 0 ? 0 : r;
}

int rdzvd_decision_peek(const uint8_t *val, size_t vlen, char run_id[RDZV_ID_MAX + 1],
                        enum rdzvd_decision_kind *kind)
{
    struct decided d;
    int r = decision_decode(val, vlen, &d);

    if (r == 0) {
        snprintf(run_id, RDZV_ID_MAX + 1, "%s", d.rec.run_id);
        *kind = d.kind;
    }
    rdzvd_job_record_clear(&d.rec);
    return r;
}

/* rdzvd_job_decide; keep (NULL: none): the host whose steps keep t's records, which then
 * makes the decision's record (rdzvd_job_record_new) instead of t's hook. */
static int decide(const struct rdzvd_job_host *keep, struct rdzvd_store *t,
                  enum rdzvd_decision_kind kind, const struct rdzvd_job_record *rec)
{
    char key[sizeof(TABLE_KEY_PREFIX) + RDZV_ID_MAX + 1];
    struct rdzvd_job_kept *k = NULL;
    size_t klen;
    char *text;
    int r;

    if (strnlen(rec->run_id, sizeof(rec->run_id)) > RDZV_ID_MAX || !rec->run_id[0] ||
        !decision_fits(kind, rec) ||
        (kind != RDZVD_DECIDE_ENDED && kind != RDZVD_DECIDE_ADMITTED &&
         kind != RDZVD_DECIDE_WAITING && kind != RDZVD_DECIDE_FORGOTTEN &&
         kind != RDZVD_DECIDE_DONE && !record_parts_valid(rec)))
        return -EINVAL;
    if (!(text = decision_encode(kind, rec)))
        return -ENOMEM;
    klen = table_key(rec->run_id, key, sizeof(key));
    if (keep && !(k = rdzvd_job_record_new(keep, RDZVD_CHANGE_DECISION, (const uint8_t *)key,
                                           klen, (const uint8_t *)text, strlen(text),
                                           rdzvd_decision_holds(kind)))) {
        free(text);
        return -ENOMEM;
    }
    r = decision_apply(rdzvd_store_decision_ud(t), t, (const uint8_t *)key, klen,
                       (const uint8_t *)text, strlen(text), keep != NULL);
    if (k)
        rdzvd_job_record_queue(keep, k, r == 0);
    free(text);
    return r > 0 ? 0 : r;
}

bool rdzvd_decision_holds(enum rdzvd_decision_kind kind)
{
    return kind == RDZVD_DECIDE_FORMED || kind == RDZVD_DECIDE_STOPPED ||
           kind == RDZVD_DECIDE_ASIDE || kind == RDZVD_DECIDE_ADMITTED;
}

int rdzvd_job_decide(struct rdzvd_store *t, enum rdzvd_decision_kind kind,
                     const struct rdzvd_job_record *rec)
{
    return decide(NULL, t, kind, rec);
}

int rdzvd_job_host_decide(const struct rdzvd_job_host *h, struct rdzvd_store *t,
                          enum rdzvd_decision_kind kind, const struct rdzvd_job_record *rec)
{
    return decide(h->keep_records && t == h->record_table ? h : NULL, t, kind, rec);
}
