/* SPDX-License-Identifier: Apache-2.0 */
/* agent-session-report.c: a worker's failure as rdzvd hears it (WORKER_EXIT, dated by this
 * host's clock: its exit, or when it said its error; with the error it said, else the last line
 * it wrote to stderr; kept for the next connection when rdzvd cannot be reached now). Called by
 * agent-session.c and agent-session-hang.c; calls only the client. */
#include <stdio.h>
#include <string.h>
#include <sys/time.h>

#include "agent/group/agent-workers.h"
#include "agent/session/agent-client.h"
#include "agent/session/agent-session-impl.h"

void agent_session_report_failure(struct agent_session *a, int64_t rank, int64_t local_rank,
                                   int64_t code, int sig, const char *reason)
{
    struct rdzv_worker_exit *w = &a->pexit;
    struct timeval tv;

    gettimeofday(&tv, NULL);
    memset(w, 0, sizeof(*w));
    w->generation = a->sm.round.generation;
    w->rank = rank;
    w->local_rank = local_rank;
    w->exit_code = code;
    w->signal = sig;
    w->time = (double)tv.tv_sec + (double)tv.tv_usec / 1e6;
    snprintf(w->host, sizeof(w->host), "%s", a->cfg.host);
    if (reason)
        snprintf(w->reason, sizeof(w->reason), "%s", reason);
    else if (local_rank >= 0 && local_rank < a->cfg.nproc) { /* the error it died of (1.19) */
        double said = agent_group_worker_error_time(a->group, (unsigned)local_rank);

        snprintf(w->error, sizeof(w->error), "%s",
                 agent_group_worker_error(a->group, (unsigned)local_rank));
        if (said > 0 && said < w->time) /* it failed then; its exit (a teardown) came later */
            w->time = said;
    }
    a->pending_exit = agent_client_send_worker_exit(a->client, w) < 0;
}
