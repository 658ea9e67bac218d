/* SPDX-License-Identifier: Apache-2.0 */
/* agent-client-pf.c: the client's part of the network pre-flight (--preflight net, protocol
 * 1.23, docs/design/preflight.md): the link check's listener, opened with the client and sent
 * in JOIN "preflight" with a fresh token, and the probes rdzvd asks for (PREFLIGHT), answered
 * with their figures (PREFLIGHT_REPORT). Loop thread only. */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "agent/preflight/agent-preflight.h"
#include "agent/session/agent-client-impl.h"
#include "common/rdzv-buf.h"
#include "common/rdzv-log.h"
#include "common/rdzv-util.h"
#include "proto/rdzv-msg.h"
#include "proto/rdzv-preflight.h"

static bool numeric_addr(const char *a, struct sockaddr_storage *ss, uint16_t port)
{
    memset(ss, 0, sizeof(*ss));
    if (uv_ip4_addr(a, port, (struct sockaddr_in *)ss) == 0)
        return true;
    return uv_ip6_addr(a, port, (struct sockaddr_in6 *)ss) == 0;
}

int agent_client_pf_open(struct agent_client *c)
{
    struct rdzv_join_preflight *pf = &c->join.preflight;
    uint8_t token[AGENT_PF_TOKEN_LEN];
    struct sockaddr_storage ss;
    int r;

    if (!pf->on)
        return 0;
    /* On the workers' address when it is numeric; else on every address, and JOIN names the
     * one this agent reaches rdzvd from (agent_client_pf_addr). */
    c->pf_addr_auto = !pf->addr[0] || !numeric_addr(pf->addr, &ss, 0);
    if (c->pf_addr_auto) {
        pf->addr[0] = '\0';
        (void)numeric_addr("0.0.0.0", &ss, 0);
    }
    r = rdzv_random_bytes(token, sizeof(token));
    if (r == 0)
        r = agent_pf_server_start(c->loop, (const struct sockaddr *)&ss, token, &c->pf_server);
    if (r == 0 && (r = agent_pf_server_port(c->pf_server)) > 0) {
        pf->port = r;
        r = 0;
    }
    for (size_t i = 0; r == 0 && i < sizeof(token); i++)
        snprintf(pf->token + 2 * i, 3, "%02x", token[i]);
    explicit_bzero(token, sizeof(token));
    if (r < 0)
        log_error_errno(r, "cannot open the network pre-flight's listener");
    return r;
}

void agent_client_pf_addr(struct agent_client *c)
{
    struct rdzv_join_preflight *pf = &c->join.preflight;
    char a[INET6_ADDRSTRLEN];

    if (pf->on && c->pf_addr_auto && agent_client_local_addr(c, a, sizeof(a)) == 0)
        snprintf(pf->addr, sizeof(pf->addr), "%s", a);
}

static void probe_done(const struct agent_pf_result *res, void *ud)
{
    struct agent_client *c = ud;
    struct rdzv_preflight_report rep = {c->pf_id, res->up, res->down};
    struct rdzv_buf b = {0};
    int r;

    c->pf_probe = NULL;
    log_info("network pre-flight: link %" PRId64 ": %.1f MB/s up, %.1f MB/s down", rep.id,
             rep.up, rep.down);
    r = rdzv_msg_put_preflight_report(&b, &rep);
    if (r == 0 && c->tcp_open)
        r = c->pf_write(c, &b);
    else
        rdzv_buf_free(&b);
    if (r < 0)
        log_warn("cannot send the network pre-flight's figures: %s", strerror(-r));
}

void agent_client_pf_handle(struct agent_client *c, const uint8_t *body, size_t len)
{
    struct rdzv_preflight p;
    struct sockaddr_storage ss;
    uint8_t token[AGENT_PF_TOKEN_LEN];
    char err[256];
    int r;

    if (rdzv_msg_parse_preflight(body, len, &p, err, sizeof(err)) < 0) {
        log_warn("bad PREFLIGHT from rdzvd: %s", err);
        return;
    }
    if (!numeric_addr(p.addr, &ss, (uint16_t)p.port))
        return; /* cannot be: parsed as numeric */
    for (size_t i = 0; i < sizeof(token); i++)
        sscanf(p.token + 2 * i, "%2hhx", &token[i]);
    if (c->pf_probe) { /* rdzvd moved on: the older check's figures are of no use */
        agent_pf_probe_cancel(c->pf_probe);
        c->pf_probe = NULL;
    }
    c->pf_id = p.id;
    r = agent_pf_probe_start(c->loop, (const struct sockaddr *)&ss, token, (unsigned)p.bound_ms,
                             p.full, probe_done, c, &c->pf_probe);
    if (r < 0) {
        struct agent_pf_result res = {RDZV_PF_UNREACHABLE, RDZV_PF_UNREACHABLE};

        probe_done(&res, c);
    }
}

void agent_client_pf_close(struct agent_client *c)
{
    if (c->pf_probe)
        agent_pf_probe_cancel(c->pf_probe);
    c->pf_probe = NULL;
    if (c->pf_server)
        agent_pf_server_close(c->pf_server);
    c->pf_server = NULL;
}
