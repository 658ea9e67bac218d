/* SPDX-License-Identifier: Apache-2.0 */
/* rdzv-msg.c: rendezvous message bodies <-> C structs, through jansson. */
#include "proto/rdzv-msg.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/rdzv-buf.h"
#include "common/rdzv-util.h"
#include "proto/rdzv-frame.h"
#include "proto/rdzv-msg-priv.h"

static const char *const nccl_mode_names[] = {"off", "auto", "required"};

const char *rdzv_nccl_mode_name(enum rdzv_nccl_mode m)
{
    return (unsigned)m < 3 ? nccl_mode_names[m] : "?";
}

int rdzv_nccl_mode_parse(const char *s, enum rdzv_nccl_mode *ret)
{
    for (unsigned i = 0; i < 3; i++)
        if (strcmp(s, nccl_mode_names[i]) == 0) {
            *ret = (enum rdzv_nccl_mode)i;
            return 0;
        }
    return -EINVAL;
}

/* s is exactly n lowercase hex characters. */
static bool hex_of_len(const char *s, size_t n)
{
    size_t i;

    for (i = 0; s[i]; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
    return i == n;
}

bool rdzv_nccl_hex_valid(const char *s)
{
    return hex_of_len(s, RDZV_NCCL_HEX_LEN);
}

bool rdzv_msg_is_command(const char *s)
{
    return hex_of_len(s, RDZV_COMMAND_HEX);
}

bool rdzv_msg_is_secret(const char *s)
{
    return hex_of_len(s, RDZV_SECRET_HEX);
}

int rdzv_msg_put(struct rdzv_buf *b, uint8_t op, json_t *obj)
{
    char *text;
    int r;

    if (!obj)
        return -ENOMEM;
    text = json_dumps(obj, JSON_COMPACT);
    json_decref(obj);
    if (!text)
        return -ENOMEM;
    r = rdzv_frame_put(b, op, text, strlen(text));
    free(text);
    return r;
}

int rdzv_msg_put_hello(struct rdzv_buf *b, const char *peer)
{
    return rdzv_msg_put(b, RDZV_MSG_HELLO,
                        json_pack("{s:s, s:i, s:s}", "magic", "rdzv", "version",
                                  RDZV_PROTO_VERSION, "peer", peer));
}

json_t *rdzv_json_set(json_t *o, const char *key, json_t *v)
{
    if (!o) {
        json_decref(v);
        return NULL;
    }
    if (json_object_set_new(o, key, v) < 0) { /* takes v even when it fails */
        json_decref(o);
        return NULL;
    }
    return o;
}

/* The network pre-flight (1.23): a numeric IPv4 or IPv6 address that fits. */
static bool addr_ok(const char *a)
{
    unsigned char buf[sizeof(struct in6_addr)];

    return strlen(a) <= RDZV_STORE_ADDR_MAX &&
           (inet_pton(AF_INET, a, buf) == 1 || inet_pton(AF_INET6, a, buf) == 1);
}

static bool token_ok(const char *s)
{
    size_t i;

    for (i = 0; s[i]; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
    return i == RDZV_PF_TOKEN_HEX;
}

/* Where a listener is: addr, port and token checked, copied into the out strings. */
int rdzv_msg_pf_listener_ok(const char *what, const char *addr, json_int_t port,
                            const char *token, char *addr_out, char *token_out, char *err,
                            size_t errlen)
{
    if (!addr_ok(addr) || port < 1 || port > 65535 || !token_ok(token)) {
        snprintf(err, errlen,
                 "%s: 'addr' must be a numeric IP address, 'port' 1..65535 and 'token' %d "
                 "lowercase hex characters",
                 what, RDZV_PF_TOKEN_HEX);
        return -EBADMSG;
    }
    snprintf(addr_out, RDZV_STORE_ADDR_MAX + 1, "%s", addr);
    snprintf(token_out, RDZV_PF_TOKEN_HEX + 1, "%s", token);
    return 0;
}

static json_t *join_preflight_json(const struct rdzv_join_preflight *pf)
{
    return json_pack("{s:s, s:I, s:s, s:f}", "addr", pf->addr, "port", (json_int_t)pf->port,
                     "token", pf->token, "fraction", pf->fraction);
}

static int parse_join_preflight(json_t *o, struct rdzv_join_preflight *pf, char *err,
                                size_t errlen)
{
    const char *addr, *token;
    json_error_t jerr;
    json_int_t port;
    double fraction;
    int r;

    memset(pf, 0, sizeof(*pf));
    if (!o)
        return 0;
    if (json_unpack_ex(o, &jerr, 0, "{s:s, s:I, s:s, s:F}", "addr", &addr, "port", &port,
                       "token", &token, "fraction", &fraction) < 0)
        return rdzv_msg_unpack_fail(&jerr, "JOIN preflight", err, errlen);
    r = rdzv_msg_pf_listener_ok("JOIN preflight", addr, port, token, pf->addr, pf->token, err,
                                errlen);
    if (r < 0)
        return r;
    if (!(fraction > 0 && fraction < 1)) {
        snprintf(err, errlen, "JOIN preflight: 'fraction' must be above 0 and below 1");
        return -EBADMSG;
    }
    pf->on = true;
    pf->port = port;
    pf->fraction = fraction;
    return 0;
}

int rdzv_msg_put_join(struct rdzv_buf *b, const struct rdzv_join *j)
{
    json_t *o = json_pack(
        "{s:s, s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:s, s:I, s:b, s:I, s:I, s:b, s:s}",
        "run_id",
        j->run_id, "node_id", j->node_id, "host", j->host, "nproc", (json_int_t)j->nproc,
        "node_rank", (json_int_t)j->node_rank, "min", (json_int_t)j->min, "max",
        (json_int_t)j->max, "last_call_ms", (json_int_t)j->last_call_ms, "max_restarts",
        (json_int_t)j->max_restarts, "nccl", rdzv_nccl_mode_name(j->nccl), "nccl_ids",
        (json_int_t)j->nccl_ids, "rank_hint", j->rank_hint, "heartbeat_timeout_ms",
        (json_int_t)j->heartbeat_timeout_ms, "join_timeout_ms", (json_int_t)j->join_timeout_ms,
        "scale_up_now", j->scale_up_now, "recovery", j->inplace ? "inplace" : "restart");
    const struct rdzv_resume *rs = &j->resume;

    if (rs->generation) {
        json_t *ro = json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:b}", "generation",
                               (json_int_t)rs->generation, "node_rank", (json_int_t)rs->node_rank,
                               "nnodes", (json_int_t)rs->nnodes, "rank_offset",
                               (json_int_t)rs->rank_offset, "world_size",
                               (json_int_t)rs->world_size, "restart_count",
                               (json_int_t)rs->restart_count, "master_port",
                               (json_int_t)rs->master_port, "left", rs->left);

        if (rs->incarnation) /* 1.18 */
            ro = rdzv_json_set(ro, "incarnation", json_integer((json_int_t)rs->incarnation));
        o = rdzv_json_set(o, "resume", ro);
    }
    if (j->secret[0])
        o = rdzv_json_set(o, "secret", json_string(j->secret));
    if (j->host_store)
        o = rdzv_json_set(o, "host_store", json_true());
    if (j->host_replica)
        o = rdzv_json_set(o, "host_replica", json_true());
    if (j->bad_node_failures > 0)
        o = rdzv_json_set(o, "bad_node_failures", json_integer((json_int_t)j->bad_node_failures));
    if (j->gpus.n)
        o = rdzv_json_set(o, "gpu_uuids", rdzv_gpu_set_to_json(&j->gpus));
    if (j->restart_backoff_s > 0)
        o = rdzv_json_set(o, "restart_backoff", json_integer((json_int_t)j->restart_backoff_s));
    if (j->age_ms > 0)
        o = rdzv_json_set(o, "age_ms", json_integer((json_int_t)j->age_ms));
    if (j->command[0])
        o = rdzv_json_set(o, "command", json_string(j->command));
    if (j->ran_incarnation && !rs->generation) /* 1.20 */
        o = rdzv_json_set(o, "ran_incarnation", json_integer((json_int_t)j->ran_incarnation));
    if (j->bad_node_window_s > 0)
        o = rdzv_json_set(o, "bad_node_window", json_integer((json_int_t)j->bad_node_window_s));
    if (j->straggler_factor > 0)
        o = rdzv_json_set(o, "straggler",
                      json_pack("{s:f, s:I, s:s}", "factor", j->straggler_factor, "window_ms",
                                (json_int_t)j->straggler_window_ms, "action",
                                j->straggler_aside ? "aside" : "report"));
    if (j->preflight.on) /* 1.23 */
        o = rdzv_json_set(o, "preflight", join_preflight_json(&j->preflight));
    return rdzv_msg_put(b, RDZV_MSG_JOIN, o);
}

json_t *rdzv_msg_ids_array(const char (*ids)[RDZV_NCCL_HEX_LEN + 1], unsigned n)
{
    json_t *arr = json_array();

    for (unsigned i = 0; arr && i < n; i++)
        if (json_array_append_new(arr, json_string(ids[i])) < 0) {
            json_decref(arr);
            return NULL;
        }
    return arr;
}

int rdzv_msg_put_round(struct rdzv_buf *b, const struct rdzv_round *r)
{
    json_t *ids = rdzv_msg_ids_array((const char(*)[RDZV_NCCL_HEX_LEN + 1])r->ids, r->n_ids);

    if (!ids)
        return -ENOMEM;
    return rdzv_msg_put(
        b, RDZV_MSG_ROUND,
        json_pack("{s:I, s:I, s:I, s:I, s:I, s:s, s:I, s:I, s:I, s:o}", "generation",
                  (json_int_t)r->generation, "node_rank", (json_int_t)r->node_rank, "nnodes",
                  (json_int_t)r->nnodes, "rank_offset", (json_int_t)r->rank_offset, "world_size",
                  (json_int_t)r->world_size, "master_addr", r->master_addr, "master_port",
                  (json_int_t)r->master_port, "restart_count", (json_int_t)r->restart_count,
                  "max_restarts", (json_int_t)r->max_restarts, "nccl_ids", ids));
}

int rdzv_msg_put_worker_exit(struct rdzv_buf *b, const struct rdzv_worker_exit *w)
{
    json_t *o = json_pack("{s:I, s:I, s:I, s:I, s:I, s:f, s:s}", "generation",
                          (json_int_t)w->generation, "rank", (json_int_t)w->rank, "local_rank",
                          (json_int_t)w->local_rank, "exit_code", (json_int_t)w->exit_code,
                          "signal", (json_int_t)w->signal, "time", w->time, "host", w->host);

    if (w->reason[0])
        o = rdzv_json_set(o, "reason", json_string(w->reason));
    if (w->error[0])
        o = rdzv_json_set(o, "error", json_string(w->error));
    return rdzv_msg_put(b, RDZV_MSG_WORKER_EXIT, o);
}

int rdzv_msg_put_event(struct rdzv_buf *b, const struct rdzv_event *e)
{
    char summary[sizeof(e->summary)], cost[sizeof(e->cost)];
    json_t *o;

    /* Summaries are built with snprintf: never let a cut character make the JSON invalid. */
    memcpy(summary, e->summary, sizeof(summary));
    summary[sizeof(summary) - 1] = '\0';
    o = json_pack("{s:s, s:I, s:I, s:s}", "type", e->type, "generation",
                  (json_int_t)e->generation, "exit_code", (json_int_t)e->exit_code, "summary",
                  rdzv_utf8_trim(summary));
    if (e->cost[0]) {
        memcpy(cost, e->cost, sizeof(cost));
        cost[sizeof(cost) - 1] = '\0';
        o = rdzv_json_set(o, "cost", json_string(rdzv_utf8_trim(cost)));
    }
    if (e->startup_grace_ms > 0)
        o = rdzv_json_set(o, "startup_grace_ms", json_integer(e->startup_grace_ms));
    return rdzv_msg_put(b, RDZV_MSG_EVENT, o);
}

int rdzv_msg_put_error(struct rdzv_buf *b, const char *fmt, ...)
{
    char text[RDZV_ERROR_MAX + 1];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    return rdzv_msg_put(b, RDZV_MSG_ERROR, json_pack("{s:s}", "error", rdzv_utf8_trim(text)));
}

int rdzv_msg_put_redirect(struct rdzv_buf *b, const char *leader, const char *fmt, ...)
{
    char text[RDZV_ERROR_MAX + 1];
    va_list ap;

    if (strlen(leader) > RDZV_ENDPOINT_MAX)
        return -EINVAL;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    return rdzv_msg_put(b, RDZV_MSG_ERROR,
                        json_pack("{s:s, s:s}", "error", rdzv_utf8_trim(text), "leader", leader));
}

json_t *rdzv_msg_load(const uint8_t *body, size_t len, char *err, size_t errlen)
{
    json_error_t jerr;
    json_t *root = json_loadb((const char *)body, len, JSON_REJECT_DUPLICATES, &jerr);

    if (!root) {
        snprintf(err, errlen, "bad JSON: %s", jerr.text);
        return NULL;
    }
    if (!json_is_object(root)) {
        snprintf(err, errlen, "bad JSON: body is not an object");
        json_decref(root);
        return NULL;
    }
    return root;
}

int rdzv_msg_copy_str(char *dst, size_t cap, const char *src, const char *name, char *err,
                      size_t errlen)
{
    size_t n = strlen(src);

    if (n >= cap) {
        snprintf(err, errlen, "'%s' longer than %zu bytes", name, cap - 1);
        return -EBADMSG;
    }
    memcpy(dst, src, n + 1);
    return 0;
}

int rdzv_msg_unpack_fail(const json_error_t *jerr, const char *what, char *err, size_t errlen)
{
    snprintf(err, errlen, "%s: %s", what, jerr->text);
    return -EBADMSG;
}

int rdzv_msg_get_ids(const json_t *arr, const char *what, char (*ids)[RDZV_NCCL_HEX_LEN + 1],
                     unsigned *ret_n, char *err, size_t errlen)
{
    const json_t *v;
    size_t i;

    if (!json_is_array(arr) || json_array_size(arr) > RDZV_MAX_NCCL_IDS) {
        snprintf(err, errlen, "%s must be an array of at most %d ids", what, RDZV_MAX_NCCL_IDS);
        return -EBADMSG;
    }
    for (i = 0; i < json_array_size(arr); i++) {
        v = json_array_get(arr, i);
        if (!json_is_string(v) || !rdzv_nccl_hex_valid(json_string_value(v))) {
            snprintf(err, errlen, "%s[%zu] is not %d lowercase hex characters", what, i,
                     RDZV_NCCL_HEX_LEN);
            return -EBADMSG;
        }
        memcpy(ids[i], json_string_value(v), RDZV_NCCL_HEX_LEN + 1);
    }
    *ret_n = (unsigned)i;
    return 0;
}

int rdzv_msg_parse_hello(const uint8_t *body, size_t len, char *err, size_t errlen)
{
    json_error_t jerr;
    const char *magic;
    json_int_t version;
    json_t *root = rdzv_msg_load(body, len, err, errlen);
    int r = 0;

    if (!root)
        return -EBADMSG;
    if (json_unpack_ex(root, &jerr, 0, "{s:s, s:I}", "magic", &magic, "version", &version) < 0)
        r = rdzv_msg_unpack_fail(&jerr, "HELLO", err, errlen);
    else if (strcmp(magic, "rdzv") != 0) {
        snprintf(err, errlen, "HELLO: bad magic '%.32s'", magic);
        r = -EBADMSG;
    } else if (version != RDZV_PROTO_VERSION) {
        snprintf(err, errlen, "HELLO: protocol version %lld, this side speaks %d",
                 (long long)version, RDZV_PROTO_VERSION);
        r = -EBADMSG;
    }
    json_decref(root);
    return r;
}

/* JOIN's "straggler" (1.11; absent: nobody is scored). */
static int parse_straggler(json_t *o, struct rdzv_join *j, char *err, size_t errlen)
{
    const char *action;
    json_error_t jerr;
    json_int_t window;
    double factor;

    if (!o)
        return 0;
    if (json_unpack_ex(o, &jerr, 0, "{s:F, s:I, s:s}", "factor", &factor, "window_ms", &window,
                       "action", &action) < 0)
        return rdzv_msg_unpack_fail(&jerr, "JOIN straggler", err, errlen);
    if (!(factor > 1 && factor <= RDZV_STRAGGLER_FACTOR_MAX) ||
        window < RDZV_STRAGGLER_WINDOW_MIN_MS || window > RDZV_STRAGGLER_WINDOW_MAX_MS ||
        (strcmp(action, "report") && strcmp(action, "aside"))) {
        snprintf(err, errlen, "JOIN: 'straggler' out of range (1 < factor <= %g, %d <= window_ms "
                              "<= %d, action \"report\" or \"aside\")",
                 RDZV_STRAGGLER_FACTOR_MAX, RDZV_STRAGGLER_WINDOW_MIN_MS,
                 RDZV_STRAGGLER_WINDOW_MAX_MS);
        return -EBADMSG;
    }
    j->straggler_factor = factor;
    j->straggler_window_ms = window;
    j->straggler_aside = strcmp(action, "aside") == 0;
    return 0;
}

int rdzv_msg_parse_join(const uint8_t *body, size_t len, struct rdzv_join *j, char *err,
                        size_t errlen)
{
    json_int_t nproc, node_rank, min, max, last_call, max_restarts, nccl_ids = 1;
    json_int_t hb_ms = RDZV_HEARTBEAT_TIMEOUT_MS, join_ms = RDZV_JOIN_TIMEOUT_MS, bad_node = 0;
    json_int_t bad_window = 0, backoff = 0, age = 0, ran_inc = 0;
    const char *run_id, *node_id, *host, *nccl = "auto", *recovery = "restart", *secret = "";
    const char *command = "";
    int rank_hint = 0, scale_now = 0, host_store = 0, host_replica = 0;
    json_error_t jerr;
    json_t *root = rdzv_msg_load(body, len, err, errlen), *resume = NULL, *gpus = NULL;
    int r = 0;

    if (!root)
        return -EBADMSG;
    memset(j, 0, sizeof(*j));
    if (json_unpack_ex(root, &jerr, 0,
                       "{s:s, s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s?s, s?I, s?b, s?I, s?I, "
                       "s?b, s?o, s?s, s?s, s?b, s?b, s?I, s?o, s?I, s?I, s?I, s?s, s?I}",
                       "run_id", &run_id, "node_id", &node_id, "host", &host, "nproc", &nproc,
                       "node_rank", &node_rank, "min", &min, "max", &max, "last_call_ms",
                       &last_call, "max_restarts", &max_restarts, "nccl", &nccl, "nccl_ids",
                       &nccl_ids, "rank_hint", &rank_hint, "heartbeat_timeout_ms", &hb_ms,
                       "join_timeout_ms", &join_ms, "scale_up_now", &scale_now, "resume",
                       &resume, "recovery", &recovery, "secret", &secret, "host_store",
                       &host_store, "host_replica", &host_replica, "bad_node_failures",
                       &bad_node, "gpu_uuids", &gpus, "bad_node_window", &bad_window,
                       "restart_backoff", &backoff, "age_ms", &age, "command", &command,
                       "ran_incarnation", &ran_inc) < 0) {
        r = rdzv_msg_unpack_fail(&jerr, "JOIN", err, errlen);
        goto out;
    }
    if (resume) {
        struct rdzv_resume *rs = &j->resume;
        json_int_t g, nr, nn, off, ws, rc, mp, inc = 0;
        int left = 0;

        if (json_unpack_ex(resume, &jerr, 0, "{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s?b, s?I}",
                           "generation", &g, "node_rank", &nr, "nnodes", &nn, "rank_offset",
                           &off, "world_size", &ws, "restart_count", &rc, "master_port", &mp,
                           "left", &left, "incarnation", &inc) < 0) {
            r = rdzv_msg_unpack_fail(&jerr, "JOIN resume", err, errlen);
            goto out;
        }
        if (g < 1 || nn < 1 || nr < 0 || nr >= nn || off < 0 || ws < 1 || off >= ws || rc < 0 ||
            mp < 0 || mp > 65535 || inc < 0 || inc > RDZV_INCARNATION_MAX) {
            snprintf(err, errlen, "JOIN: 'resume' values are out of range");
            r = -EBADMSG;
            goto out;
        }
        *rs = (struct rdzv_resume){(uint64_t)g, nr, nn, off, ws, rc, mp, left != 0,
                                   (uint64_t)inc};
    }
    r = rdzv_msg_copy_str(j->run_id, sizeof(j->run_id), run_id, "run_id", err, errlen);
    if (r == 0)
        r = rdzv_msg_copy_str(j->node_id, sizeof(j->node_id), node_id, "node_id", err, errlen);
    if (r == 0)
        r = rdzv_msg_copy_str(j->host, sizeof(j->host), host, "host", err, errlen);
    if (r < 0)
        goto out;
    if (strcmp(recovery, "restart") && strcmp(recovery, "inplace")) {
        snprintf(err, errlen, "JOIN: 'recovery' must be \"restart\" or \"inplace\"");
        r = -EBADMSG;
        goto out;
    }
    if (!*run_id || nproc < 1 || nproc > RDZV_NPROC_MAX || min < 1 || max < min || max > 100000 ||
        node_rank < -1 || last_call < 0 || max_restarts < 0 || nccl_ids < 1 ||
        nccl_ids > RDZV_MAX_NCCL_IDS || rdzv_nccl_mode_parse(nccl, &j->nccl) < 0 ||
        hb_ms < 100 || hb_ms > 3600000 || join_ms < 0 || join_ms > 86400000 || bad_node < 0 ||
        bad_node > RDZV_BAD_NODE_FAILURES_MAX || bad_window < 0 ||
        bad_window > RDZV_BAD_NODE_WINDOW_MAX ||
        (bad_window > 0 && bad_node > RDZV_BAD_NODE_WINDOWED_MAX) || backoff < 0 ||
        backoff > RDZV_RESTART_BACKOFF_MAX || age < 0 || age > RDZV_AGE_MS_MAX || ran_inc < 0 ||
        ran_inc > RDZV_INCARNATION_MAX) {
        snprintf(err, errlen,
                 "JOIN: a value is out of range (run_id non-empty, 1 <= nproc <= "
                 "1024, 1 <= min <= max <= 100000, node_rank >= -1, nccl "
                 "off|auto|required, 1 <= nccl_ids <= %d, 100 <= heartbeat_timeout_ms <= 3600000, "
                 "0 <= bad_node_failures <= %d (%d with a bad_node_window), "
                 "0 <= bad_node_window <= %d, 0 <= restart_backoff <= %d, "
                 "0 <= age_ms <= %lld, 0 <= ran_incarnation <= %lld)",
                 RDZV_MAX_NCCL_IDS, RDZV_BAD_NODE_FAILURES_MAX, RDZV_BAD_NODE_WINDOWED_MAX,
                 RDZV_BAD_NODE_WINDOW_MAX, RDZV_RESTART_BACKOFF_MAX, (long long)RDZV_AGE_MS_MAX,
                 RDZV_INCARNATION_MAX);
        r = -EBADMSG;
        goto out;
    }
    j->nproc = nproc;
    j->node_rank = node_rank;
    j->min = min;
    j->max = max;
    j->last_call_ms = last_call;
    j->max_restarts = max_restarts;
    j->nccl_ids = nccl_ids;
    j->rank_hint = rank_hint != 0;
    j->heartbeat_timeout_ms = hb_ms;
    j->join_timeout_ms = join_ms;
    j->scale_up_now = scale_now != 0;
    j->inplace = strcmp(recovery, "inplace") == 0;
    j->host_store = host_store != 0;
    j->host_replica = host_replica != 0;
    j->bad_node_failures = bad_node;
    j->bad_node_window_s = bad_window;
    j->restart_backoff_s = backoff;
    j->age_ms = age;
    j->ran_incarnation = j->resume.generation ? 0 : (uint64_t)ran_inc; /* a resume has its own */
    r = parse_straggler(json_object_get(root, "straggler"), j, err, errlen);
    if (r == 0)
        r = parse_join_preflight(json_object_get(root, "preflight"), &j->preflight, err,
                                 errlen);
    if (r < 0)
        goto out;
    if (*secret && !rdzv_msg_is_secret(secret)) {
        snprintf(err, errlen, "JOIN: 'secret' must be %d lowercase hex characters",
                 RDZV_SECRET_HEX);
        r = -EBADMSG;
        goto out;
    }
    snprintf(j->secret, sizeof(j->secret), "%s", secret);
    if (*command && !rdzv_msg_is_command(command)) {
        snprintf(err, errlen, "JOIN: 'command' must be %d lowercase hex characters",
                 RDZV_COMMAND_HEX);
        r = -EBADMSG;
        goto out;
    }
    snprintf(j->command, sizeof(j->command), "%s", command);
    if (gpus)
        r = rdzv_gpu_set_from_json(gpus, "JOIN: 'gpu_uuids'", &j->gpus, err, errlen);
out:
    json_decref(root);
    return r;
}

int rdzv_msg_parse_round(const uint8_t *body, size_t len, struct rdzv_round *rd, char *err,
                         size_t errlen)
{
    json_int_t gen, node_rank, nnodes, off, world, port, restarts, max_restarts;
    const char *addr;
    json_t *ids;
    json_error_t jerr;
    json_t *root = rdzv_msg_load(body, len, err, errlen);
    int r = 0;

    if (!root)
        return -EBADMSG;
    /* Not the ids past n_ids: 16 KiB that a fresh allocation would fault in for nothing. */
    memset(rd, 0, offsetof(struct rdzv_round, ids));
    if (json_unpack_ex(root, &jerr, 0, "{s:I, s:I, s:I, s:I, s:I, s:s, s:I, s:I, s:I, s:o}",
                       "generation", &gen, "node_rank", &node_rank, "nnodes", &nnodes,
                       "rank_offset", &off, "world_size", &world, "master_addr", &addr,
                       "master_port", &port, "restart_count", &restarts, "max_restarts",
                       &max_restarts, "nccl_ids", &ids) < 0) {
        r = rdzv_msg_unpack_fail(&jerr, "ROUND", err, errlen);
        goto out;
    }
    if (gen < 0 || node_rank < 0 || nnodes < 1 || node_rank >= nnodes || off < 0 || world < 1 ||
        port < 1 || port > 65535 || !json_is_array(ids) ||
        json_array_size(ids) > RDZV_MAX_NCCL_IDS) {
        snprintf(err, errlen, "ROUND: a value is out of range");
        r = -EBADMSG;
        goto out;
    }
    r = rdzv_msg_copy_str(rd->master_addr, sizeof(rd->master_addr), addr, "master_addr", err,
                          errlen);
    if (r < 0)
        goto out;
    r = rdzv_msg_get_ids(ids, "ROUND: nccl_ids", rd->ids, &rd->n_ids, err, errlen);
    if (r < 0)
        goto out;
    rd->generation = (uint64_t)gen;
    rd->node_rank = node_rank;
    rd->nnodes = nnodes;
    rd->rank_offset = off;
    rd->world_size = world;
    rd->master_port = port;
    rd->restart_count = restarts;
    rd->max_restarts = max_restarts;
out:
    json_decref(root);
    return r;
}

int rdzv_msg_parse_worker_exit(const uint8_t *body, size_t len, struct rdzv_worker_exit *w,
                               char *err, size_t errlen)
{
    json_int_t gen, rank, local_rank, code, sig;
    const char *host = "", *reason = "", *error = "";
    json_error_t jerr;
    double t = 0;
    json_t *root = rdzv_msg_load(body, len, err, errlen);
    int r = 0;

    if (!root)
        return -EBADMSG;
    memset(w, 0, sizeof(*w));
    if (json_unpack_ex(root, &jerr, 0, "{s:I, s:I, s:I, s:I, s:I, s?F, s?s, s?s, s?s}",
                       "generation", &gen, "rank", &rank, "local_rank", &local_rank, "exit_code",
                       &code, "signal", &sig, "time", &t, "host", &host, "reason", &reason,
                       "error", &error) < 0) {
        r = rdzv_msg_unpack_fail(&jerr, "WORKER_EXIT", err, errlen);
        goto out;
    }
    r = rdzv_msg_copy_str(w->host, sizeof(w->host), host, "host", err, errlen);
    if (r == 0)
        r = rdzv_msg_copy_str(w->reason, sizeof(w->reason), reason, "reason", err, errlen);
    if (r < 0)
        goto out;
    snprintf(w->error, sizeof(w->error), "%s", error); /* cut, not refused */
    rdzv_utf8_trim(w->error);
    w->generation = (uint64_t)gen;
    w->rank = rank;
    w->local_rank = local_rank;
    w->exit_code = code;
    w->signal = sig;
    /* What a wait status can say (127: exec failed, 128+N: signal N), and no control characters
     * in the texts other agents are shown. */
    if (gen < 0 || rank < 0 || local_rank < 0 || code < 0 || code > 255 || sig < 0 || sig > 64 ||
        rdzv_has_ctl(w->host) || rdzv_has_ctl(w->reason) || rdzv_has_ctl(w->error)) {
        snprintf(err, errlen, "WORKER_EXIT: values are out of range (rank and local rank >= 0, "
                              "exit code 0..255, signal 0..64, no control characters)");
        r = -EBADMSG;
        goto out;
    }
    if (!(t >= 0 && t < 1e11)) {
        snprintf(err, errlen, "WORKER_EXIT: 'time' must be unix seconds");
        r = -EBADMSG;
        goto out;
    }
    w->time = t;
out:
    json_decref(root);
    return r;
}

int rdzv_msg_parse_event(const uint8_t *body, size_t len, struct rdzv_event *e, char *err,
                         size_t errlen)
{
    const char *type, *summary = "", *cost = "";
    json_int_t gen, code = 0, grace = 0;
    json_error_t jerr;
    json_t *root = rdzv_msg_load(body, len, err, errlen);
    int r = 0;

    if (!root)
        return -EBADMSG;
    memset(e, 0, sizeof(*e));
    if (json_unpack_ex(root, &jerr, 0, "{s:s, s:I, s?I, s?s, s?s, s?I}", "type", &type,
                       "generation", &gen, "exit_code", &code, "summary", &summary, "cost", &cost,
                       "startup_grace_ms", &grace) < 0) {
        r = rdzv_msg_unpack_fail(&jerr, "EVENT", err, errlen);
        goto out;
    }
    if (grace < 0) {
        snprintf(err, errlen, "EVENT: startup_grace_ms must not be negative");
        r = -EBADMSG;
        goto out;
    }
    if (grace > RDZV_STARTUP_GRACE_MAX_MS) /* a later rdzvd's longer one: this agent's longest */
        grace = RDZV_STARTUP_GRACE_MAX_MS;
    r = rdzv_msg_copy_str(e->type, sizeof(e->type), type, "type", err, errlen);
    if (r == 0) {
        /* A long summary is cut, not refused: it is for people. */
        snprintf(e->summary, sizeof(e->summary), "%s", summary);
        rdzv_utf8_trim(e->summary);
        snprintf(e->cost, sizeof(e->cost), "%s", cost);
        rdzv_utf8_trim(e->cost);
        e->generation = (uint64_t)gen;
        e->exit_code = code;
        e->startup_grace_ms = grace;
    }
out:
    json_decref(root);
    return r;
}
