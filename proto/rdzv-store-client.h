/* SPDX-License-Identifier: Apache-2.0 */
/* rdzv-store-client.h: the one blocking PyTorch TCPStore client (modern numbering), over one
 * TCP connection, used by rdzvctl (ctl/) and the trainer's gloo rendezvous (train/).
 *
 * Two levels:
 *  - request calls (set, wait, get, add) send one request and read its reply, each within a
 *    timeout; the first error is sticky: every later request call returns it at once;
 *  - raw calls (send, recv) move bytes within an absolute deadline, for callers that build
 *    their own pipelines (rdzvctl sends VALIDATE, PING and a request in one write, and speaks
 *    the rendezvous handshake on the same socket before TCPStore). They are never sticky.
 *
 * Deadlines are absolute times on rdzv_now_ms()'s clock; 0 means none (wait forever).
 * Ownership: rdzv_store_client_connect() returns an object the caller frees with
 * rdzv_store_client_free(), which closes the socket. Values returned by get are malloc'ed and
 * the caller's.
 * Errors: negative errno. -ETIMEDOUT past the deadline, -ECONNRESET when the peer closed the
 * connection, -EPROTO for a reply that makes no sense, -ENXIO when the host name does not
 * resolve, -ENOMEM, -ECANCELED when the cancel descriptor became readable (connect_cancel);
 * other socket errors as they come.
 * Threads: blocking calls; one connection is used by one thread at a time. No loop needed.
 */
#pragma once
#include <stddef.h>
#include <stdint.h>

struct rdzv_store_client;

enum {
    RDZV_STORE_CLIENT_RETRY = 1 << 0,       /* connect: retry refused / timed-out tries until
                                             * the timeout (a store that is still starting) */
    RDZV_STORE_CLIENT_NO_VALIDATE = 1 << 1, /* connect: don't send VALIDATE (the caller does, or
                                             * authenticates first) */
};

/* Connect to host:port (any address it resolves to), within timeout_ms (0: no limit), then
 * send VALIDATE unless told not to. Returns 0 or a negative errno (the last try's). */
int rdzv_store_client_connect(const char *host, uint16_t port, uint64_t timeout_ms,
                              unsigned flags, struct rdzv_store_client **ret);

/* As rdzv_store_client_connect(), and every wait of this client (the connect, its retries and
 * pauses, each later send and receive) also ends with -ECANCELED as soon as cancel_fd (-1: none;
 * not owned) is readable: another thread abandons the store by making it so (rdzv-train's
 * control watcher on a new generation: a store that the job has moved away from is never
 * waited on for the whole timeout). */
int rdzv_store_client_connect_cancel(const char *host, uint16_t port, uint64_t timeout_ms,
                                     unsigned flags, int cancel_fd,
                                     struct rdzv_store_client **ret);

/* Closes the connection. Accepts NULL; returns NULL. */
struct rdzv_store_client *rdzv_store_client_free(struct rdzv_store_client *c);

/* Raw: write all n bytes / read exactly n bytes before deadline_ms (0: none). */
int rdzv_store_client_send(struct rdzv_store_client *c, const void *p, size_t n,
                           uint64_t deadline_ms);
int rdzv_store_client_recv(struct rdzv_store_client *c, void *p, size_t n, uint64_t deadline_ms);
/* Raw: a u64 (little-endian), and a u64-length-prefixed byte string of at most max bytes
 * (-EPROTO if longer), malloc'ed and NUL-terminated past *ret_len. */
int rdzv_store_client_recv_u64(struct rdzv_store_client *c, uint64_t *ret, uint64_t deadline_ms);
int rdzv_store_client_recv_str(struct rdzv_store_client *c, uint64_t max, uint8_t **ret,
                               size_t *ret_len, uint64_t deadline_ms);

/* Requests. key is sent as given (PyTorch's clients add a '/' prefix themselves). */
int rdzv_store_client_set(struct rdzv_store_client *c, const char *key, const void *val,
                          size_t len);
/* Wait until all n keys exist, up to timeout_ms (0: none). */
int rdzv_store_client_wait(struct rdzv_store_client *c, const char *const *keys, size_t n,
                           uint64_t timeout_ms);
/* Wait for key (up to timeout_ms), then read it into a malloc'ed *ret_val (NUL-terminated past
 * *ret_len). */
int rdzv_store_client_get(struct rdzv_store_client *c, const char *key, uint64_t timeout_ms,
                          void **ret_val, size_t *ret_len);
/* Atomic add; the new value in *ret. */
int rdzv_store_client_add(struct rdzv_store_client *c, const char *key, int64_t delta,
                          int64_t *ret);
