/* SPDX-License-Identifier: Apache-2.0 */
/* rdzv-buf.h: growable byte buffer with a read offset, plus little-endian put helpers. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/rdzv-util.h"

/* Bytes live in data[off .. len); cap is the allocation size. A zeroed struct is an empty
 * buffer. */
struct rdzv_buf {
    uint8_t *data;
    size_t len;
    size_t cap;
    size_t off;
};

/* Make room for at least extra more bytes after len. Returns 0 or -ENOMEM. */
int rdzv_buf_reserve(struct rdzv_buf *b, size_t extra);
/* As rdzv_buf_reserve, for a caller that knows the buffer will hold at most most unread bytes:
 * a buffer that must grow (its unread bytes first moved to the front) doubles, as there, but
 * never past most, nor less than extra more. 0 or -ENOMEM. */
int rdzv_buf_reserve_upto(struct rdzv_buf *b, size_t extra, size_t most);
/* Append n bytes. Returns 0 or -ENOMEM. */
int rdzv_buf_put(struct rdzv_buf *b, const void *p, size_t n);
/* Append printf-formatted text (no NUL counted in len, one written past it). 0 or -ENOMEM. */
int rdzv_buf_printf(struct rdzv_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Append s escaped for a Prometheus label value (\\, \", \n; other control characters, which
 * the format has no escape for, as the text \xNN, i.e. "\\xNN") or, with html, for HTML text and
 * attribute values (&<>"'; control characters as the visible text \xNN). NULL appends nothing.
 * 0 or -ENOMEM. */
int rdzv_buf_put_escaped(struct rdzv_buf *b, const char *s, bool html);
/* Append the unix time t (seconds) as UTC: "2026-11-25 17:19:49Z" with date, else "17:19:49Z".
 * 0 or -ENOMEM. */
int rdzv_buf_put_utc(struct rdzv_buf *b, double t, bool with_date);
int rdzv_buf_put_u8(struct rdzv_buf *b, uint8_t v);
int rdzv_buf_put_u32(struct rdzv_buf *b, uint32_t v);
int rdzv_buf_put_u64(struct rdzv_buf *b, uint64_t v);
/* u64 length followed by the bytes: PyTorch's string/byte-vector encoding. */
int rdzv_buf_put_str(struct rdzv_buf *b, const void *p, size_t n);
/* Unread bytes. */
static inline size_t rdzv_buf_avail(const struct rdzv_buf *b)
{
    return b->len - b->off;
}
static inline const uint8_t *rdzv_buf_head(const struct rdzv_buf *b)
{
    return b->data + b->off;
}
/* Drop n unread bytes from the front; the buffer is reset to empty once all is consumed. */
void rdzv_buf_consume(struct rdzv_buf *b, size_t n);
/* Move unread bytes to the front so the tail is as large as possible. */
void rdzv_buf_compact(struct rdzv_buf *b);
/* Release the allocation; the struct becomes an empty buffer. */
void rdzv_buf_free(struct rdzv_buf *b);
/* b's bytes as a NUL-terminated string the caller frees (b is then the caller's to forget), or
 * NULL when r (what the appends returned) is negative or out of memory, b freed. */
char *rdzv_buf_take_str(struct rdzv_buf *b, int r);

/* rdzv_get_u32/u64 and rdzv_set_u32/u64 (little-endian) live in rdzv-util.h. */
