/* SPDX-License-Identifier: Apache-2.0 */
/* agent-session-inplace.c: --recovery inplace, the ROUND's side: each running worker told the new
 * generation on its control channel, only the missing local ranks started (not those done), and
 * a worker that could not be told started again if it failed. (The failure's side, which
 * workers stay, is agent-session.c's.) */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <string.h>

#include "common/rdzv-log.h"
#include "common/rdzv-util.h"
#include "agent/group/agent-env.h"
#include "agent/session/agent-session-impl.h"
#include "agent/group/agent-workers.h"

/* The worker group's assignment for the current generation (strings in a->sm.round). */
void agent_session_round_assignment(const struct agent_session *a, struct agent_assignment *as)
{
    const struct rdzv_round *r = &a->sm.round;

    *as = (struct agent_assignment){
        .generation = r->generation,
        .node_rank = (unsigned)r->node_rank,
        .nnodes = (unsigned)r->nnodes,
        .rank_offset = (unsigned)r->rank_offset,
        .world_size = (unsigned)r->world_size,
        .master_addr = r->master_addr,
        .master_port = (unsigned)r->master_port,
        .nccl_id_hex = r->n_ids ? r->ids[0] : NULL,
        .restart_count = (unsigned)r->restart_count,
    };
}

/* --recovery inplace: a worker that could not be told the generation has exited: start its
 * replacement in it now (the others wait for it in their re-forming). 0 or -errno. */
int agent_session_replace_late(struct agent_session *a, unsigned local_rank)
{
    struct agent_assignment as;

    agent_session_round_assignment(a, &as);
    agent_session_front_assign(a, &as); /* its node's peers' front, as they were told */
    a->sm.late[local_rank] = false;
    memset(a->spawn, 0, (size_t)a->cfg.nproc * sizeof(*a->spawn));
    a->spawn[local_rank] = true;
    log_info("starting local rank %u again in generation %" PRIu64
             " (it ended before it could be told)", local_rank, as.generation);
    return agent_group_start_ranks(a->group, &as, a->spawn);
}

/* --recovery inplace, none running: start every rank but those done (their script ended with
 * exit 0: agent-policy A3a). 0 or -errno, as agent_group_start_ranks. */
int agent_session_start_ranks(struct agent_session *a, const struct agent_assignment *as)
{
    for (unsigned i = 0; i < (unsigned)a->cfg.nproc; i++)
        a->spawn[i] = !a->sm.done[i];
    return agent_group_start_ranks(a->group, as, a->spawn);
}

/* --recovery inplace: tell each running worker the new generation on its control channel (first,
 * so that they re-form while the others start), then start only the missing local ranks. A
 * worker that cannot be told (its channel is full: it does not read it) is killed: its exit is
 * then a failure of this generation. */
int agent_session_round_in_place(struct agent_session *a, const struct agent_assignment *as)
{
    unsigned kept = 0, missing = 0, n = (unsigned)a->cfg.nproc;
    char line[AGENT_ENV_CONTROL_LINE_MAX];

    for (unsigned i = 0; i < n; i++) {
        bool running = agent_group_rank_running(a->group, i);
        int len, e;

        a->spawn[i] = !running && !a->sm.done[i]; /* done: its script ended with exit 0 (A3a) */
        missing += a->spawn[i];
        if (!running)
            continue;
        len = agent_env_control_line(as, i, line, sizeof(line));
        e = len < 0 ? len : agent_group_control_send(a->group, i, line, (size_t)len);
        if (e == -ENOTCONN) {
            /* It closed its channel: it is exiting, and its exit is not seen yet. */
            log_info("worker (local rank %u) is exiting; it is started again if it failed", i);
            a->sm.late[i] = true;
            continue;
        }
        if (e < 0) {
            log_error_errno(e, "cannot tell worker (local rank %u) the new generation; killing it "
                            "and starting it again", i);
            agent_group_signal_rank(a->group, i, SIGKILL);
            a->sm.late[i] = true;
            continue;
        }
        kept++;
    }
    log_info("generation %" PRIu64 " in place: %u worker%s keep%s running, %u start%s",
             as->generation, kept, rdzv_plural(kept), kept == 1 ? "s" : "", missing,
             missing == 1 ? "s" : "");
    return agent_group_start_ranks(a->group, as, a->spawn);
}
