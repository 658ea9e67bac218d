/* SPDX-License-Identifier: Apache-2.0 */
/* rdzv-auth.c: token files and HMAC-SHA256 through libcrypto (no hand-written crypto). */
#include "common/rdzv-auth.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/*
 * libcrypto is loaded at the first use, not linked: it is 4.7 MB with 20,000 relocations, which
 * every start of every agent (hundreds per host in a benchmark, one per restart otherwise) would
 * pay without a token file in sight. Only the one-shot HMAC() and EVP_sha256() are used; their
 * ABI is the same in OpenSSL 1.1.1 and 3.x, so the prototypes are declared here, with EVP_MD
 * opaque, and no OpenSSL header is needed to build.
 */
typedef struct evp_md_st EVP_MD;
typedef const EVP_MD *(*evp_sha256_fn)(void);
typedef unsigned char *(*hmac_fn)(const EVP_MD *md, const void *key, int key_len,
                                  const unsigned char *data, size_t data_len, unsigned char *out,
                                  unsigned int *out_len);

static struct {
    pthread_once_t once;
    hmac_fn hmac;
    evp_sha256_fn sha256;
    char error[256];
} crypto = {.once = PTHREAD_ONCE_INIT};

static void crypto_load(void)
{
    static const char *const names[] = {"libcrypto.so.3", "libcrypto.so.1.1", "libcrypto.so"};
    void *lib = NULL;
    const char *why = "not found";

    for (size_t i = 0; !lib && i < sizeof(names) / sizeof(names[0]); i++) {
        lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (!lib && i == 0)
            why = dlerror();
    }
    if (!lib) {
        snprintf(crypto.error, sizeof(crypto.error),
                 "cannot load OpenSSL's libcrypto (%s); install it (Debian: apt-get install "
                 "libssl3)", why ? why : "not found");
        return;
    }
    crypto.hmac = (hmac_fn)dlsym(lib, "HMAC");
    crypto.sha256 = (evp_sha256_fn)dlsym(lib, "EVP_sha256");
    if (!crypto.hmac || !crypto.sha256) {
        crypto.hmac = NULL;
        snprintf(crypto.error, sizeof(crypto.error), "libcrypto has no HMAC or EVP_sha256");
    }
    /* Never dlclose()d: the handle lives as long as the process. */
}

int rdzv_auth_crypto_load(char *err, size_t errlen)
{
    pthread_once(&crypto.once, crypto_load);
    if (crypto.hmac)
        return 0;
    if (err)
        snprintf(err, errlen, "%s", crypto.error);
    return -ENOPKG;
}

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
    if (r == 0) {
        r = rdzv_auth_crypto_load(err, errlen); /* a token is useless without HMAC: say so now */
        if (r < 0)
            rdzv_token_wipe(ret);
    }
    if (r < 0 && r != -ENOPKG) {
        char why[200];

        snprintf(why, sizeof(why), "%s", err);
        snprintf(err, errlen, "token file %s: %s", path, why);
    }
out_wipe:
    explicit_bzero(buf, sizeof(buf));
out_close:
    close(fd);
    return r;
}

void rdzv_token_wipe(struct rdzv_token *t)
{
    explicit_bzero(t, sizeof(*t));
}

int rdzv_hmac_sha256(const uint8_t *key, size_t keylen, const uint8_t *data, size_t len,
                     uint8_t out[RDZV_MAC_BYTES])
{
    unsigned outlen = 0;

    if (keylen > INT32_MAX)
        return -EINVAL;
    if (rdzv_auth_crypto_load(NULL, 0) < 0)
        return -EIO;
    if (!crypto.hmac(crypto.sha256(), key, (int)keylen, data, len, out, &outlen) ||
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
    explicit_bzero(msg, sizeof(msg));
    return r;
}

bool rdzv_auth_equal(const uint8_t *a, const uint8_t *b, size_t n)
{
    /* Every byte is looked at, whatever differs first: no early exit for a timing side channel.
     * The volatile keeps the compiler from turning this into memcmp(). */
    volatile uint8_t diff = 0;

    for (size_t i = 0; i < n; i++)
        diff |= a[i] ^ b[i];
    return diff == 0;
}
