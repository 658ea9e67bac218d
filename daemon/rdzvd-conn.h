/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-conn.h: one client connection: read, parse, dispatch, write, close. */
#pragma once

struct rdzvd_server;
struct rdzvd_conn;

#include <stddef.h>
#include <stdint.h>

struct rdzvd_listener;
struct rdzv_buf;

/* Accept the pending connection on listener l and start reading it. The connection is owned by
 * the server's registry and freed after rdzvd_conn_close(). Returns 0 or a negative errno. */
int rdzvd_conn_accept(struct rdzvd_listener *l);

/* Close every connection that came in on l. */
void rdzvd_conn_close_listener(struct rdzvd_listener *l);

/* For the rendezvous code: the buffer to append an outgoing frame to (flushed after the current
 * event), or NULL when c is closing. */
struct rdzv_buf *rdzvd_conn_out(struct rdzvd_conn *c);
/* Close c once everything queued has been written (after an ERROR frame). */
void rdzvd_conn_close_after_flush(struct rdzvd_conn *c);
/* Attach the job member an agent connection stands for; rdzvd_job_conn_closed() gets it back. */
void rdzvd_conn_set_member(struct rdzvd_conn *c, void *member);
void *rdzvd_conn_get_member(const struct rdzvd_conn *c);
struct rdzvd_server *rdzvd_conn_server(const struct rdzvd_conn *c);
const char *rdzvd_conn_peer(const struct rdzvd_conn *c);
uint64_t rdzvd_conn_id(const struct rdzvd_conn *c);
/* Bytes the kernel holds unread on c's socket (FIONREAD), 0 when unknown. A deadline timer that
 * finds input waiting has run late: the loop stalled and has not polled since the peer spoke. */
size_t rdzvd_conn_unread(struct rdzvd_conn *c);
/* Our own address on c, as the peer reached it (v4-mapped shown as IPv4). 0 or -errno. */
int rdzvd_conn_local_addr(struct rdzvd_conn *c, char *buf, size_t len);

/* Start closing c, logging reason at info. Asynchronous: memory is released in the close
 * callback. Its waits are dropped at once. Safe to call twice. */
void rdzvd_conn_close(struct rdzvd_conn *c, const char *reason);

/* Close every connection (shutdown). */
void rdzvd_conn_close_all(struct rdzvd_server *srv);

/* Write out replies that other connections' requests queued (woken WAITs). */
void rdzvd_conn_flush_pending(struct rdzvd_server *srv);

/* The wake callback for the store: c's WAIT is satisfied. */
struct rdzvd_waiter;
void rdzvd_conn_wake(struct rdzvd_waiter *w, void *ud);
/* The store's watch callback: queue a PyTorch <= 2.0 WATCH_KEY notification to c. */
void rdzvd_conn_watch(struct rdzvd_waiter *w, void *ud, uint8_t type, const uint8_t *key,
                      size_t klen, const uint8_t *old, size_t oldlen, const uint8_t *nv,
                      size_t nvlen);
