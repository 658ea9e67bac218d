/* SPDX-License-Identifier: Apache-2.0 */
/* rdzv-auth.h: shared-secret tokens and the HMAC-SHA256 challenge-response of RENDEZVOUS.md
 * ("Authentication"), on OpenSSL's libcrypto, loaded at the first use (dlopen), so that a process
 * without a token never maps it. No I/O besides reading the token file, no logging. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/rdzv-util.h"

#define RDZV_TOKEN_MIN 16     /* bytes, after trailing whitespace is stripped */
#define RDZV_TOKEN_MAX 4096
#define RDZV_NONCE_BYTES 32
#define RDZV_MAC_BYTES 32     /* SHA-256 */
#define RDZV_AUTH_SCHEME "hmac-sha256"

struct rdzv_token {
    size_t len;
    uint8_t key[RDZV_TOKEN_MAX];
};

/* The token in data[0..len): trailing whitespace stripped, at least RDZV_TOKEN_MIN and at most
 * RDZV_TOKEN_MAX bytes. Returns 0 or -EINVAL with a reason in err. */
int rdzv_token_parse(const uint8_t *data, size_t len, struct rdzv_token *ret, char *err,
                     size_t errlen);

/* Read the token file at path: a regular file that neither group nor others may access (like an
 * ssh key), then rdzv_token_parse(), then rdzv_auth_crypto_load(). Returns 0 or a negative errno
 * with a one-line reason (that names the path, never the secret) in err. */
int rdzv_token_load(const char *path, struct rdzv_token *ret, char *err, size_t errlen);

/* Load libcrypto (once; later calls return the first outcome). Returns 0, or -ENOPKG with a
 * one-line reason that says what to install in err (when err is not NULL). */
int rdzv_auth_crypto_load(char *err, size_t errlen);

/* Overwrite the secret (explicit_bzero). */
void rdzv_token_wipe(struct rdzv_token *t);

/* HMAC-SHA256(key, data) into out. Returns 0 or -EIO (also when libcrypto cannot be loaded). */
int rdzv_hmac_sha256(const uint8_t *key, size_t keylen, const uint8_t *data, size_t len,
                     uint8_t out[RDZV_MAC_BYTES]);

/* The handshake MAC: HMAC(token, "rdzv-auth-v1 client" or "rdzv-auth-v1 server" || server_nonce
 * || client_nonce). Returns 0 or -EIO. */
int rdzv_auth_mac(const struct rdzv_token *t, bool server, const uint8_t sn[RDZV_NONCE_BYTES],
                  const uint8_t cn[RDZV_NONCE_BYTES], uint8_t out[RDZV_MAC_BYTES]);

/* Constant-time comparison: the time depends on n only. */
bool rdzv_auth_equal(const uint8_t *a, const uint8_t *b, size_t n);

/* n random bytes from the kernel's CSPRNG, for nonces: rdzv_random_bytes() (rdzv-util.h). */
static inline int rdzv_auth_random(uint8_t *out, size_t n)
{
    return rdzv_random_bytes(out, n);
}
