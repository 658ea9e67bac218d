/* SPDX-License-Identifier: Apache-2.0 */
/* test-auth.c: token files, HMAC-SHA256 (RFC 4231 vectors), the handshake messages, and the
 * --allow-store-from matcher. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/rdzv-auth.h"
#include "common/rdzv-buf.h"
#include "daemon/data/rdzvd-acl.h"
#include "proto/rdzv-auth-msg.h"
#include "proto/rdzv-frame.h"
#include "../tap.h"

static void hmac_hex(const uint8_t *key, size_t klen, const void *data, size_t len, char *out)
{
    uint8_t mac[RDZV_MAC_BYTES];

    ASSERT_OK(rdzv_hmac_sha256(key, klen, data, len, mac));
    rdzv_hex(mac, sizeof(mac), out);
}

/* RFC 4231 section 4: test cases 1, 2, 3, 4, 6 and 7 (5 truncates the output). */
static void test_hmac_rfc4231(void)
{
    uint8_t key[131], data[50];
    char hex[65];

    memset(key, 0x0b, 20);
    hmac_hex(key, 20, "Hi There", 8, hex);
    ASSERT_EQ(strcmp(hex, "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"), 0);

    hmac_hex((const uint8_t *)"Jefe", 4, "what do ya want for nothing?", 28, hex);
    ASSERT_EQ(strcmp(hex, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"), 0);

    memset(key, 0xaa, 20);
    memset(data, 0xdd, 50);
    hmac_hex(key, 20, data, 50, hex);
    ASSERT_EQ(strcmp(hex, "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe"), 0);

    for (unsigned i = 0; i < 25; i++)
        key[i] = (uint8_t)(i + 1);
    memset(data, 0xcd, 50);
    hmac_hex(key, 25, data, 50, hex);
    ASSERT_EQ(strcmp(hex, "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b"), 0);

    memset(key, 0xaa, 131);
    hmac_hex(key, 131, "Test Using Larger Than Block-Size Key - Hash Key First", 54, hex);
    ASSERT_EQ(strcmp(hex, "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"), 0);

    static const char msg7[] = "This is a test using a larger than block-size key and a larger "
                               "than block-size data. The key needs to be hashed before being "
                               "used by the HMAC algorithm.";
    hmac_hex(key, 131, msg7, sizeof(msg7) - 1, hex);
    ASSERT_EQ(strcmp(hex, "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2"), 0);
}

static void test_token_parse(void)
{
    struct rdzv_token t;
    char err[256];

    /* Trailing whitespace (a newline from echo) is not part of the secret. */
    ASSERT_OK(rdzv_token_parse((const uint8_t *)"0123456789abcdef\n \t\r\n", 21, &t, err,
                               sizeof(err)));
    ASSERT_EQ(t.len, 16u);
    ASSERT_MEMEQ(t.key, "0123456789abcdef", 16);
    /* Leading and inner whitespace is. */
    ASSERT_OK(rdzv_token_parse((const uint8_t *)" 0123456789 abcdef", 18, &t, err, sizeof(err)));
    ASSERT_EQ(t.len, 18u);
    /* Too short, even if padded with whitespace. */
    ASSERT_EQ(rdzv_token_parse((const uint8_t *)"0123456789abcde\n\n\n", 18, &t, err,
                               sizeof(err)),
              -EINVAL);
    ASSERT_TRUE(strstr(err, "at least 16") != NULL);
    ASSERT_EQ(rdzv_token_parse((const uint8_t *)"", 0, &t, err, sizeof(err)), -EINVAL);
}

static void write_file(const char *path, const char *data, mode_t mode)
{
    int fd;

    (void)unlink(path); /* a 0400 file from the last round can't be reopened for writing */
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);

    ASSERT_TRUE(fd >= 0);
    ASSERT_EQ(write(fd, data, strlen(data)), (ssize_t)strlen(data));
    ASSERT_OK(fchmod(fd, mode));
    close(fd);
}

static void test_token_load(void)
{
    char dir[] = "/tmp/rdzv-test-auth-XXXXXX", path[64], err[512];
    const char *secret = "s3cr3t-s3cr3t-s3cr3t";
    struct rdzv_token t;

    ASSERT_NOT_NULL(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/token", dir);

    write_file(path, "s3cr3t-s3cr3t-s3cr3t\n", 0600);
    ASSERT_OK(rdzv_token_load(path, &t, err, sizeof(err)));
    ASSERT_EQ(t.len, strlen(secret));
    ASSERT_MEMEQ(t.key, secret, t.len);
    write_file(path, "s3cr3t-s3cr3t-s3cr3t\n", 0400);
    ASSERT_OK(rdzv_token_load(path, &t, err, sizeof(err)));
    rdzv_token_wipe(&t);
    ASSERT_EQ(t.len, 0u);

    /* Readable (or writable) by group or others: refused, like an ssh key; the secret is never
     * part of the message. */
    static const mode_t bad_modes[] = {0644, 0640, 0604, 0620, 0602, 0660};
    for (unsigned i = 0; i < sizeof(bad_modes) / sizeof(bad_modes[0]); i++) {
        write_file(path, "s3cr3t-s3cr3t-s3cr3t\n", bad_modes[i]);
        ASSERT_EQ(rdzv_token_load(path, &t, err, sizeof(err)), -EPERM);
        ASSERT_TRUE(strstr(err, "group or others") != NULL);
        ASSERT_TRUE(strstr(err, "chmod 600") != NULL);
        ASSERT_TRUE(strstr(err, secret) == NULL);
    }
    write_file(path, "short\n", 0600);
    ASSERT_EQ(rdzv_token_load(path, &t, err, sizeof(err)), -EINVAL);
    ASSERT_TRUE(strstr(err, path) != NULL);
    ASSERT_TRUE(strstr(err, "at least 16") != NULL);
    ASSERT_OK(unlink(path));
    ASSERT_EQ(rdzv_token_load(path, &t, err, sizeof(err)), -ENOENT);
    ASSERT_EQ(rdzv_token_load(dir, &t, err, sizeof(err)), -EINVAL); /* a directory */
    ASSERT_OK(rmdir(dir));
}

static void test_hex(void)
{
    uint8_t b[4] = {0x00, 0x7f, 0xa5, 0xff}, back[4];
    char hex[9];

    rdzv_hex(b, 4, hex);
    ASSERT_EQ(strcmp(hex, "007fa5ff"), 0);
    ASSERT_OK(rdzv_hex_decode("007FA5ff", back, 4));
    ASSERT_MEMEQ(back, b, 4);
    ASSERT_EQ(rdzv_hex_decode("007fa5f", back, 4), -EINVAL);
    ASSERT_EQ(rdzv_hex_decode("007fa5fff0", back, 4), -EINVAL);
    ASSERT_EQ(rdzv_hex_decode("007fa5fg", back, 4), -EINVAL);
}

/* Pull the body of the single frame in b. */
static const uint8_t *frame_body(struct rdzv_buf *b, uint8_t want_op, uint32_t *len)
{
    const uint8_t *body;
    const char *why = "";
    uint8_t op = 0;

    ASSERT_EQ(rdzv_frame_peek(rdzv_buf_head(b), rdzv_buf_avail(b), RDZV_MAX_MSG, &op, &body, len,
                              &why),
              (ssize_t)rdzv_buf_avail(b));
    ASSERT_EQ(op, want_op);
    return body;
}

static void test_handshake_messages(void)
{
    struct rdzv_token t, wrong;
    struct rdzv_buf hello = {0}, auth = {0}, ok = {0};
    uint8_t sn[RDZV_NONCE_BYTES], got_sn[RDZV_NONCE_BYTES], cn[RDZV_NONCE_BYTES];
    uint8_t dcn[RDZV_NONCE_BYTES];
    const uint8_t *body;
    bool required = false;
    uint32_t len;
    char err[256];

    ASSERT_OK(rdzv_token_parse((const uint8_t *)"a-shared-secret-of-some-length", 30, &t, err,
                               sizeof(err)));
    ASSERT_OK(rdzv_token_parse((const uint8_t *)"another-secret-of-some-length!", 30, &wrong, err,
                               sizeof(err)));
    ASSERT_OK(rdzv_auth_random(sn, sizeof(sn)));

    /* HELLO without a challenge: no token required. */
    ASSERT_OK(rdzv_auth_put_hello(&hello, "rdzvd test", NULL));
    body = frame_body(&hello, RDZV_MSG_HELLO, &len);
    required = true;
    ASSERT_OK(rdzv_auth_parse_hello(body, len, &required, got_sn, err, sizeof(err)));
    ASSERT_FALSE(required);
    rdzv_buf_free(&hello);

    ASSERT_OK(rdzv_auth_put_hello(&hello, "rdzvd test", sn));
    body = frame_body(&hello, RDZV_MSG_HELLO, &len);
    ASSERT_OK(rdzv_auth_parse_hello(body, len, &required, got_sn, err, sizeof(err)));
    ASSERT_TRUE(required);
    ASSERT_MEMEQ(got_sn, sn, sizeof(sn));
    /* The secret never crosses the wire. */
    ASSERT_TRUE(memmem(body, len, t.key, t.len) == NULL);

    /* Right token: the daemon accepts, and the client accepts the daemon's proof. */
    ASSERT_OK(rdzv_auth_put_auth(&auth, &t, got_sn, cn));
    body = frame_body(&auth, RDZV_MSG_AUTH, &len);
    ASSERT_TRUE(memmem(body, len, t.key, t.len) == NULL);
    ASSERT_OK(rdzv_auth_check_auth(body, len, &t, sn, dcn, err, sizeof(err)));
    ASSERT_MEMEQ(dcn, cn, sizeof(cn));
    ASSERT_OK(rdzv_auth_put_ok(&ok, &t, sn, dcn));
    {
        uint32_t olen;
        const uint8_t *ob = frame_body(&ok, RDZV_MSG_AUTH_OK, &olen);

        ASSERT_OK(rdzv_auth_check_ok(ob, olen, &t, sn, cn, err, sizeof(err)));
        /* A daemon without the token can't fake it. */
        ASSERT_EQ(rdzv_auth_check_ok(ob, olen, &wrong, sn, cn, err, sizeof(err)), -EACCES);
        /* Nor replay the client's own proof (different label). */
        ASSERT_EQ(rdzv_auth_check_ok(body, len, &t, sn, cn, err, sizeof(err)), -EACCES);
    }

    /* Wrong token, or a replay against another challenge: refused. */
    ASSERT_EQ(rdzv_auth_check_auth(body, len, &wrong, sn, dcn, err, sizeof(err)), -EACCES);
    ASSERT_TRUE(strstr(err, "wrong token") != NULL);
    {
        uint8_t sn2[RDZV_NONCE_BYTES];

        ASSERT_OK(rdzv_auth_random(sn2, sizeof(sn2)));
        ASSERT_EQ(rdzv_auth_check_auth(body, len, &t, sn2, dcn, err, sizeof(err)), -EACCES);
    }

    /* Malformed bodies. */
    static const char *const bad[] = {
        "", "[]", "{", "{\"nonce\":\"00\"}", "{\"mac\":\"00\"}",
        "{\"nonce\":1,\"mac\":\"00\"}", "{\"nonce\":\"zz\",\"mac\":\"zz\"}",
    };
    for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        ASSERT_EQ(rdzv_auth_check_auth((const uint8_t *)bad[i], strlen(bad[i]), &t, sn, dcn, err,
                                       sizeof(err)),
                  -EBADMSG);
    rdzv_buf_free(&hello);
    rdzv_buf_free(&auth);
    rdzv_buf_free(&ok);
}


/* A token at the size limit is kept whole; one byte more is refused, as a file too. */
static void test_token_limits(void)
{
    char dir[] = "/tmp/rdzv-test-auth-XXXXXX", path[64], err[512];
    static uint8_t data[RDZV_TOKEN_MAX + 300];
    static char text[RDZV_TOKEN_MAX + 300];
    struct rdzv_token t;
    uint8_t mac[RDZV_MAC_BYTES];

    for (size_t i = 0; i < sizeof(data); i++)
        data[i] = (uint8_t)('a' + i % 26);
    ASSERT_OK(rdzv_token_parse(data, RDZV_TOKEN_MAX, &t, err, sizeof(err)));
    ASSERT_EQ(t.len, RDZV_TOKEN_MAX);
    ASSERT_MEMEQ(t.key, data, RDZV_TOKEN_MAX);
    /* Trailing whitespace past the limit is not part of it. */
    memset(data + RDZV_TOKEN_MAX, '\n', 10);
    ASSERT_OK(rdzv_token_parse(data, RDZV_TOKEN_MAX + 10, &t, err, sizeof(err)));
    ASSERT_EQ(t.len, RDZV_TOKEN_MAX);
    data[RDZV_TOKEN_MAX] = 'z';
    ASSERT_EQ(rdzv_token_parse(data, RDZV_TOKEN_MAX + 1, &t, err, sizeof(err)), -EINVAL);
    ASSERT_TRUE(strstr(err, "longer than 4096") != NULL);

    ASSERT_NOT_NULL(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/token", dir);
    /* A file of the largest token and a newline loads; one byte more than it reads is refused. */
    memcpy(text, data, RDZV_TOKEN_MAX);
    text[RDZV_TOKEN_MAX] = '\n';
    text[RDZV_TOKEN_MAX + 1] = '\0';
    write_file(path, text, 0600);
    ASSERT_OK(rdzv_token_load(path, &t, err, sizeof(err)));
    ASSERT_EQ(t.len, RDZV_TOKEN_MAX);
    ASSERT_MEMEQ(t.key, data, RDZV_TOKEN_MAX);
    text[RDZV_TOKEN_MAX] = 'z';
    write_file(path, text, 0600);
    ASSERT_EQ(rdzv_token_load(path, &t, err, sizeof(err)), -EINVAL);
    ASSERT_TRUE(strstr(err, path) != NULL);
    ASSERT_TRUE(strstr(err, "longer than") != NULL);
    memset(text, 'q', RDZV_TOKEN_MAX + 256);
    text[RDZV_TOKEN_MAX + 256] = '\0';
    write_file(path, text, 0600);
    ASSERT_EQ(rdzv_token_load(path, &t, err, sizeof(err)), -EINVAL);
    ASSERT_TRUE(strstr(err, "too large") != NULL);
    ASSERT_TRUE(strstr(err, "qqqq") == NULL);
    ASSERT_OK(unlink(path));
    ASSERT_OK(rmdir(dir));
    /* A key length HMAC() cannot take is refused before any use of it. */
    ASSERT_EQ(rdzv_hmac_sha256(NULL, (size_t)INT32_MAX + 1, data, 1, mac), -EINVAL);
    ASSERT_OK(rdzv_auth_crypto_load(NULL, 0));
    ASSERT_OK(rdzv_auth_crypto_load(err, sizeof(err)));
}

/* HELLO, AUTH and AUTH_OK bodies that must be refused, field by field. */
static void test_handshake_refusals(void)
{
    uint8_t sn[RDZV_NONCE_BYTES], cn[RDZV_NONCE_BYTES], got[RDZV_NONCE_BYTES];
    struct rdzv_buf auth = {0}, ok = {0};
    struct rdzv_token t;
    bool required;
    char err[256], body[512], nhex[2 * RDZV_NONCE_BYTES + 1];
    const uint8_t *ab;
    uint32_t alen;

    ASSERT_OK(rdzv_token_parse((const uint8_t *)"a-shared-secret-of-some-length", 30, &t, err,
                               sizeof(err)));
    ASSERT_OK(rdzv_auth_random(sn, sizeof(sn)));
    rdzv_hex(sn, sizeof(sn), nhex);

    /* HELLO: each member's type, the scheme, the nonce's presence and form. */
    static const char *const bad_hello[] = {
        "", "[]", "{\"auth\":1}", "{\"nonce\":7}",
        "{\"auth\":\"hmac-md5\",\"nonce\":\"00\"}",
        "{\"auth\":\"" RDZV_AUTH_SCHEME "\"}",
        "{\"auth\":\"" RDZV_AUTH_SCHEME "\",\"nonce\":\"00\"}",
    };
    for (unsigned i = 0; i < sizeof(bad_hello) / sizeof(bad_hello[0]); i++) {
        err[0] = '\0';
        required = false;
        ASSERT_EQ(rdzv_auth_parse_hello((const uint8_t *)bad_hello[i], strlen(bad_hello[i]),
                                        &required, got, err, sizeof(err)),
                  -EBADMSG);
        ASSERT_TRUE(err[0] != '\0');
        ASSERT_FALSE(required);
    }
    ASSERT_EQ(rdzv_auth_parse_hello((const uint8_t *)bad_hello[4], strlen(bad_hello[4]),
                                    &required, got, err, sizeof(err)),
              -EBADMSG);
    ASSERT_TRUE(strstr(err, "'hmac-md5'") != NULL);
    /* A nonce one hex digit short. */
    snprintf(body, sizeof(body), "{\"auth\":\"%s\",\"nonce\":\"%.*s\"}", RDZV_AUTH_SCHEME,
             2 * RDZV_NONCE_BYTES - 1, nhex);
    ASSERT_EQ(rdzv_auth_parse_hello((const uint8_t *)body, strlen(body), &required, got, err,
                                    sizeof(err)),
              -EBADMSG);
    snprintf(body, sizeof(body), "{\"auth\":\"%s\",\"nonce\":\"%s\"}", RDZV_AUTH_SCHEME, nhex);
    ASSERT_OK(rdzv_auth_parse_hello((const uint8_t *)body, strlen(body), &required, got, err,
                                    sizeof(err)));
    ASSERT_TRUE(required);
    ASSERT_MEMEQ(got, sn, sizeof(sn));

    /* AUTH: a client nonce equal to the daemon's is refused even with the right MAC. */
    {
        uint8_t mac[RDZV_MAC_BYTES];
        char mhex[2 * RDZV_MAC_BYTES + 1];

        ASSERT_OK(rdzv_auth_mac(&t, false, sn, sn, mac));
        rdzv_hex(mac, sizeof(mac), mhex);
        snprintf(body, sizeof(body), "{\"nonce\":\"%s\",\"mac\":\"%s\"}", nhex, mhex);
        ASSERT_EQ(rdzv_auth_check_auth((const uint8_t *)body, strlen(body), &t, sn, cn, err,
                                       sizeof(err)),
                  -EACCES);
        ASSERT_TRUE(strstr(err, "repeats") != NULL);
        /* A good nonce with a MAC of the wrong length. */
        snprintf(body, sizeof(body), "{\"nonce\":\"%s\",\"mac\":\"%.*s\"}", nhex,
                 2 * RDZV_MAC_BYTES - 2, mhex);
        ASSERT_EQ(rdzv_auth_check_auth((const uint8_t *)body, strlen(body), &t, sn, cn, err,
                                       sizeof(err)),
                  -EBADMSG);
        ASSERT_TRUE(strstr(err, "'mac'") != NULL);
    }

    /* AUTH_OK: the body's shape and the MAC's form. */
    ASSERT_OK(rdzv_auth_put_auth(&auth, &t, sn, cn));
    ab = frame_body(&auth, RDZV_MSG_AUTH, &alen);
    ASSERT_OK(rdzv_auth_check_auth(ab, alen, &t, sn, got, err, sizeof(err)));
    ASSERT_OK(rdzv_auth_put_ok(&ok, &t, sn, cn));
    static const char *const bad_ok[] = {
        "",
        "[1]",
        "{}",
        "{\"mac\":1}",
        "{\"nonce\":\"00\"}",
        "{\"mac\":\"zz\"}",
        "{\"mac\":\"00\"}",
    };
    for (unsigned i = 0; i < sizeof(bad_ok) / sizeof(bad_ok[0]); i++) {
        err[0] = '\0';
        ASSERT_EQ(rdzv_auth_check_ok((const uint8_t *)bad_ok[i], strlen(bad_ok[i]), &t, sn, cn,
                                     err, sizeof(err)),
                  -EBADMSG);
        ASSERT_TRUE(err[0] != '\0');
    }
    {
        uint32_t olen;
        const uint8_t *ob = frame_body(&ok, RDZV_MSG_AUTH_OK, &olen);

        ASSERT_OK(rdzv_auth_check_ok(ob, olen, &t, sn, cn, err, sizeof(err)));
        /* The daemon's proof is for this client nonce only. */
        ASSERT_EQ(rdzv_auth_check_ok(ob, olen, &t, sn, sn, err, sizeof(err)), -EACCES);
    }
    rdzv_buf_free(&auth);
    rdzv_buf_free(&ok);
}

static bool allows(const struct rdzvd_acl *acl, const char *ip)
{
    struct sockaddr_in a4 = {.sin_family = AF_INET};
    struct sockaddr_in6 a6 = {.sin6_family = AF_INET6};

    if (inet_pton(AF_INET, ip, &a4.sin_addr) == 1)
        return rdzvd_acl_allows(acl, (struct sockaddr *)&a4);
    ASSERT_EQ(inet_pton(AF_INET6, ip, &a6.sin6_addr), 1);
    return rdzvd_acl_allows(acl, (struct sockaddr *)&a6);
}

static void test_acl(void)
{
    struct rdzvd_acl acl;
    char err[256];

    ASSERT_TRUE(allows(NULL, "192.0.2.1"));
    ASSERT_OK(rdzvd_acl_parse(RDZVD_ACL_DEFAULT_WITH_TOKEN, &acl, err, sizeof(err)));
    ASSERT_EQ(acl.n, 2u);
    ASSERT_TRUE(allows(&acl, "127.0.0.1"));
    ASSERT_TRUE(allows(&acl, "127.255.0.9"));
    ASSERT_TRUE(allows(&acl, "::1"));
    ASSERT_TRUE(allows(&acl, "::ffff:127.0.0.2")); /* v4-mapped matches as IPv4 */
    ASSERT_FALSE(allows(&acl, "128.0.0.1"));
    ASSERT_FALSE(allows(&acl, "::2"));
    ASSERT_FALSE(allows(&acl, "::ffff:10.0.0.1"));

    ASSERT_OK(rdzvd_acl_parse("10.1.0.0/16, 192.0.2.7,2001:db8::/33", &acl, err, sizeof(err)));
    ASSERT_EQ(acl.n, 3u);
    ASSERT_TRUE(allows(&acl, "10.1.255.255"));
    ASSERT_FALSE(allows(&acl, "10.2.0.0"));
    ASSERT_TRUE(allows(&acl, "192.0.2.7"));
    ASSERT_FALSE(allows(&acl, "192.0.2.8"));
    ASSERT_TRUE(allows(&acl, "2001:db8:7fff::1"));
    ASSERT_FALSE(allows(&acl, "2001:db8:8000::1"));
    ASSERT_FALSE(allows(&acl, "127.0.0.1"));

    /* Host bits in the network are ignored; /0 is everyone of that family. */
    ASSERT_OK(rdzvd_acl_parse("127.0.0.1/32,10.9.9.9/8,::/0", &acl, err, sizeof(err)));
    ASSERT_TRUE(allows(&acl, "10.200.1.1"));
    ASSERT_FALSE(allows(&acl, "127.0.0.2"));
    ASSERT_TRUE(allows(&acl, "fe80::1"));

    static const char *const bad[] = {"", ",", "10.0.0.0/33", "::/129", "10.0.0.0/", "10.0.0/8",
                                      "host.example", "10.0.0.0/8x", "1.2.3.4/-1"};
    for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        ASSERT_EQ(rdzvd_acl_parse(bad[i], &acl, err, sizeof(err)), -EINVAL);
}

int main(void)
{
    TEST(test_hmac_rfc4231);
    TEST(test_token_parse);
    TEST(test_token_load);
    TEST(test_hex);
    TEST(test_handshake_messages);
    TEST(test_acl);
    TEST(test_token_limits);
    TEST(test_handshake_refusals);
    return tap_done();
}
