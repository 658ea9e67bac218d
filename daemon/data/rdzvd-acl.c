/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-acl.c: address allowlist (--allow-store-from) and the refusal log limit. */
#include "daemon/data/rdzvd-acl.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


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

bool rdzvd_ratelimit_ok(struct rdzvd_ratelimit *rl, uint64_t now_ms, uint64_t *ret_suppressed)
{
    if (now_ms - rl->window_ms >= RDZVD_RATELIMIT_WINDOW_MS || rl->window_ms == 0) {
        rl->window_ms = now_ms ? now_ms : 1;
        rl->count = 0;
    }
    if (rl->count >= RDZVD_RATELIMIT_BURST) {
        rl->suppressed++;
        return false;
    }
    rl->count++;
    *ret_suppressed = rl->suppressed;
    rl->suppressed = 0;
    return true;
}
