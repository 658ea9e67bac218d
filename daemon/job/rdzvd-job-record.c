/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-job-record.c: a job's record in the job table (rdzvd-job-record.h). */
#include "daemon/job/rdzvd-job-record.h"

#include <errno.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* rec's nodes and ids are what rdzvd_job_record_put takes (rdzvd-job-journals.h)? */
static bool record_parts_valid(const struct rdzvd_job_record *rec)
{
    int64_t sum = 0;

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

/* rec's nodes ([[node_id, nproc], ...] by node rank) and ids (["hex", ...]) into o. 0 or
 * -ENOMEM. */
static int record_encode_parts(json_t *o, const struct rdzvd_job_record *rec)
{
    json_t *a;

    if (rec->nodes) {
        if (!(a = json_array()) || json_object_set_new(o, "nodes", a) < 0)
            return -ENOMEM;
        for (int64_t i = 0; i < rec->nnodes; i++)
            if (json_array_append_new(a, json_pack("[s, I]", rec->nodes[i].node_id,
                                                   (json_int_t)rec->nodes[i].nproc)) < 0)
                return -ENOMEM;
    }
    if (rec->n_ids) {
        if (!(a = json_array()) || json_object_set_new(o, "ids", a) < 0)
            return -ENOMEM;
        for (unsigned i = 0; i < rec->n_ids; i++)
            if (json_array_append_new(a, json_string(rec->ids[i])) < 0)
                return -ENOMEM;
    }
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
    if (v && st->command[0] && json_object_set_new(v, "command", json_string(st->command)) < 0) {
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
    double f;

    if (!v)
        return;
    if (json_unpack(v, "{s:I, s:I, s:I, s:b, s:s, s:I, s:I, s:I, s:F, s:I, s:b, s?s}",
                    "last_call_ms", &last, "heartbeat_timeout_ms", &hb, "join_timeout_ms", &join,
                    "scale_up_now", &up, "recovery", &recovery, "bad_node_failures", &bad,
                    "bad_node_window", &win, "restart_backoff", &back, "straggler_factor", &f,
                    "straggler_window_ms", &sw, "straggler_aside", &aside, "command",
                    &command) < 0)
        return;
    if (last < 0 || hb < 0 || hb > 3600000 || join < 0 ||
        join > 86400000 || (strcmp(recovery, "restart") && strcmp(recovery, "inplace")) ||
        bad < 0 || bad > RDZV_BAD_NODE_FAILURES_MAX || win < 0 ||
        win > RDZV_BAD_NODE_WINDOW_MAX || (win > 0 && bad > RDZV_BAD_NODE_WINDOWED_MAX) ||
        back < 0 || back > RDZV_RESTART_BACKOFF_MAX ||
        (f != 0 && (!(f > 1 && f <= RDZV_STRAGGLER_FACTOR_MAX) ||
                    sw < 1 || sw > RDZV_STRAGGLER_WINDOW_MAX_MS)) ||
        (f == 0 && (sw != 0 || aside)) || (*command && !rdzv_msg_is_command(command)))
        return;
    rec->has_settings = true;
    rec->settings = (struct rdzvd_job_settings){
        .last_call_ms = last, .heartbeat_timeout_ms = hb, .join_timeout_ms = join,
        .scale_up_now = up != 0, .inplace = strcmp(recovery, "inplace") == 0,
        .bad_node_failures = bad, .bad_node_window_s = win, .restart_backoff_s = back,
        .straggler_factor = f, .straggler_window_ms = sw, .straggler_aside = aside != 0};
    snprintf(rec->settings.command, sizeof(rec->settings.command), "%s", command);
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
    if (o && (record_encode_settings(o, rec) < 0 || record_encode_parts(o, rec) < 0)) {
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
    free(rec->ids);
    free(rec->hist);
    rec->nodes = NULL;
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
    case RDZVD_DECIDE_FORGOTTEN:
    case RDZVD_DECIDE_ADMITTED:
        return rdzvd_job_admitted_valid(&rec->admitted, kind == RDZVD_DECIDE_ADMITTED);
    }
    return false;
}

/* ---- a job's waiting, and its node ids (rdzvd-job-ids.c) ---- */

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
                    ? json_pack("{s:s, s:I}", "run_id", rec->run_id, "since_ms",
                                (json_int_t)rec->waiting_since_ms)
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
        return waiting_decide(t, d->rec.run_id, d->rec.waiting_since_ms);
    }
    if (d->kind == RDZVD_DECIDE_ENDED) {
        int s = rdzvd_job_ids_forget(t, d->rec.run_id, NULL);

        (void)waiting_decide(t, d->rec.run_id, 0);
        r = rdzvd_store_delete(t, d->key, d->klen); /* 1: deleted, 0: there was none */
        /* Its outcome kept (a store full refuses it: the end stands, told to nobody later). */
        if (r >= 0 && s >= 0 && d->rec.has_end && rdzvd_job_end_keep(t, &d->rec.end) == 0)
            return 0;
        return r < 0 ? r : s < 0 ? s : !r && s;
    }
    if (d->kind == RDZVD_DECIDE_ADMITTED)
        return rdzvd_job_ids_admit(t, d->rec.run_id, &d->rec.admitted);
    if (d->kind == RDZVD_DECIDE_FORGOTTEN)
        return rdzvd_job_ids_forget(t, d->rec.run_id, d->rec.admitted.node_id);
    r = rdzvd_job_record_get(t, d->rec.run_id, &cur);
    if (r == 0 && decision_goes_back(d, &cur)) {
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

        d->kind = RDZVD_DECIDE_WAITING;
        if (json_unpack(o, "{s:I}", "since_ms", &since) < 0 || since < 0 ||
            strlen(id) > RDZV_ID_MAX)
            goto out;
        snprintf(d->rec.run_id, sizeof(d->rec.run_id), "%s", id);
        d->rec.waiting_since_ms = (int64_t)since;
        r = 0;
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

int rdzvd_decision_apply(struct rdzvd_store *t, const uint8_t *key, size_t klen,
                         const uint8_t *val, size_t vlen)
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
    r = rdzvd_store_change_as(t, RDZVD_CHANGE_DECISION, key, klen, val, vlen, apply_decided, &d);
    if (r > 0)
        r = 0;
out:
    rdzvd_job_record_clear(&d.rec);
    return r;
}

int rdzvd_job_decide(struct rdzvd_store *t, enum rdzvd_decision_kind kind,
                     const struct rdzvd_job_record *rec)
{
    char key[sizeof(TABLE_KEY_PREFIX) + RDZV_ID_MAX + 1];
    char *text;
    int r;

    if (strnlen(rec->run_id, sizeof(rec->run_id)) > RDZV_ID_MAX || !rec->run_id[0] ||
        !decision_fits(kind, rec) ||
        (kind != RDZVD_DECIDE_ENDED && kind != RDZVD_DECIDE_ADMITTED &&
         kind != RDZVD_DECIDE_WAITING && kind != RDZVD_DECIDE_FORGOTTEN &&
         !record_parts_valid(rec)))
        return -EINVAL;
    if (!(text = decision_encode(kind, rec)))
        return -ENOMEM;
    r = rdzvd_decision_apply(t, (const uint8_t *)key, table_key(rec->run_id, key, sizeof(key)),
                             (const uint8_t *)text, strlen(text));
    free(text);
    return r;
}
