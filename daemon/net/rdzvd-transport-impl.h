/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-transport-impl.h: PRIVATE to the transport's files (rdzvd-transport.c: deadlines, the
 * input budget, close, write, read; rdzvd-transport-registry.c: accept, the sessions' accessors,
 * the registry, the transport's lifetime): struct rdzvd_conn and the helpers these files share.
 * Nothing else includes it; the rest of rdzvd goes through rdzvd-transport.h.
 *
 * Calls go one way: rdzvd-transport-registry.c calls rdzvd-transport.c, never the reverse.
 * Threads: the loop's only, as rdzvd-transport.h says. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "common/rdzv-buf.h"
#include "common/rdzv-list.h"
#include "daemon/net/rdzvd-transport.h"

enum conn_state {
    CONN_OPEN,    /* reading or paused */
    CONN_CLOSING, /* uv_close called; waiting for the close callback */
    _CONN_STATE_MAX,
};

struct write_req {
    uv_write_t req;
    struct rdzvd_conn *conn;
    struct rdzv_buf buf;
};

struct rdzvd_conn {
    uv_tcp_t tcp; /* first: callbacks recover the connection from the handle */
    struct rdzvd_transport *t;
    struct rdzvd_conn_group *group;
    struct rdzv_list node;       /* in t->conns */
    struct rdzv_list group_node; /* in group->conns */
    struct rdzv_list flush_node; /* in t->flush_list while output waits to be flushed */
    struct rdzv_list hs_node;    /* in t->handshaking until the handshake is done */
    struct rdzv_list backlog_node; /* in t->backlog while its requests wait for a later turn */
    uint64_t turn;               /* t->turn when turn_bytes and turn_frames were counted from 0 */
    size_t turn_bytes;           /* served in that turn */
    unsigned turn_frames;
    bool over_budget;            /* the last parse stopped at the per-turn budget */
    struct rdzv_list holding_node; /* in t->holding while in_charged > 0 */
    size_t in_charged;           /* in.cap as counted in t->in_bytes (and t->hs_in_bytes) */
    struct rdzv_list req_node;   /* in t->requests while a request is incomplete */
    uint64_t req_deadline_ms;    /* uv_now() based */
    uint64_t nserved;            /* requests served */
    uint64_t req_mark;           /* nserved when the deadline was set */
    uint64_t hs_deadline_ms;     /* uv_now() based */
    uint64_t hs_since_ms;        /* accepted at (uv_now()) */
    uint8_t addr[16];            /* the peer's address, IPv4 as v4-mapped IPv6 (zero: unknown) */
    uint32_t hs_bucket;          /* its address's bucket in t->hs_per_addr, while hs_counted */
    bool hs_counted;             /* counted there (from accept to its handshake's end) */
    uint64_t id;
    char peer[64];
    enum conn_state state;
    bool reading;
    bool close_after_flush;      /* close once every queued byte is written */
    size_t overdue;              /* output refused past twice the cap (rdzvd_conn_out_room):
                                  * closed at its flush */
    const struct rdzvd_session_ops *ops;
    struct rdzv_buf in;   /* bytes of a request not complete yet */
    size_t need;          /* don't re-parse until in holds this many bytes */
    bool need_whole;      /* need is the whole request's length (rdzvd_conn_set_need) */
    struct rdzv_buf out;  /* output not handed to the kernel yet */
    struct write_req *wr; /* the write in flight, if any */
    union {
        max_align_t align;
        unsigned char bytes[RDZVD_SESSION_BYTES];
    } session;
};

/* An idle connection must stay cheap (no buffers held; the handle and this struct only). */
_Static_assert(sizeof(struct rdzvd_conn) <= 1024, "struct rdzvd_conn grew past 1 KiB");

/* rdzvd-transport.c, for accepting connections and the registry. */
/* Bytes the kernel holds unread on c's socket (FIONREAD), 0 when unknown. */
size_t rdzvd_conn_kernel_unread(struct rdzvd_conn *c);
/* Count c, its address now known, among its address's connections before their handshake. */
void rdzvd_hs_count(struct rdzvd_conn *c);
/* Past the budget, c takes the slot of a stale connection still handshaking, if there is one
 * (rdzvd_transport_shed_handshaking); else the pool runs over the budget. */
void rdzvd_hs_make_room(struct rdzvd_conn *c);
/* Give c a pre-handshake slot and a deadline. */
void rdzvd_hs_track(struct rdzvd_conn *c);
/* Hand queued output to the kernel: try a direct write, queue the rest with uv_write. */
void rdzvd_conn_flush(struct rdzvd_conn *c);
/* c's libuv read callbacks: the scratch buffer (or c->in after a partial request), and serving
 * what was read. */
void rdzvd_conn_alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
void rdzvd_conn_read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);
