/* SPDX-License-Identifier: Apache-2.0 */
/* agent-front-wire.c: the store front's view of TCPStore replies and its buffered writes
 * (agent-front-wire.h). */
#include "agent/front/agent-front-wire.h"

#include <errno.h>
#include <string.h>

#include "common/rdzv-util.h"

#define READ_CHUNK 65536

bool agent_front_changes_keys(enum rdzv_op op)
{
    switch (op) {
    case RDZV_OP_SET:
    case RDZV_OP_COMPARE_SET:
    case RDZV_OP_ADD:
    case RDZV_OP_DELETE_KEY:
    case RDZV_OP_APPEND:
    case RDZV_OP_MULTI_SET:
    case RDZV_OP_QUEUE_PUSH:
    case RDZV_OP_QUEUE_POP:
        return true;
    default:
        return false;
    }
}

/* The end of k strings (u64 length, bytes) from off in p[0..n): >= off, -EAGAIN when
 * incomplete, -EPROTO when one is longer than AGENT_FRONT_REPLY_VALUE_MAX. */
static ssize_t strings_end(const uint8_t *p, size_t n, size_t off, uint64_t k)
{
    for (uint64_t i = 0; i < k; i++) {
        uint64_t len;

        if (n - off < 8)
            return -EAGAIN;
        len = rdzv_get_u64(p + off);
        if (len > AGENT_FRONT_REPLY_VALUE_MAX)
            return -EPROTO;
        if (n - off - 8 < len)
            return -EAGAIN;
        off += 8 + (size_t)len;
    }
    return (ssize_t)off;
}

static ssize_t fixed(size_t size, size_t n)
{
    return n >= size ? (ssize_t)size : -EAGAIN;
}

ssize_t agent_front_reply_size(enum rdzv_op op, uint64_t count, const uint8_t *p, size_t n)
{
    switch (op) {
    case RDZV_OP_CHECK:
        return fixed(1, n);
    case RDZV_OP_PING:
        return fixed(4, n);
    case RDZV_OP_ADD:
    case RDZV_OP_GETNUMKEYS:
    case RDZV_OP_DELETE_KEY:
    case RDZV_OP_QUEUE_LEN:
        return fixed(8, n);
    case RDZV_OP_GET:
    case RDZV_OP_COMPARE_SET:
        return strings_end(p, n, 0, 1);
    case RDZV_OP_MULTI_GET:
        return strings_end(p, n, 0, count);
    case RDZV_OP_QUEUE_POP:
        if (n < 8)
            return -EAGAIN;
        return (int64_t)rdzv_get_u64(p) > 0 ? strings_end(p, n, 8, 1) : 8;
    case RDZV_OP_LIST:
        if (n < 8)
            return -EAGAIN;
        if (rdzv_get_u64(p) > AGENT_FRONT_REPLY_VALUE_MAX / 8)
            return -EPROTO;
        return strings_end(p, n, 8, rdzv_get_u64(p));
    default:
        return -EPROTO;
    }
}

void agent_front_alloc_in(struct rdzv_buf *b, uv_buf_t *buf)
{
    if (rdzv_buf_avail(b) == 0)
        b->len = b->off = 0;
    else
        rdzv_buf_compact(b);
    if (rdzv_buf_reserve(b, READ_CHUNK) < 0) {
        *buf = uv_buf_init(NULL, 0);
        return;
    }
    *buf = uv_buf_init((char *)b->data + b->len, (unsigned)(b->cap - b->len));
}

static void written(uv_write_t *req, int status)
{
    struct agent_front_out *o = req->data;

    o->writing = false;
    rdzv_buf_free(&o->cur);
    o->done(o, status);
}

int agent_front_out_kick(struct agent_front_out *o, uv_stream_t *s)
{
    uv_buf_t b;
    int r;

    if (o->writing || !rdzv_buf_avail(&o->next))
        return 0;
    o->cur = o->next;
    memset(&o->next, 0, sizeof(o->next));
    b = uv_buf_init((char *)rdzv_buf_head(&o->cur), (unsigned)rdzv_buf_avail(&o->cur));
    o->req.data = o;
    r = uv_write(&o->req, s, &b, 1, written);
    if (r < 0) {
        rdzv_buf_free(&o->cur);
        return r;
    }
    o->writing = true;
    return 0;
}

void agent_front_out_free(struct agent_front_out *o)
{
    rdzv_buf_free(&o->next);
    rdzv_buf_free(&o->cur);
}
