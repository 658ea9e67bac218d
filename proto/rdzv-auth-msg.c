/* SPDX-License-Identifier: Apache-2.0 */
/* rdzv-auth-msg.c: HELLO challenge, AUTH and AUTH_OK bodies (JSON through jansson). */
#include "proto/rdzv-auth-msg.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "proto/rdzv-frame.h"
#include "proto/rdzv-msg.h"

int rdzv_auth_put_hello(struct rdzv_buf *b, const char *peer, const uint8_t *sn)
{
    char hex[2 * RDZV_NONCE_BYTES + 1];

    if (!sn)
        return rdzv_msg_put_hello(b, peer);
    rdzv_hex(sn, RDZV_NONCE_BYTES, hex);
    return rdzv_msg_put(b, RDZV_MSG_HELLO,
                        json_pack("{s:s, s:i, s:s, s:s, s:s}", "magic", "rdzv", "version",
                                  RDZV_PROTO_VERSION, "peer", peer, "auth", RDZV_AUTH_SCHEME,
                                  "nonce", hex));
}

int rdzv_auth_parse_hello(const uint8_t *body, size_t len, bool *ret_required,
                          uint8_t sn[RDZV_NONCE_BYTES], char *err, size_t errlen)
{
    json_t *root = rdzv_msg_load(body, len, err, errlen);
    const char *scheme = NULL, *nonce = NULL;
    int r = 0;

    if (!root)
        return -EBADMSG;
    if (json_unpack(root, "{s?s, s?s}", "auth", &scheme, "nonce", &nonce) < 0) {
        snprintf(err, errlen, "HELLO: 'auth' and 'nonce' must be strings");
        r = -EBADMSG;
    } else if (!scheme) {
        *ret_required = false;
    } else if (strcmp(scheme, RDZV_AUTH_SCHEME) != 0) {
        snprintf(err, errlen, "rdzvd asks for authentication scheme '%.32s', this client only "
                              "knows " RDZV_AUTH_SCHEME,
                 scheme);
        r = -EBADMSG;
    } else if (!nonce || rdzv_hex_decode(nonce, sn, RDZV_NONCE_BYTES) < 0) {
        snprintf(err, errlen, "HELLO: 'nonce' must be %d hex digits", 2 * RDZV_NONCE_BYTES);
        r = -EBADMSG;
    } else {
        *ret_required = true;
    }
    json_decref(root);
    return r;
}

int rdzv_auth_put_auth(struct rdzv_buf *b, const struct rdzv_token *t,
                       const uint8_t sn[RDZV_NONCE_BYTES], uint8_t cn[RDZV_NONCE_BYTES])
{
    char nhex[2 * RDZV_NONCE_BYTES + 1], mhex[2 * RDZV_MAC_BYTES + 1];
    uint8_t mac[RDZV_MAC_BYTES];
    int r;

    r = rdzv_auth_random(cn, RDZV_NONCE_BYTES);
    if (r == 0)
        r = rdzv_auth_mac(t, false, sn, cn, mac);
    if (r < 0)
        return r;
    rdzv_hex(cn, RDZV_NONCE_BYTES, nhex);
    rdzv_hex(mac, RDZV_MAC_BYTES, mhex);
    return rdzv_msg_put(b, RDZV_MSG_AUTH, json_pack("{s:s, s:s}", "nonce", nhex, "mac", mhex));
}

/* Read {"nonce"?: hex32, "mac": hex32} from body. */
static int parse_proof(const char *what, const uint8_t *body, size_t len, bool want_nonce,
                       uint8_t cn[RDZV_NONCE_BYTES], uint8_t mac[RDZV_MAC_BYTES], char *err,
                       size_t errlen)
{
    json_t *root = rdzv_msg_load(body, len, err, errlen);
    const char *nonce = NULL, *mhex = NULL;
    int r = 0;

    if (!root)
        return -EBADMSG;
    if (json_unpack(root, "{s?s, s?s}", "nonce", &nonce, "mac", &mhex) < 0 || !mhex ||
        (want_nonce && !nonce)) {
        snprintf(err, errlen, "%s: expected {%s\"mac\":hex}", what,
                 want_nonce ? "\"nonce\":hex, " : "");
        r = -EBADMSG;
    } else if (want_nonce && rdzv_hex_decode(nonce, cn, RDZV_NONCE_BYTES) < 0) {
        snprintf(err, errlen, "%s: 'nonce' must be %d hex digits", what, 2 * RDZV_NONCE_BYTES);
        r = -EBADMSG;
    } else if (rdzv_hex_decode(mhex, mac, RDZV_MAC_BYTES) < 0) {
        snprintf(err, errlen, "%s: 'mac' must be %d hex digits", what, 2 * RDZV_MAC_BYTES);
        r = -EBADMSG;
    }
    json_decref(root);
    return r;
}

int rdzv_auth_check_auth(const uint8_t *body, size_t len, const struct rdzv_token *t,
                         const uint8_t sn[RDZV_NONCE_BYTES], uint8_t cn[RDZV_NONCE_BYTES],
                         char *err, size_t errlen)
{
    uint8_t got[RDZV_MAC_BYTES], want[RDZV_MAC_BYTES];
    int r;

    r = parse_proof("AUTH", body, len, true, cn, got, err, errlen);
    if (r < 0)
        return r;
    if (rdzv_auth_equal(sn, cn, RDZV_NONCE_BYTES)) {
        snprintf(err, errlen, "the client nonce repeats the daemon's");
        return -EACCES;
    }
    r = rdzv_auth_mac(t, false, sn, cn, want);
    if (r < 0) {
        snprintf(err, errlen, "HMAC failed");
        return r;
    }
    if (!rdzv_auth_equal(got, want, RDZV_MAC_BYTES)) {
        snprintf(err, errlen, "wrong token (the proof does not match)");
        return -EACCES;
    }
    return 0;
}

int rdzv_auth_put_ok(struct rdzv_buf *b, const struct rdzv_token *t,
                     const uint8_t sn[RDZV_NONCE_BYTES], const uint8_t cn[RDZV_NONCE_BYTES])
{
    char mhex[2 * RDZV_MAC_BYTES + 1];
    uint8_t mac[RDZV_MAC_BYTES];
    int r = rdzv_auth_mac(t, true, sn, cn, mac);

    if (r < 0)
        return r;
    rdzv_hex(mac, RDZV_MAC_BYTES, mhex);
    return rdzv_msg_put(b, RDZV_MSG_AUTH_OK, json_pack("{s:s}", "mac", mhex));
}

int rdzv_auth_check_ok(const uint8_t *body, size_t len, const struct rdzv_token *t,
                       const uint8_t sn[RDZV_NONCE_BYTES], const uint8_t cn[RDZV_NONCE_BYTES],
                       char *err, size_t errlen)
{
    uint8_t got[RDZV_MAC_BYTES], want[RDZV_MAC_BYTES];
    int r;

    r = parse_proof("AUTH_OK", body, len, false, NULL, got, err, errlen);
    if (r < 0)
        return r;
    r = rdzv_auth_mac(t, true, sn, cn, want);
    if (r < 0) {
        snprintf(err, errlen, "HMAC failed");
        return r;
    }
    if (!rdzv_auth_equal(got, want, RDZV_MAC_BYTES)) {
        snprintf(err, errlen, "rdzvd could not prove it holds the token (is this the right "
                              "daemon?)");
        return -EACCES;
    }
    return 0;
}
