/* SPDX-License-Identifier: Apache-2.0 */
/* rdzv-auth.c: token files and HMAC-SHA256 through libcrypto (no hand-written crypto). */
#include "rdzv-auth.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

static const char label_client[] = "rdzv-auth-v1 client";
static const char label_server[] = "rdzv-auth-v1 server";

int rdzv_token_parse(const uint8_t *data, size_t len, struct rdzv_token *ret, char *err,
                     size_t errlen)
{
    while (len > 0 && (data[len - 1] == ' ' || data[len - 1] == '\n' || data[len - 1] == '\r' ||
                       data[len - 1] == '\t' || data[len - 1] == '\v' || data[len - 1] == '\f'))
        len--;
    if (len < RDZV_TOKEN_MIN) {
        snprintf(err, errlen, "the token is %zu bytes long, at least %d are required (make one "
                              "with: head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n')",
                 len, RDZV_TOKEN_MIN);
        return -EINVAL;
    }
    if (len > RDZV_TOKEN_MAX) {
        snprintf(err, errlen, "the token is longer than %d bytes", RDZV_TOKEN_MAX);
        return -EINVAL;
    }
    memcpy(ret->key, data, len);
    ret->len = len;
    return 0;
}

int rdzv_token_load(const char *path, struct rdzv_token *ret, char *err, size_t errlen)
{
    uint8_t buf[RDZV_TOKEN_MAX + 256];
    struct stat st;
    size_t n = 0;
    int fd, r;

    fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        r = -errno;
        snprintf(err, errlen, "cannot open token file %s: %s", path, strerror(-r));
        return r;
    }
    if (fstat(fd, &st) < 0) {
        r = -errno;
        snprintf(err, errlen, "cannot stat token file %s: %s", path, strerror(-r));
        goto out_close;
    }
    if (!S_ISREG(st.st_mode)) {
        r = -EINVAL;
        snprintf(err, errlen, "token file %s is not a regular file", path);
        goto out_close;
    }
    if (st.st_mode & 077) {
        r = -EPERM;
        snprintf(err, errlen, "token file %s is accessible by group or others (mode %04o); "
                              "run: chmod 600 %s",
                 path, (unsigned)(st.st_mode & 07777), path);
        goto out_close;
    }
    for (;;) {
        ssize_t got = read(fd, buf + n, sizeof(buf) - n);

        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            r = -errno;
            snprintf(err, errlen, "cannot read token file %s: %s", path, strerror(-r));
            goto out_wipe;
        }
        if (got == 0)
            break;
        n += (size_t)got;
        if (n == sizeof(buf)) {
            r = -EINVAL;
            snprintf(err, errlen, "token file %s is too large (at most %d bytes)", path,
                     RDZV_TOKEN_MAX);
            goto out_wipe;
        }
    }
    r = rdzv_token_parse(buf, n, ret, err, errlen);
    if (r < 0) {
        char why[200];

        snprintf(why, sizeof(why), "%s", err);
        snprintf(err, errlen, "token file %s: %s", path, why);
    }
out_wipe:
    OPENSSL_cleanse(buf, sizeof(buf));
out_close:
    close(fd);
    return r;
}

void rdzv_token_wipe(struct rdzv_token *t)
{
    OPENSSL_cleanse(t, sizeof(*t));
}

int rdzv_hmac_sha256(const uint8_t *key, size_t keylen, const uint8_t *data, size_t len,
                     uint8_t out[RDZV_MAC_BYTES])
{
    unsigned outlen = 0;

    if (keylen > INT32_MAX)
        return -EINVAL;
    if (!HMAC(EVP_sha256(), key, (int)keylen, data, len, out, &outlen) ||
        outlen != RDZV_MAC_BYTES)
        return -EIO;
    return 0;
}

int rdzv_auth_mac(const struct rdzv_token *t, bool server, const uint8_t sn[RDZV_NONCE_BYTES],
                  const uint8_t cn[RDZV_NONCE_BYTES], uint8_t out[RDZV_MAC_BYTES])
{
    uint8_t msg[sizeof(label_client) - 1 + 2 * RDZV_NONCE_BYTES];
    const char *label = server ? label_server : label_client;
    size_t ll = sizeof(label_client) - 1;
    int r;

    memcpy(msg, label, ll);
    memcpy(msg + ll, sn, RDZV_NONCE_BYTES);
    memcpy(msg + ll + RDZV_NONCE_BYTES, cn, RDZV_NONCE_BYTES);
    r = rdzv_hmac_sha256(t->key, t->len, msg, sizeof(msg), out);
    OPENSSL_cleanse(msg, sizeof(msg));
    return r;
}

bool rdzv_auth_equal(const uint8_t *a, const uint8_t *b, size_t n)
{
    return CRYPTO_memcmp(a, b, n) == 0;
}

int rdzv_auth_random(uint8_t *out, size_t n)
{
    if (n > INT32_MAX || RAND_bytes(out, (int)n) != 1)
        return -EIO;
    return 0;
}

void rdzv_hex_encode(const uint8_t *p, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";

    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[p[i] >> 4];
        out[2 * i + 1] = digits[p[i] & 15];
    }
    out[2 * n] = '\0';
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int rdzv_hex_decode(const char *s, uint8_t *out, size_t n)
{
    if (strlen(s) != 2 * n)
        return -EINVAL;
    for (size_t i = 0; i < n; i++) {
        int hi = hexval(s[2 * i]), lo = hexval(s[2 * i + 1]);

        if (hi < 0 || lo < 0)
            return -EINVAL;
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    return 0;
}
