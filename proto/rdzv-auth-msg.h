/* SPDX-License-Identifier: Apache-2.0 */
/* rdzv-auth-msg.h: the bodies of the authentication handshake (RENDEZVOUS.md, Authentication):
 * the daemon's challenge in its HELLO, AUTH and AUTH_OK. Pure: no I/O, no logging. Parsers return
 * 0, -EBADMSG (malformed) or -EACCES (a proof that does not match) with a reason in err. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/rdzv-auth.h"

struct rdzv_buf;

/* Daemon: its HELLO, with "auth" and "nonce" when sn is not NULL (a token is required). */
int rdzv_auth_put_hello(struct rdzv_buf *b, const char *peer, const uint8_t *sn);

/* Client: read the daemon's HELLO (already checked by rdzv_msg_parse_hello). *ret_required says
 * whether it asks for a token; if so its nonce goes to sn. */
int rdzv_auth_parse_hello(const uint8_t *body, size_t len, bool *ret_required,
                          uint8_t sn[RDZV_NONCE_BYTES], char *err, size_t errlen);

/* Client: a fresh client nonce into cn, then the AUTH frame proving t for sn, cn. */
int rdzv_auth_put_auth(struct rdzv_buf *b, const struct rdzv_token *t,
                       const uint8_t sn[RDZV_NONCE_BYTES], uint8_t cn[RDZV_NONCE_BYTES]);

/* Daemon: check an AUTH body against t and its nonce sn; on success the client nonce is in cn. */
int rdzv_auth_check_auth(const uint8_t *body, size_t len, const struct rdzv_token *t,
                         const uint8_t sn[RDZV_NONCE_BYTES], uint8_t cn[RDZV_NONCE_BYTES],
                         char *err, size_t errlen);

/* Daemon: the AUTH_OK frame (its proof for sn, cn). */
int rdzv_auth_put_ok(struct rdzv_buf *b, const struct rdzv_token *t,
                     const uint8_t sn[RDZV_NONCE_BYTES], const uint8_t cn[RDZV_NONCE_BYTES]);

/* Client: check the daemon's AUTH_OK. */
int rdzv_auth_check_ok(const uint8_t *body, size_t len, const struct rdzv_token *t,
                       const uint8_t sn[RDZV_NONCE_BYTES], const uint8_t cn[RDZV_NONCE_BYTES],
                       char *err, size_t errlen);
