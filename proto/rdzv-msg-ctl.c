/* SPDX-License-Identifier: Apache-2.0 */
/* rdzv-msg-ctl.c: the small rendezvous messages <-> C structs: JOINED, NCCL_REQUEST, NCCL_ID,
 * HEARTBEAT, READY, LEAVE, STATUS and ERROR (JOIN, ROUND, WORKER_EXIT, EVENT: rdzv-msg.c). */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "common/rdzv-util.h"
#include "proto/rdzv-frame.h"
#include "proto/rdzv-msg-priv.h"
#include "proto/rdzv-msg.h"

json_t *rdzv_msg_unpack(const uint8_t *body, size_t len, const char *what, char *err,
                        size_t errlen, const char *fmt, ...)
{
    json_error_t jerr;
    json_t *root = rdzv_msg_load(body, len, err, errlen);
    char why[160];
    va_list ap;
    int r;

    if (!root) {
        snprintf(why, sizeof(why), "%s", err);
        snprintf(err, errlen, "%s: %s", what, why);
        return NULL;
    }
    va_start(ap, fmt);
    r = json_vunpack_ex(root, &jerr, 0, fmt, ap);
    va_end(ap);
    if (r < 0) {
        (void)rdzv_msg_unpack_fail(&jerr, what, err, errlen);
        json_decref(root);
        return NULL;
    }
    return root;
}

/* Copy a text meant for people, cutting (on a character boundary) what does not fit. */
static void copy_text(char *dst, size_t cap, const char *src)
{
    snprintf(dst, cap, "%s", src);
    rdzv_utf8_trim(dst);
}

/* JOINED's and HEARTBEAT's "warning" (1.17) into o, cut to RDZV_WARNING_MAX bytes on a
 * character; one that is not UTF-8 is left out rather than losing the message. */
static json_t *set_warning(json_t *o, const char *warning)
{
    char text[RDZV_WARNING_MAX + 1];
    json_t *w;

    copy_text(text, sizeof(text), warning);
    w = json_string(text);
    return w ? rdzv_json_set(o, "warning", w) : o;
}

int rdzv_msg_put_joined(struct rdzv_buf *b, const struct rdzv_joined *j)
{
    json_t *o = json_pack("{s:s, s:I, s:b, s:b, s:I}", "run_id", j->run_id, "waiting",
                          (json_int_t)j->waiting, "spare", j->spare, "resumed", j->resumed,
                          "generation", (json_int_t)j->generation);

    /* "recovery" (1.1) only when set: rdzvd always sets it, as 1.0 never did. */
    if (j->recovery[0])
        o = rdzv_json_set(o, "recovery", json_string(j->recovery));
    if (j->secret[0])
        o = rdzv_json_set(o, "secret", json_string(j->secret));
    if (j->warning[0])
        o = set_warning(o, j->warning);
    if (j->incarnation)
        o = rdzv_json_set(o, "incarnation", json_integer((json_int_t)j->incarnation));
    return rdzv_msg_put(b, RDZV_MSG_JOINED, o);
}

int rdzv_msg_parse_joined(const uint8_t *body, size_t len, struct rdzv_joined *j, char *err,
                          size_t errlen)
{
    json_int_t waiting = 0, gen = 0, inc = 0;
    const char *run_id = "", *recovery = "", *secret = "", *warning = "";
    int spare = 0, resumed = 0, r;
    json_t *root = rdzv_msg_unpack(body, len, "JOINED", err, errlen,
                                   "{s?s, s?I, s?b, s?b, s?I, s?s, s?s, s?s, s?I}", "run_id",
                                   &run_id, "waiting", &waiting, "spare", &spare, "resumed",
                                   &resumed, "generation", &gen, "recovery", &recovery, "secret",
                                   &secret, "warning", &warning, "incarnation", &inc);

    if (!root)
        return -EBADMSG;
    memset(j, 0, sizeof(*j));
    r = rdzv_msg_copy_str(j->run_id, sizeof(j->run_id), run_id, "run_id", err, errlen);
    j->waiting = waiting;
    j->spare = spare != 0;
    j->resumed = resumed != 0;
    j->generation = (uint64_t)gen;
    if (r == 0 && *recovery && strcmp(recovery, "restart") && strcmp(recovery, "inplace")) {
        snprintf(err, errlen, "JOINED: 'recovery' must be \"restart\" or \"inplace\"");
        r = -EBADMSG;
    }
    if (r == 0 && (inc < 0 || inc > RDZV_INCARNATION_MAX)) {
        snprintf(err, errlen, "JOINED: 'incarnation' must be 0 to %lld", RDZV_INCARNATION_MAX);
        r = -EBADMSG;
    }
    j->incarnation = (uint64_t)inc;
    if (r == 0 && *secret && !rdzv_msg_is_secret(secret)) {
        snprintf(err, errlen, "JOINED: 'secret' must be %d lowercase hex characters",
                 RDZV_SECRET_HEX);
        r = -EBADMSG;
    }
    if (r == 0) {
        snprintf(j->recovery, sizeof(j->recovery), "%s", recovery);
        snprintf(j->secret, sizeof(j->secret), "%s", secret);
        copy_text(j->warning, sizeof(j->warning), warning);
    }
    json_decref(root);
    return r;
}

int rdzv_msg_put_nccl_request(struct rdzv_buf *b, const struct rdzv_nccl_request *q)
{
    json_t *o = json_pack("{s:I, s:I}", "generation", (json_int_t)q->generation, "count",
                          (json_int_t)q->count);

    if (o && q->store &&
        (json_object_set_new(o, "store", json_true()) < 0 ||
         (q->store_allow[0] &&
          json_object_set_new(o, "store_allow", json_string(q->store_allow)) < 0))) {
        json_decref(o);
        o = NULL;
    }
    return rdzv_msg_put(b, RDZV_MSG_NCCL_REQUEST, o);
}

int rdzv_msg_parse_nccl_request(const uint8_t *body, size_t len, struct rdzv_nccl_request *q,
                                char *err, size_t errlen)
{
    json_int_t gen, count;
    int store = 0;
    const char *allow = "";
    json_t *root = rdzv_msg_unpack(body, len, "NCCL_REQUEST", err, errlen, "{s:I, s:I, s?b, s?s}",
                                   "generation", &gen, "count", &count, "store", &store,
                                   "store_allow", &allow);
    int r = 0;

    if (!root)
        return -EBADMSG;
    if (count < (store ? 0 : 1) || count > RDZV_MAX_NCCL_IDS) {
        snprintf(err, errlen, "NCCL_REQUEST: 'count' must be 1..%d (0..%d with 'store')",
                 RDZV_MAX_NCCL_IDS, RDZV_MAX_NCCL_IDS);
        r = -EBADMSG;
        goto out;
    }
    if (strlen(allow) > RDZV_STORE_ALLOW_MAX) {
        snprintf(err, errlen, "NCCL_REQUEST: 'store_allow' is longer than %d bytes",
                 RDZV_STORE_ALLOW_MAX);
        r = -EBADMSG;
        goto out;
    }
    for (const char *c = allow; *c; c++)
        if (*c < 0x20 || *c > 0x7e) {
            snprintf(err, errlen, "NCCL_REQUEST: 'store_allow' must be printable ASCII");
            r = -EBADMSG;
            goto out;
        }
    q->generation = (uint64_t)gen;
    q->count = (unsigned)count;
    q->store = store != 0;
    snprintf(q->store_allow, sizeof(q->store_allow), "%s", allow);
out:
    json_decref(root);
    return r;
}

/* o with "store_addr" and "store_port" added when n names a store; NULL (o freed) when out of
 * memory, or when o is NULL. */
static json_t *put_store(json_t *o, const struct rdzv_nccl_id *n)
{
    if (o && n->store_port > 0 &&
        (json_object_set_new(o, "store_addr", json_string(n->store_addr)) < 0 ||
         json_object_set_new(o, "store_port", json_integer(n->store_port)) < 0)) {
        json_decref(o);
        o = NULL;
    }
    return o;
}

int rdzv_msg_put_nccl_id(struct rdzv_buf *b, const struct rdzv_nccl_id *n)
{
    json_t *ids;

    if (n->failed)
        return rdzv_msg_put(b, RDZV_MSG_NCCL_ID,
                            put_store(json_pack("{s:I, s:s}", "generation",
                                                (json_int_t)n->generation, "error", n->error),
                                      n));
    ids = rdzv_msg_ids_array((const char(*)[RDZV_NCCL_HEX_LEN + 1])n->ids, n->n_ids);
    if (!ids)
        return -ENOMEM;
    return rdzv_msg_put(b, RDZV_MSG_NCCL_ID,
                        put_store(json_pack("{s:I, s:o}", "generation", (json_int_t)n->generation,
                                            "ids", ids),
                                  n));
}

/* Unpack the members of NCCL_ID; returns the root that owns *ids, *error and *addr, or NULL. */
static json_t *unpack_nccl_id(const uint8_t *body, size_t len, json_int_t *gen, json_t **ids,
                              const char **error, const char **addr, json_int_t *port, char *err,
                              size_t errlen)
{
    *ids = NULL;
    *error = NULL;
    *addr = NULL;
    *port = 0;
    return rdzv_msg_unpack(body, len, "NCCL_ID", err, errlen, "{s:I, s?o, s?s, s?s, s?I}",
                           "generation", gen, "ids", ids, "error", error, "store_addr", addr,
                           "store_port", port);
}

/* A store's address: a numeric IPv4 or IPv6 address (what workers get as MASTER_ADDR). */
static bool store_addr_ok(const char *a)
{
    unsigned char buf[sizeof(struct in6_addr)];

    return strlen(a) <= RDZV_STORE_ADDR_MAX &&
           (inet_pton(AF_INET, a, buf) == 1 || inet_pton(AF_INET6, a, buf) == 1);
}

int rdzv_msg_parse_nccl_id(const uint8_t *body, size_t len, struct rdzv_nccl_id *n, char *err,
                           size_t errlen)
{
    const char *error, *addr;
    json_t *ids;
    json_int_t gen, port;
    json_t *root = unpack_nccl_id(body, len, &gen, &ids, &error, &addr, &port, err, errlen);
    int r = 0;

    if (!root)
        return -EBADMSG;
    /* Not the ids: 16 KiB that a fresh allocation would fault in for nothing. */
    memset(n, 0, offsetof(struct rdzv_nccl_id, ids));
    n->generation = (uint64_t)gen;
    if (!addr != !port || (addr && (port < 1 || port > 65535 || !store_addr_ok(addr)))) {
        snprintf(err, errlen, "NCCL_ID: 'store_addr' (a numeric IP address) and 'store_port' "
                              "(1..65535) come together");
        r = -EBADMSG;
        goto out;
    }
    if (addr) {
        snprintf(n->store_addr, sizeof(n->store_addr), "%s", addr);
        n->store_port = port;
    }
    if (error) {
        n->failed = true;
        copy_text(n->error, sizeof(n->error), error);
    } else if (addr && json_is_array(ids) && json_array_size(ids) == 0) {
        n->n_ids = 0; /* a store, no ids asked for */
    } else if (!json_is_array(ids) || json_array_size(ids) < 1) {
        snprintf(err, errlen, "NCCL_ID: 'ids' must be an array of 1..%d ids", RDZV_MAX_NCCL_IDS);
        r = -EBADMSG;
    } else {
        r = rdzv_msg_get_ids(ids, "NCCL_ID: ids", n->ids, &n->n_ids, err, errlen);
    }
out:
    json_decref(root);
    return r;
}

int rdzv_msg_parse_nccl_id_generation(const uint8_t *body, size_t len, uint64_t *ret, char *err,
                                      size_t errlen)
{
    const char *error, *addr;
    json_t *ids;
    json_int_t gen, port;
    json_t *root = unpack_nccl_id(body, len, &gen, &ids, &error, &addr, &port, err, errlen);

    if (!root)
        return -EBADMSG;
    json_decref(root);
    *ret = (uint64_t)gen;
    return 0;
}

/* The messages whose body is {"generation":n}. */
static int put_generation(struct rdzv_buf *b, uint8_t op, uint64_t gen)
{
    return rdzv_msg_put(b, op, json_pack("{s:I}", "generation", (json_int_t)gen));
}

static int parse_generation(const uint8_t *body, size_t len, const char *what, uint64_t *ret,
                            char *err, size_t errlen)
{
    json_int_t gen;
    json_t *root = rdzv_msg_unpack(body, len, what, err, errlen, "{s:I}", "generation", &gen);

    if (!root)
        return -EBADMSG;
    json_decref(root);
    *ret = (uint64_t)gen;
    return 0;
}

static const char *const wait_names[] = {
    [RDZV_WAIT_NODES] = "nodes",
    [RDZV_WAIT_REBUILD] = "rebuild",
    [RDZV_WAIT_BACKOFF] = "backoff",
};

/* HEARTBEAT's "wait" (1.15), NULL when none (or out of memory). */
static json_t *wait_json(const struct rdzv_wait *w)
{
    if (w->what <= RDZV_WAIT_NONE || w->what > RDZV_WAIT_BACKOFF)
        return NULL;
    return json_pack("{s:s, s:I, s:I, s:I, s:I}", "for", wait_names[w->what], "nodes",
                     (json_int_t)w->nodes, "need", (json_int_t)w->need, "max",
                     (json_int_t)w->max, "left_ms", (json_int_t)w->left_ms);
}

/* HEARTBEAT's "wait" into w: 0, or -EBADMSG (a member of the wrong type or out of range). A
 * "for" this reader does not know leaves w->what RDZV_WAIT_NONE. */
static int parse_wait(const json_t *o, struct rdzv_wait *w, char *err, size_t errlen)
{
    const char *what;
    json_int_t nodes, need, max, left;
    json_error_t jerr;

    if (json_unpack_ex((json_t *)o, &jerr, 0, "{s:s, s:I, s:I, s:I, s:I}", "for", &what, "nodes",
                       &nodes, "need", &need, "max", &max, "left_ms", &left) < 0)
        return rdzv_msg_unpack_fail(&jerr, "HEARTBEAT: wait", err, errlen);
    if (nodes < 0 || nodes > 100000 || need < 0 || need > 100000 || max < 0 || max > 100000 ||
        left < -1 || left > RDZV_WAIT_LEFT_MAX_MS) {
        snprintf(err, errlen, "HEARTBEAT: wait out of range (0 <= nodes, need, max <= 100000; "
                              "-1 <= left_ms <= %" PRId64 ")",
                 (int64_t)RDZV_WAIT_LEFT_MAX_MS);
        return -EBADMSG;
    }
    for (unsigned i = RDZV_WAIT_NODES; i <= RDZV_WAIT_BACKOFF; i++)
        if (strcmp(what, wait_names[i]) == 0)
            w->what = (enum rdzv_wait_for)i;
    w->nodes = nodes;
    w->need = need;
    w->max = max;
    w->left_ms = left;
    return 0;
}

int rdzv_msg_put_heartbeat(struct rdzv_buf *b, const struct rdzv_heartbeat *h)
{
    json_t *o, *arr, *wait = wait_json(&h->wait);

    if (h->n_progress == 0 && !wait && !h->warning[0] && !h->has_loop_stall)
        return put_generation(b, RDZV_MSG_HEARTBEAT, h->generation);
    if (h->n_progress == 0) {
        o = json_pack("{s:I}", "generation", (json_int_t)h->generation);
        if (wait)
            o = rdzv_json_set(o, "wait", wait);
        if (h->warning[0])
            o = set_warning(o, h->warning);
        if (h->has_loop_stall)
            o = rdzv_json_set(o, "loop_stall_ms", json_integer(h->loop_stall_ms));
        return rdzv_msg_put(b, RDZV_MSG_HEARTBEAT, o);
    }
    json_decref(wait); /* an agent's: it waits for nothing */
    if (h->n_progress > RDZV_PROGRESS_MAX)
        return -EMSGSIZE;
    arr = json_array();
    for (unsigned i = 0; arr && i < h->n_progress; i++) {
        const struct rdzv_rank_progress *p = &h->progress[i];

        json_t *e = json_pack("{s:I, s:I, s:I}", "local_rank", (json_int_t)p->local_rank, "step",
                              (json_int_t)p->step, "age_ms", (json_int_t)p->age_ms);

        if (e && ((p->timeout_ms > 0 &&
                   json_object_set_new(e, "timeout_ms", json_integer(p->timeout_ms)) < 0) ||
                  (p->has_compute &&
                   json_object_set_new(e, "compute_ms", json_integer(p->compute_ms)) < 0))) {
            json_decref(e);
            e = NULL;
        }
        if (json_array_append_new(arr, e) < 0) {
            json_decref(arr);
            arr = NULL;
        }
    }
    o = json_pack("{s:I, s:o}", "generation", (json_int_t)h->generation, "progress", arr);
    if (h->has_loop_stall)
        o = rdzv_json_set(o, "loop_stall_ms", json_integer(h->loop_stall_ms));
    return rdzv_msg_put(b, RDZV_MSG_HEARTBEAT, o);
}

/* HEARTBEAT's "progress": arr into h->progress[0..n_progress). */
static int parse_progress(const json_t *arr, struct rdzv_heartbeat *h, char *err, size_t errlen)
{
    uint8_t seen[RDZV_PROGRESS_MAX / 8] = {0};
    json_error_t jerr;
    json_t *e;
    size_t i;

    if (!json_is_array(arr) || json_array_size(arr) > RDZV_PROGRESS_MAX) {
        snprintf(err, errlen, "HEARTBEAT: 'progress' must be an array of at most %d",
                 RDZV_PROGRESS_MAX);
        return -EBADMSG;
    }
    json_array_foreach(arr, i, e)
    {
        struct rdzv_rank_progress *p = &h->progress[i];
        json_int_t lr, step, age, tmo = 0, cms = 0;
        bool has_cms;

        if (json_unpack_ex(e, &jerr, 0, "{s:I, s:I, s:I, s?I, s?I}", "local_rank", &lr, "step",
                           &step, "age_ms", &age, "timeout_ms", &tmo, "compute_ms", &cms) < 0)
            return rdzv_msg_unpack_fail(&jerr, "HEARTBEAT: progress", err, errlen);
        has_cms = json_object_get(e, "compute_ms") != NULL;
        if (lr < 0 || lr >= RDZV_PROGRESS_MAX || step < 0 || age < 0 ||
            age > RDZV_PROGRESS_AGE_MAX_MS || tmo < 0 || tmo > RDZV_PROGRESS_AGE_MAX_MS ||
            cms < 0 || cms > RDZV_COMPUTE_MS_MAX || (seen[lr / 8] & (1u << (lr % 8)))) {
            snprintf(err, errlen,
                     "HEARTBEAT: progress[%zu] out of range (0 <= local_rank < %d, distinct; "
                     "step >= 0; 0 <= age_ms, timeout_ms <= %" PRId64 "; 0 <= compute_ms <= %d)",
                     i, RDZV_PROGRESS_MAX, RDZV_PROGRESS_AGE_MAX_MS, RDZV_COMPUTE_MS_MAX);
            return -EBADMSG;
        }
        p->timeout_ms = tmo;
        p->has_compute = has_cms;
        p->compute_ms = cms;
        seen[lr / 8] |= (uint8_t)(1u << (lr % 8));
        p->local_rank = lr;
        p->step = step;
        p->age_ms = age;
    }
    h->n_progress = (unsigned)i;
    return 0;
}

int rdzv_msg_parse_heartbeat(const uint8_t *body, size_t len, struct rdzv_heartbeat *h, char *err,
                             size_t errlen)
{
    json_t *arr = NULL, *wait = NULL;
    const char *warning = "";
    json_int_t gen, stall = -1;
    json_t *root = rdzv_msg_unpack(body, len, "HEARTBEAT", err, errlen,
                                   "{s:I, s?o, s?o, s?s, s?I}", "generation", &gen, "progress",
                                   &arr, "wait", &wait, "warning", &warning, "loop_stall_ms",
                                   &stall);
    int r = 0;

    if (!root)
        return -EBADMSG;
    if (json_object_get(root, "loop_stall_ms") && (stall < 0 || stall > RDZV_LOOP_STALL_MAX_MS)) {
        snprintf(err, errlen, "HEARTBEAT: loop_stall_ms out of range (0..%d)",
                 RDZV_LOOP_STALL_MAX_MS);
        json_decref(root);
        return -EBADMSG;
    }
    h->has_loop_stall = stall >= 0;
    h->loop_stall_ms = stall >= 0 ? stall : 0;
    h->generation = (uint64_t)gen;
    h->n_progress = 0;
    memset(&h->wait, 0, sizeof(h->wait));
    copy_text(h->warning, sizeof(h->warning), warning);
    if (arr)
        r = parse_progress(arr, h, err, errlen);
    if (r == 0 && wait)
        r = parse_wait(wait, &h->wait, err, errlen);
    json_decref(root);
    return r;
}

int rdzv_msg_put_ready(struct rdzv_buf *b, const struct rdzv_ready *r)
{
    return put_generation(b, RDZV_MSG_READY, r->generation);
}

int rdzv_msg_parse_ready(const uint8_t *body, size_t len, struct rdzv_ready *r, char *err,
                         size_t errlen)
{
    return parse_generation(body, len, "READY", &r->generation, err, errlen);
}

int rdzv_msg_put_leave(struct rdzv_buf *b, const struct rdzv_leave *l)
{
    return rdzv_msg_put(b, RDZV_MSG_LEAVE,
                        json_pack("{s:I, s:s}", "generation", (json_int_t)l->generation,
                                  "status", l->succeeded ? "succeeded" : "failed"));
}

int rdzv_msg_parse_leave(const uint8_t *body, size_t len, struct rdzv_leave *l, char *err,
                         size_t errlen)
{
    const char *status;
    json_int_t gen;
    json_t *root = rdzv_msg_unpack(body, len, "LEAVE", err, errlen, "{s:I, s:s}", "generation",
                                   &gen, "status", &status);

    if (!root)
        return -EBADMSG;
    l->generation = (uint64_t)gen;
    l->succeeded = strcmp(status, "succeeded") == 0;
    json_decref(root);
    return 0;
}

int rdzv_msg_put_unhealthy(struct rdzv_buf *b, const struct rdzv_unhealthy *u)
{
    return rdzv_msg_put(b, RDZV_MSG_UNHEALTHY, json_pack("{s:s}", "reason", u->reason));
}

int rdzv_msg_parse_unhealthy(const uint8_t *body, size_t len, struct rdzv_unhealthy *u, char *err,
                             size_t errlen)
{
    const char *reason;
    json_t *root = rdzv_msg_unpack(body, len, "UNHEALTHY", err, errlen, "{s:s}", "reason",
                                   &reason);

    if (!root)
        return -EBADMSG;
    copy_text(u->reason, sizeof(u->reason), reason);
    json_decref(root);
    return 0;
}

int rdzv_msg_put_cancel(struct rdzv_buf *b, const struct rdzv_cancel *c)
{
    json_t *o = json_pack("{s:I, s:s}", "signal", (json_int_t)c->signal, "reason", c->reason);

    if (o && c->sched_job[0] && json_object_set_new(o, "sched_job", json_string(c->sched_job)))
        o = (json_decref(o), NULL);
    return rdzv_msg_put(b, RDZV_MSG_CANCEL, o);
}

int rdzv_msg_parse_cancel(const uint8_t *body, size_t len, struct rdzv_cancel *c, char *err,
                          size_t errlen)
{
    const char *reason, *sched_job = "";
    json_int_t sig;
    json_t *root = rdzv_msg_unpack(body, len, "CANCEL", err, errlen, "{s:I, s:s, s?s}", "signal",
                                   &sig, "reason", &reason, "sched_job", &sched_job);

    if (!root)
        return -EBADMSG;
    if (sig < 1 || sig > 64) {
        json_decref(root);
        snprintf(err, errlen, "CANCEL: 'signal' must be 1..64");
        return -EBADMSG;
    }
    c->signal = sig;
    copy_text(c->reason, sizeof(c->reason), reason);
    copy_text(c->sched_job, sizeof(c->sched_job), sched_job);
    json_decref(root);
    return 0;
}

int rdzv_msg_put_release(struct rdzv_buf *b, const struct rdzv_release *r)
{
    return rdzv_msg_put(b, RDZV_MSG_RELEASE,
                        json_pack("{s:s, s:s}", "run_id", r->run_id, "node", r->node));
}

int rdzv_msg_parse_release(const uint8_t *body, size_t len, struct rdzv_release *r, char *err,
                           size_t errlen)
{
    const char *run_id, *node;
    json_t *root = rdzv_msg_unpack(body, len, "RELEASE", err, errlen, "{s:s, s:s}", "run_id",
                                   &run_id, "node", &node);
    int rc = -EBADMSG;

    if (!root)
        return -EBADMSG;
    if (!*run_id || !*node || strlen(run_id) > RDZV_ID_MAX || strlen(node) > RDZV_HOST_MAX)
        snprintf(err, errlen, "RELEASE: 'run_id' and 'node' must be 1..%d and 1..%d bytes",
                 RDZV_ID_MAX, RDZV_HOST_MAX);
    else
        rc = 0;
    if (rc == 0) {
        snprintf(r->run_id, sizeof(r->run_id), "%s", run_id);
        snprintf(r->node, sizeof(r->node), "%s", node);
    }
    json_decref(root);
    return rc;
}

int rdzv_msg_put_release_reply(struct rdzv_buf *b, const struct rdzv_release_reply *r)
{
    json_t *o = json_pack("{s:I}", "released", (json_int_t)r->released);

    if (r->error[0])
        o = rdzv_json_set(o, "error", json_string(r->error));
    if (r->denied)
        o = rdzv_json_set(o, "denied", json_true());
    return rdzv_msg_put(b, RDZV_MSG_RELEASE_REPLY, o);
}

int rdzv_msg_parse_release_reply(const uint8_t *body, size_t len, struct rdzv_release_reply *r,
                                 char *err, size_t errlen)
{
    const char *error = "";
    json_int_t n;
    int denied = 0;
    json_t *root = rdzv_msg_unpack(body, len, "RELEASE_REPLY", err, errlen, "{s:I, s?s, s?b}",
                                   "released", &n, "error", &error, "denied", &denied);

    if (!root)
        return -EBADMSG;
    r->released = n < 0 ? 0 : n;
    r->denied = denied != 0;
    copy_text(r->error, sizeof(r->error), error);
    json_decref(root);
    return n < 0 ? (snprintf(err, errlen, "RELEASE_REPLY: 'released' < 0"), -EBADMSG) : 0;
}

int rdzv_msg_put_cancel_job(struct rdzv_buf *b, const struct rdzv_cancel_job *c)
{
    return rdzv_msg_put(b, RDZV_MSG_CANCEL_JOB,
                        json_pack("{s:s, s:s}", "run_id", c->run_id, "reason", c->reason));
}

int rdzv_msg_parse_cancel_job(const uint8_t *body, size_t len, struct rdzv_cancel_job *c,
                              char *err, size_t errlen)
{
    const char *run_id, *reason;
    json_t *root = rdzv_msg_unpack(body, len, "CANCEL_JOB", err, errlen, "{s:s, s:s}", "run_id",
                                   &run_id, "reason", &reason);
    int rc = -EBADMSG;

    if (!root)
        return -EBADMSG;
    if (!*run_id || strlen(run_id) > RDZV_ID_MAX) {
        snprintf(err, errlen, "CANCEL_JOB: 'run_id' must be 1..%d bytes", RDZV_ID_MAX);
    } else {
        snprintf(c->run_id, sizeof(c->run_id), "%s", run_id);
        copy_text(c->reason, sizeof(c->reason), reason);
        rc = 0;
    }
    json_decref(root);
    return rc;
}

int rdzv_msg_put_cancel_job_reply(struct rdzv_buf *b, const struct rdzv_cancel_job_reply *r)
{
    json_t *o = json_pack("{s:b}", "cancelled", r->cancelled);

    if (r->error[0])
        o = rdzv_json_set(o, "error", json_string(r->error));
    if (r->denied)
        o = rdzv_json_set(o, "denied", json_true());
    return rdzv_msg_put(b, RDZV_MSG_CANCEL_JOB_REPLY, o);
}

int rdzv_msg_parse_cancel_job_reply(const uint8_t *body, size_t len,
                                    struct rdzv_cancel_job_reply *r, char *err, size_t errlen)
{
    const char *error = "";
    int cancelled, denied = 0;
    json_t *root = rdzv_msg_unpack(body, len, "CANCEL_JOB_REPLY", err, errlen, "{s:b, s?s, s?b}",
                                   "cancelled", &cancelled, "error", &error, "denied", &denied);

    if (!root)
        return -EBADMSG;
    r->cancelled = cancelled;
    r->denied = denied != 0;
    copy_text(r->error, sizeof(r->error), error);
    json_decref(root);
    return 0;
}

int rdzv_msg_put_status(struct rdzv_buf *b)
{
    return rdzv_msg_put(b, RDZV_MSG_STATUS, json_object());
}

int rdzv_msg_parse_status(const uint8_t *body, size_t len, char *err, size_t errlen)
{
    json_t *root = rdzv_msg_load(body, len, err, errlen);

    if (!root)
        return -EBADMSG;
    json_decref(root);
    return 0;
}

int rdzv_msg_parse_error(const uint8_t *body, size_t len, struct rdzv_error *e, char *err,
                         size_t errlen)
{
    const char *text;
    json_t *root = rdzv_msg_unpack(body, len, "ERROR", err, errlen, "{s:s}", "error", &text);
    json_t *leader;
    int r = 0;

    if (!root)
        return -EBADMSG;
    copy_text(e->error, sizeof(e->error), text);
    e->redirect = false;
    e->leader[0] = '\0';
    leader = json_object_get(root, "leader");
    if (leader) {
        e->redirect = true;
        if (!json_is_string(leader)) {
            snprintf(err, errlen, "ERROR 'leader' is not a string");
            r = -EBADMSG;
        } else {
            r = rdzv_msg_copy_str(e->leader, sizeof(e->leader), json_string_value(leader),
                                  "ERROR leader", err, errlen);
        }
        for (const char *q = e->leader; r == 0 && *q; q++)
            if ((unsigned char)*q < 0x20 || *q == 0x7f) {
                snprintf(err, errlen, "ERROR 'leader' holds a control character");
                r = -EBADMSG;
            }
    }
    json_decref(root);
    return r < 0 ? -EBADMSG : 0;
}
