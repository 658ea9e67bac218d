/* SPDX-License-Identifier: Apache-2.0 */
/* rdzv-tcpstore.h: pure decoder and encoder for PyTorch TCPStore requests. No I/O, no logging. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "proto/rdzv-proto.h"

struct rdzv_buf;

/* A borrowed view of bytes inside the request buffer. */
struct rdzv_slice {
    const uint8_t *p;
    size_t len;
};

/* One decoded request. Strings stay in the caller's buffer; walk them with rdzv_req_next(). */
struct rdzv_req {
    enum rdzv_op op;
    size_t frame_len;   /* bytes of the whole request, type byte included */
    /* On need-more (0 returned): frame_len is the whole request's length, not only the length
     * of the part whose lengths are read so far (a multi-key request learns its own a field at
     * a time). */
    bool frame_whole;
    uint64_t nstrings;  /* length-prefixed strings that follow (keys and values in order) */
    uint64_t count;     /* the request's key count (CHECK, WAIT, MULTI_*), else 0 */
    int64_t delta;      /* ADD */
    uint32_t u32;       /* VALIDATE magic, PING nonce */
    const uint8_t *strings;
};

/* Iterator over the strings of a request that rdzv_req_decode() accepted. */
struct rdzv_cursor {
    const uint8_t *p;
};

/* Why a decode failed, for the log line that closes the connection. */
struct rdzv_decode_err {
    const char *what;  /* static text */
    uint64_t value;    /* the offending number (a length, a count, the op byte) */
    uint64_t limit;    /* the limit it broke, or 0 */
};

/* Look at the request at the start of p[0..n), spoken in dialect d.
 * Returns the size of one complete request (> 0) and fills *req, 0 when more bytes are
 * needed, -EPROTO for an operation the dialect does not have, or -EMSGSIZE when a length or
 * count breaks lim (detected as soon as the field arrives, before the rest is buffered).
 * On error *err says why. Never reads past n. */
ssize_t rdzv_req_decode(const uint8_t *p, size_t n, enum rdzv_dialect d,
                        const struct rdzv_limits *lim, struct rdzv_req *req,
                        struct rdzv_decode_err *err);

static inline void rdzv_req_cursor(const struct rdzv_req *req, struct rdzv_cursor *c)
{
    c->p = req->strings;
}

/* Next string of an accepted request. The caller must not call it more than req->nstrings times. */
void rdzv_req_next(struct rdzv_cursor *c, struct rdzv_slice *out);

/* Client-side encoders: append one request in dialect d to b. Return 0, -EPROTO when d lacks
 * the op, or -ENOMEM. */
int rdzv_enc_op(struct rdzv_buf *b, enum rdzv_dialect d, enum rdzv_op op);
int rdzv_enc_validate(struct rdzv_buf *b);
/* VALIDATE with another magic (RDZV_FRONT_MAGIC: a store front's connection). */
int rdzv_enc_validate_magic(struct rdzv_buf *b, uint32_t magic);
int rdzv_enc_key(struct rdzv_buf *b, enum rdzv_dialect d, enum rdzv_op op, const void *key,
                 size_t klen);
int rdzv_enc_set(struct rdzv_buf *b, enum rdzv_dialect d, const void *key, size_t klen,
                 const void *val, size_t vlen);
int rdzv_enc_add(struct rdzv_buf *b, enum rdzv_dialect d, const void *key, size_t klen,
                 int64_t delta);
/* CHECK / WAIT / MULTI_GET over n NUL-terminated keys. */
int rdzv_enc_keys(struct rdzv_buf *b, enum rdzv_dialect d, enum rdzv_op op,
                  const char *const *keys, size_t n);
int rdzv_enc_ping(struct rdzv_buf *b, uint32_t nonce);
