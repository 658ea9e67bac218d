/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz-tcpstore.c: decode TCPStore requests from arbitrary bytes and apply them to a real store,
 * the way rdzvd-conn.c's conn_dispatch does, with several connections sharing one store.
 *
 * Input: byte 0 picks the dialect (% 3: 2.0, 2.1, modern). Then, repeatedly, one byte picks the
 * connection (% 3) that sends the next request, followed by that request's bytes. Decoding stops
 * at the first request that is incomplete or refused. */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/rdzv-buf.h"
#include "../../daemon/rdzvd-store.h"
#include "../../proto/rdzv-tcpstore.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define NCONNS 3

/* Small limits so that every refusal path is reachable within a few KiB of input. */
static const struct rdzv_limits fuzz_lim = {
    .max_key_len = 64,
    .max_value_len = 256,
    .max_keys_per_req = 16,
    .max_frame = 4096,
    .max_outbuf = 1u << 16,
    .max_conns = NCONNS,
    .max_store_bytes = 2048,
    .max_wait_keys = 24,
    .max_queue_items = 8,
};

/* Never compiled out; a fuzzer finding is an abort with the line. */
#define CHECK(expr)                                                                                \
    do {                                                                                           \
        if (!(expr)) {                                                                             \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #expr);               \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static unsigned wakes_total; /* over all connections, for per-request deltas */

struct fuzz_conn {
    struct rdzvd_waiter waiter;
    unsigned wakes;
    unsigned pending; /* WAITs that returned 0 and were neither woken nor cancelled */
    struct rdzv_buf out;
};

static void fuzz_wake(struct rdzvd_waiter *w, void *ud)
{
    struct fuzz_conn *c = ud;

    CHECK(&c->waiter == w);
    CHECK(c->pending > 0);
    c->pending--;
    c->wakes++;
    wakes_total++;
    /* The same reply byte rdzvd_tcpstore_wake queues. */
    CHECK(rdzv_buf_put_u8(&c->out, RDZV_WAIT_STOP_WAITING) == 0);
}

static int count_key(const uint8_t *key, size_t klen, void *ud)
{
    uint64_t *n = ud;

    CHECK(klen <= fuzz_lim.max_key_len);
    (void)key;
    (*n)++;
    return 0;
}

static int list_key(const uint8_t *key, size_t klen, void *ud)
{
    return rdzv_buf_put_str(ud, key, klen);
}

/* The connection is closed by the daemon: its waits go away. */
static void conn_drop(struct rdzvd_store *st, struct fuzz_conn *c)
{
    unsigned n = rdzvd_store_cancel_waits(st, &c->waiter);

    CHECK(n == c->pending);
    c->pending = 0;
    CHECK(c->waiter.nregs == 0);
    CHECK(rdzv_list_empty(&c->waiter.waits));
}

/* The strings of an accepted request lie inside its frame, in order, and obey the limits. */
static void check_strings(const struct rdzv_req *req, const uint8_t *frame)
{
    struct rdzv_cursor cur;
    const uint8_t *end = frame + req->frame_len, *prev = frame;

    rdzv_req_cursor(req, &cur);
    for (uint64_t i = 0; i < req->nstrings; i++) {
        struct rdzv_slice s;

        CHECK(cur.p >= prev && cur.p + 8 <= end);
        rdzv_req_next(&cur, &s);
        CHECK(s.p >= frame + 1 && s.len <= (size_t)(end - s.p));
        CHECK(s.len <= fuzz_lim.max_value_len);
        prev = s.p + s.len;
    }
    CHECK(cur.p <= end);
}

/* Serve one request from connection c like conn_dispatch. Returns false when the daemon would
 * close the connection. */
static bool dispatch(struct rdzvd_store *st, struct fuzz_conn *c, const struct rdzv_req *req)
{
    struct rdzv_slice k, v, v2;
    struct rdzv_cursor cur;
    struct rdzv_buf *out = &c->out;
    const uint8_t *val;
    size_t vlen;
    int64_t n64;
    int r = 0;

    rdzv_req_cursor(req, &cur);
    switch (req->op) {
    case RDZV_OP_VALIDATE:
    case RDZV_OP_WATCH_KEY:
        return false;
    case RDZV_OP_PING:
        r = rdzv_buf_put_u32(out, req->u32);
        break;
    case RDZV_OP_SET:
        rdzv_req_next(&cur, &k);
        rdzv_req_next(&cur, &v);
        CHECK(k.len <= fuzz_lim.max_key_len);
        r = rdzvd_store_set(st, k.p, k.len, v.p, v.len);
        if (r == 0) {
            CHECK(rdzvd_store_get(st, k.p, k.len, &val, &vlen) == 0);
            CHECK(vlen == v.len && memcmp(val, v.p, vlen) == 0);
        }
        break;
    case RDZV_OP_COMPARE_SET:
        rdzv_req_next(&cur, &k);
        rdzv_req_next(&cur, &v);
        rdzv_req_next(&cur, &v2);
        r = rdzvd_store_compare_set(st, k.p, k.len, v.p, v.len, v2.p, v2.len, &val, &vlen);
        if (r == 0)
            r = rdzv_buf_put_str(out, val, vlen); /* ASan checks the reply bytes are live */
        break;
    case RDZV_OP_GET:
        rdzv_req_next(&cur, &k);
        if (rdzvd_store_get(st, k.p, k.len, &val, &vlen) < 0) {
            val = NULL;
            vlen = 0;
        }
        r = rdzv_buf_put_str(out, val, vlen);
        break;
    case RDZV_OP_ADD: {
        char text[24];

        rdzv_req_next(&cur, &k);
        r = rdzvd_store_add(st, k.p, k.len, req->delta, &n64);
        if (r == -EINVAL || r == -ERANGE)
            return false;
        if (r == 0) {
            snprintf(text, sizeof(text), "%" PRId64, n64);
            CHECK(rdzvd_store_get(st, k.p, k.len, &val, &vlen) == 0);
            CHECK(vlen == strlen(text) && memcmp(val, text, vlen) == 0);
            r = rdzv_buf_put_u64(out, (uint64_t)n64);
        }
        break;
    }
    case RDZV_OP_CHECK: {
        bool ready = true;

        for (uint64_t i = 0; i < req->count; i++) {
            rdzv_req_next(&cur, &k);
            if (ready && !rdzvd_store_exists(st, k.p, k.len))
                ready = false;
        }
        r = rdzv_buf_put_u8(out, ready ? RDZV_CHECK_READY : RDZV_CHECK_NOT_READY);
        break;
    }
    case RDZV_OP_WAIT:
        r = rdzvd_store_wait_begin(st, &c->waiter);
        for (uint64_t i = 0; r == 0 && i < req->count; i++) {
            rdzv_req_next(&cur, &k);
            r = rdzvd_store_wait_key(st, &c->waiter, k.p, k.len);
        }
        if (r < 0) {
            CHECK(r == -EMSGSIZE || r == -ENOSPC || r == -ENOMEM);
            return false;
        }
        r = rdzvd_store_wait_end(st, &c->waiter);
        CHECK(r == 0 || r == 1);
        if (r == 1)
            r = rdzv_buf_put_u8(out, RDZV_WAIT_STOP_WAITING);
        else
            c->pending++;
        CHECK(c->waiter.nregs <= fuzz_lim.max_wait_keys);
        break;
    case RDZV_OP_GETNUMKEYS: {
        uint64_t n = 0;

        CHECK(rdzvd_store_foreach(st, count_key, &n) == 0);
        CHECK(n == rdzvd_store_num_keys(st));
        r = rdzv_buf_put_u64(out, n);
        break;
    }
    case RDZV_OP_DELETE_KEY:
        rdzv_req_next(&cur, &k);
        r = rdzvd_store_delete(st, k.p, k.len);
        CHECK(r == 0 || r == 1);
        CHECK(rdzvd_store_get(st, k.p, k.len, &val, &vlen) == -ENOENT);
        r = rdzv_buf_put_u64(out, (uint64_t)r);
        break;
    case RDZV_OP_APPEND:
        rdzv_req_next(&cur, &k);
        rdzv_req_next(&cur, &v);
        r = rdzvd_store_append(st, k.p, k.len, v.p, v.len);
        if (r == 0) {
            CHECK(rdzvd_store_get(st, k.p, k.len, &val, &vlen) == 0);
            CHECK(vlen >= v.len && vlen <= fuzz_lim.max_value_len);
            CHECK(memcmp(val + vlen - v.len, v.p, v.len) == 0);
        }
        break;
    case RDZV_OP_MULTI_GET:
        for (uint64_t i = 0; r == 0 && i < req->count; i++) {
            rdzv_req_next(&cur, &k);
            if (rdzvd_store_get(st, k.p, k.len, &val, &vlen) < 0) {
                val = NULL;
                vlen = 0;
            }
            r = rdzv_buf_put_str(out, val, vlen);
        }
        break;
    case RDZV_OP_MULTI_SET:
        for (uint64_t i = 0; r == 0 && i < req->count; i++) {
            rdzv_req_next(&cur, &k);
            rdzv_req_next(&cur, &v);
            r = rdzvd_store_set(st, k.p, k.len, v.p, v.len);
        }
        break;
    case RDZV_OP_CANCEL_WAIT:
        CHECK(rdzvd_store_cancel_waits(st, &c->waiter) == c->pending);
        c->pending = 0;
        CHECK(c->waiter.nregs == 0);
        r = rdzv_buf_put_u8(out, RDZV_WAIT_CANCELED);
        break;
    case RDZV_OP_QUEUE_PUSH:
        rdzv_req_next(&cur, &k);
        rdzv_req_next(&cur, &v);
        r = rdzvd_store_queue_push(st, k.p, k.len, v.p, v.len);
        if (r == 0)
            CHECK(rdzvd_store_queue_len(st, k.p, k.len) > 0);
        break;
    case RDZV_OP_QUEUE_POP: {
        uint64_t before = UINT64_MAX;
        uint8_t *item = NULL;
        size_t ilen = 0;

        rdzv_req_next(&cur, &k);
        r = rdzvd_store_queue_pop(st, k.p, k.len, &before, &item, &ilen);
        if (r == 0) {
            CHECK(before <= fuzz_lim.max_queue_items);
            CHECK(rdzvd_store_queue_len(st, k.p, k.len) == (before ? before - 1 : 0));
            CHECK((before > 0) == (item != NULL));
            r = rdzv_buf_put_u64(out, before);
        }
        if (r == 0 && before > 0)
            r = rdzv_buf_put_str(out, item, ilen);
        free(item);
        break;
    }
    case RDZV_OP_QUEUE_LEN:
        rdzv_req_next(&cur, &k);
        CHECK(rdzvd_store_queue_len(st, k.p, k.len) <= fuzz_lim.max_queue_items);
        r = rdzv_buf_put_u64(out, rdzvd_store_queue_len(st, k.p, k.len));
        break;
    case RDZV_OP_LIST: {
        size_t before = out->len;

        r = rdzv_buf_put_u64(out, rdzvd_store_num_keys(st));
        if (r == 0)
            r = rdzvd_store_foreach(st, list_key, out);
        if (r == 0)
            CHECK(out->len - before >= 8 + 8 * rdzvd_store_num_keys(st));
        break;
    }
    default:
        CHECK(!"decoder returned an operation outside the table");
    }

    CHECK(r == 0 || r == -EMSGSIZE || r == -ENOSPC || r == -ENOMEM);
    /* Replies are not read by anyone: keep the buffers small. */
    if (out->len > 4096)
        rdzv_buf_free(out);
    return r == 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct fuzz_conn conns[NCONNS];
    struct rdzvd_store *st = NULL;
    enum rdzv_dialect d;
    size_t pos = 1;

    if (size < 1)
        return 0;
    d = (enum rdzv_dialect)(data[0] % 3);
    if (rdzvd_store_new(&fuzz_lim, fuzz_wake, &st) < 0)
        return 0;
    memset(conns, 0, sizeof(conns));
    for (unsigned i = 0; i < NCONNS; i++)
        rdzvd_waiter_init(&conns[i].waiter, &conns[i]);

    while (pos + 1 < size) {
        struct fuzz_conn *c = &conns[data[pos] % NCONNS];
        struct rdzv_decode_err err = {0};
        struct rdzv_req req;
        size_t n = size - pos - 1;
        unsigned wakes_before;
        const uint8_t *p = data + pos + 1;
        ssize_t r;

        r = rdzv_req_decode(p, n, d, &fuzz_lim, &req, &err);
        if (r == 0) {
            /* Need more: the hint points past what we have. */
            CHECK(req.frame_len > n);
            break;
        }
        if (r < 0) {
            CHECK(r == -EPROTO || r == -EMSGSIZE);
            CHECK(err.what != NULL);
            if (r == -EMSGSIZE)
                CHECK(err.value > err.limit);
            conn_drop(st, c);
            break;
        }
        CHECK((size_t)r <= n && req.frame_len == (size_t)r);
        /* ADD's trailing i64 is not held to max_frame (reported; test-tcpstore covers it). */
        CHECK(req.frame_len <= fuzz_lim.max_frame + (req.op == RDZV_OP_ADD ? 8 : 0));
        CHECK(req.count <= fuzz_lim.max_keys_per_req);
        CHECK(rdzv_op_to_wire(d, req.op) == p[0]);
        check_strings(&req, p);
        wakes_before = wakes_total;
        if (!dispatch(st, c, &req))
            conn_drop(st, c); /* a new connection takes its place */
        /* Only writes wake waiters, and a queue push wakes at most one. */
        if (req.op == RDZV_OP_QUEUE_PUSH)
            CHECK(wakes_total - wakes_before <= 1);
        else if (req.op != RDZV_OP_SET && req.op != RDZV_OP_COMPARE_SET && req.op != RDZV_OP_ADD &&
                 req.op != RDZV_OP_APPEND && req.op != RDZV_OP_MULTI_SET)
            CHECK(wakes_total == wakes_before);
        CHECK(rdzvd_store_bytes(st) <= fuzz_lim.max_store_bytes);
        pos += 1 + (size_t)r;
    }

    /* One connection closes, the store goes away under the others. */
    conn_drop(st, &conns[0]);
    st = rdzvd_store_free(st);
    for (unsigned i = 0; i < NCONNS; i++) {
        CHECK(conns[i].waiter.nregs == 0);
        CHECK(rdzv_list_empty(&conns[i].waiter.waits));
        rdzv_buf_free(&conns[i].out);
    }
    return 0;
}
