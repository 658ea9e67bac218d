/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-tcpstore-apply.h: the TCPStore protocol as a function: one decoded request
 * (proto/rdzv-tcpstore.h) applied to a store yields its reply bytes, its wake-ups and an error,
 * with no connection in it. rdzvd-tcpstore.c is the thin adapter that feeds it a connection's
 * requests; tests/fuzz/fuzz-tcpstore.c drives the same function.
 *
 * Reply sizes: a request costs what it sends. No reply may be larger than
 * lim->max_outbuf (--max-outbuf), or than a reply of one value (u64 length, max_value_len bytes,
 * framing) where that is larger: only MULTI_GET (many large values) and LIST (every key) can be,
 * and they are sized from the store before a byte of the reply is produced, and refused
 * (-ENOBUFS, a peer mistake: the connection closes) when they would be. Together with the
 * transport's check before each request (nothing is served while more than --max-outbuf waits to
 * be written), what one connection has queued stays under about twice --max-outbuf however it
 * pipelines; before, one 9 KB MULTI_GET naming an 8 MiB key 1,024 times built an 8 GiB reply.
 *
 * Wake-ups: a write that completes other clients' WAITs, or changes a watched key, calls the
 * store's callbacks (rdzvd_store_new's wake, rdzvd_store_set_watch_cb's watch) with those
 * clients' waiters, before rdzvd_tcpstore_apply returns.
 * Ownership: everything is borrowed. Threads: the store's (the loop's). */
#pragma once
#include <stdbool.h>
#include <stddef.h>

#include "common/rdzv-buf.h"
#include "proto/rdzv-tcpstore.h"
#include "daemon/data/rdzvd-store.h"

/* What one request did besides its reply bytes. */
struct rdzvd_tcpstore_res {
    bool waiting;    /* a WAIT on missing keys: its reply comes later, through the wake callback */
    char error[224]; /* a peer mistake: why the connection must close ("" otherwise) */
};

/* Apply req to st on behalf of the client whose waits and watches are w, appending the reply
 * bytes (none for a SET, a WAIT still waiting) to out. lim: the limits named in error texts.
 * Returns 0; or a negative errno: with res->error set the request is the peer's mistake
 * (-EPROTO: an operation not allowed here; -EINVAL, -ERANGE: ADD on a value that is not a 64-bit
 * decimal integer or would overflow; -EMSGSIZE: a value or a wait list past its limit, an APPEND
 * included: it changes nothing; -ENOSPC: the store budget is spent; -ENOBUFS: a reply past the
 * output cap, above), else rdzvd failed (-ENOMEM). On an error, out may hold part of a
 * reply, which must not be sent. */
int rdzvd_tcpstore_apply(struct rdzvd_store *st, struct rdzvd_waiter *w,
                         const struct rdzv_limits *lim, const struct rdzv_req *req,
                         struct rdzv_buf *out, struct rdzvd_tcpstore_res *res);
