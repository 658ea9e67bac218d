/* SPDX-License-Identifier: Apache-2.0 */
/* agent-probe.h: what answers at an address that did not speak rdzvd's protocol. An agent
 * pointed at the wrong port (rdzvd's HTTP status page, another service, a listener that never
 * answers) must say what it reached and stop, not wait for rdzvd there forever. A peer that sent
 * bytes is judged by them; a silent one (an HTTP server waits for its client's whole request)
 * is asked once more on a connection of its own, as an HTTP client asks ("GET / HTTP/1.0").
 * Loop thread only. */
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

/* The probe's connection waits this long for its first bytes. */
#define AGENT_PROBE_MS 2000
/* The most bytes of a peer's answer kept to judge it (and quote a few of). */
#define AGENT_PROBE_READ 64

enum agent_peer {
    AGENT_PEER_SILENT, /* accepted the connection, sent nothing */
    AGENT_PEER_CLOSED, /* closed it (or refused it) without a byte */
    AGENT_PEER_HTTP,   /* "HTTP/..." */
    AGENT_PEER_OTHER,  /* bytes that are neither HTTP nor rdzvd's frames */
};

/* The kind of peer whose first bytes are p (n bytes, n > 0: not rdzvd's frames). */
enum agent_peer agent_peer_classify(const uint8_t *p, size_t n);
/* What the peer did, for a message that starts with its address: "answered like an HTTP
 * server", "answered 'SSH-2.0-...'", ... (p, n: its first bytes, quoted for OTHER). */
void agent_peer_describe(enum agent_peer k, const uint8_t *p, size_t n, char *buf, size_t len);

struct agent_probe;
/* Ask the peer at addr as an HTTP client; cb(kind, ud) fires once, within AGENT_PROBE_MS, with
 * what answered (never after agent_probe_cancel). 0 or a negative errno. */
int agent_probe_start(uv_loop_t *loop, const struct sockaddr *addr,
                      void (*cb)(enum agent_peer k, const uint8_t *p, size_t n, void *ud),
                      void *ud, struct agent_probe **ret);
/* Stop the probe (asynchronous close); its callback does not fire. */
void agent_probe_cancel(struct agent_probe *p);
