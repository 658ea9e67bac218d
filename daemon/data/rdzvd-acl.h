/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-acl.h: who may talk to rdzvd: the address allowlist for TCPStore clients
 * (--allow-store-from) and the rate limit of the log lines about refused peers. Pure functions
 * over caller-owned structs: no I/O, no logging; any thread (rdzvd calls them from the loop).
 * Ownership: the caller's (struct rdzvd_acl and struct rdzvd_ratelimit are plain values).
 * Errors: negative errno (-EINVAL with a reason). */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

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

/* The rate limit of log lines about refused or failed peers: at most RDZVD_RATELIMIT_BURST lines
 * per RDZVD_RATELIMIT_WINDOW_MS. Embedded in its owner (the server); zeroed is ready. */
#define RDZVD_RATELIMIT_WINDOW_MS 10000
#define RDZVD_RATELIMIT_BURST 10
struct rdzvd_ratelimit {
    uint64_t window_ms;   /* start of the current window */
    unsigned count;       /* lines logged in it */
    uint64_t suppressed;  /* lines dropped since the last one logged */
};

/* True when one more line may be logged at now_ms (any monotonic clock in ms); then
 * *ret_suppressed holds how many were dropped before it. */
bool rdzvd_ratelimit_ok(struct rdzvd_ratelimit *rl, uint64_t now_ms, uint64_t *ret_suppressed);
