/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-acl.h: who may talk to rdzvd: the address allowlist for TCPStore clients
 * (--allow-store-from), the handshake deadline of new connections (--handshake-timeout) and the
 * rate limit of the log lines about refused peers. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <uv.h>

#include "../common/rdzv-list.h"

#define RDZVD_ACL_MAX 64
#define RDZVD_ACL_DEFAULT_WITH_TOKEN "127.0.0.0/8,::1"
#define RDZVD_HANDSHAKE_TIMEOUT_MS 10000

struct rdzvd_cidr {
    uint8_t v6;        /* 0: IPv4 (addr[0..4)), 1: IPv6 */
    uint8_t bits;      /* prefix length */
    uint8_t addr[16];
};

struct rdzvd_acl {
    unsigned n;
    struct rdzvd_cidr e[RDZVD_ACL_MAX];
    char desc[256];    /* as given, for log lines */
};

/* Parse "CIDR[,CIDR...]" (IPv4 or IPv6; an address without /N is one host). Returns 0 or -EINVAL
 * with a reason in err. */
int rdzvd_acl_parse(const char *s, struct rdzvd_acl *acl, char *err, size_t errlen);

/* Whether the peer address sa is in acl. IPv4-mapped IPv6 peers (::ffff:a.b.c.d) match as IPv4.
 * A NULL acl allows everyone. */
bool rdzvd_acl_allows(const struct rdzvd_acl *acl, const struct sockaddr *sa);

/* A connection that has not finished its handshake yet: linked in accept order, which is also
 * deadline order, so one timer for the oldest is exact. */
struct rdzvd_hs_entry {
    struct rdzv_list node;
    uint64_t deadline_ms; /* uv_now() based */
};

/* Per-server state (embedded in struct rdzvd_server). */
struct rdzvd_guard {
    struct rdzv_list handshaking; /* struct rdzvd_hs_entry.node, oldest first */
    uv_timer_t timer;
    bool timer_open;
    uint64_t timeout_ms;          /* 0: no deadline */
    uint64_t rl_window_ms;        /* log rate limit: start of the current window */
    unsigned rl_count;            /* lines logged in it */
    uint64_t rl_suppressed;       /* lines dropped since the last one logged */
};

struct rdzvd_server;

/* Set up / close srv's guard (called by rdzvd_server_init / _stop / _done). */
int rdzvd_guard_init(struct rdzvd_server *srv);
void rdzvd_guard_stop(struct rdzvd_server *srv);

/* Start e's handshake deadline (at accept). O(1). */
void rdzvd_guard_track(struct rdzvd_server *srv, struct rdzvd_hs_entry *e);
/* The handshake finished or the connection is closing. O(1), safe to call twice. */
void rdzvd_guard_untrack(struct rdzvd_hs_entry *e);

/* Rate limit for lines about refused or failed peers: true when this one may be logged; then
 * *ret_suppressed holds how many were dropped before it. At most 10 lines per 10 s. */
bool rdzvd_guard_may_log(struct rdzvd_server *srv, uint64_t *ret_suppressed);

/* Implemented by rdzvd-conn.c: the handshake of e's connection ran out of time. */
void rdzvd_conn_handshake_expired(struct rdzvd_hs_entry *e);
