/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-transport.h: the daemon's connections as byte streams: one struct rdzvd_conn per
 * connection (read buffer, output queue, backpressure, THE output cap, close and close after
 * flush, handshake deadline), the registry of all of them, deferred flushing. It knows nothing of
 * TCPStore, jobs or authentication: a session (struct rdzvd_session_ops) plugged into each
 * connection parses requests and queues replies.
 *
 * Ownership: the owner (the server) embeds struct rdzvd_transport and the groups; connections
 * belong to the transport and are freed in their close callback, after the session's closing()
 * and before the group's conn_gone(). Output buffers handed out stay the connection's.
 * Threads: everything here runs on the loop's thread, from libuv callbacks or from code they
 * call. Errors are negative errno values (libuv's UV_E* are the same numbers). */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <uv.h>

#include "common/rdzv-list.h"
#include "common/rdzv-log.h"
#include "daemon/net/rdzvd-accept-pace.h"

struct rdzv_buf;
struct rdzvd_ratelimit;
struct rdzvd_conn; /* opaque: fields live in rdzvd-transport-impl.h */
struct rdzvd_transport;

/* What a session does with a connection. All callbacks run on the loop thread. */
struct rdzvd_session_ops {
    const char *name; /* "tcpstore", "rdzv peer", ... for debug logs */
    /* Serve at most one request from p[0..n) (n > 0). Returns the bytes it used (> 0), 0 when
     * the request is not complete (rdzvd_conn_set_need() may say how many bytes it needs; a
     * session that handed c to another session with rdzvd_conn_set_session() may also return 0
     * and the new one is called at once), or -1 once c is closing or finishing (no more is read).
     * Replies go to rdzvd_conn_out(). */
    ssize_t (*serve)(struct rdzvd_conn *c, const uint8_t *p, size_t n);
    /* c starts closing (rdzvd_conn_close): drop what refers to it. Optional. */
    void (*closing)(struct rdzvd_conn *c);
    /* Past the output cap: true pauses reading (the peer may pipeline requests, e.g. TCPStore),
     * false closes the connection. */
    bool pause_at_cap;
};

/* Room for the state of the session in charge of a connection (rdzvd_conn_session_data()). The
 * transport never reads it; each session checks that its state fits (_Static_assert). As small as
 * the largest session (the TCPStore one, 72 bytes, rounded to max_align_t): it is paid by every
 * one of tens of thousands of idle connections. */
#define RDZVD_SESSION_BYTES 80

/* A set of connections closed together (a listener's); embedded by its owner. */
struct rdzvd_conn_group {
    struct rdzv_list conns;
    uint64_t n;
    /* Called after one of its connections was freed (from the close callback). */
    void (*conn_gone)(struct rdzvd_conn_group *g);
    /* Its listener and connection callback, behind the transport's accept pace: set by the
     * owner (rdzvd_paced_init) before the first accept. */
    struct rdzvd_paced paced;
};

struct rdzvd_transport_hooks {
    /* Output is held (t->hold): make it writable now, e.g. write the journal records it waits
     * for, then call rdzvd_transport_flush_pending(). Called before a connection is closed after
     * a protocol error, so that earlier replies still go out. */
    void (*release)(struct rdzvd_transport *t);
    /* c did not finish its handshake in time (rdzvd_conn_handshake_done never came). The hook
     * closes it. */
    void (*handshake_expired)(struct rdzvd_conn *c);
    /* The transport's own handle finished closing (after rdzvd_transport_done): t may be freed
     * now as far as the transport is concerned. Optional. */
    void (*closed)(struct rdzvd_transport *t);
    /* Before c's requests of a turn are served: true to serve them; false when the hook closed
     * c (e.g. a replica no longer the leader: its store may be stale). Optional. */
    bool (*may_serve)(struct rdzvd_transport *t, struct rdzvd_conn *c);
};

/* Per daemon; embedded by the server. Fields are the transport's, except those marked. */
struct rdzvd_transport {
    uv_loop_t *loop;
    const struct rdzvd_transport_hooks *hooks;
    void *ud;                  /* for the hooks (the server) */
    uint64_t max_outbuf;       /* THE output cap, bytes queued per connection (--max-outbuf) */
    uint64_t *proto_errors;    /* bumped by rdzvd_conn_protocol_error(); may be NULL */
    uint64_t *outbuf_closes;   /* bumped when output past the cap closes one; may be NULL */
    enum rdzv_log_level lifecycle_level; /* set by the owner: "closed" lines (default info) */
    bool hold;                 /* set by the owner: output waits until it calls flush_pending */
    uint8_t *scratch;          /* one read buffer shared by all connections (one thread) */
    size_t scratch_len;
    struct rdzv_list conns;    /* every connection */
    struct rdzv_list flush_list; /* connections with output queued from elsewhere */
    struct rdzv_list handshaking; /* oldest first: one timer for the oldest deadline is exact */
    uint64_t nconns;
    uint64_t next_id;
    uint64_t nhandshaking;     /* connections in handshaking */
    uint64_t max_handshaking;  /* set by the owner: past this many, or past max_hs_bytes of
                                * rdzvd_transport_hs_bytes(), a stale one is closed, if any
                                * (rdzvd_transport_shed_handshaking); 0: no such bound */
    uint64_t max_hs_bytes;
    uint64_t nclosing;         /* connections closing, their close callback yet to come */
    struct rdzvd_ratelimit *refusals; /* set by the owner: limits the lines about shed peers */
    uint64_t hs_timeout_ms;    /* 0: no handshake deadline */
    uint32_t *hs_per_addr;     /* connections before their handshake, per bucket of addresses
                                * (RDZVD_HS_ADDR_BUCKETS, keyed by hs_seed) */
    uint64_t hs_seed;
    uv_timer_t hs_timer;
    bool hs_timer_open;
    /* The per-turn budget (RDZVD_TURN_BYTES, RDZVD_TURN_FRAMES): a connection that used its
     * share of a loop turn stops reading; what it sent waits on the backlog, served from an idle
     * handle (active only while the backlog is not empty) one share per turn, oldest first. */
    struct rdzv_list backlog;
    uv_idle_t backlog_idle;
    uv_prepare_t turn_prepare; /* counts turns (turn); unreferenced: keeps no loop alive */
    uint64_t turn;
    /* Set by the owner: no request of any connection is served (what they send waits on the
     * backlog, read no further) until rdzvd_transport_resume(). A replicated rdzvd's leader
     * pauses while the changes of the requests served so far are being committed. */
    bool paused;
    /* Input held for requests not served yet (the buffers' sizes): all connections together
     * under max_input_bytes, those before their handshake under a quarter of it. Past either,
     * the connection holding the most is closed. Set by the owner; 0: no limit. */
    uint64_t max_input_bytes;
    uint64_t in_bytes, hs_in_bytes;
    struct rdzv_list holding;  /* connections holding input */
    /* A request incomplete this long closes its connection (set by the owner; 0: never). One
     * list in deadline order and one timer, as for handshakes. */
    uint64_t req_timeout_ms;
    struct rdzv_list requests;
    uv_timer_t req_timer;
    struct rdzvd_accept_pace accept_pace; /* shared by every group's listener */
    unsigned handles_closing;  /* of hs_timer, req_timer, backlog_idle, turn_prepare, accept_pace */
};

/* Set up t on loop. Returns 0 or a negative errno (-ENOMEM, uv_timer_init's). */
int rdzvd_transport_init(struct rdzvd_transport *t, uv_loop_t *loop,
                         const struct rdzvd_transport_hooks *hooks, void *ud, uint64_t max_outbuf,
                         uint64_t handshake_timeout_ms);
/* Close the transport's handles (asynchronous, hooks->closed follows; safe twice: returns
 * whether this call started the close) and, with free_buffers, release memory. Call with
 * free_buffers once the loop has finished. */
bool rdzvd_transport_done(struct rdzvd_transport *t, bool free_buffers);
/* Write out output that was queued from elsewhere (woken waits, other connections' requests,
 * timers) or held; nothing while t->hold. */
void rdzvd_transport_flush_pending(struct rdzvd_transport *t);
/* Clear t->paused and serve what waited meanwhile, from the next turn on. */
void rdzvd_transport_resume(struct rdzvd_transport *t);
/* Close every connection, handing the kernel what is queued first (shutdown). */
void rdzvd_transport_close_all(struct rdzvd_transport *t, const char *reason);

/* Accept the pending connection on g's listener (g->paced) into group g. It is registered, named
 * and has its handshake deadline running and a pre-handshake slot (past t->max_hs_bytes or
 * t->max_handshaking, taken from a stale connection if there is one:
 * rdzvd_transport_shed_handshaking), but reads nothing until rdzvd_conn_start(); the caller may
 * close it instead (refusals). *ret_addr gets the peer's
 * address (family 0 when unknown). Returns 0, -EAGAIN when the accept pace's budget is spent
 * (nothing made: g's connection callback comes again next turn), or another negative errno (c
 * is then closing, or was never made). */
int rdzvd_transport_accept(struct rdzvd_transport *t,
                           struct rdzvd_conn_group *g, struct rdzvd_conn **ret,
                           struct sockaddr_storage *ret_addr);
/* The same for a connection another thread accepted (rdzvd-acceptor.h): fd, non-blocking with
 * TCP_NODELAY, from addr. No pace here: the acceptor's taker paces. Returns 0, or a negative
 * errno (fd is closed, and c with it). */
int rdzvd_transport_adopt(struct rdzvd_transport *t, struct rdzvd_conn_group *g, int fd,
                          const struct sockaddr_storage *addr, struct rdzvd_conn **ret);
/* Put session ops in charge of c and start reading. 0 or a negative errno (c is then closed). */
int rdzvd_conn_start(struct rdzvd_conn *c, const struct rdzvd_session_ops *ops);
/* Hand c to another session from within serve(); its state area is for the new one to fill. */
void rdzvd_conn_set_session(struct rdzvd_conn *c, const struct rdzvd_session_ops *ops);
/* The session's state area (RDZVD_SESSION_BYTES, max-aligned). */
void *rdzvd_conn_session_data(const struct rdzvd_conn *c);
/* From serve(): do not call serve again until this many bytes are buffered. whole: the request
 * is that long in all, so that its buffer grows to hold it exactly (it is charged to
 * --max-input-bytes as it is held); otherwise by doubling, as a multi-key request learns its
 * length a field at a time. */
void rdzvd_conn_set_need(struct rdzvd_conn *c, size_t bytes, bool whole);
/* Connections before their handshake: the contract.
 *
 * Stale: still before its handshake RDZVD_HS_SHED_AGE_MS after its accept (the silence bound),
 * with nothing waiting unread in the kernel. Only a stale connection is ever closed to make room
 * for another: none younger, whatever the newcomer's address, so an honest storm (thousands of
 * ranks per host, several hosts at once, each silent while it imports) is never cut down by
 * itself or by another host. Past the budget (t->max_hs_bytes of rdzvd_transport_hs_bytes(), and
 * t->max_handshaking connections if set), or at the owner's --max-conns, a newcomer
 * (keep) takes the slot of the oldest stale one of its own address among the oldest few; if its
 * address has only busy or young ones there, of none; if it has none there, of the oldest stale
 * one of any address. With none to take, the pool runs over the budget while its connections are
 * young or busy: what bounds it is the owner's --max-conns, where the newcomer itself is refused
 * (never an older one), and the owner keeps the last slots from crowded addresses
 * (rdzvd_conn_hs_from_addr, RDZVD_HS_SPARE_DIV). Within the silence bound each one is through
 * its handshake, or stale and a slot for the next newcomer, or closed at its handshake deadline.
 *
 * rdzvd_transport_shed_handshaking closes the stale connection that keep takes the place of,
 * logging why; never keep. Returns whether one was closed. */
bool rdzvd_transport_shed_handshaking(struct rdzvd_transport *t, struct rdzvd_conn *keep,
                                      const char *why);
/* What one connection before its handshake costs rdzvd, input aside: its structure as the
 * allocator holds it and libuv's slot for its descriptor (under 1 KiB; the kernel's socket is
 * bounded by the owner's --max-conns). */
uint64_t rdzvd_conn_hs_cost(void);
/* What the connections before their handshake cost together: that, each, and the input they
 * hold. O(1). */
uint64_t rdzvd_transport_hs_bytes(const struct rdzvd_transport *t);
/* Connections before their handshake from c's address (an IPv6 one: its /64), c included while
 * it is one of them: an upper bound (addresses share a bucket of a keyed hash). O(1). */
uint64_t rdzvd_conn_hs_from_addr(const struct rdzvd_conn *c);
/* The handshake finished: cancel c's deadline, free its pre-handshake slot. O(1), safe twice. */
void rdzvd_conn_handshake_done(struct rdzvd_conn *c);
/* Whether c is still waiting for its handshake deadline. */
bool rdzvd_conn_handshaking(const struct rdzvd_conn *c);
struct rdzvd_conn_group *rdzvd_conn_group(const struct rdzvd_conn *c);
/* Whether ops is the session in charge of c. */
bool rdzvd_conn_in_session(const struct rdzvd_conn *c, const struct rdzvd_session_ops *ops);
/* Close every connection of g, with reason. */
void rdzvd_conn_group_close(struct rdzvd_conn_group *g, const char *reason);

/* The buffer to append outgoing bytes to, or NULL when c is closing. The bytes are written once
 * the current event is over (c is put on the flush list) and count against the output cap,
 * which is checked when they are flushed. */
struct rdzv_buf *rdzvd_conn_out(struct rdzvd_conn *c);
/* rdzvd_conn_out() for n bytes c did not ask for (a watch notification): NULL, the bytes never
 * made, when c is closing or when they would take its queued output past twice the cap (into an
 * empty queue they are always taken); c is then closed at its flush (logged, counted in
 * outbuf_closes). So no write of another client makes c hold more than twice the cap or one
 * notification, however much it changes. */
struct rdzv_buf *rdzvd_conn_out_room(struct rdzvd_conn *c, size_t n);
/* From serve() only: the buffer for the reply to the request being served. Written when the
 * batch of requests ends, under the same cap; cheaper than rdzvd_conn_out(). */
struct rdzv_buf *rdzvd_conn_reply(struct rdzvd_conn *c);
/* Close c once everything queued has been written. */
void rdzvd_conn_close_after_flush(struct rdzvd_conn *c);
/* Whether rdzvd_conn_close_after_flush() or _finish() was called on c. */
bool rdzvd_conn_closes_after_flush(const struct rdzvd_conn *c);
/* Stop reading c, write what is queued and close it then (after a refusal or an ERROR). */
void rdzvd_conn_finish(struct rdzvd_conn *c);
/* Log "<why>, closing connection" at warn, count a protocol error, hand the kernel the replies
 * queued before (as far as it takes them now), and close. */
void rdzvd_conn_protocol_error(struct rdzvd_conn *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Log "<fmt>, closing connection" for c at warn, unless rl had its share of lines in this window
 * (then the line is counted, and the next one logged says how many were dropped). */
void rdzvd_conn_warn_limited(struct rdzvd_conn *c, struct rdzvd_ratelimit *rl, const char *fmt,
                             ...) __attribute__((format(printf, 3, 4)));
/* Start closing c, logging reason at t->lifecycle_level (info unless set). Asynchronous: memory is
 * released in the close callback. The session's closing() runs at once. Safe to call twice. */
void rdzvd_conn_close(struct rdzvd_conn *c, const char *reason);
bool rdzvd_conn_closing(const struct rdzvd_conn *c);

const char *rdzvd_conn_peer(const struct rdzvd_conn *c);
uint64_t rdzvd_conn_id(const struct rdzvd_conn *c);
/* Bytes c sent that were not served yet: held unread by the kernel (FIONREAD) or read and
 * waiting for a later turn (the per-turn budget). 0 when none or unknown. A deadline timer that
 * finds input waiting has run late: the loop stalled, or was busy, since the peer spoke. */
size_t rdzvd_conn_unread(struct rdzvd_conn *c);
/* Our own address on c, as the peer reached it (v4-mapped shown as IPv4). 0 or -errno. */
int rdzvd_conn_local_addr(struct rdzvd_conn *c, char *buf, size_t len);
