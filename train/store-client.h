/* SPDX-License-Identifier: Apache-2.0 */
/* store-client.h: a small blocking PyTorch TCPStore client (the modern protocol, opened with
 * VALIDATE), for the trainer's gloo rendezvous. Every call has a deadline. */
#pragma once
#include <stddef.h>
#include <stdint.h>

struct train_store;

/* Connect to host:port, retrying refused connections until timeout_ms has passed. Returns 0,
 * -ETIMEDOUT, or the negative errno / -EHOSTUNREACH (name did not resolve) of the last try. */
int train_store_connect(const char *host, uint16_t port, uint64_t timeout_ms,
                        struct train_store **ret);

/* Every call below returns 0 or a negative errno: -ETIMEDOUT past the timeout given at connect
 * (or to the call), -ECONNRESET when the store closed the connection, -EPROTO for a reply that
 * makes no sense. After any error the connection is unusable (every later call fails). */
int train_store_set(struct train_store *s, const char *key, const void *val, size_t len);
/* Wait until all keys exist, up to timeout_ms. */
int train_store_wait(struct train_store *s, const char *const *keys, size_t n,
                     uint64_t timeout_ms);
/* Wait for key (up to timeout_ms), then read it: *ret_val is malloc'ed (NUL-terminated past
 * *ret_len for convenience). */
int train_store_get(struct train_store *s, const char *key, uint64_t timeout_ms, void **ret_val,
                    size_t *ret_len);
/* Atomic add; the new value in *ret. */
int train_store_add(struct train_store *s, const char *key, int64_t delta, int64_t *ret);

struct train_store *train_store_free(struct train_store *s);
