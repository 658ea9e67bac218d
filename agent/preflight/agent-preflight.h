/* SPDX-License-Identifier: Apache-2.0 */
/* agent-preflight.h: the network pre-flight's link check between two agents
 * (docs/design/preflight.md). Each agent listens on its local address; a probe connects to a
 * peer's listener twice, once for each way. On each connection it first sends a hello: the magic
 * "RDZVPF1\n", the job's 16-byte token, and 'D' (the listener sends) or 'U' (the probe sends).
 * The receiver measures: from its first byte, for AGENT_PF_WINDOW_MS or AGENT_PF_BYTES, whichever
 * ends first; 'd' and 'u' are the same ways with AGENT_PF_FULL_BYTES, so that the whole window
 * runs (a full probe: the pre-flight's confirmation). For 'U' ('u') the listener reports its
 * figure back (bytes, microseconds: two little-endian u64). A connect that fails (nobody
 * listens yet) or takes AGENT_PF_ATTEMPT_MS is tried again, AGENT_PF_RETRY_MS after a failure,
 * while the way's bound lasts: a busy peer that accepts late is measured. A way that does not
 * connect or finish within the probe's bound is unreachable.
 *
 * The listener serves AGENT_PF_CONNS_MAX connections at once: a new one closes the oldest still
 * without its hello, or is closed when all are past theirs. A connection whose
 * hello is not whole and right within AGENT_PF_HELLO_MS is closed; after its hello, a connection
 * lives at most AGENT_PF_BOUND_MS, and the listener sends at most AGENT_PF_BYTES (a full
 * probe's: AGENT_PF_FULL_BYTES) + AGENT_PF_CHUNK * 4 bytes on it.
 * Loop thread only; errors are negative errnos. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#define AGENT_PF_TOKEN_LEN 16
#define AGENT_PF_MAGIC "RDZVPF1\n"
#define AGENT_PF_HELLO_LEN (8 + AGENT_PF_TOKEN_LEN + 1)
#define AGENT_PF_HELLO_MS 2000      /* a connection's whole hello, else it is closed */
#define AGENT_PF_CONNS_MAX 8        /* connections a listener serves at once */
#define AGENT_PF_WINDOW_MS 300      /* one way's measure, from its first byte ... */
#define AGENT_PF_BYTES (16u << 20)  /* ... or this many bytes, whichever ends first */
#define AGENT_PF_FULL_BYTES (1u << 30) /* a full probe's bytes: the window ends it */
#define AGENT_PF_BOUND_MS 3000      /* a connection's life; a probe's default bound for each way */
#define AGENT_PF_CHUNK (256u << 10) /* one write */
#define AGENT_PF_ATTEMPT_MS 500     /* one connect, then a new one, within the way's bound */
#define AGENT_PF_RETRY_MS 50        /* the wait after a failed connect (refused) */

/* A link's figures from the probe's side: MB/s each way, or RDZV_PF_UNREACHABLE. */
struct agent_pf_result {
    double up;   /* probe -> listener */
    double down; /* listener -> probe */
};

struct agent_pf_server;
/* Listen on addr (port 0: any) for probes that know token. 0 or a negative errno. */
int agent_pf_server_start(uv_loop_t *loop, const struct sockaddr *addr,
                          const uint8_t token[AGENT_PF_TOKEN_LEN], struct agent_pf_server **ret);
/* The port it listens on, or a negative errno. */
int agent_pf_server_port(struct agent_pf_server *s);
/* Close it and its connections (asynchronously). */
void agent_pf_server_close(struct agent_pf_server *s);

struct agent_pf_probe;
/* Measure the link to the listener at peer, each way, each within bound_ms (its connects, tried
 * again while it lasts, and the transfer); full: up to AGENT_PF_FULL_BYTES a way, so the whole
 * window runs. cb fires once, then the probe frees itself. 0 or a negative errno. */
int agent_pf_probe_start(uv_loop_t *loop, const struct sockaddr *peer,
                         const uint8_t token[AGENT_PF_TOKEN_LEN], unsigned bound_ms, bool full,
                         void (*cb)(const struct agent_pf_result *r, void *ud), void *ud,
                         struct agent_pf_probe **ret);
/* Stop it; its callback does not fire. Not after the callback fired. */
void agent_pf_probe_cancel(struct agent_pf_probe *p);
