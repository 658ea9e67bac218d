/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz-tcpstore.c: decode TCPStore requests from arbitrary bytes and apply them to a real store
 * with rdzvd's own rdzvd_tcpstore_apply (the function its connections run), with several
 * connections sharing one store, and check the store and the replies after each.
 *
 * Input: byte 0 picks the dialect (% 4: 2.0, 2.1, modern, a store front's). Then, repeatedly,
 * one byte picks the connection (% 3) that sends the next request, followed by that request's
 * bytes. Decoding stops at the first request that is incomplete or refused. */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/rdzv-buf.h"
#include "common/rdzv-util.h"
#include "daemon/data/rdzvd-store.h"
#include "daemon/net/rdzvd-tcpstore-apply.h"
#include "proto/rdzv-tcpstore.h"
#include "fuzz-check.h"

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

static unsigned wakes_total; /* over all connections, for per-request deltas */

struct fuzz_conn {
    struct rdzvd_waiter waiter;
    unsigned wakes;
    unsigned pending; /* WAITs that returned 0 and were neither woken nor cancelled */
    unsigned watched; /* watch notifications received */
    struct rdzv_buf out;   /* replies of its requests, checked after each */
    struct rdzv_buf notes; /* what the store's callbacks queued: wake-ups, watch notifications */
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
    CHECK(rdzv_buf_put_u8(&c->notes, RDZV_WAIT_STOP_WAITING) == 0);
    if (c->notes.len > 4096)
        rdzv_buf_free(&c->notes);
}

static int count_key(const uint8_t *key, size_t klen, void *ud)
{
    uint64_t *n = ud;

    CHECK(klen <= fuzz_lim.max_key_len);
    (void)key;
    (*n)++;
    return 0;
}

/* PyTorch <= 2.0's watch notification, queued as rdzvd_tcpstore_watch queues it. */
static void fuzz_watch(struct rdzvd_waiter *w, void *ud, uint8_t type, const uint8_t *key,
                       size_t klen, const uint8_t *old, size_t oldlen, const uint8_t *nv,
                       size_t nvlen)
{
    struct fuzz_conn *c = ud;

    CHECK(&c->waiter == w);
    CHECK(klen <= fuzz_lim.max_key_len);
    CHECK(oldlen <= fuzz_lim.max_value_len && nvlen <= fuzz_lim.max_value_len);
    c->watched++;
    CHECK(rdzv_buf_put_u8(&c->notes, type) == 0);
    CHECK(rdzv_buf_put_str(&c->notes, key, klen) == 0);
    CHECK(rdzv_buf_put_str(&c->notes, old, oldlen) == 0);
    CHECK(rdzv_buf_put_str(&c->notes, nv, nvlen) == 0);
    if (c->notes.len > 4096)
        rdzv_buf_free(&c->notes);
}

/* The connection is closed by the daemon: its waits go away. */
static void conn_drop(struct rdzvd_store *st, struct fuzz_conn *c)
{
    unsigned n = rdzvd_store_cancel_waits(st, &c->waiter);

    CHECK(n == c->pending);
    c->pending = 0;
    rdzvd_store_drop_watches(st, &c->waiter);
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

/* The u64 a reply put at out->data + at. */
static uint64_t reply_u64(const struct rdzv_buf *out, size_t at)
{
    CHECK(out->len >= at + 8);
    return rdzv_get_u64(out->data + at);
}

/* Serve one request from connection c with the real rdzvd_tcpstore_apply (what rdzvd's
 * connections run), then check what it did to the store and what it replied. Returns false when
 * the daemon would close the connection. */
static bool dispatch(struct rdzvd_store *st, struct fuzz_conn *c, const struct rdzv_req *req)
{
    struct rdzvd_tcpstore_res res;
    struct rdzv_slice k = {NULL, 0}, v = {NULL, 0};
    struct rdzv_cursor cur;
    struct rdzv_buf *out = &c->out;
    const uint8_t *val;
    size_t vlen, at = out->len;
    int r;

    rdzv_req_cursor(req, &cur);
    if (req->nstrings >= 1)
        rdzv_req_next(&cur, &k);
    if (req->nstrings >= 2)
        rdzv_req_next(&cur, &v);
    r = rdzvd_tcpstore_apply(st, &c->waiter, &fuzz_lim, req, out, &res);
    CHECK(r == 0 || r == -EPROTO || r == -EINVAL || r == -ERANGE || r == -EMSGSIZE ||
          r == -ENOSPC || r == -ENOMEM);
    /* A refusal says why, unless rdzvd itself failed; success says nothing. */
    CHECK(r == 0 ? res.error[0] == '\0' : (r == -ENOMEM || res.error[0] != '\0'));
    CHECK(!res.waiting ||
          (r == 0 && (req->op == RDZV_OP_WAIT || req->op == RDZV_OP_TAG_WAIT)));
    CHECK(c->waiter.nregs <= fuzz_lim.max_wait_keys);
    if (r < 0) {
        CHECK(req->op != RDZV_OP_PING && req->op != RDZV_OP_GET);
        return false;
    }
    switch (req->op) {
    case RDZV_OP_VALIDATE:
        CHECK(!"VALIDATE accepted after the start of the connection");
        break;
    case RDZV_OP_SET:
        CHECK(k.len <= fuzz_lim.max_key_len);
        CHECK(rdzvd_store_get(st, k.p, k.len, &val, &vlen) == 0);
        CHECK(vlen == v.len && memcmp(val, v.p, vlen) == 0);
        CHECK(out->len == at);
        break;
    case RDZV_OP_ADD: {
        char text[24];

        snprintf(text, sizeof(text), "%" PRId64, (int64_t)reply_u64(out, at));
        CHECK(rdzvd_store_get(st, k.p, k.len, &val, &vlen) == 0);
        CHECK(vlen == strlen(text) && memcmp(val, text, vlen) == 0);
        break;
    }
    case RDZV_OP_WAIT:
        if (res.waiting)
            c->pending++;
        else
            CHECK(out->len == at + 1 && out->data[at] == RDZV_WAIT_STOP_WAITING);
        break;
    case RDZV_OP_TAG_WAIT:
        if (res.waiting)
            c->pending++;
        else /* answered at once: the woken frame and its tag, the wait's first string */
            CHECK(out->len == at + 9 && out->data[at] == RDZV_FRAME_WOKEN &&
                  k.len == 8 && memcmp(out->data + at + 1, k.p, 8) == 0);
        break;
    case RDZV_OP_TAG_CANCEL: {
        unsigned left = 0;

        for (struct rdzv_list *pos = c->waiter.waits.next; pos != &c->waiter.waits;
             pos = pos->next)
            left++;
        CHECK(left <= c->pending && out->len == at);
        c->pending = left;
        break;
    }
    case RDZV_OP_GETNUMKEYS: {
        uint64_t n = 0;

        CHECK(rdzvd_store_foreach(st, count_key, &n) == 0);
        CHECK(n == rdzvd_store_num_keys(st) && reply_u64(out, at) == n);
        break;
    }
    case RDZV_OP_DELETE_KEY:
        CHECK(reply_u64(out, at) <= 1);
        CHECK(rdzvd_store_get(st, k.p, k.len, &val, &vlen) == -ENOENT);
        break;
    case RDZV_OP_APPEND:
        CHECK(rdzvd_store_get(st, k.p, k.len, &val, &vlen) == 0);
        CHECK(vlen >= v.len && vlen <= fuzz_lim.max_value_len);
        CHECK(memcmp(val + vlen - v.len, v.p, v.len) == 0);
        break;
    case RDZV_OP_CANCEL_WAIT:
        c->pending = 0;
        CHECK(rdzv_list_empty(&c->waiter.waits));
        CHECK(out->len == at + 1 && out->data[at] == RDZV_WAIT_CANCELED);
        break;
    case RDZV_OP_QUEUE_PUSH:
        CHECK(rdzvd_store_queue_len(st, k.p, k.len) > 0);
        break;
    case RDZV_OP_QUEUE_POP: {
        uint64_t before = reply_u64(out, at);

        CHECK(before <= fuzz_lim.max_queue_items);
        CHECK(rdzvd_store_queue_len(st, k.p, k.len) == (before ? before - 1 : 0));
        CHECK(out->len == at + 8 + (before ? 8 + reply_u64(out, at + 8) : 0));
        break;
    }
    case RDZV_OP_QUEUE_LEN:
        CHECK(reply_u64(out, at) <= fuzz_lim.max_queue_items);
        break;
    case RDZV_OP_LIST:
        CHECK(reply_u64(out, at) == rdzvd_store_num_keys(st));
        CHECK(out->len - at >= 8 + 8 * rdzvd_store_num_keys(st));
        break;
    case RDZV_OP_WATCH_KEY:
        CHECK(out->len == at + 1 && out->data[at] == RDZV_WATCH_CALLBACK_REGISTERED);
        break;
    default:
        break;
    }
    /* Replies are not read by anyone: keep the buffers small. */
    if (out->len > 4096)
        rdzv_buf_free(out);
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct fuzz_conn conns[NCONNS];
    struct rdzvd_store *st = NULL;
    enum rdzv_dialect d;
    size_t pos = 1;

    if (size < 1)
        return 0;
    d = (enum rdzv_dialect)(data[0] % 4);
    if (rdzvd_store_new(&fuzz_lim, fuzz_wake, &st) < 0)
        return 0;
    rdzvd_store_set_watch_cb(st, fuzz_watch);
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
        rdzv_buf_free(&conns[i].notes);
    }
    return 0;
}
