/* SPDX-License-Identifier: Apache-2.0 */
/* agent-host.h: an agent that starts the job's rdzvd itself (torchrun's c10d and static
 * rendezvous, with no daemon started by hand), so that the daemon outlives the agent.
 *
 * agent_host_maybe_start() first tries to connect to the endpoint: if something answers, nobody
 * hosts. Otherwise this agent hosts when it must (static node rank 0, --rdzv-conf is_host=1), when
 * the kernel lets it bind() the endpoint's address (so the address is this host's: no hostname
 * matching), or when it is node rank 0 (then on the wildcard address); agents of one host that
 * all qualify (loopback) race for the UDP port of the same address and number, and the one that
 * gets it hosts while the others join. Hosting means: the real rdzvd binary (found beside
 * rdzv-agent, or ../daemon/ in the build tree, or PATH), double-forked into a session of its own
 * (setsid; not a child of the agent), cwd /, stdout and stderr appended to its log, run as
 * `rdzvd --bind A --port P --exit-when-idle AGENT_HOST_IDLE --ready-fd 3 --remove-dir D ...`.
 * D is $TMPDIR/rdzvd-host-<port>-XXXXXX, made for it: its log (D/rdzvd.log, or
 * <--log-dir>/rdzvd-host-<port>.log, kept) and, as a replica, its Raft log (D/state). rdzvd
 * deletes D when it ends normally. rdzvd itself ends as soon as its job has ended and no agent
 * is connected, once no agent has been connected for 5 s (a job still held: its agents gone), or
 * when none came within 180 s. So when the hosting agent is SIGKILLed
 * the daemon goes on, as one started by hand; when its node dies, the job's rendezvous dies
 * with it (docs/guide/from-torchrun.md). The agent waits for rdzvd's readiness on the
 * --ready-fd pipe (its port, or EOF when it exited first: another agent's rdzvd took the port),
 * up to AGENT_HOST_READY_MS.
 *
 * The session calls it again when the endpoint refuses a connection before its first JOINED
 * (agent_session_cfg.rehost): what answered the first look may have been an rdzvd exiting (a run
 * that had just ended).
 *
 * Ownership: nothing is kept; cfg strings are borrowed for the call.
 * Errors: negative errno; a failure to host is logged and the caller carries on as a client.
 * Threads: main() before the loop runs (it blocks up to AGENT_HOST_READY_MS + 2 s; it forks). */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "common/rdzv-log.h"

/* rdzvd --exit-when-idle: the job ended and no agent is connected, or none for 5 s; none came
 * in 180 s. */
#define AGENT_HOST_IDLE "5:180"
#define AGENT_HOST_READY_FD 3     /* rdzvd's --ready-fd */
#define AGENT_HOST_LIFELINE_FD 4  /* the same pipe, left open: its reader sees rdzvd's exit */
#define AGENT_HOST_READY_MS 10000 /* how long the agent waits for it to listen */

struct agent_host_cfg {
    const char *host;       /* the endpoint's host */
    uint16_t port;          /* and port */
    const char *self_exe;   /* rdzv-agent's path: rdzvd is looked for beside it */
    bool must;              /* host without the bind check (static node rank 0, is_host=1) */
    bool rank0;             /* node rank 0: host on the wildcard address if the bind check fails */
    const char *token_file; /* passed to rdzvd, or NULL */
    const char *replica_key_file; /* passed to rdzvd when it is a replica (replicas > 1) */
    /* More than 1: rdzvd is the first replica (--peers itself, --replicas N, its Raft log in
     * its directory), and asks agents on other hosts for the others. */
    unsigned replicas;
    const char *log_dir; /* --log-dir: rdzvd's log goes there, kept; NULL: in its directory */
    int metrics_port;    /* --metrics-port, passed to rdzvd (0: a free one); -1: none */
    const char *metrics_bind; /* --metrics-bind, passed to rdzvd with it (not its --bind) */
    enum rdzv_log_level level;
};

/* Where a hosted rdzvd logs: log_dir/<fmt...> (log_dir made if missing), else dir/rdzvd.log in
 * the directory made for it (deleted with it, rdzvd --remove-dir). 0 or a negative errno
 * (logged). */
int agent_host_log_path(char *out, size_t n, const char *log_dir, const char *dir,
                        const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* The last non-empty line of the log at path (at most n - 1 bytes of it) into out, or a note
 * that there is none. */
void agent_host_log_tail(const char *path, char *out, size_t n);
/* rdzvd beside self_exe (installed), in the build tree, or in PATH, into out. 0 or -ENOENT. */
int agent_host_find_rdzvd(const char *self_exe, char *out, size_t n);
/* Start argv (rdzvd) double-forked into a session of its own, cwd /, stdin /dev/null, stdout and
 * stderr appended to log_path, ready_w as its fd AGENT_HOST_READY_FD and again as
 * AGENT_HOST_LIFELINE_FD (the caller closes its own copy): the read end gets the port, then EOF
 * only when rdzvd exits. 0 once the intermediate child is reaped, or a negative errno. */
int agent_host_spawn(char **argv, int ready_w, const char *log_path);

/* Returns 1 when this agent started rdzvd (and it accepts connections), 0 when something answers
 * already or another agent is to host, or a negative errno (logged). */
int agent_host_maybe_start(const struct agent_host_cfg *cfg);
