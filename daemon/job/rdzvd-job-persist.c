/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-job-persist.c: what of a job outlives rdzvd (--state-dir): the journal of each
 * generation's store, named per job and generation, and the job's record (rdzvd-job-journals.h)
 * from which a restarted rdzvd rebuilds it. Part of the job state machine (rdzvd-job-impl.h). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/rdzv-log.h"
#include "common/rdzv-util.h"
#include "daemon/data/rdzvd-journal.h"
#include "daemon/job/rdzvd-job-impl.h"

/* The generation's store goes; its journal (--state-dir) too, unless rdzvd is shutting down or
 * the job goes back to its record: then the agents come back to the next rdzvd, or to this one,
 * which reopens it with its keys. */
void rdzvd_job_close_store(struct rdzvd_job *j)
{
    if (j->store) {
        j->host.ops->store_close(j->host.ud, j->store, !j->shutting_down && !j->unloaded);
        j->store = NULL;
    } else if (j->store_deferred_gen && !j->shutting_down && !j->unloaded &&
               j->host.state_dirfd >= 0) {
        char sname[RDZVD_JOB_NAME_MAX] = "";
        int r;

        /* Never reopened, and its generation is over: its journal goes as its store's would. */
        rdzvd_job_store_journal_name(j, j->store_deferred_gen, sname, sizeof(sname));
        if (sname[0] && (r = rdzvd_job_record_drop_journal(j->host.state_dirfd, sname)) < 0)
            log_warn_errno(r, "job=%s cannot delete the journal %s", j->run_id, sname);
    }
    j->store_deferred_gen = 0;
    j->store_addr[0] = '\0';
}

bool rdzvd_jobs_port_deferred(struct rdzv_list *jobs, uint16_t port)
{
    struct rdzv_list *pos, *tmp;

    rdzv_list_for_each_safe(pos, tmp, jobs)
    {
        const struct rdzvd_job *j = rdzv_container_of(pos, struct rdzvd_job, node);

        if (j->store_deferred_gen && j->store_port == port)
            return true;
    }
    return false;
}

int rdzvd_job_choose_store(struct rdzvd_job *j, const struct rdzvd_member *m0)
{
    if (j->host.agent_stores && m0 && m0->peer && m0->join.host_store)
        return 1;
    return rdzvd_job_open_store(j, 0, true);
}

int rdzvd_job_store_fallback(struct rdzvd_job *j)
{
    int r;

    if (j->store || j->store_addr[0])
        return 0;
    r = rdzvd_job_open_store(j, 0, true);
    return r < 0 ? r : 1;
}

/* The journal name of generation gen's store: "job-<SHA-256 of run_id>-gen-<gen>"
 * (rdzvd_job_state_name), or "" when it cannot be computed (libcrypto missing). */
void rdzvd_job_store_journal_name(const struct rdzvd_job *j, uint64_t gen, char *buf, size_t len)
{
    (void)rdzvd_job_state_name(j->run_id, gen, buf, len);
}

/* Open generation j->generation's store on port (0: any). fresh: a new generation's store,
 * which never replays what an earlier use of its journal name left on disk (a round formed but
 * never sent before rdzvd died, or an earlier job of the same run_id); otherwise the journal
 * of the generation is replayed (a rebuild after an rdzvd restart). 0 or a negative errno. */
int rdzvd_job_open_store(struct rdzvd_job *j, uint16_t port, bool fresh)
{
    char desc[64], sname[RDZVD_JOB_NAME_MAX] = "";
    int r;

    snprintf(desc, sizeof(desc), "job %.24s gen %" PRIu64, j->run_id, j->generation);
    /* Without --state-dir there is no journal, and no name to hash (libcrypto stays unloaded). */
    if (j->host.state_dirfd >= 0) {
        rdzvd_job_store_journal_name(j, j->generation, sname, sizeof(sname));
        if (!sname[0])
            log_warn("job=%s gen=%" PRIu64 " no journal for its store: cannot name it "
                     "(libcrypto missing?)",
                     j->run_id, j->generation);
    }
    if (fresh && sname[0] && (r = rdzvd_job_record_drop_journal(j->host.state_dirfd, sname)) < 0)
        log_warn_errno(r, "job=%s cannot delete the stale journal %s", j->run_id, sname);
    return j->host.ops->store_open(j->host.ud, desc, sname[0] ? sname : NULL, port, &j->store,
                                   &j->store_port);
}

/* The nodes of j's running generation by node rank (malloc'd, round.nnodes of them), or NULL
 * when a node rank has no member (a job made from an agent's claim) or out of memory (logged). */
static struct rdzvd_job_record_node *job_round_nodes(struct rdzvd_job *j)
{
    struct rdzvd_job_record_node *nodes;
    int64_t n = j->round.nnodes;

    /* by_rank read here, not through rdzvd_member_by_rank: rdzvd-job-sm.c calls this file, and
     * no call goes back (tests/layering.py) */
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
        nodes[i] = (struct rdzvd_job_record_node){.nproc = j->by_rank[i]->join.nproc};
        memcpy(nodes[i].node_id, j->by_rank[i]->join.node_id, sizeof(nodes[i].node_id));
    }
    return nodes;
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
                                   .has_settings = true};

    memcpy(rec.run_id, j->run_id, sizeof(rec.run_id));
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
        .straggler_aside = jn->straggler_aside};
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
        .straggler_aside = j->straggler_aside};
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
    memcpy(j->command, st->command, sizeof(j->command));
}

/* r, the result of a decision: applied to the table but not written (the journal turned
 * persistence off) is -EIO: a restarted rdzvd would not know it, so it is not made. 0 or a
 * negative errno. */
static int decision_written(const struct rdzvd_job *j, int r)
{
    if (r >= 0 && j->host.record_journal && rdzvd_journal_failed(j->host.record_journal))
        r = -EIO;
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
    }
    r = rdzvd_job_decide(j->host.record_table,
                         running ? RDZVD_DECIDE_FORMED : RDZVD_DECIDE_STOPPED, &rec);
    if (r == -EINVAL && running) {
        /* Its nodes do not add up to its world, or an id is not one (a bug): keep the rest. */
        log_warn("job=%s gen=%" PRIu64 " its nodes or NCCL ids do not fit its world of %" PRId64
                 "; recorded without them",
                 j->run_id, j->generation, rec.world_size);
        free(rec.nodes);
        rec.nodes = NULL;
        rec.n_ids = 0;
        r = rdzvd_job_decide(j->host.record_table, RDZVD_DECIDE_FORMED, &rec);
    }
    r = decision_written(j, r);
    if (r < 0)
        log_warn_errno(r, "job=%s gen=%" PRIu64 " cannot record the decision (generation %s) "
                       "in its job table",
                       j->run_id, j->generation, running ? "formed" : "stopped");
    free(rec.nodes);
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
    r = rdzvd_job_decide(j->host.record_table, RDZVD_DECIDE_ASIDE, &rec);
    r = decision_written(j, r);
    if (r < 0)
        log_warn_errno(r, "job=%s cannot record a node put aside in its job table", j->run_id);
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
    r = rdzvd_job_decide(t, RDZVD_DECIDE_ENDED, &rec);
    if (r < 0)
        log_warn_errno(r, "job=%s cannot delete its record", j->run_id);
    return r < 0 ? r : 0;
}

int rdzvd_job_forget(struct rdzvd_job *j)
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
    r = rdzvd_job_decide(j->host.secret_table, RDZVD_DECIDE_FORGOTTEN, &rec);
    return j->host.secret_table == j->host.record_table ? decision_written(j, r) : r;
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
    size_t need = strlen(node_id) + 1, len, off, kept = 0, gone = 0;
    char *ids, first[RDZV_ID_MAX + 1] = "";
    int r;

    if (rdzvd_job_ids_len(j->host.secret_table, j->run_id) + need <= rdzvd_job_ids_bytes_max)
        return 0; /* it fits: a JOIN reads no more than that */
    if ((r = rdzvd_job_ids_get(j->host.secret_table, j->run_id, &ids, &len)) < 0)
        return r;
    for (off = 0; off < len; off += strlen(ids + off) + 1)
        kept += id_promised(j, ids + off) ? strlen(ids + off) + 1 : 0;
    if (len + need > rdzvd_job_ids_bytes_max && kept + need > rdzvd_job_ids_bytes_max)
        r = -ENOSPC; /* forgetting the others would not make room */
    for (int pass = 0; pass < 2 && r == 0 && len + need > rdzvd_job_ids_bytes_max; pass++) {
        for (off = 0; off < len && r == 0 && len + need > rdzvd_job_ids_bytes_max;) {
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
                 j->run_id, rdzvd_job_ids_bytes_max, node_id, gone, first);
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
        r = rdzvd_job_decide(j->host.secret_table, RDZVD_DECIDE_ADMITTED, &rec);
    if (j->host.secret_table == j->host.record_table)
        r = decision_written(j, r);
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

/* WAITING for run_id in h's job table (since: unix ms; 0: an agent is back), as written: 0, or
 * a negative errno (-EIO: applied, but the journal turned persistence off). */
static int decide_waiting(const struct rdzvd_job_host *h, const char *run_id, int64_t since)
{
    struct rdzvd_job_record rec = {.generation = 0};
    int r;

    snprintf(rec.run_id, sizeof(rec.run_id), "%s", run_id);
    rec.waiting_since_ms = since;
    r = rdzvd_job_decide(h->record_table, RDZVD_DECIDE_WAITING, &rec);
    if (r >= 0 && h->record_journal && rdzvd_journal_failed(h->record_journal))
        r = -EIO;
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
        (void)decide_waiting(&j->host, j->run_id, (int64_t)(rdzvd_job_wall_s() * 1000));
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
