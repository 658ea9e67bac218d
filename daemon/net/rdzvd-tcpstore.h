/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-tcpstore.h: the TCPStore session plugged into a transport connection: PyTorch TCPStore
 * requests in one of its numberings (proto/rdzv-tcpstore.h), served from a store, replies queued
 * on the connection. Peer mistakes close that connection with a logged reason.
 *
 * Ownership: the session's state lives in its connection (the transport's); store and env are
 * borrowed. Errors: none returned (peer mistakes and out of memory close the connection).
 * Threads: the loop's only (transport callbacks and the store's wake/watch callbacks). */
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "proto/rdzv-proto.h"
#include "daemon/data/rdzvd-store.h"

struct rdzvd_conn;
struct rdzvd_env;

/* Make c a TCPStore connection on st (borrowed: it must outlive c) with the opcode numbering
 * dialect, and put this session in charge of it. Called from another session's serve() (which
 * then returns 0 or the bytes it used) or before rdzvd_conn_start(). If c is still handshaking,
 * its first request completes the handshake. env must outlive c. Cannot fail. */
void rdzvd_tcpstore_begin(struct rdzvd_conn *c, const struct rdzvd_env *env,
                          struct rdzvd_store *st, enum rdzv_dialect dialect);

/* The store's callbacks for stores served by this session (rdzvd_store_new /
 * rdzvd_store_set_watch_cb): queue the reply of a woken WAIT / a PyTorch <= 2.0 WATCH_KEY
 * notification on the connection (ud). Out of memory closes it after its flush. */
void rdzvd_tcpstore_wake(struct rdzvd_waiter *w, void *ud);
void rdzvd_tcpstore_watch(struct rdzvd_waiter *w, void *ud, uint8_t type, const uint8_t *key,
                          size_t klen, const uint8_t *old, size_t oldlen, const uint8_t *nv,
                          size_t nvlen);
