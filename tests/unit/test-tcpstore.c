/* SPDX-License-Identifier: Apache-2.0 */
/* test-tcpstore.c: the TCPStore request decoder, encoders and opcode tables, in every dialect. */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/rdzv-buf.h"
#include "common/rdzv-util.h"
#include "proto/rdzv-proto.h"
#include "proto/rdzv-tcpstore.h"
#include "../tap.h"

#define MAX_STRS 8

/* The wire layout of each operation, written out independently of the decoder's table. */
enum shape { S_NONE, S_U32, S_KEY, S_KEY_VAL, S_KEY_2VAL, S_KEY_I64, S_N_KEYS, S_N_KEYVALS };

static enum shape op_shape(enum rdzv_op op)
{
    switch (op) {
    case RDZV_OP_VALIDATE:
    case RDZV_OP_PING:
        return S_U32;
    case RDZV_OP_SET:
    case RDZV_OP_APPEND:
    case RDZV_OP_QUEUE_PUSH:
        return S_KEY_VAL;
    case RDZV_OP_COMPARE_SET:
        return S_KEY_2VAL;
    case RDZV_OP_GET:
    case RDZV_OP_DELETE_KEY:
    case RDZV_OP_QUEUE_POP:
    case RDZV_OP_QUEUE_LEN:
    case RDZV_OP_WATCH_KEY:
        return S_KEY;
    case RDZV_OP_ADD:
        return S_KEY_I64;
    case RDZV_OP_CHECK:
    case RDZV_OP_WAIT:
    case RDZV_OP_MULTI_GET:
        return S_N_KEYS;
    case RDZV_OP_MULTI_SET:
        return S_N_KEYVALS;
    case RDZV_OP_GETNUMKEYS:
    case RDZV_OP_CANCEL_WAIT:
    case RDZV_OP_LIST:
    default:
        return S_NONE;
    }
}

/* Strings used to fill frames: empty, binary with NUL and 0xff, and ordinary keys. */
#define STR(s)                                                                                     \
    {                                                                                              \
        s, sizeof(s) - 1                                                                           \
    }
static const struct {
    const char *p;
    size_t len;
} sample_strs[] = {
    STR("/torch.rendezvous.job"),
    STR(""),
    STR("\0\xff\x01\x80"),
    STR("init/"),
    STR("value with spaces and more bytes than a u64"),
    STR("x"),
};

/* One hand-built request and what the decoder must report for it. */
struct sample {
    enum rdzv_op op;
    struct rdzv_buf buf;
    uint64_t count;
    int64_t delta;
    uint32_t u32;
    uint64_t nstr;
    size_t str_off; /* where the first string's length field starts */
    size_t str_end; /* just past the last string */
    const uint8_t *strs[MAX_STRS];
    size_t lens[MAX_STRS];
};

static void sample_add_str(struct sample *s, unsigned which)
{
    unsigned i = which % RDZV_ARRAY_SIZE(sample_strs);

    ASSERT_TRUE(s->nstr < MAX_STRS);
    s->strs[s->nstr] = (const uint8_t *)sample_strs[i].p;
    s->lens[s->nstr] = sample_strs[i].len;
    s->nstr++;
    ASSERT_OK(rdzv_buf_put_str(&s->buf, sample_strs[i].p, sample_strs[i].len));
}

/* Build a frame for op in dialect d. variant picks the strings, the count (0, 2 or 4 keys for
 * counted ops, 0/1/2 pairs for MULTI_SET) and the numbers. */
static void sample_build(struct sample *s, enum rdzv_dialect d, enum rdzv_op op, unsigned variant)
{
    int w = rdzv_op_to_wire(d, op);

    memset(s, 0, sizeof(*s));
    ASSERT_OK(w);
    s->op = op;
    ASSERT_OK(rdzv_buf_put_u8(&s->buf, (uint8_t)w));
    switch (op_shape(op)) {
    case S_NONE:
        break;
    case S_U32:
        s->u32 = op == RDZV_OP_VALIDATE ? RDZV_VALIDATE_MAGIC : 0x01020304u * (variant + 1);
        ASSERT_OK(rdzv_buf_put_u32(&s->buf, s->u32));
        break;
    case S_KEY:
        sample_add_str(s, variant);
        break;
    case S_KEY_VAL:
        sample_add_str(s, variant);
        sample_add_str(s, variant + 1);
        break;
    case S_KEY_2VAL:
        sample_add_str(s, variant);
        sample_add_str(s, variant + 1);
        sample_add_str(s, variant + 2);
        break;
    case S_KEY_I64:
        sample_add_str(s, variant);
        s->delta = variant == 0 ? 1 : variant == 1 ? -1 : INT64_MIN;
        ASSERT_OK(rdzv_buf_put_u64(&s->buf, (uint64_t)s->delta));
        break;
    case S_N_KEYS:
        s->count = 2 * (variant % 3);
        ASSERT_OK(rdzv_buf_put_u64(&s->buf, s->count));
        for (uint64_t i = 0; i < s->count; i++)
            sample_add_str(s, variant + (unsigned)i);
        break;
    case S_N_KEYVALS:
        s->count = variant % 3;
        ASSERT_OK(rdzv_buf_put_u64(&s->buf, s->count));
        for (uint64_t i = 0; i < 2 * s->count; i++)
            sample_add_str(s, variant + (unsigned)i);
        break;
    }
    s->str_off = (op_shape(op) == S_N_KEYS || op_shape(op) == S_N_KEYVALS) ? 9 : 1;
    s->str_end = s->buf.len - (op_shape(op) == S_KEY_I64 ? 8 : 0);
    if (op_shape(op) == S_U32 || op_shape(op) == S_NONE)
        s->str_end = s->str_off;
}

static uint8_t *dup_exact(const uint8_t *p, size_t n)
{
    /* Exact-size heap copies: ASan reports any read past n, even for n == 0. */
    uint8_t *q = malloc(n);

    ASSERT_TRUE(q != NULL || n == 0);
    if (q)
        memcpy(q, p, n);
    return q;
}

/* Decoded fields and strings of req (decoded from base) match s. */
static void check_req(const struct sample *s, const struct rdzv_req *req, const uint8_t *base,
                      size_t avail)
{
    struct rdzv_cursor cur;

    ASSERT_EQ(req->op, s->op);
    ASSERT_EQ(req->frame_len, s->buf.len);
    ASSERT_EQ(req->count, s->count);
    ASSERT_EQ(req->delta, s->delta);
    ASSERT_EQ(req->u32, s->u32);
    ASSERT_EQ(req->nstrings, s->nstr);
    if (s->nstr > 0)
        ASSERT_TRUE(req->strings == base + s->str_off);
    rdzv_req_cursor(req, &cur);
    for (uint64_t i = 0; i < s->nstr; i++) {
        struct rdzv_slice sl;

        rdzv_req_next(&cur, &sl);
        ASSERT_EQ(sl.len, s->lens[i]);
        ASSERT_TRUE(sl.p >= base && sl.p + sl.len <= base + avail);
        ASSERT_MEMEQ(sl.p, s->strs[i], sl.len);
    }
    if (s->nstr > 0)
        ASSERT_TRUE(cur.p == base + s->str_end);
}

/* The complete frame decodes to exactly its length and fields; every proper prefix asks for
 * more, with a need hint in (prefix, frame] and without reading past the prefix. */
static void check_sample(enum rdzv_dialect d, const struct rdzv_limits *lim, const struct sample *s)
{
    size_t len = s->buf.len;
    uint8_t *p = dup_exact(s->buf.data, len);
    struct rdzv_decode_err err = {0};
    struct rdzv_req req;
    ssize_t r;

    r = rdzv_req_decode(p, len, d, lim, &req, &err);
    ASSERT_EQ(r, len);
    check_req(s, &req, p, len);
    free(p);

    for (size_t k = 0; k < len; k++) {
        uint8_t *q = dup_exact(s->buf.data, k);

        r = rdzv_req_decode(q, k, d, lim, &req, &err);
        ASSERT_EQ(r, 0);
        ASSERT_TRUE(req.frame_len > k);
        ASSERT_LE(req.frame_len, len);
        if (req.frame_whole) /* the buffer is grown to exactly this: never short */
            ASSERT_EQ(req.frame_len, len);
        free(q);
    }
}

static const enum rdzv_dialect all_dialects[] = {RDZV_DIALECT_V20, RDZV_DIALECT_V21,
                                                 RDZV_DIALECT_MODERN};

/* Number of operations each dialect defines: wire bytes 0 .. n-1, none above. */
static unsigned dialect_nops(enum rdzv_dialect d)
{
    return d == RDZV_DIALECT_V20 ? 9 : d == RDZV_DIALECT_V21 ? 12 : 18;
}

static void test_op_tables_consistent(void)
{
    for (size_t i = 0; i < RDZV_ARRAY_SIZE(all_dialects); i++) {
        enum rdzv_dialect d = all_dialects[i];
        bool seen[_RDZV_OP_MAX] = {false};

        for (unsigned b = 0; b < 256; b++) {
            int op = rdzv_op_from_wire(d, (uint8_t)b);

            if (b >= dialect_nops(d)) {
                ASSERT_EQ(op, -EPROTO);
                continue;
            }
            ASSERT_OK(op);
            ASSERT_TRUE(op < _RDZV_OP_MAX);
            ASSERT_FALSE(seen[op]);
            seen[op] = true;
            ASSERT_EQ(rdzv_op_to_wire(d, (enum rdzv_op)op), b);
        }
        for (int op = 0; op < _RDZV_OP_MAX; op++) {
            int w = rdzv_op_to_wire(d, (enum rdzv_op)op);

            ASSERT_TRUE(strcmp(rdzv_op_name((enum rdzv_op)op), "?") != 0);
            if (!seen[op]) {
                ASSERT_EQ(w, -EPROTO);
                continue;
            }
            ASSERT_OK(w);
            ASSERT_EQ(rdzv_op_from_wire(d, (uint8_t)w), op);
        }
    }
    ASSERT_EQ(rdzv_op_to_wire(_RDZV_DIALECT_MAX, RDZV_OP_SET), -EPROTO);
    ASSERT_EQ(rdzv_op_from_wire(_RDZV_DIALECT_MAX, 0), -EPROTO);
    ASSERT_TRUE(strcmp(rdzv_op_name(_RDZV_OP_MAX), "?") == 0);
}

/* Spot checks against proto/TCPSTORE.md section 2, the places where the numberings differ. */
static void test_op_tables_match_pytorch(void)
{
    ASSERT_EQ(rdzv_op_from_wire(RDZV_DIALECT_V20, 0), RDZV_OP_SET);
    ASSERT_EQ(rdzv_op_from_wire(RDZV_DIALECT_V20, 6), RDZV_OP_GETNUMKEYS);
    ASSERT_EQ(rdzv_op_from_wire(RDZV_DIALECT_V20, 7), RDZV_OP_WATCH_KEY);
    ASSERT_EQ(rdzv_op_from_wire(RDZV_DIALECT_V20, 8), RDZV_OP_DELETE_KEY);
    ASSERT_EQ(rdzv_op_from_wire(RDZV_DIALECT_V21, 0), RDZV_OP_SET);
    ASSERT_EQ(rdzv_op_from_wire(RDZV_DIALECT_V21, 7), RDZV_OP_DELETE_KEY);
    ASSERT_EQ(rdzv_op_from_wire(RDZV_DIALECT_V21, 8), RDZV_OP_APPEND);
    ASSERT_EQ(rdzv_op_from_wire(RDZV_DIALECT_V21, 11), RDZV_OP_CANCEL_WAIT);
    ASSERT_EQ(rdzv_op_from_wire(RDZV_DIALECT_MODERN, 0), RDZV_OP_VALIDATE);
    ASSERT_EQ(rdzv_op_from_wire(RDZV_DIALECT_MODERN, 1), RDZV_OP_SET);
    ASSERT_EQ(rdzv_op_from_wire(RDZV_DIALECT_MODERN, 8), RDZV_OP_DELETE_KEY);
    ASSERT_EQ(rdzv_op_from_wire(RDZV_DIALECT_MODERN, 12), RDZV_OP_CANCEL_WAIT);
    ASSERT_EQ(rdzv_op_from_wire(RDZV_DIALECT_MODERN, 13), RDZV_OP_PING);
    ASSERT_EQ(rdzv_op_from_wire(RDZV_DIALECT_MODERN, 14), RDZV_OP_QUEUE_PUSH);
    ASSERT_EQ(rdzv_op_from_wire(RDZV_DIALECT_MODERN, 16), RDZV_OP_QUEUE_LEN);
    ASSERT_EQ(rdzv_op_from_wire(RDZV_DIALECT_MODERN, 17), RDZV_OP_LIST);
    ASSERT_EQ(rdzv_op_to_wire(RDZV_DIALECT_MODERN, RDZV_OP_WATCH_KEY), -EPROTO);
    ASSERT_EQ(rdzv_op_to_wire(RDZV_DIALECT_V21, RDZV_OP_WATCH_KEY), -EPROTO);
    ASSERT_EQ(rdzv_op_to_wire(RDZV_DIALECT_V20, RDZV_OP_APPEND), -EPROTO);
}

/* rdzv's store-front numbering: the modern one without WAIT and CANCEL_WAIT, with the tag ops
 * after LIST; never a name --legacy takes. */
static void test_front_numbering(void)
{
    enum rdzv_dialect d = RDZV_DIALECT_V21;

    for (unsigned b = 0; b < 18; b++)
        ASSERT_EQ(rdzv_op_from_wire(RDZV_DIALECT_FRONT, (uint8_t)b),
                  b == 6 || b == 12 ? -EPROTO : rdzv_op_from_wire(RDZV_DIALECT_MODERN, (uint8_t)b));
    ASSERT_EQ(rdzv_op_from_wire(RDZV_DIALECT_FRONT, 18), RDZV_OP_TAG_WAIT);
    ASSERT_EQ(rdzv_op_from_wire(RDZV_DIALECT_FRONT, 19), RDZV_OP_TAG_CANCEL);
    for (unsigned b = 20; b < 256; b++)
        ASSERT_EQ(rdzv_op_from_wire(RDZV_DIALECT_FRONT, (uint8_t)b), -EPROTO);
    for (size_t i = 0; i < RDZV_ARRAY_SIZE(all_dialects); i++) {
        ASSERT_EQ(rdzv_op_from_wire(all_dialects[i], 18), -EPROTO);
        ASSERT_EQ(rdzv_op_to_wire(all_dialects[i], RDZV_OP_TAG_WAIT), -EPROTO);
    }
    ASSERT_EQ(rdzv_op_to_wire(RDZV_DIALECT_FRONT, RDZV_OP_WAIT), -EPROTO);
    ASSERT_EQ(rdzv_dialect_parse("front", &d), -EINVAL);
    ASSERT_EQ(d, RDZV_DIALECT_V21);
    ASSERT_TRUE(strcmp(rdzv_dialect_name(RDZV_DIALECT_FRONT), "front") == 0);
    ASSERT_FALSE(rdzv_op_has_reply(RDZV_OP_TAG_WAIT));
    ASSERT_FALSE(rdzv_op_has_reply(RDZV_OP_QUEUE_PUSH));
    ASSERT_TRUE(rdzv_op_has_reply(RDZV_OP_MULTI_GET));
    ASSERT_TRUE(rdzv_op_has_reply(RDZV_OP_WAIT));
}

static void test_dialect_names(void)
{
    enum rdzv_dialect d = RDZV_DIALECT_MODERN;

    for (size_t i = 0; i < RDZV_ARRAY_SIZE(all_dialects); i++) {
        ASSERT_OK(rdzv_dialect_parse(rdzv_dialect_name(all_dialects[i]), &d));
        ASSERT_EQ(d, all_dialects[i]);
    }
    ASSERT_OK(rdzv_dialect_parse("1.13", &d));
    ASSERT_EQ(d, RDZV_DIALECT_V20);
    d = RDZV_DIALECT_V21;
    ASSERT_EQ(rdzv_dialect_parse("2.2", &d), -EINVAL);
    ASSERT_EQ(rdzv_dialect_parse("", &d), -EINVAL);
    ASSERT_EQ(d, RDZV_DIALECT_V21);
    ASSERT_TRUE(strcmp(rdzv_dialect_name(_RDZV_DIALECT_MAX), "?") == 0);
}

static void test_decode_every_op_complete_and_prefixes(void)
{
    const struct rdzv_limits lim = RDZV_LIMITS_DEFAULT;
    unsigned nchecked = 0;

    for (size_t i = 0; i < RDZV_ARRAY_SIZE(all_dialects); i++) {
        enum rdzv_dialect d = all_dialects[i];

        for (unsigned b = 0; b < dialect_nops(d); b++) {
            enum rdzv_op op = (enum rdzv_op)rdzv_op_from_wire(d, (uint8_t)b);

            for (unsigned v = 0; v < 6; v++) {
                struct sample s;

                sample_build(&s, d, op, v);
                check_sample(d, &lim, &s);
                rdzv_buf_free(&s.buf);
                nchecked++;
            }
        }
    }
    ASSERT_EQ(nchecked, 6 * (9 + 12 + 18));
}

static void test_decode_empty_input(void)
{
    const struct rdzv_limits lim = RDZV_LIMITS_DEFAULT;
    struct rdzv_decode_err err = {0};
    struct rdzv_req req;
    uint8_t *p = dup_exact((const uint8_t *)"", 0);

    ASSERT_EQ(rdzv_req_decode(p, 0, RDZV_DIALECT_MODERN, &lim, &req, &err), 0);
    ASSERT_EQ(req.frame_len, 1);
    free(p);
}

/* All frames of a dialect back to back in one buffer decode one after the other. */
static void test_decode_coalesced(void)
{
    const struct rdzv_limits lim = RDZV_LIMITS_DEFAULT;

    for (size_t i = 0; i < RDZV_ARRAY_SIZE(all_dialects); i++) {
        enum rdzv_dialect d = all_dialects[i];
        struct sample s[3 * 18];
        struct rdzv_buf all = {0};
        size_t n = 0, off = 0;
        uint8_t *p;

        for (unsigned v = 0; v < 3; v++)
            for (unsigned b = 0; b < dialect_nops(d); b++) {
                sample_build(&s[n], d, (enum rdzv_op)rdzv_op_from_wire(d, (uint8_t)b), v + b);
                ASSERT_OK(rdzv_buf_put(&all, s[n].buf.data, s[n].buf.len));
                n++;
            }
        p = dup_exact(all.data, all.len);
        for (size_t j = 0; j < n; j++) {
            struct rdzv_decode_err err = {0};
            struct rdzv_req req;
            ssize_t r = rdzv_req_decode(p + off, all.len - off, d, &lim, &req, &err);

            ASSERT_EQ(r, s[j].buf.len);
            check_req(&s[j], &req, p + off, all.len - off);
            off += (size_t)r;
            rdzv_buf_free(&s[j].buf);
        }
        ASSERT_EQ(off, all.len);
        free(p);
        rdzv_buf_free(&all);
    }
}

static void test_decode_unknown_ops(void)
{
    const struct rdzv_limits lim = RDZV_LIMITS_DEFAULT;

    for (size_t i = 0; i < RDZV_ARRAY_SIZE(all_dialects); i++) {
        enum rdzv_dialect d = all_dialects[i];

        for (unsigned b = dialect_nops(d); b < 256; b++) {
            /* Only the type byte is there: the verdict must not wait for more. */
            uint8_t byte = (uint8_t)b;
            uint8_t *p = dup_exact(&byte, 1);
            struct rdzv_decode_err err = {0};
            struct rdzv_req req;

            ASSERT_EQ(rdzv_req_decode(p, 1, d, &lim, &req, &err), -EPROTO);
            ASSERT_NOT_NULL(err.what);
            ASSERT_EQ(err.value, b);
            free(p);
        }
    }
}

/* Decode buf (exact heap copy) and return the result, filling err. */
static ssize_t decode_buf(const struct rdzv_buf *b, enum rdzv_dialect d,
                          const struct rdzv_limits *lim, struct rdzv_req *req,
                          struct rdzv_decode_err *err)
{
    uint8_t *p = dup_exact(b->data, b->len);
    ssize_t r = rdzv_req_decode(p, b->len, d, lim, req, err);

    free(p);
    return r;
}

/* Limits are enforced as soon as the length field is complete, without the body. */
static void test_decode_limits_early(void)
{
    struct rdzv_limits lim = RDZV_LIMITS_DEFAULT;
    const enum rdzv_dialect d = RDZV_DIALECT_MODERN;
    struct rdzv_decode_err err;
    struct rdzv_req req;
    struct rdzv_buf b = {0};

    lim.max_key_len = 16;
    lim.max_value_len = 32;
    lim.max_keys_per_req = 4;

    /* Key one byte over: refused with only type + length present. */
    ASSERT_OK(rdzv_enc_op(&b, d, RDZV_OP_GET));
    ASSERT_OK(rdzv_buf_put_u64(&b, 17));
    memset(&err, 0, sizeof(err));
    ASSERT_EQ(decode_buf(&b, d, &lim, &req, &err), -EMSGSIZE);
    ASSERT_EQ(err.value, 17);
    ASSERT_EQ(err.limit, 16);
    ASSERT_NOT_NULL(err.what);
    /* Seven of the eight length bytes: still need more. */
    b.len--;
    ASSERT_EQ(decode_buf(&b, d, &lim, &req, &err), 0);
    rdzv_buf_free(&b);

    /* Key at the limit is fine; its body is still awaited. */
    ASSERT_OK(rdzv_enc_op(&b, d, RDZV_OP_GET));
    ASSERT_OK(rdzv_buf_put_u64(&b, 16));
    ASSERT_EQ(decode_buf(&b, d, &lim, &req, &err), 0);
    ASSERT_EQ(req.frame_len, 1 + 8 + 16);
    rdzv_buf_free(&b);

    /* Absurd lengths do not wrap around. */
    ASSERT_OK(rdzv_enc_op(&b, d, RDZV_OP_SET));
    ASSERT_OK(rdzv_buf_put_u64(&b, UINT64_MAX));
    ASSERT_EQ(decode_buf(&b, d, &lim, &req, &err), -EMSGSIZE);
    rdzv_buf_free(&b);

    /* Value one over, checked against the value limit (not the key limit). */
    ASSERT_OK(rdzv_enc_op(&b, d, RDZV_OP_SET));
    ASSERT_OK(rdzv_buf_put_str(&b, "k", 1));
    ASSERT_OK(rdzv_buf_put_u64(&b, 32));
    ASSERT_EQ(decode_buf(&b, d, &lim, &req, &err), 0);
    b.len -= 8;
    ASSERT_OK(rdzv_buf_put_u64(&b, 33));
    ASSERT_EQ(decode_buf(&b, d, &lim, &req, &err), -EMSGSIZE);
    ASSERT_EQ(err.value, 33);
    ASSERT_EQ(err.limit, 32);
    rdzv_buf_free(&b);

    /* COMPARE_SET: expected and desired are values. */
    ASSERT_OK(rdzv_enc_op(&b, d, RDZV_OP_COMPARE_SET));
    ASSERT_OK(rdzv_buf_put_str(&b, "k", 1));
    ASSERT_OK(rdzv_buf_put_str(&b, "", 0));
    ASSERT_OK(rdzv_buf_put_u64(&b, 33));
    ASSERT_EQ(decode_buf(&b, d, &lim, &req, &err), -EMSGSIZE);
    ASSERT_EQ(err.limit, 32);
    rdzv_buf_free(&b);

    /* ADD's key is a key. */
    ASSERT_OK(rdzv_enc_op(&b, d, RDZV_OP_ADD));
    ASSERT_OK(rdzv_buf_put_u64(&b, 17));
    ASSERT_EQ(decode_buf(&b, d, &lim, &req, &err), -EMSGSIZE);
    rdzv_buf_free(&b);

    /* Counts: over the limit as soon as the u64 is there; at the limit fine. */
    ASSERT_OK(rdzv_enc_op(&b, d, RDZV_OP_WAIT));
    ASSERT_OK(rdzv_buf_put_u64(&b, 5));
    ASSERT_EQ(decode_buf(&b, d, &lim, &req, &err), -EMSGSIZE);
    ASSERT_EQ(err.value, 5);
    ASSERT_EQ(err.limit, 4);
    rdzv_buf_free(&b);
    ASSERT_OK(rdzv_enc_op(&b, d, RDZV_OP_MULTI_SET));
    ASSERT_OK(rdzv_buf_put_u64(&b, UINT64_MAX));
    ASSERT_EQ(decode_buf(&b, d, &lim, &req, &err), -EMSGSIZE);
    rdzv_buf_free(&b);
    ASSERT_OK(rdzv_enc_op(&b, d, RDZV_OP_MULTI_GET));
    ASSERT_OK(rdzv_buf_put_u64(&b, 4));
    ASSERT_EQ(decode_buf(&b, d, &lim, &req, &err), 0);
    ASSERT_EQ(req.frame_len, 9 + 8);
    rdzv_buf_free(&b);

    /* Keys of counted ops are held to the key limit, MULTI_SET values to the value limit. */
    ASSERT_OK(rdzv_enc_op(&b, d, RDZV_OP_CHECK));
    ASSERT_OK(rdzv_buf_put_u64(&b, 3));
    ASSERT_OK(rdzv_buf_put_str(&b, "a", 1));
    ASSERT_OK(rdzv_buf_put_u64(&b, 17));
    ASSERT_EQ(decode_buf(&b, d, &lim, &req, &err), -EMSGSIZE);
    ASSERT_EQ(err.limit, 16);
    rdzv_buf_free(&b);
    ASSERT_OK(rdzv_enc_op(&b, d, RDZV_OP_MULTI_SET));
    ASSERT_OK(rdzv_buf_put_u64(&b, 2));
    ASSERT_OK(rdzv_buf_put_str(&b, "a", 1));
    ASSERT_OK(rdzv_buf_put_u64(&b, 32)); /* a value: 32 is allowed */
    ASSERT_EQ(decode_buf(&b, d, &lim, &req, &err), 0);
    rdzv_buf_free(&b);
    ASSERT_OK(rdzv_enc_op(&b, d, RDZV_OP_MULTI_SET));
    ASSERT_OK(rdzv_buf_put_u64(&b, 2));
    ASSERT_OK(rdzv_buf_put_str(&b, "a", 1));
    ASSERT_OK(rdzv_buf_put_str(&b, "v", 1));
    ASSERT_OK(rdzv_buf_put_u64(&b, 17)); /* second key */
    ASSERT_EQ(decode_buf(&b, d, &lim, &req, &err), -EMSGSIZE);
    ASSERT_EQ(err.limit, 16);
    rdzv_buf_free(&b);

    /* The same limits hold in the legacy numberings. */
    ASSERT_OK(rdzv_enc_op(&b, RDZV_DIALECT_V20, RDZV_OP_SET));
    ASSERT_OK(rdzv_buf_put_u64(&b, 17));
    ASSERT_EQ(decode_buf(&b, RDZV_DIALECT_V20, &lim, &req, &err), -EMSGSIZE);
    rdzv_buf_free(&b);
    ASSERT_OK(rdzv_enc_op(&b, RDZV_DIALECT_V21, RDZV_OP_MULTI_GET));
    ASSERT_OK(rdzv_buf_put_u64(&b, 5));
    ASSERT_EQ(decode_buf(&b, RDZV_DIALECT_V21, &lim, &req, &err), -EMSGSIZE);
    rdzv_buf_free(&b);
}

/* A request that would grow past max_frame is refused once the offending length arrives. */
static void test_decode_max_frame(void)
{
    struct rdzv_limits lim = RDZV_LIMITS_DEFAULT;
    const enum rdzv_dialect d = RDZV_DIALECT_MODERN;
    struct rdzv_decode_err err;
    struct rdzv_req req;
    struct rdzv_buf b = {0};
    uint8_t body[64] = {0};

    lim.max_frame = 64;

    /* SET of exactly 64 bytes: 1 + 8 + 20 + 8 + 27. */
    ASSERT_OK(rdzv_enc_set(&b, d, body, 20, body, 27));
    ASSERT_EQ(b.len, 64);
    ASSERT_EQ(decode_buf(&b, d, &lim, &req, &err), 64);
    rdzv_buf_free(&b);

    /* One more value byte: refused with just the value's length field. */
    ASSERT_OK(rdzv_enc_op(&b, d, RDZV_OP_SET));
    ASSERT_OK(rdzv_buf_put_str(&b, body, 20));
    ASSERT_OK(rdzv_buf_put_u64(&b, 28));
    memset(&err, 0, sizeof(err));
    ASSERT_EQ(decode_buf(&b, d, &lim, &req, &err), -EMSGSIZE);
    ASSERT_EQ(err.value, 65);
    ASSERT_EQ(err.limit, 64);
    rdzv_buf_free(&b);

    /* Many small keys add up. */
    ASSERT_OK(rdzv_enc_op(&b, d, RDZV_OP_WAIT));
    ASSERT_OK(rdzv_buf_put_u64(&b, 5));
    for (int i = 0; i < 4; i++)
        ASSERT_OK(rdzv_buf_put_str(&b, body, 3)); /* 9 + 4 * 11 = 53 */
    ASSERT_OK(rdzv_buf_put_u64(&b, 3));           /* 53 + 11 = 64: fine */
    ASSERT_EQ(decode_buf(&b, d, &lim, &req, &err), 0);
    b.len -= 8;
    ASSERT_OK(rdzv_buf_put_u64(&b, 4)); /* 65 */
    ASSERT_EQ(decode_buf(&b, d, &lim, &req, &err), -EMSGSIZE);
    rdzv_buf_free(&b);
}

/* max_frame is "bytes in one whole request": ADD's trailing i64 is part of the request. */
static void test_decode_max_frame_add(void)
{
    struct rdzv_limits lim = RDZV_LIMITS_DEFAULT;
    const enum rdzv_dialect d = RDZV_DIALECT_MODERN;
    struct rdzv_decode_err err;
    struct rdzv_req req;
    struct rdzv_buf b = {0};
    uint8_t body[64] = {0};

    lim.max_frame = 64;
    ASSERT_OK(rdzv_enc_add(&b, d, body, 47, 1));
    ASSERT_EQ(b.len, 64);
    ASSERT_EQ(decode_buf(&b, d, &lim, &req, &err), 64);
    rdzv_buf_free(&b);
    /* 1 + 8 + 55 + 8 = 72 > 64. */
    ASSERT_OK(rdzv_enc_add(&b, d, body, 55, 1));
    ASSERT_EQ(b.len, 72);
    memset(&err, 0, sizeof(err));
    ASSERT_EQ(decode_buf(&b, d, &lim, &req, &err), -EMSGSIZE);
    rdzv_buf_free(&b);
}

/* What the encoders produce is byte for byte the hand-built frame, and decodes back to it. */
static void check_encoded(enum rdzv_dialect d, const struct rdzv_buf *enc, const struct sample *s)
{
    const struct rdzv_limits lim = RDZV_LIMITS_DEFAULT;

    ASSERT_EQ(enc->len, s->buf.len);
    ASSERT_MEMEQ(enc->data, s->buf.data, enc->len);
    check_sample(d, &lim, s);
}

static void test_encoders_round_trip(void)
{
    for (size_t i = 0; i < RDZV_ARRAY_SIZE(all_dialects); i++) {
        enum rdzv_dialect d = all_dialects[i];

        for (unsigned b = 0; b < dialect_nops(d); b++) {
            enum rdzv_op op = (enum rdzv_op)rdzv_op_from_wire(d, (uint8_t)b);

            for (unsigned v = 0; v < 3; v++) {
                struct rdzv_buf enc = {0};
                struct sample s;
                const char *keys[MAX_STRS];
                char keybuf[MAX_STRS][64];
                bool have = true;

                sample_build(&s, d, op, v);
                switch (op) {
                case RDZV_OP_VALIDATE:
                    ASSERT_OK(rdzv_enc_validate(&enc));
                    break;
                case RDZV_OP_PING:
                    ASSERT_OK(rdzv_enc_ping(&enc, s.u32));
                    break;
                case RDZV_OP_SET:
                    ASSERT_OK(rdzv_enc_set(&enc, d, s.strs[0], s.lens[0], s.strs[1], s.lens[1]));
                    break;
                case RDZV_OP_ADD:
                    ASSERT_OK(rdzv_enc_add(&enc, d, s.strs[0], s.lens[0], s.delta));
                    break;
                case RDZV_OP_GET:
                case RDZV_OP_DELETE_KEY:
                case RDZV_OP_QUEUE_POP:
                case RDZV_OP_QUEUE_LEN:
                case RDZV_OP_WATCH_KEY:
                    ASSERT_OK(rdzv_enc_key(&enc, d, op, s.strs[0], s.lens[0]));
                    break;
                case RDZV_OP_CHECK:
                case RDZV_OP_WAIT:
                case RDZV_OP_MULTI_GET: {
                    /* rdzv_enc_keys takes C strings: rebuild the sample from NUL-free keys. */
                    rdzv_buf_free(&s.buf);
                    memset(&s, 0, sizeof(s));
                    s.op = op;
                    s.count = v + 1;
                    s.str_off = 9;
                    ASSERT_OK(rdzv_buf_put_u8(&s.buf, (uint8_t)b));
                    ASSERT_OK(rdzv_buf_put_u64(&s.buf, s.count));
                    for (unsigned k = 0; k < s.count; k++) {
                        snprintf(keybuf[k], sizeof(keybuf[k]), "/key/%u/%u", v, k);
                        keys[k] = keybuf[k];
                        s.strs[k] = (const uint8_t *)keybuf[k];
                        s.lens[k] = strlen(keybuf[k]);
                        ASSERT_OK(rdzv_buf_put_str(&s.buf, keys[k], s.lens[k]));
                    }
                    s.nstr = s.count;
                    s.str_end = s.buf.len;
                    ASSERT_OK(rdzv_enc_keys(&enc, d, op, keys, s.count));
                    break;
                }
                case RDZV_OP_GETNUMKEYS:
                case RDZV_OP_CANCEL_WAIT:
                case RDZV_OP_LIST:
                    ASSERT_OK(rdzv_enc_op(&enc, d, op));
                    break;
                default:
                    have = false; /* no dedicated encoder */
                    break;
                }
                if (have)
                    check_encoded(d, &enc, &s);
                rdzv_buf_free(&enc);
                rdzv_buf_free(&s.buf);
            }
        }
    }
}

static void test_encoders_exact_bytes(void)
{
    struct rdzv_buf b = {0};
    static const uint8_t validate[] = {0x00, 0xce, 0xf7, 0x85, 0x3c};
    static const uint8_t ping[] = {0x0d, 0x78, 0x56, 0x34, 0x12};
    static const uint8_t add[] = {0x04, 5,   0,   0,    0,    0,    0,    0,    0,    'i',  'n',
                                  'i',  't', '/', 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};

    ASSERT_OK(rdzv_enc_validate(&b));
    ASSERT_EQ(b.len, sizeof(validate));
    ASSERT_MEMEQ(b.data, validate, sizeof(validate));
    rdzv_buf_free(&b);
    ASSERT_OK(rdzv_enc_ping(&b, 0x12345678u));
    ASSERT_EQ(b.len, sizeof(ping));
    ASSERT_MEMEQ(b.data, ping, sizeof(ping));
    rdzv_buf_free(&b);
    ASSERT_OK(rdzv_enc_add(&b, RDZV_DIALECT_MODERN, "init/", 5, -1));
    ASSERT_EQ(b.len, sizeof(add));
    ASSERT_MEMEQ(b.data, add, sizeof(add));
    rdzv_buf_free(&b);
}

/* Encoding an operation the dialect lacks fails and leaves the buffer alone. */
static void test_encoders_refuse_missing_ops(void)
{
    struct rdzv_buf b = {0};
    const char *keys[] = {"a"};

    ASSERT_OK(rdzv_buf_put_u8(&b, 0xaa));
    ASSERT_EQ(rdzv_enc_key(&b, RDZV_DIALECT_V20, RDZV_OP_QUEUE_POP, "k", 1), -EPROTO);
    ASSERT_EQ(rdzv_enc_key(&b, RDZV_DIALECT_MODERN, RDZV_OP_WATCH_KEY, "k", 1), -EPROTO);
    ASSERT_EQ(rdzv_enc_keys(&b, RDZV_DIALECT_V20, RDZV_OP_MULTI_GET, keys, 1), -EPROTO);
    ASSERT_EQ(rdzv_enc_op(&b, RDZV_DIALECT_V21, RDZV_OP_LIST), -EPROTO);
    ASSERT_EQ(b.len, 1);
    rdzv_buf_free(&b);
}

/* The need hint grows monotonically as bytes arrive and never overshoots the frame. */
static void test_decode_need_hint(void)
{
    const struct rdzv_limits lim = RDZV_LIMITS_DEFAULT;
    const char *keys[] = {"/a", "", "/ccc"};
    struct rdzv_buf b = {0};
    size_t last = 0;

    ASSERT_OK(rdzv_enc_keys(&b, RDZV_DIALECT_V21, RDZV_OP_WAIT, keys, 3));
    for (size_t k = 0; k < b.len; k++) {
        struct rdzv_decode_err err = {0};
        struct rdzv_req req;
        struct rdzv_buf pre = {.data = b.data, .len = k, .cap = k};

        ASSERT_EQ(decode_buf(&pre, RDZV_DIALECT_V21, &lim, &req, &err), 0);
        ASSERT_TRUE(req.frame_len >= last);
        ASSERT_TRUE(req.frame_len > k);
        ASSERT_LE(req.frame_len, b.len);
        last = req.frame_len;
    }
    rdzv_buf_free(&b);
}

int main(void)
{
    TEST(test_op_tables_consistent);
    TEST(test_op_tables_match_pytorch);
    TEST(test_dialect_names);
    TEST(test_front_numbering);
    TEST(test_decode_every_op_complete_and_prefixes);
    TEST(test_decode_empty_input);
    TEST(test_decode_coalesced);
    TEST(test_decode_unknown_ops);
    TEST(test_decode_limits_early);
    TEST(test_decode_max_frame);
    TEST(test_encoders_round_trip);
    TEST(test_encoders_exact_bytes);
    TEST(test_encoders_refuse_missing_ops);
    TEST(test_decode_need_hint);
    /* Last: checks a limit the implementation may not enforce yet. */
    TEST(test_decode_max_frame_add);
    return tap_done();
}
