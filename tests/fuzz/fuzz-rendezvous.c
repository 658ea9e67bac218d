/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz-rendezvous.c: decode rendezvous frames (proto/rdzv-frame.h) from arbitrary bytes and hand
 * each complete frame's body to the parser its op gets in rdzvd or rdzv-agent (proto/rdzv-msg.h),
 * with round-trip properties: a frame re-encodes to the same bytes, and for every message with a
 * struct (all but HELLO) parse(put(x)) == x.
 *
 * Input: a byte stream as a peer would send it on one connection. Decoding stops at the first
 * frame that is incomplete or refused; a body that does not parse is skipped, as the peer would
 * be told and closed. */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/rdzv-auth.h"
#include "common/rdzv-buf.h"
#include "proto/rdzv-auth-msg.h"
#include "proto/rdzv-frame.h"
#include "proto/rdzv-msg.h"
#include "proto/rdzv-status.h"
#include "fuzz-check.h"

/* A parser that failed said why, in one NUL-terminated line that fits. */
static void check_err(const char *err, size_t errlen)
{
    size_t n = strnlen(err, errlen);

    CHECK(n > 0 && n < errlen);
    CHECK(!memchr(err, '\n', n));
}

/* Re-frame what put wrote and return its body. out must hold exactly one frame of op. */
static void reframe(const struct rdzv_buf *out, uint8_t want_op, const uint8_t **body,
                    uint32_t *blen)
{
    const char *why = NULL;
    uint8_t op = 0;
    ssize_t r = rdzv_frame_peek(rdzv_buf_head(out), rdzv_buf_avail(out), RDZV_MAX_MSG, &op, body,
                                blen, &why);

    CHECK(r > 0 && (size_t)r == rdzv_buf_avail(out));
    CHECK(op == want_op);
}

static void check_join(const uint8_t *body, uint32_t len)
{
    struct rdzv_join a, b;
    struct rdzv_buf out = {0};
    const uint8_t *b2;
    uint32_t l2;
    char err[256];
    int r;

    r = rdzv_msg_parse_join(body, len, &a, err, sizeof(err));
    if (r < 0) {
        CHECK(r == -EBADMSG);
        check_err(err, sizeof(err));
        return;
    }
    CHECK(rdzv_msg_put_join(&out, &a) == 0);
    reframe(&out, RDZV_MSG_JOIN, &b2, &l2);
    CHECK(rdzv_msg_parse_join(b2, l2, &b, err, sizeof(err)) == 0);
    CHECK(strcmp(a.run_id, b.run_id) == 0 && strcmp(a.node_id, b.node_id) == 0);
    CHECK(strcmp(a.host, b.host) == 0);
    CHECK(a.nproc == b.nproc && a.node_rank == b.node_rank);
    CHECK(a.min == b.min && a.max == b.max);
    CHECK(a.last_call_ms == b.last_call_ms && a.max_restarts == b.max_restarts);
    CHECK(a.nccl == b.nccl && a.nccl_ids == b.nccl_ids && a.rank_hint == b.rank_hint);
    CHECK(a.heartbeat_timeout_ms == b.heartbeat_timeout_ms);
    CHECK(a.join_timeout_ms == b.join_timeout_ms && a.scale_up_now == b.scale_up_now);
    CHECK(a.gpus.n == b.gpus.n && a.gpus.n <= RDZV_GPU_UUIDS_MAX &&
          memcmp(a.gpus.u, b.gpus.u, a.gpus.n * sizeof(a.gpus.u[0])) == 0);
    CHECK(rdzv_gpu_set_valid(&a.gpus));
    CHECK(a.resume.generation == b.resume.generation);
    if (a.resume.generation) {
        CHECK(a.resume.node_rank == b.resume.node_rank && a.resume.nnodes == b.resume.nnodes);
        CHECK(a.resume.rank_offset == b.resume.rank_offset);
        CHECK(a.resume.world_size == b.resume.world_size);
        CHECK(a.resume.restart_count == b.resume.restart_count);
        CHECK(a.resume.master_port == b.resume.master_port && a.resume.left == b.resume.left);
    }
    rdzv_buf_free(&out);
}

static void check_round(const uint8_t *body, uint32_t len)
{
    /* Two ~16 KiB structs: on the heap, as agent-client.c does. */
    struct rdzv_round *a = malloc(sizeof(*a)), *b = malloc(sizeof(*b));
    struct rdzv_buf out = {0};
    const uint8_t *b2;
    uint32_t l2;
    char err[256];
    int r;

    CHECK(a && b);
    r = rdzv_msg_parse_round(body, len, a, err, sizeof(err));
    if (r < 0) {
        CHECK(r == -EBADMSG);
        check_err(err, sizeof(err));
        goto out_free;
    }
    CHECK(a->n_ids <= RDZV_MAX_NCCL_IDS);
    for (unsigned i = 0; i < a->n_ids; i++)
        CHECK(rdzv_nccl_hex_valid(a->ids[i]));
    CHECK(rdzv_msg_put_round(&out, a) == 0);
    reframe(&out, RDZV_MSG_ROUND, &b2, &l2);
    CHECK(rdzv_msg_parse_round(b2, l2, b, err, sizeof(err)) == 0);
    CHECK(a->generation == b->generation && a->node_rank == b->node_rank);
    CHECK(a->nnodes == b->nnodes && a->rank_offset == b->rank_offset);
    CHECK(a->world_size == b->world_size && strcmp(a->master_addr, b->master_addr) == 0);
    CHECK(a->master_port == b->master_port && a->restart_count == b->restart_count);
    CHECK(a->max_restarts == b->max_restarts && a->n_ids == b->n_ids);
    for (unsigned i = 0; i < a->n_ids; i++)
        CHECK(strcmp(a->ids[i], b->ids[i]) == 0);
    rdzv_buf_free(&out);
out_free:
    free(a);
    free(b);
}

static void check_worker_exit(const uint8_t *body, uint32_t len)
{
    struct rdzv_worker_exit a, b;
    struct rdzv_buf out = {0};
    const uint8_t *b2;
    uint32_t l2;
    char err[256];
    int r;

    r = rdzv_msg_parse_worker_exit(body, len, &a, err, sizeof(err));
    if (r < 0) {
        CHECK(r == -EBADMSG);
        check_err(err, sizeof(err));
        return;
    }
    CHECK(rdzv_msg_put_worker_exit(&out, &a) == 0);
    reframe(&out, RDZV_MSG_WORKER_EXIT, &b2, &l2);
    CHECK(rdzv_msg_parse_worker_exit(b2, l2, &b, err, sizeof(err)) == 0);
    CHECK(a.generation == b.generation && a.rank == b.rank && a.local_rank == b.local_rank);
    CHECK(a.exit_code == b.exit_code && a.signal == b.signal);
    CHECK(a.time == b.time && strcmp(a.host, b.host) == 0);
    rdzv_buf_free(&out);
}

static void check_event(const uint8_t *body, uint32_t len)
{
    struct rdzv_event a, b;
    struct rdzv_buf out = {0};
    const uint8_t *b2;
    uint32_t l2;
    char err[256];
    int r;

    r = rdzv_msg_parse_event(body, len, &a, err, sizeof(err));
    if (r < 0) {
        CHECK(r == -EBADMSG);
        check_err(err, sizeof(err));
        return;
    }
    CHECK(strlen(a.summary) <= RDZV_SUMMARY_MAX);
    CHECK(rdzv_msg_put_event(&out, &a) == 0);
    reframe(&out, RDZV_MSG_EVENT, &b2, &l2);
    CHECK(rdzv_msg_parse_event(b2, l2, &b, err, sizeof(err)) == 0);
    CHECK(strcmp(a.type, b.type) == 0 && a.generation == b.generation);
    CHECK(a.exit_code == b.exit_code && strcmp(a.summary, b.summary) == 0);
    rdzv_buf_free(&out);
}

/* A parser's answer: 0, or -EBADMSG with a reason. True when it parsed. */
static bool parsed(int r, const char *err, size_t errlen)
{
    if (r == 0)
        return true;
    CHECK(r == -EBADMSG);
    check_err(err, errlen);
    return false;
}

/* check_<name>(body, len): a body that parses re-encodes to one frame of op that parses to the
 * same struct (compared bytewise: both start zeroed and the parsers write field by field), and
 * the struct satisfies ok (an expression over a). On the heap: NCCL_ID is ~16 KiB. */
#define ROUND_TRIP(name, type, op, ok)                                                            \
    static void check_##name(const uint8_t *body, uint32_t len)                                    \
    {                                                                                              \
        type *a = calloc(1, sizeof(type)), *b = calloc(1, sizeof(type));                           \
        struct rdzv_buf out = {0};                                                                 \
        const uint8_t *b2;                                                                         \
        uint32_t l2;                                                                               \
        char err[256];                                                                             \
                                                                                                   \
        CHECK(a && b);                                                                             \
        if (parsed(rdzv_msg_parse_##name(body, len, a, err, sizeof(err)), err, sizeof(err))) {     \
            CHECK(ok);                                                                             \
            CHECK(rdzv_msg_put_##name(&out, a) == 0);                                              \
            reframe(&out, op, &b2, &l2);                                                           \
            CHECK(rdzv_msg_parse_##name(b2, l2, b, err, sizeof(err)) == 0);                        \
            CHECK(memcmp(a, b, sizeof(type)) == 0);                                                \
            rdzv_buf_free(&out);                                                                   \
        }                                                                                          \
        free(a);                                                                                   \
        free(b);                                                                                   \
    }

static bool nccl_id_ok(const struct rdzv_nccl_id *a)
{
    if (a->failed)
        return a->n_ids == 0 && strlen(a->error) <= RDZV_ERROR_MAX;
    if (a->n_ids < 1 || a->n_ids > RDZV_MAX_NCCL_IDS)
        return false;
    for (unsigned i = 0; i < a->n_ids; i++)
        if (!rdzv_nccl_hex_valid(a->ids[i]))
            return false;
    return true;
}

ROUND_TRIP(joined, struct rdzv_joined, RDZV_MSG_JOINED, strlen(a->run_id) <= RDZV_ID_MAX)
ROUND_TRIP(nccl_request, struct rdzv_nccl_request, RDZV_MSG_NCCL_REQUEST,
           a->count >= 1 && a->count <= RDZV_MAX_NCCL_IDS)
ROUND_TRIP(nccl_id, struct rdzv_nccl_id, RDZV_MSG_NCCL_ID, nccl_id_ok(a))

/* NCCL_ID as rdzvd reads it: the generation first (a stale one is ignored), then the whole. */
static void check_nccl_id_both(const uint8_t *body, uint32_t len)
{
    uint64_t gen;
    char err[256];
    int r = rdzv_msg_parse_nccl_id_generation(body, len, &gen, err, sizeof(err));

    CHECK(r == 0 || r == -EBADMSG);
    if (r < 0)
        check_err(err, sizeof(err));
    check_nccl_id(body, len);
}
ROUND_TRIP(heartbeat, struct rdzv_heartbeat, RDZV_MSG_HEARTBEAT,
           a->n_progress <= RDZV_PROGRESS_MAX)
ROUND_TRIP(ready, struct rdzv_ready, RDZV_MSG_READY, true)
ROUND_TRIP(replica, struct rdzv_replica, RDZV_MSG_REPLICA,
           a->id >= 1 && a->id <= RDZV_REPLICA_ID_MAX && a->port >= 0 && a->port <= 65534 &&
               (!a->port || (a->replicas >= 1 && a->replicas <= RDZV_REPLICAS_LIST_MAX)) &&
               strlen(a->endpoint) <= RDZV_ENDPOINT_MAX)
ROUND_TRIP(replicas, struct rdzv_replicas, RDZV_MSG_REPLICAS,
           a->n >= 1 && a->n <= RDZV_REPLICAS_LIST_MAX)
ROUND_TRIP(leave, struct rdzv_leave, RDZV_MSG_LEAVE, true)

static void check_error(const uint8_t *body, uint32_t len)
{
    struct rdzv_error a, b;
    struct rdzv_buf out = {0};
    const uint8_t *b2;
    uint32_t l2;
    char err[256];

    if (!parsed(rdzv_msg_parse_error(body, len, &a, err, sizeof(err)), err, sizeof(err)))
        return;
    CHECK(strlen(a.error) <= RDZV_ERROR_MAX);
    CHECK(rdzv_msg_put_error(&out, "%s", a.error) == 0);
    reframe(&out, RDZV_MSG_ERROR, &b2, &l2);
    CHECK(rdzv_msg_parse_error(b2, l2, &b, err, sizeof(err)) == 0);
    CHECK(strcmp(a.error, b.error) == 0);
    rdzv_buf_free(&out);
}

static void check_status(const uint8_t *body, uint32_t len)
{
    struct rdzv_buf out = {0};
    const uint8_t *b2;
    uint32_t l2;
    char err[256];

    if (!parsed(rdzv_msg_parse_status(body, len, err, sizeof(err)), err, sizeof(err)))
        return;
    CHECK(rdzv_msg_put_status(&out) == 0);
    reframe(&out, RDZV_MSG_STATUS, &b2, &l2);
    CHECK(rdzv_msg_parse_status(b2, l2, err, sizeof(err)) == 0);
    rdzv_buf_free(&out);
}

/* The handshake decoders of rdzv-auth-msg.h, with a fixed token and nonces: a body either fails
 * to parse (-EBADMSG), carries a proof that does not match (-EACCES), or (crafted) matches; any
 * other failure is HMAC being unavailable. Each failure says why. */
static void check_auth(uint8_t op, const uint8_t *body, uint32_t len)
{
    static const struct rdzv_token tok = {.len = 16, .key = "fuzz-token-16byt"};
    uint8_t sn[RDZV_NONCE_BYTES] = {1}, cn[RDZV_NONCE_BYTES] = {2};
    bool required = false;
    char err[256] = "";
    int r;

    switch (op) {
    case RDZV_MSG_HELLO:
        r = rdzv_auth_parse_hello(body, len, &required, sn, err, sizeof(err));
        break;
    case RDZV_MSG_AUTH:
        r = rdzv_auth_check_auth(body, len, &tok, sn, cn, err, sizeof(err));
        break;
    default:
        r = rdzv_auth_check_ok(body, len, &tok, sn, cn, err, sizeof(err));
        break;
    }
    if (r < 0)
        check_err(err, sizeof(err));
}

/* STATUS_REPLY: a body that decodes re-encodes to a document that decodes and re-encodes to the
 * same bytes (floats may change form once, e.g. 1 -> 1.0), within the decoder's limits. */
static void check_status_reply(const uint8_t *body, uint32_t len)
{
    struct rdzv_status a, b;
    char err[256], *t1 = NULL, *t2 = NULL;
    json_t *o;
    int r = rdzv_status_parse(body, len, &a, err, sizeof(err));

    CHECK(r == 0 || r == -EBADMSG || r == -ENOMEM);
    if (r < 0) {
        check_err(err, sizeof(err));
        rdzv_status_free(&a);
        return;
    }
    CHECK(a.n_jobs <= RDZV_STATUS_MAX_JOBS);
    for (size_t i = 0; i < a.n_jobs; i++)
        CHECK(a.jobs[i].n_nodes <= RDZV_STATUS_MAX_NODES &&
              a.jobs[i].n_events <= RDZV_STATUS_EVENTS &&
              a.jobs[i].n_ranks <= RDZV_STATUS_MAX_RANKS);
    o = rdzv_status_to_json(&a);
    CHECK(o);
    t1 = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    CHECK(t1);
    CHECK(rdzv_status_parse((const uint8_t *)t1, strlen(t1), &b, err, sizeof(err)) == 0);
    o = rdzv_status_to_json(&b);
    CHECK(o);
    t2 = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    CHECK(t2 && strcmp(t1, t2) == 0);
    free(t1);
    free(t2);
    rdzv_status_free(&a);
    rdzv_status_free(&b);
}

/* Bodies with no decoder (STORE: {}): loaded as JSON, as their readers do. */
static void check_loaded(const uint8_t *body, uint32_t len)
{
    char err[256];
    json_t *root = rdzv_msg_load(body, len, err, sizeof(err));

    if (!root) {
        check_err(err, sizeof(err));
        return;
    }
    CHECK(json_is_object(root));
    json_decref(root);
}

static void check_body(uint8_t op, const uint8_t *body, uint32_t len)
{
    char err[256];
    int r;

    switch (op) {
    case RDZV_MSG_HELLO:
        r = rdzv_msg_parse_hello(body, len, err, sizeof(err));
        CHECK(r == 0 || r == -EBADMSG);
        if (r < 0)
            check_err(err, sizeof(err));
        else
            check_auth(op, body, len);
        break;
    case RDZV_MSG_AUTH:
    case RDZV_MSG_AUTH_OK:
        check_auth(op, body, len);
        break;
    case RDZV_MSG_JOIN:
        check_join(body, len);
        break;
    case RDZV_MSG_ROUND:
        check_round(body, len);
        break;
    case RDZV_MSG_WORKER_EXIT:
        check_worker_exit(body, len);
        break;
    case RDZV_MSG_EVENT:
        check_event(body, len);
        break;
    case RDZV_MSG_JOINED:
        check_joined(body, len);
        break;
    case RDZV_MSG_NCCL_REQUEST:
        check_nccl_request(body, len);
        break;
    case RDZV_MSG_NCCL_ID:
        check_nccl_id_both(body, len);
        break;
    case RDZV_MSG_HEARTBEAT:
        check_heartbeat(body, len);
        break;
    case RDZV_MSG_READY:
        check_ready(body, len);
        break;
    case RDZV_MSG_LEAVE:
        check_leave(body, len);
        break;
    case RDZV_MSG_REPLICA:
        check_replica(body, len);
        break;
    case RDZV_MSG_REPLICAS:
        check_replicas(body, len);
        break;
    case RDZV_MSG_ERROR:
        check_error(body, len);
        break;
    case RDZV_MSG_STATUS:
        check_status(body, len);
        break;
    case RDZV_MSG_STATUS_REPLY:
        check_status_reply(body, len);
        break;
    default:
        check_loaded(body, len);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t pos = 0;

    while (pos < size) {
        const uint8_t *p = data + pos, *body = NULL;
        size_t n = size - pos;
        const char *why = NULL;
        uint32_t blen = 0;
        uint8_t op = 0;
        ssize_t r;

        r = rdzv_frame_peek(p, n, RDZV_MAX_MSG, &op, &body, &blen, &why);
        if (r == 0) {
            /* Need more: the header, or a body longer than what is here. */
            CHECK(n < RDZV_FRAME_HDR || RDZV_FRAME_HDR + (size_t)rdzv_get_u32(p + 4) > n);
            break;
        }
        if (r < 0) {
            CHECK(r == -EPROTO || r == -EMSGSIZE);
            CHECK(why && *why);
            if (r == -EMSGSIZE)
                CHECK(n >= RDZV_FRAME_HDR && rdzv_get_u32(p + 4) > RDZV_MAX_MSG);
            break;
        }
        CHECK((size_t)r <= n && (size_t)r == RDZV_FRAME_HDR + blen);
        CHECK(body == p + RDZV_FRAME_HDR && op == p[0]);
        CHECK(rdzv_msg_name(op)[0] != '?');
        /* One byte short of the frame is "need more", never a different answer. */
        {
            const uint8_t *b2 = NULL;
            uint32_t l2 = 0;
            uint8_t op2 = 0;

            CHECK(rdzv_frame_peek(p, (size_t)r - 1, RDZV_MAX_MSG, &op2, &b2, &l2, &why) == 0);
        }
        /* The frame re-encodes to the same bytes. */
        {
            struct rdzv_buf out = {0};

            CHECK(rdzv_frame_put(&out, op, body, blen) == 0);
            CHECK(rdzv_buf_avail(&out) == (size_t)r);
            CHECK(memcmp(rdzv_buf_head(&out), p, (size_t)r) == 0);
            rdzv_buf_free(&out);
        }
        check_body(op, body, blen);
        pos += (size_t)r;
    }
    return 0;
}
