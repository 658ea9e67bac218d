/* SPDX-License-Identifier: Apache-2.0 */
/* agent-host.h: an agent that starts the job's rdzvd itself (torchrun's c10d and static
 * rendezvous, with no daemon started by hand), so that the daemon outlives the agent.
 *
 * agent_host_maybe_start() first tries to connect to the endpoint: if something answers, nobody
 * hosts. Otherwise this agent hosts when it must (static node rank 0, --rdzv-conf is_host=1), when
 * the kernel lets it bind() the endpoint's address (so the address is this host's: no hostname
 * matching), or when it is node rank 0 (then on the wildcard address); agents of one host that
 * all qualify (loopback) race for the UDP port of the same address and number, and the one that
 * gets it hosts while the others join. Hosting means: a process
 * of its own session (setsid), `rdzv-agent --host-watch IDLE_MS PORT -- rdzvd --bind A --port P
 * ...`, not a child of the agent, that runs the real rdzvd binary (found beside rdzv-agent, or
 * ../daemon/ in the build tree, or PATH) and ends it once no agent has been connected to PORT for
 * IDLE_MS (the job is over), or when none came within AGENT_HOST_FIRST_MS. So when the hosting
 * agent is SIGKILLed the daemon goes on, as one started by hand; when its node dies, the job's
 * rendezvous dies with it (README). The daemon's output goes to
 * $TMPDIR/rdzvd-host-<port>.log.
 *
 * Ownership: nothing is kept; cfg strings are borrowed for the call.
 * Errors: negative errno; a failure to host is logged and the caller carries on as a client.
 * Threads: main() before the loop runs (it blocks up to a few seconds; it forks). */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "../common/rdzv-log.h"

#define AGENT_HOST_IDLE_MS 5000    /* no agent connected this long: the job is over */
#define AGENT_HOST_FIRST_MS 180000 /* no agent ever came: give up */

struct agent_host_cfg {
    const char *host;       /* the endpoint's host */
    uint16_t port;          /* and port */
    const char *self_exe;   /* rdzv-agent's path: rdzvd is looked for beside it */
    bool must;              /* host without the bind check (static node rank 0, is_host=1) */
    bool rank0;             /* node rank 0: host on the wildcard address if the bind check fails */
    const char *token_file; /* passed to rdzvd, or NULL */
    enum rdzv_log_level level;
};

/* Returns 1 when this agent started rdzvd (and it accepts connections), 0 when something answers
 * already or another agent is to host, or a negative errno (logged). */
int agent_host_maybe_start(const struct agent_host_cfg *cfg);

/* The `rdzv-agent --host-watch IDLE_MS PORT -- RDZVD [ARGS...]` process. Returns its exit
 * status: rdzvd's, or 0 when it ended it for idleness. */
int agent_host_watch_main(int argc, char **argv);
