/* SPDX-License-Identifier: Apache-2.0 */
/* agent-store.c: the generation's store on node rank 0's agent (agent-store.h). */
#include "agent/session/agent-store.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/rdzv-log.h"
#include "daemon/front/rdzvd-daemon.h"

struct agent_store {
    uv_loop_t *loop;
    struct rdzvd_daemon *srv;               /* a store host; NULL until the first open */
    char addr[RDZV_STORE_ADDR_MAX + 1];     /* what srv is bound to */
    char allow[RDZV_STORE_ALLOW_MAX + 1];   /* and whom it lets in ("": anywhere) */
    struct rdzvd_config cfg;                /* srv's (cfg.bind points at addr) */
    struct rdzvd_listener *cur, *next;      /* the running generation's, and one asked for */
    uint64_t cur_gen, next_gen;
};

int agent_store_new(uv_loop_t *loop, struct agent_store **ret)
{
    struct agent_store *s = calloc(1, sizeof(*s));

    if (!s)
        return -ENOMEM;
    s->loop = loop;
    *ret = s;
    return 0;
}

static void store_close(struct rdzvd_listener **l)
{
    if (*l)
        rdzvd_daemon_store_close(*l);
    *l = NULL;
}

/* Start the server on addr. 0 or a negative errno (logged). */
static int server_start(struct agent_store *s, const char *addr, const char *allow)
{
    int r;

    snprintf(s->addr, sizeof(s->addr), "%s", addr);
    snprintf(s->allow, sizeof(s->allow), "%s", allow);
    s->cfg = (struct rdzvd_config){
        .bind = s->addr,
        .port = 0,
        .legacy = RDZV_DIALECT_V20,
        .legacy_allowed = true,
        .lim = RDZV_LIMITS_DEFAULT,
        .embedded = true,
    };
    r = rdzvd_daemon_new_stores(s->loop, &s->cfg, allow, &s->srv);
    if (r == 0)
        r = rdzvd_daemon_listen(s->srv);
    if (r < 0) {
        log_error_errno(r, "cannot host the generation's store on %s", addr);
        s->srv = rdzvd_daemon_free(s->srv);
        s->addr[0] = '\0';
    }
    return r;
}

int agent_store_open(struct agent_store *s, uint64_t gen, const char *addr, const char *allow,
                     char addr_out[RDZV_STORE_ADDR_MAX + 1], uint16_t *port_out)
{
    char desc[64];
    int r;

    /* Started once, where the agent first reached rdzvd from: an address of this host, which
     * the agent's reconnects (another replica, another route) do not change. */
    if (!s->srv && (r = server_start(s, addr, allow)) < 0)
        return r;
    store_close(&s->next);
    snprintf(desc, sizeof(desc), "generation %" PRIu64 " store", gen);
    r = rdzvd_daemon_store_open(s->srv, desc, &s->next, port_out);
    if (r < 0) {
        log_error_errno(r, "cannot open generation %" PRIu64 "'s store on %s", gen, addr);
        return r;
    }
    s->next_gen = gen;
    snprintf(addr_out, RDZV_STORE_ADDR_MAX + 1, "%s", s->addr);
    log_info("hosting generation %" PRIu64 "'s store on %s:%u (TCPStore clients from %s)", gen,
             s->addr, *port_out, s->allow[0] ? s->allow : "anywhere");
    return 0;
}

void agent_store_round(struct agent_store *s, uint64_t gen)
{
    if (!s)
        return;
    if (s->cur && s->cur_gen < gen)
        store_close(&s->cur);
    if (s->next && s->next_gen == gen) {
        s->cur = s->next;
        s->cur_gen = gen;
        s->next = NULL;
    } else if (s->next && s->next_gen < gen) {
        store_close(&s->next);
    }
}

void agent_store_stop(struct agent_store *s)
{
    if (!s || !s->srv)
        return;
    store_close(&s->cur); /* the stores are the owner's to close, as rdzvd's job layer does */
    store_close(&s->next);
    rdzvd_daemon_stop(s->srv);
}

struct agent_store *agent_store_free(struct agent_store *s)
{
    if (!s)
        return NULL;
    (void)rdzvd_daemon_free(s->srv);
    free(s);
    return NULL;
}
