/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-peer.h: the rdzv-peer session plugged into a transport connection: the HELLO handshake,
 * the token challenge (AUTH), STORE (the rest of the connection speaks TCPStore), and every other
 * rendezvous message (proto/RENDEZVOUS.md) handed to the job layer through the handler table it
 * registers (struct rdzvd_peer_handler). This file never includes the job layer's headers.
 *
 * Ownership: the session's state lives in its connection (the transport's); the handler table
 * and env are borrowed and must outlive the connection. Errors: negative errno from the handler;
 * peer mistakes close that connection with an ERROR frame and a logged reason.
 * Threads: the loop's only (transport callbacks, and the job layer from its own callbacks). */
#pragma once
#include <stdbool.h>
#include <stdint.h>

struct rdzvd_conn;
struct rdzvd_env;
struct rdzvd_store;

/* The job layer's entry points, registered by rdzvd_daemon_new() (rdzvd-daemon.c) with the ud
 * each callback gets (rdzvd_server_set_peer_handler). */
struct rdzvd_peer_handler {
    /* One rendezvous message (after HELLO and AUTH) from c. Returns 0, or a negative errno after
     * which c is closed: after its output is flushed if the handler called
     * rdzvd_conn_close_after_flush() (an ERROR frame queued), at once otherwise. */
    int (*msg)(void *ud, struct rdzvd_conn *c, uint8_t op, const uint8_t *body, uint32_t len);
    /* c, which stood for member (rdzvd_conn_set_member), is closing. */
    void (*closed)(void *ud, struct rdzvd_conn *c, void *member);
    /* The daemon shuts down: drop everything built on the server (jobs, their listeners). */
    void (*shutdown)(void *ud);
    /* Optional (NULL: shutdown is called instead). A replica that led was deposed: drop its jobs
     * (they are the next leader's), keep what it needs to lead again and to end (the hosted
     * replicas' manager, --exit-when-idle). */
    void (*deposed)(void *ud);
    /* Optional (NULL: not told). This replica leads now, its log applied (after its election;
     * again after it was deposed and elected): take over the jobs the job table records. */
    void (*leading)(void *ud);
    /* Optional (NULL: not told). c finished its handshake (HELLO, and AUTH with a token): an rdzv
     * peer is connected; then, once, c stops being one (it closes, or STORE made it a TCPStore
     * client). Called in pairs, never for plain TCPStore connections. */
    void (*peer_up)(void *ud, struct rdzvd_conn *c);
    void (*peer_down)(void *ud, struct rdzvd_conn *c);
};

/* Make c an rdzv peer and put this session in charge of it; it must start with HELLO. store: the
 * key space STORE switches to (borrowed); store_ok: its address may use TCPStore without the
 * token (--allow-store-from). env must outlive c. Cannot fail. */
void rdzvd_peer_begin(struct rdzvd_conn *c, const struct rdzvd_env *env, struct rdzvd_store *store,
                      bool store_ok);

/* For the job layer, on connections of this session only (those handed to handler->msg). */
/* Attach the job member an agent connection stands for; handler->closed gets it back. */
void rdzvd_conn_set_member(struct rdzvd_conn *c, void *member);
void *rdzvd_conn_get_member(const struct rdzvd_conn *c);
/* Whether c speaks for the operator: it proved --admin-token-file, or rdzvd has no token at all
 * (then nothing is proved, and every peer is trusted alike). */
bool rdzvd_conn_is_operator(const struct rdzvd_conn *c);
