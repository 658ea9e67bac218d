/* SPDX-License-Identifier: Apache-2.0 */
/* agent-front-wire.h: what the store front (agent-front.c) knows of the TCPStore protocol's
 * replies, and its buffered writes: no state of the front's own.
 *
 * Ownership: an agent_front_out owns its buffers (agent_front_out_free).
 * Threads: the loop's only. */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "common/rdzv-buf.h"
#include "proto/rdzv-proto.h"

/* Whether op may change a key. */
bool agent_front_changes_keys(enum rdzv_op op);
/* The size of the store's whole reply to op (count: MULTI_GET's keys) at p[0..n): >= 0 (0: an
 * empty reply, MULTI_GET of no key), -EAGAIN when incomplete, -EPROTO when it is not one (a
 * value over AGENT_FRONT_REPLY_VALUE_MAX, an op without a reply). The store applies its own
 * limits, which may be wider than rdzv_limits' defaults: only a sanity bound here. */
#define AGENT_FRONT_REPLY_VALUE_MAX (1ull << 30)
ssize_t agent_front_reply_size(enum rdzv_op op, uint64_t count, const uint8_t *p, size_t n);
/* A read buffer at b's tail, of at least 64 KiB (compacted first); empty when out of memory. */
void agent_front_alloc_in(struct rdzv_buf *b, uv_buf_t *buf);

/* Bytes queued for a stream, written one batch at a time. */
struct agent_front_out {
    uv_write_t req;
    struct rdzv_buf next; /* queued */
    struct rdzv_buf cur;  /* being written */
    bool writing;
    /* A batch is written (status 0) or failed: the owner writes the next (kick) or closes. */
    void (*done)(struct agent_front_out *o, int status);
    void *ud;
};

/* Write what is queued, unless a batch is being written: 0 or a negative errno (nothing is
 * written then). */
int agent_front_out_kick(struct agent_front_out *o, uv_stream_t *s);
/* Its buffers freed (after its stream is closed: a batch's callback has run). */
void agent_front_out_free(struct agent_front_out *o);
