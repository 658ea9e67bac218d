/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-tcpstore-apply.c: one decoded TCPStore request applied to a store (see the header). */
#include "daemon/net/rdzvd-tcpstore-apply.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static int list_key_cb(const uint8_t *key, size_t klen, void *ud)
{
    return rdzv_buf_put_str(ud, key, klen);
}

static int list_size_cb(const uint8_t *key, size_t klen, void *ud)
{
    uint64_t *size = ud;

    (void)key;
    *size += 8 + (uint64_t)klen;
    return 0;
}

/* The most bytes one reply may hold: --max-outbuf, but never less than a reply of one value (a
 * GET of any value the store may hold is answered whatever the cap). */
static uint64_t reply_max(const struct rdzv_limits *lim)
{
    uint64_t one = lim->max_value_len + 16;

    return lim->max_outbuf > one ? lim->max_outbuf : one;
}

/* The size of MULTI_GET's reply to the keys at cur: a u64 length and the value (empty when
 * missing) for each. Nothing is copied. */
static uint64_t multi_get_size(struct rdzvd_store *st, const struct rdzv_req *req,
                               struct rdzv_cursor cur)
{
    uint64_t size = 0;

    for (uint64_t i = 0; i < req->count; i++) {
        struct rdzv_slice k;
        const uint8_t *val;
        size_t vlen;

        rdzv_req_next(&cur, &k);
        if (rdzvd_store_get(st, k.p, k.len, &val, &vlen) < 0)
            vlen = 0;
        size += 8 + (uint64_t)vlen;
    }
    return size;
}

/* A peer mistake: the reason in res, r returned. */
__attribute__((format(printf, 3, 4))) static int peer_fault(struct rdzvd_tcpstore_res *res, int r,
                                                            const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(res->error, sizeof(res->error), fmt, ap);
    va_end(ap);
    return r;
}

/* A WAIT of the n keys at cur (a TAG_WAIT's with its tag): 0 and res->waiting when one is
 * missing, 1 when none is (answer now), or a negative errno (res->error set: a peer mistake). */
static int apply_wait(struct rdzvd_store *st, struct rdzvd_waiter *w,
                      const struct rdzv_limits *lim, struct rdzv_cursor *cur, uint64_t n,
                      uint64_t tag, struct rdzvd_tcpstore_res *res)
{
    struct rdzv_slice k;
    int r = rdzvd_store_wait_begin(st, w);

    if (r == 0)
        rdzvd_store_wait_tag(st, tag);
    for (uint64_t i = 0; r == 0 && i < n; i++) {
        rdzv_req_next(cur, &k);
        r = rdzvd_store_wait_key(st, w, k.p, k.len);
    }
    if (r == -EMSGSIZE)
        return peer_fault(res, r, "more than %" PRIu64 " keys waited on at once",
                          lim->max_wait_keys);
    if (r == 0)
        r = rdzvd_store_wait_end(st, w);
    res->waiting = r == 0;
    return r;
}

/* At most 64 bytes of a key, for an error text. */
#define KEY_SHOWN(k) (int)((k).len > 64 ? 64 : (k).len), (const char *)(k).p

int rdzvd_tcpstore_apply(struct rdzvd_store *st, struct rdzvd_waiter *w,
                         const struct rdzv_limits *lim, const struct rdzv_req *req,
                         struct rdzv_buf *out, struct rdzvd_tcpstore_res *res)
{
    struct rdzv_slice k, v, v2;
    struct rdzv_cursor cur;
    const uint8_t *val;
    size_t vlen;
    uint64_t size;
    int64_t n64;
    int r = 0;

    res->waiting = false;
    res->error[0] = '\0';
    rdzv_req_cursor(req, &cur);
    switch (req->op) {
    case RDZV_OP_VALIDATE:
        return peer_fault(res, -EPROTO, "VALIDATE after the start of the connection");
    case RDZV_OP_PING:
        r = rdzv_buf_put_u32(out, req->u32);
        break;
    case RDZV_OP_SET:
        rdzv_req_next(&cur, &k);
        rdzv_req_next(&cur, &v);
        r = rdzvd_store_set(st, k.p, k.len, v.p, v.len);
        break;
    case RDZV_OP_COMPARE_SET:
        rdzv_req_next(&cur, &k);
        rdzv_req_next(&cur, &v);
        rdzv_req_next(&cur, &v2);
        r = rdzvd_store_compare_set(st, k.p, k.len, v.p, v.len, v2.p, v2.len, &val, &vlen);
        if (r == 0)
            r = rdzv_buf_put_str(out, val, vlen);
        break;
    case RDZV_OP_GET:
        rdzv_req_next(&cur, &k);
        /* A missing key reads as empty, like PyTorch's libuv server (clients WAIT first). */
        if (rdzvd_store_get(st, k.p, k.len, &val, &vlen) < 0)
            vlen = 0;
        r = rdzv_buf_put_str(out, val, vlen);
        break;
    case RDZV_OP_ADD:
        rdzv_req_next(&cur, &k);
        r = rdzvd_store_add(st, k.p, k.len, req->delta, &n64);
        if (r == -EINVAL)
            return peer_fault(res, r, "ADD on key '%.*s' whose value is not a decimal integer",
                              KEY_SHOWN(k));
        if (r == -ERANGE)
            return peer_fault(res, r, "ADD on key '%.*s' overflows a 64-bit integer", KEY_SHOWN(k));
        if (r == 0)
            r = rdzv_buf_put_u64(out, (uint64_t)n64);
        break;
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
        r = apply_wait(st, w, lim, &cur, req->count, 0, res);
        if (r < 0 && res->error[0])
            return r;
        if (r == 1)
            r = rdzv_buf_put_u8(out, RDZV_WAIT_STOP_WAITING);
        break;
    case RDZV_OP_TAG_WAIT:
        /* A store front's: its first string the tag (8 bytes), the keys after it; the answer
         * (RDZV_FRAME_WOKEN and the tag) comes once they are all set, now or later. */
        if (req->count == 0)
            return peer_fault(res, -EPROTO, "TAG_WAIT without its tag");
        rdzv_req_next(&cur, &k);
        if (k.len != 8)
            return peer_fault(res, -EPROTO, "TAG_WAIT's tag of %zu bytes, not 8", k.len);
        r = apply_wait(st, w, lim, &cur, req->count - 1, rdzv_get_u64(k.p), res);
        if (r < 0 && res->error[0])
            return r;
        if (r == 1)
            r = rdzv_buf_put_u8(out, RDZV_FRAME_WOKEN);
        if (r == 0 && !res->waiting)
            r = rdzv_buf_put(out, k.p, 8);
        break;
    case RDZV_OP_TAG_CANCEL:
        rdzv_req_next(&cur, &k);
        if (k.len != 8)
            return peer_fault(res, -EPROTO, "TAG_CANCEL's tag of %zu bytes, not 8", k.len);
        (void)rdzvd_store_cancel_tag(st, w, rdzv_get_u64(k.p));
        break;
    case RDZV_OP_GETNUMKEYS:
        r = rdzv_buf_put_u64(out, rdzvd_store_num_keys(st));
        break;
    case RDZV_OP_DELETE_KEY:
        rdzv_req_next(&cur, &k);
        r = rdzv_buf_put_u64(out, (uint64_t)rdzvd_store_delete(st, k.p, k.len));
        break;
    case RDZV_OP_APPEND:
        rdzv_req_next(&cur, &k);
        rdzv_req_next(&cur, &v);
        r = rdzvd_store_append(st, k.p, k.len, v.p, v.len);
        break;
    case RDZV_OP_MULTI_GET:
        size = multi_get_size(st, req, cur);
        if (size > reply_max(lim))
            return peer_fault(res, -ENOBUFS,
                              "MULTI_GET of %" PRIu64 " keys would reply %" PRIu64
                              " bytes, more than the output cap of %" PRIu64
                              " (--max-outbuf; ask for fewer keys at a time)",
                              req->count, size, reply_max(lim));
        for (uint64_t i = 0; r == 0 && i < req->count; i++) {
            rdzv_req_next(&cur, &k);
            if (rdzvd_store_get(st, k.p, k.len, &val, &vlen) < 0)
                vlen = 0;
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
        rdzvd_store_cancel_waits(st, w);
        r = rdzv_buf_put_u8(out, RDZV_WAIT_CANCELED);
        break;
    case RDZV_OP_QUEUE_PUSH:
        rdzv_req_next(&cur, &k);
        rdzv_req_next(&cur, &v);
        r = rdzvd_store_queue_push(st, k.p, k.len, v.p, v.len);
        break;
    case RDZV_OP_QUEUE_POP: {
        uint64_t before;
        uint8_t *item = NULL;
        size_t ilen = 0;

        rdzv_req_next(&cur, &k);
        r = rdzvd_store_queue_pop(st, k.p, k.len, &before, &item, &ilen);
        if (r == 0)
            r = rdzv_buf_put_u64(out, before);
        if (r == 0 && before > 0)
            r = rdzv_buf_put_str(out, item, ilen);
        free(item);
        break;
    }
    case RDZV_OP_QUEUE_LEN:
        rdzv_req_next(&cur, &k);
        r = rdzv_buf_put_u64(out, rdzvd_store_queue_len(st, k.p, k.len));
        break;
    case RDZV_OP_LIST:
        size = 8;
        (void)rdzvd_store_foreach(st, list_size_cb, &size);
        if (size > reply_max(lim))
            return peer_fault(res, -ENOBUFS,
                              "LIST of %" PRIu64 " keys would reply %" PRIu64
                              " bytes, more than the output cap of %" PRIu64 " (--max-outbuf)",
                              rdzvd_store_num_keys(st), size, reply_max(lim));
        r = rdzv_buf_put_u64(out, rdzvd_store_num_keys(st));
        if (r == 0)
            r = rdzvd_store_foreach(st, list_key_cb, out);
        break;
    case RDZV_OP_WATCH_KEY:
        rdzv_req_next(&cur, &k);
        r = rdzvd_store_watch(st, w, k.p, k.len);
        if (r == -EMSGSIZE)
            return peer_fault(res, r, "more than %" PRIu64 " keys waited on or watched at once",
                              lim->max_wait_keys);
        if (r == 0)
            r = rdzv_buf_put_u8(out, RDZV_WATCH_CALLBACK_REGISTERED);
        break;
    default:
        return peer_fault(res, -EPROTO, "unexpected operation %d", (int)req->op);
    }

    if (r == -EMSGSIZE)
        return peer_fault(res, r, "%s would make a value larger than %" PRIu64 " bytes",
                          rdzv_op_name(req->op), lim->max_value_len);
    if (r == -EDQUOT)
        return peer_fault(res, r,
                          "%s refused: no room on disk for the store's journal (its bound, the "
                          "store's share of --max-store-bytes plus as much again, or the "
                          "--state-dir free space that rdzvd keeps for its job table); delete "
                          "keys to make room",
                          rdzv_op_name(req->op));
    if (r == -ENOSPC) {
        struct rdzvd_store_room rm = rdzvd_store_room(st);

        if (rm.share < rm.max)
            return peer_fault(res, r,
                              "%s refused: the store is full (%" PRIu64 " bytes held of its "
                              "share %" PRIu64 ", %" PRIu64 " in all stores, limit %" PRIu64
                              "; see --max-store-bytes: the main store holds at most half of it)",
                              rdzv_op_name(req->op), rm.held, rm.share, rm.used, rm.max);
        return peer_fault(res, r,
                          "%s refused: the store is full (%" PRIu64 " bytes held, %" PRIu64
                          " in all stores, limit %" PRIu64 "; see --max-store-bytes)",
                          rdzv_op_name(req->op), rm.held, rm.used, rm.max);
    }
    return r < 0 ? r : 0;
}
