/* SPDX-License-Identifier: Apache-2.0 */
/* rdzv-tcpstore.c: pure decoder and encoder for PyTorch TCPStore requests. */
#include "proto/rdzv-tcpstore.h"

#include <errno.h>
#include <string.h>

#include "common/rdzv-buf.h"

/* How the strings after the type byte are laid out for each op. */
enum layout {
    L_NONE,      /* nothing */
    L_U32,       /* u32 */
    L_KEY,       /* key */
    L_KEY_VAL,   /* key, value */
    L_KEY_2VAL,  /* key, expected, desired */
    L_KEY_I64,   /* key, i64 */
    L_N_KEYS,    /* u64 n, n x key */
    L_N_KEYVALS, /* u64 n, n x (key, value) */
};

static const uint8_t op_layout[_RDZV_OP_MAX] = {
    [RDZV_OP_VALIDATE] = L_U32,        [RDZV_OP_SET] = L_KEY_VAL,
    [RDZV_OP_COMPARE_SET] = L_KEY_2VAL, [RDZV_OP_GET] = L_KEY,
    [RDZV_OP_ADD] = L_KEY_I64,         [RDZV_OP_CHECK] = L_N_KEYS,
    [RDZV_OP_WAIT] = L_N_KEYS,         [RDZV_OP_GETNUMKEYS] = L_NONE,
    [RDZV_OP_DELETE_KEY] = L_KEY,      [RDZV_OP_APPEND] = L_KEY_VAL,
    [RDZV_OP_MULTI_GET] = L_N_KEYS,    [RDZV_OP_MULTI_SET] = L_N_KEYVALS,
    [RDZV_OP_CANCEL_WAIT] = L_NONE,    [RDZV_OP_PING] = L_U32,
    [RDZV_OP_QUEUE_PUSH] = L_KEY_VAL,  [RDZV_OP_QUEUE_POP] = L_KEY,
    [RDZV_OP_QUEUE_LEN] = L_KEY,       [RDZV_OP_LIST] = L_NONE,
    [RDZV_OP_WATCH_KEY] = L_KEY,       [RDZV_OP_TAG_WAIT] = L_N_KEYS,
    [RDZV_OP_TAG_CANCEL] = L_KEY,
};

static ssize_t fail(struct rdzv_decode_err *err, int code, const char *what, uint64_t value,
                    uint64_t limit)
{
    err->what = what;
    err->value = value;
    err->limit = limit;
    return code;
}

/* Need-more: report how many bytes are known to be needed so the caller can skip re-parsing. */
static ssize_t need(struct rdzv_req *req, size_t n)
{
    req->frame_len = n;
    return 0;
}

ssize_t rdzv_req_decode(const uint8_t *p, size_t n, enum rdzv_dialect d,
                        const struct rdzv_limits *lim, struct rdzv_req *req,
                        struct rdzv_decode_err *err)
{
    size_t pos = 1;
    uint64_t nstr, i;
    int op;

    memset(req, 0, sizeof(*req));
    if (n < 1)
        return need(req, 1);
    op = rdzv_op_from_wire(d, p[0]);
    if (op < 0)
        return fail(err, -EPROTO, "unknown operation", p[0], 0);
    req->op = (enum rdzv_op)op;

    switch (op_layout[op]) {
    case L_NONE:
        req->frame_len = 1;
        return 1;
    case L_U32:
        if (n < 5)
            return need(req, 5);
        req->u32 = rdzv_get_u32(p + 1);
        req->frame_len = 5;
        return 5;
    case L_KEY:
    case L_KEY_I64:
        nstr = 1;
        break;
    case L_KEY_VAL:
        nstr = 2;
        break;
    case L_KEY_2VAL:
        nstr = 3;
        break;
    case L_N_KEYS:
    case L_N_KEYVALS:
        if (n < 9)
            return need(req, 9);
        req->count = rdzv_get_u64(p + 1);
        if (req->count > lim->max_keys_per_req)
            return fail(err, -EMSGSIZE, "too many keys in one request", req->count,
                        lim->max_keys_per_req);
        nstr = op_layout[op] == L_N_KEYS ? req->count : 2 * req->count;
        pos = 9;
        break;
    default:
        return fail(err, -EPROTO, "unknown operation", p[0], 0);
    }

    req->nstrings = nstr;
    req->strings = p + pos;
    for (i = 0; i < nstr; i++) {
        bool is_key =
            op_layout[op] == L_N_KEYVALS ? (i % 2 == 0) : (i == 0 || op_layout[op] == L_N_KEYS);
        uint64_t max = is_key ? lim->max_key_len : lim->max_value_len;
        uint64_t len;

        if (n - pos < 8)
            return need(req, pos + 8);
        len = rdzv_get_u64(p + pos);
        if (len > max)
            return fail(err, -EMSGSIZE, is_key ? "key too long" : "value too long", len, max);
        /* ADD's trailing i64 counts too: refuse as soon as the key length is known. */
        if (pos + 8 + len + (op_layout[op] == L_KEY_I64 ? 8 : 0) > lim->max_frame)
            return fail(err, -EMSGSIZE, "request too large", pos + 8 + len, lim->max_frame);
        pos += 8;
        if (n - pos < len) {
            need(req, pos + len);
            req->frame_whole = i + 1 == nstr && op_layout[op] != L_KEY_I64;
            return 0;
        }
        pos += len;
    }
    if (op_layout[op] == L_KEY_I64) {
        if (n - pos < 8) {
            need(req, pos + 8);
            req->frame_whole = true;
            return 0;
        }
        req->delta = (int64_t)rdzv_get_u64(p + pos);
        pos += 8;
    }
    req->frame_len = pos;
    return (ssize_t)pos;
}

void rdzv_req_next(struct rdzv_cursor *c, struct rdzv_slice *out)
{
    out->len = rdzv_get_u64(c->p);
    out->p = c->p + 8;
    c->p += 8 + out->len;
}

int rdzv_enc_op(struct rdzv_buf *b, enum rdzv_dialect d, enum rdzv_op op)
{
    int w = rdzv_op_to_wire(d, op);

    if (w < 0)
        return w;
    return rdzv_buf_put_u8(b, (uint8_t)w);
}

int rdzv_enc_validate(struct rdzv_buf *b)
{
    return rdzv_enc_validate_magic(b, RDZV_VALIDATE_MAGIC);
}

int rdzv_enc_validate_magic(struct rdzv_buf *b, uint32_t magic)
{
    int r = rdzv_enc_op(b, RDZV_DIALECT_MODERN, RDZV_OP_VALIDATE);

    return r < 0 ? r : rdzv_buf_put_u32(b, magic);
}

int rdzv_enc_key(struct rdzv_buf *b, enum rdzv_dialect d, enum rdzv_op op, const void *key,
                 size_t klen)
{
    int r = rdzv_enc_op(b, d, op);

    return r < 0 ? r : rdzv_buf_put_str(b, key, klen);
}

int rdzv_enc_set(struct rdzv_buf *b, enum rdzv_dialect d, const void *key, size_t klen,
                 const void *val, size_t vlen)
{
    int r = rdzv_enc_key(b, d, RDZV_OP_SET, key, klen);

    return r < 0 ? r : rdzv_buf_put_str(b, val, vlen);
}

int rdzv_enc_add(struct rdzv_buf *b, enum rdzv_dialect d, const void *key, size_t klen,
                 int64_t delta)
{
    int r = rdzv_enc_key(b, d, RDZV_OP_ADD, key, klen);

    return r < 0 ? r : rdzv_buf_put_u64(b, (uint64_t)delta);
}

int rdzv_enc_keys(struct rdzv_buf *b, enum rdzv_dialect d, enum rdzv_op op,
                  const char *const *keys, size_t n)
{
    int r = rdzv_enc_op(b, d, op);

    if (r >= 0)
        r = rdzv_buf_put_u64(b, n);
    for (size_t i = 0; r >= 0 && i < n; i++)
        r = rdzv_buf_put_str(b, keys[i], strlen(keys[i]));
    return r;
}

int rdzv_enc_ping(struct rdzv_buf *b, uint32_t nonce)
{
    int r = rdzv_enc_op(b, RDZV_DIALECT_MODERN, RDZV_OP_PING);

    return r < 0 ? r : rdzv_buf_put_u32(b, nonce);
}
