/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-acl.c: address allowlist, handshake deadlines (one list, one timer), refusal log limit. */
#include "rdzvd-acl.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rdzvd-server.h"

#define RL_WINDOW_MS 10000
#define RL_BURST 10

static int parse_one(const char *tok, struct rdzvd_cidr *c, char *err, size_t errlen)
{
    char addr[INET6_ADDRSTRLEN + 8];
    const char *slash = strchr(tok, '/');
    size_t alen = slash ? (size_t)(slash - tok) : strlen(tok);
    unsigned max;
    long bits;

    if (alen == 0 || alen >= sizeof(addr)) {
        snprintf(err, errlen, "'%s' is not an address or CIDR", tok);
        return -EINVAL;
    }
    memcpy(addr, tok, alen);
    addr[alen] = '\0';
    memset(c, 0, sizeof(*c));
    if (inet_pton(AF_INET, addr, c->addr) == 1) {
        c->v6 = 0;
        max = 32;
    } else if (inet_pton(AF_INET6, addr, c->addr) == 1) {
        c->v6 = 1;
        max = 128;
    } else {
        snprintf(err, errlen, "'%s' is not an IPv4 or IPv6 address", addr);
        return -EINVAL;
    }
    bits = max;
    if (slash) {
        char *end;

        bits = strtol(slash + 1, &end, 10);
        if (slash[1] == '\0' || *end != '\0' || bits < 0 || bits > (long)max) {
            snprintf(err, errlen, "'%s': prefix length must be 0..%u", tok, max);
            return -EINVAL;
        }
    }
    c->bits = (uint8_t)bits;
    /* Clear host bits so that matching is a plain prefix compare. */
    for (unsigned i = 0; i < 16; i++) {
        unsigned keep = c->bits > i * 8 ? c->bits - i * 8 : 0;

        if (keep < 8)
            c->addr[i] &= (uint8_t)(0xff00u >> keep);
    }
    return 0;
}

int rdzvd_acl_parse(const char *s, struct rdzvd_acl *acl, char *err, size_t errlen)
{
    char *copy, *save = NULL, *tok;
    int r = 0;

    memset(acl, 0, sizeof(*acl));
    snprintf(acl->desc, sizeof(acl->desc), "%s", s);
    copy = strdup(s);
    if (!copy)
        return -ENOMEM;
    for (tok = strtok_r(copy, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save)) {
        if (acl->n == RDZVD_ACL_MAX) {
            snprintf(err, errlen, "more than %d entries", RDZVD_ACL_MAX);
            r = -EINVAL;
            break;
        }
        r = parse_one(tok, &acl->e[acl->n], err, errlen);
        if (r < 0)
            break;
        acl->n++;
    }
    free(copy);
    if (r == 0 && acl->n == 0) {
        snprintf(err, errlen, "no address given");
        r = -EINVAL;
    }
    return r;
}

static bool prefix_match(const uint8_t *a, const uint8_t *net, unsigned bits)
{
    unsigned full = bits / 8, rest = bits % 8;

    if (memcmp(a, net, full) != 0)
        return false;
    return rest == 0 || ((a[full] ^ net[full]) & (uint8_t)(0xff00u >> rest)) == 0;
}

bool rdzvd_acl_allows(const struct rdzvd_acl *acl, const struct sockaddr *sa)
{
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    const uint8_t *a;
    bool v6;

    if (!acl)
        return true;
    if (sa->sa_family == AF_INET) {
        a = (const uint8_t *)&((const struct sockaddr_in *)sa)->sin_addr;
        v6 = false;
    } else if (sa->sa_family == AF_INET6) {
        a = ((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr;
        v6 = true;
        if (memcmp(a, mapped, sizeof(mapped)) == 0) {
            a += 12;
            v6 = false;
        }
    } else {
        return false;
    }
    for (unsigned i = 0; i < acl->n; i++)
        if (acl->e[i].v6 == v6 && prefix_match(a, acl->e[i].addr, acl->e[i].bits))
            return true;
    return false;
}

static void guard_arm(struct rdzvd_server *srv);

static void guard_timer_cb(uv_timer_t *t)
{
    struct rdzvd_server *srv = t->data;
    struct rdzvd_guard *g = &srv->guard;
    uint64_t now = uv_now(srv->loop);

    while (!rdzv_list_empty(&g->handshaking)) {
        struct rdzvd_hs_entry *e =
            rdzv_container_of(g->handshaking.next, struct rdzvd_hs_entry, node);

        if (e->deadline_ms > now)
            break;
        rdzvd_guard_untrack(e);
        rdzvd_conn_handshake_expired(e);
    }
    guard_arm(srv);
}

/* (Re)arm the timer for the oldest connection still handshaking. Entries that finished early
 * leave the timer set for a deadline that is gone: it then fires once for nothing and rearms. */
static void guard_arm(struct rdzvd_server *srv)
{
    struct rdzvd_guard *g = &srv->guard;
    struct rdzvd_hs_entry *e;
    uint64_t now = uv_now(srv->loop);

    if (!g->timer_open || rdzv_list_empty(&g->handshaking))
        return;
    e = rdzv_container_of(g->handshaking.next, struct rdzvd_hs_entry, node);
    (void)uv_timer_start(&g->timer, guard_timer_cb, e->deadline_ms > now ? e->deadline_ms - now : 0,
                         0);
}

int rdzvd_guard_init(struct rdzvd_server *srv)
{
    struct rdzvd_guard *g = &srv->guard;
    int r;

    rdzv_list_init(&g->handshaking);
    g->timeout_ms = srv->cfg.handshake_timeout_ms;
    r = uv_timer_init(srv->loop, &g->timer);
    if (r < 0)
        return r;
    g->timer.data = srv;
    g->timer_open = true;
    return 0;
}

void rdzvd_guard_stop(struct rdzvd_server *srv)
{
    struct rdzvd_guard *g = &srv->guard;

    if (!g->timer_open)
        return;
    g->timer_open = false;
    uv_close((uv_handle_t *)&g->timer, NULL);
}

void rdzvd_guard_track(struct rdzvd_server *srv, struct rdzvd_hs_entry *e)
{
    struct rdzvd_guard *g = &srv->guard;
    bool was_empty = rdzv_list_empty(&g->handshaking);

    rdzv_list_init(&e->node);
    if (g->timeout_ms == 0 || !g->timer_open)
        return;
    e->deadline_ms = uv_now(srv->loop) + g->timeout_ms;
    rdzv_list_add_tail(&g->handshaking, &e->node);
    /* A running timer already points at an older (or equal) deadline. */
    if (was_empty || !uv_is_active((uv_handle_t *)&g->timer))
        guard_arm(srv);
}

void rdzvd_guard_untrack(struct rdzvd_hs_entry *e)
{
    if (e->node.next)
        rdzv_list_del(&e->node);
}

bool rdzvd_guard_may_log(struct rdzvd_server *srv, uint64_t *ret_suppressed)
{
    struct rdzvd_guard *g = &srv->guard;
    uint64_t now = uv_now(srv->loop);

    if (now - g->rl_window_ms >= RL_WINDOW_MS || g->rl_window_ms == 0) {
        g->rl_window_ms = now ? now : 1;
        g->rl_count = 0;
    }
    if (g->rl_count >= RL_BURST) {
        g->rl_suppressed++;
        return false;
    }
    g->rl_count++;
    *ret_suppressed = g->rl_suppressed;
    g->rl_suppressed = 0;
    return true;
}
