/* SPDX-License-Identifier: Apache-2.0 */
/* rdzv-buf.c: growable byte buffer. */
#include "common/rdzv-buf.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int rdzv_buf_reserve(struct rdzv_buf *b, size_t extra)
{
    size_t need, ncap;
    uint8_t *p;

    if (extra > SIZE_MAX - b->len)
        return -ENOMEM;
    need = b->len + extra;
    if (need <= b->cap)
        return 0;
    /* Reuse consumed space at the front before growing. */
    if (b->off > 0 && need - b->off <= b->cap) {
        rdzv_buf_compact(b);
        return 0;
    }
    ncap = b->cap ? b->cap : 64;
    while (ncap < need) {
        if (ncap > SIZE_MAX / 2)
            return -ENOMEM;
        ncap *= 2;
    }
    p = realloc(b->data, ncap);
    if (!p)
        return -ENOMEM;
    b->data = p;
    b->cap = ncap;
    return 0;
}

int rdzv_buf_reserve_upto(struct rdzv_buf *b, size_t extra, size_t most)
{
    size_t need, ncap;
    uint8_t *p;

    if (extra > SIZE_MAX - b->len)
        return -ENOMEM;
    if (b->len + extra <= b->cap)
        return 0;
    if (b->off > 0)
        rdzv_buf_compact(b);
    need = b->len + extra;
    if (need <= b->cap)
        return 0;
    /* Doubling keeps a buffer filled a little at a time from a copy per fill. */
    ncap = b->cap > SIZE_MAX / 2 ? SIZE_MAX : 2 * b->cap;
    if (ncap > most)
        ncap = most;
    if (ncap < need)
        ncap = need;
    if (!(p = realloc(b->data, ncap)))
        return -ENOMEM;
    b->data = p;
    b->cap = ncap;
    return 0;
}

int rdzv_buf_put(struct rdzv_buf *b, const void *p, size_t n)
{
    int r = rdzv_buf_reserve(b, n);

    if (r < 0)
        return r;
    if (n)
        memcpy(b->data + b->len, p, n);
    b->len += n;
    return 0;
}

int rdzv_buf_put_u8(struct rdzv_buf *b, uint8_t v)
{
    return rdzv_buf_put(b, &v, 1);
}

int rdzv_buf_put_u32(struct rdzv_buf *b, uint32_t v)
{
    uint8_t t[4];

    rdzv_set_u32(t, v);
    return rdzv_buf_put(b, t, sizeof(t));
}

int rdzv_buf_put_u64(struct rdzv_buf *b, uint64_t v)
{
    uint8_t t[8];

    rdzv_set_u64(t, v);
    return rdzv_buf_put(b, t, sizeof(t));
}

int rdzv_buf_put_str(struct rdzv_buf *b, const void *p, size_t n)
{
    int r = rdzv_buf_reserve(b, 8 + n);

    if (r < 0)
        return r;
    (void)rdzv_buf_put_u64(b, n);
    return rdzv_buf_put(b, p, n);
}

void rdzv_buf_consume(struct rdzv_buf *b, size_t n)
{
    b->off += n;
    if (b->off >= b->len)
        b->off = b->len = 0;
}

void rdzv_buf_compact(struct rdzv_buf *b)
{
    if (b->off == 0)
        return;
    memmove(b->data, b->data + b->off, b->len - b->off);
    b->len -= b->off;
    b->off = 0;
}

void rdzv_buf_free(struct rdzv_buf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = b->off = 0;
}

int rdzv_buf_printf(struct rdzv_buf *b, const char *fmt, ...)
{
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || rdzv_buf_reserve(b, (size_t)n + 1) < 0)
        return -ENOMEM;
    va_start(ap, fmt);
    vsnprintf((char *)b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return 0;
}

int rdzv_buf_put_escaped(struct rdzv_buf *b, const char *s, bool html)
{
    int r = 0;

    for (; s && *s && r == 0; s++) {
        unsigned char c = (unsigned char)*s;
        const char *e = NULL;
        char hex[8];

        if (html) {
            e = c == '&'    ? "&amp;"
                : c == '<'  ? "&lt;"
                : c == '>'  ? "&gt;"
                : c == '"'  ? "&quot;"
                : c == '\'' ? "&#39;"
                            : NULL;
            if (c < 0x20 || c == 0x7f) { /* visible, not raw: a run id or host may hold any */
                snprintf(hex, sizeof(hex), "\\x%02x", c);
                e = hex;
            }
        } else if (c == '\\' || c == '"' || c == '\n') {
            e = c == '\\' ? "\\\\" : c == '"' ? "\\\"" : "\\n";
        } else if (c < 0x20 || c == 0x7f) {
            snprintf(hex, sizeof(hex), "\\\\x%02x", c);
            e = hex;
        }
        r = e ? rdzv_buf_put(b, e, strlen(e)) : rdzv_buf_put(b, s, 1);
    }
    return r;
}

int rdzv_buf_put_utc(struct rdzv_buf *b, double t, bool with_date)
{
    time_t secs = (time_t)t;
    struct tm tm;
    char when[64];
    size_t n;

    gmtime_r(&secs, &tm);
    n = with_date ? strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%SZ", &tm)
                  : strftime(when, sizeof(when), "%H:%M:%SZ", &tm);
    return rdzv_buf_put(b, when, n);
}

char *rdzv_buf_take_str(struct rdzv_buf *b, int r)
{
    if (r == 0)
        r = rdzv_buf_put(b, "", 1); /* NUL */
    if (r < 0) {
        rdzv_buf_free(b);
        return NULL;
    }
    return (char *)b->data;
}
