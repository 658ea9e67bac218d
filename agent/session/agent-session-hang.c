/* SPDX-License-Identifier: Apache-2.0 */
/* agent-session-hang.c: a worker that made no progress for --progress-timeout
 * (agent_session_group_hang): its stacks asked for and logged, then it is failed with where it
 * was stuck in its root cause. Calls into agent-session.c (agent-session-impl.h), never the
 * other way. */
#include <inttypes.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "common/rdzv-log.h"
#include "agent/group/agent-env.h"
#include "agent/session/agent-session-impl.h"
#include "agent/session/agent-session.h"
#include "agent/group/agent-stacks.h"
#include "agent/group/agent-workers.h"

/* A hung worker's stacks are in (or could not be had): fail it with the place it was stuck in
 * its root cause, if its generation still runs it (the machine decides: AGENT_IN_HUNG). */
static void hang_fail(struct hang_ctx *h, const char *reason)
{
    agent_session_feed(h->a, &(struct agent_input){.kind = AGENT_IN_HUNG,
                                                   .local_rank = h->local_rank, .gen = h->gen,
                                                   .text = reason});
}

static void hang_stacks_done(void *ud, const struct agent_stacks_result *r)
{
    struct hang_ctx *h = ud;
    struct agent_session *a = h->a;
    const char *line = r->text, *nl;
    char reason[RDZV_REASON_MAX + 1];

    a->stacks[h->local_rank] = NULL;
    log_warn("worker rank %" PRId64 " (local rank %u): its stacks (%s):",
             a->sm.round.rank_offset + h->local_rank, h->local_rank, r->source);
    for (; line && *line; line = nl ? nl + 1 : NULL) {
        nl = strchr(line, '\n');
        log_warn("  | %.*s", (int)(nl ? nl - line : (ptrdiff_t)strlen(line)), line);
    }
    if (r->culprit[0])
        (void)!snprintf(reason, sizeof(reason), "%.100s, %s%.150s", h->reason,
                        strncmp(r->culprit, "stopped", 7) ? "in " : "", r->culprit);
    else
        snprintf(reason, sizeof(reason), "%s", h->reason);
    hang_fail(h, reason);
}

void agent_session_group_hang(struct agent_group *g, unsigned local_rank, bool reported,
                              uint64_t last_step, uint64_t silent_ms, void *ud)
{
    struct agent_session *a = ud;
    struct hang_ctx *h = &a->hangs[local_rank];
    char file[4096] = "";
    const char *ef;
    bool announced = false;
    int pid = 0;

    if (a->stacks[local_rank]) /* they are being asked for already */
        return;
    h->asked = false;
    agent_session_feed(a, &(struct agent_input){.kind = AGENT_IN_SILENT,
                                                .local_rank = local_rank});
    if (!h->asked) /* the machine's: its generation does not run any more */
        return;
    *h = (struct hang_ctx){.a = a, .local_rank = local_rank, .asked = true, .gen = h->gen};
    if (reported)
        snprintf(h->reason, sizeof(h->reason), "made no progress for %.1f s after step %" PRIu64,
                 (double)silent_ms / 1000, last_step);
    else
        snprintf(h->reason, sizeof(h->reason),
                 "made no first progress report within %.1f s of its start",
                 (double)silent_ms / 1000);
    if (agent_group_hang_info(g, local_rank, &pid, &announced) < 0) {
        hang_fail(h, h->reason);
        return;
    }
    /* Where is it stuck? Ask it (or gdb, or /proc) before it is killed. */
    log_warn("worker rank %" PRId64 " (local rank %u, pid %d) %s: asking for its stacks",
             a->sm.round.rank_offset + local_rank, local_rank, pid, h->reason);
    ef = agent_group_error_file(g, local_rank);
    if (ef && agent_env_stacks_file(ef, file, sizeof(file)) < 0)
        file[0] = '\0';
    if (agent_stacks_collect(a->loop, pid, announced, file[0] ? file : NULL, hang_stacks_done, h,
                             &a->stacks[local_rank]) < 0) {
        a->stacks[local_rank] = NULL;
        hang_fail(h, h->reason);
    }
}
