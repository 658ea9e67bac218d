/* SPDX-License-Identifier: Apache-2.0 */
/* agent-session-wait.c: no silent wait. rdzvd answers each HEARTBEAT with what the job waits for
 * (protocol 1.15: its nodes, a rebuilt generation's nodes, a restart's backoff; agent-client.h
 * on_wait); once a wait has lasted AGENT_WAIT_FIRST_MS the agent says so, and again every
 * AGENT_WAIT_EVERY_MS, with how long is left and what a user would check: two agents of one job
 * with another --endpoint or --rdzv-id wait for each other in vain until the join timeout. The
 * heartbeats set the pace: no timer of its own. */
#include <inttypes.h>
#include <stdio.h>

#include "common/rdzv-log.h"
#include "common/rdzv-util.h"
#include "agent/session/agent-session-impl.h"

#define AGENT_WAIT_FIRST_MS 10000
#define AGENT_WAIT_EVERY_MS 30000

/* " (S s left ...)" of left_ms, or "" when rdzvd set no end. */
static void left_text(int64_t left_ms, const char *what, char *buf, size_t len)
{
    if (left_ms < 0)
        buf[0] = '\0';
    else
        snprintf(buf, len, " (%.0f s left %s)", (double)left_ms / 1000, what);
}

void agent_session_on_wait(struct agent_client *c, const struct rdzv_wait *w, void *ud)
{
    struct agent_session *a = ud;
    const struct agent_endpoint *ep = &a->eps.ep[a->ep_last];
    uint64_t now = rdzv_now_ms();
    char nnodes[48], left[64];

    (void)c;
    if (w->what != a->wait_for) {
        a->wait_for = w->what;
        a->wait_began_ms = now;
        a->wait_line_ms = 0;
    }
    if (w->what == RDZV_WAIT_NONE || now - a->wait_began_ms < AGENT_WAIT_FIRST_MS ||
        (a->wait_line_ms && now - a->wait_line_ms < AGENT_WAIT_EVERY_MS))
        return;
    a->wait_line_ms = now;
    switch (w->what) {
    case RDZV_WAIT_NODES:
        if (w->need == w->max)
            snprintf(nnodes, sizeof(nnodes), "%" PRId64, w->max);
        else
            snprintf(nnodes, sizeof(nnodes), "%" PRId64 ":%" PRId64, w->need, w->max);
        left_text(w->left_ms, "before the join timeout", left, sizeof(left));
        if (a->sm.round.generation > 0) /* it ran, and lost a node: not a typo in the line */
            log_warn("still waiting for job %s's nodes: %" PRId64 " of --nnodes %s joined%s. The "
                     "job ran generation %" PRIu64 " and lost a node since (lost, or put aside: "
                     "rdzvctl status says which); another agent with the same line takes its "
                     "place",
                     a->cfg.run_id, w->nodes, nnodes, left, a->sm.round.generation);
        else
            log_warn("still waiting for job %s's nodes: %" PRId64 " of --nnodes %s joined%s. Are "
                     "the others started, with the same %s %s and %s %s:%u? Another id or "
                     "endpoint is another job",
                     a->cfg.run_id, w->nodes, nnodes, left,
                     a->cfg.run_id_flag ? a->cfg.run_id_flag : "--rdzv-id", a->cfg.run_id,
                     agent_endpoints_flag(&a->eps), ep->host, ep->port);
        break;
    case RDZV_WAIT_REBUILD:
        /* No time left: the window is over, and the nodes back still stop their workers. */
        if (w->left_ms < 0) {
            log_warn("waiting for the workers of %" PRId64 " node(s) of job %s to stop: the "
                     "next generation forms once they have (%" PRId64 " of %" PRId64 " stopped)",
                     w->need - w->nodes, a->cfg.run_id, w->nodes, w->need);
            break;
        }
        left_text(w->left_ms, "before it goes on without the others", left, sizeof(left));
        log_warn("waiting for the nodes of job %s to come back to rdzvd (rdzvd restarted, its "
                 "leader changed, or their connections closed): %" PRId64 " of %" PRId64
                 " back%s",
                 a->cfg.run_id, w->nodes, w->need, left);
        break;
    case RDZV_WAIT_BACKOFF:
        left_text(w->left_ms, "of the backoff", left, sizeof(left));
        log_info("the job restarts after a backoff (--restart-backoff): the next generation "
                 "forms then%s",
                 left);
        break;
    case RDZV_WAIT_NONE:
        break;
    }
}
