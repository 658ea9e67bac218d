/* SPDX-License-Identifier: Apache-2.0 */
/* test-util.c: number and address parsing, hashing and the growable byte buffer. */
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/rdzv-buf.h"
#include "common/rdzv-util.h"
#include "../tap.h"

/* Parse s (its bytes only, no NUL) from an exact-size heap copy, so ASan sees overreads. */
static int parse_i64(const char *s, int64_t *ret)
{
    size_t n = strlen(s);
    uint8_t *p = malloc(n);
    int r;

    ASSERT_TRUE(p != NULL || n == 0);
    if (n)
        memcpy(p, s, n);
    r = rdzv_parse_i64n(p, n, ret);
    free(p);
    return r;
}

static void expect_i64(const char *s, int64_t want)
{
    int64_t v = 0x5555;

    snprintf(tap_note, sizeof(tap_note), "input \"%s\"", s);
    ASSERT_OK(parse_i64(s, &v));
    ASSERT_EQ(v, want);
    tap_note[0] = '\0';
}

static void expect_i64_err(const char *s, int err)
{
    int64_t v = 0x5555;

    snprintf(tap_note, sizeof(tap_note), "input \"%s\"", s);
    ASSERT_EQ(parse_i64(s, &v), err);
    ASSERT_EQ(v, 0x5555); /* untouched on failure */
    tap_note[0] = '\0';
}

static void test_parse_i64n(void)
{
    int64_t v;

    expect_i64("0", 0);
    expect_i64("-0", 0);
    expect_i64("+0", 0);
    expect_i64("7", 7);
    expect_i64("-7", -7);
    expect_i64("+42", 42);
    expect_i64("0009", 9);
    expect_i64("000000000000000000000000000000000000001", 1);
    expect_i64("9223372036854775807", INT64_MAX);
    expect_i64("-9223372036854775808", INT64_MIN);
    expect_i64("9223372036854775806", INT64_MAX - 1);
    expect_i64("-9223372036854775807", INT64_MIN + 1);
    expect_i64("922337203685477580", INT64_MAX / 10);

    /* One past either end, and far past. */
    expect_i64_err("9223372036854775808", -ERANGE);
    expect_i64_err("-9223372036854775809", -ERANGE);
    expect_i64_err("9223372036854775810", -ERANGE);
    expect_i64_err("18446744073709551616", -ERANGE);
    expect_i64_err("99999999999999999999999", -ERANGE);
    expect_i64_err("-99999999999999999999999", -ERANGE);

    /* Not numbers. */
    expect_i64_err("", -EINVAL);
    expect_i64_err("-", -EINVAL);
    expect_i64_err("+", -EINVAL);
    expect_i64_err("--1", -EINVAL);
    expect_i64_err("+-1", -EINVAL);
    expect_i64_err("1-", -EINVAL);
    expect_i64_err(" 1", -EINVAL);
    expect_i64_err("1 ", -EINVAL);
    expect_i64_err("12a", -EINVAL);
    expect_i64_err("0x10", -EINVAL);
    expect_i64_err("1e3", -EINVAL);
    expect_i64_err("1.0", -EINVAL);
    expect_i64_err("abc", -EINVAL);

    /* Exactly n bytes: a NUL inside is junk, bytes after n are not looked at. */
    ASSERT_EQ(rdzv_parse_i64n((const uint8_t *)"1\0", 2, &v), -EINVAL);
    ASSERT_OK(rdzv_parse_i64n((const uint8_t *)"123456", 3, &v));
    ASSERT_EQ(v, 123);
    ASSERT_OK(rdzv_parse_i64n((const uint8_t *)"-5xyz", 2, &v));
    ASSERT_EQ(v, -5);

    /* Every value printed by %lld parses back. */
    for (int i = -70; i <= 70; i++) {
        char buf[32];
        int64_t want = i < 0 ? INT64_MIN / (1 - i) : INT64_MAX / (1 + i);

        snprintf(buf, sizeof(buf), "%lld", (long long)want);
        expect_i64(buf, want);
    }
}

static void test_parse_u64(void)
{
    uint64_t v = 0;

    ASSERT_OK(rdzv_parse_u64("0", &v));
    ASSERT_EQ(v, 0);
    ASSERT_OK(rdzv_parse_u64("18446744073709551615", &v));
    ASSERT_EQ(v, UINT64_MAX);
    v = 3;
    ASSERT_EQ(rdzv_parse_u64("18446744073709551616", &v), -ERANGE);
    ASSERT_EQ(rdzv_parse_u64("", &v), -EINVAL);
    ASSERT_EQ(rdzv_parse_u64(NULL, &v), -EINVAL);
    ASSERT_EQ(rdzv_parse_u64("-1", &v), -EINVAL);
    ASSERT_EQ(rdzv_parse_u64("+1", &v), -EINVAL);
    ASSERT_EQ(rdzv_parse_u64(" 1", &v), -EINVAL);
    ASSERT_EQ(rdzv_parse_u64("1x", &v), -EINVAL);
    ASSERT_EQ(rdzv_parse_u64("1 ", &v), -EINVAL);
    ASSERT_EQ(v, 3);
}

static void expect_size(const char *s, uint64_t want)
{
    uint64_t v = 12345;

    snprintf(tap_note, sizeof(tap_note), "input \"%s\"", s);
    ASSERT_OK(rdzv_parse_size(s, &v));
    ASSERT_EQ(v, want);
    tap_note[0] = '\0';
}

static void expect_size_err(const char *s, int err)
{
    uint64_t v = 12345;

    snprintf(tap_note, sizeof(tap_note), "input \"%s\"", s);
    ASSERT_EQ(rdzv_parse_size(s, &v), err);
    ASSERT_EQ(v, 12345);
    tap_note[0] = '\0';
}

static void test_parse_size(void)
{
    expect_size("0", 0);
    expect_size("1", 1);
    expect_size("4096", 4096);
    expect_size("1K", 1024);
    expect_size("1k", 1024);
    expect_size("8KiB", 8192);
    expect_size("8kib", 8192);
    expect_size("2M", 2u << 20);
    expect_size("3MiB", 3u << 20);
    expect_size("4G", 4ull << 30);
    expect_size("4GiB", 4ull << 30);
    expect_size("0G", 0);
    expect_size("18446744073709551615", UINT64_MAX);
    expect_size("17179869183G", (17179869183ull) << 30);

    expect_size_err("17179869184G", -ERANGE); /* 2^64 */
    expect_size_err("18014398509481984K", -ERANGE);
    expect_size_err("18446744073709551616", -ERANGE);
    expect_size_err("", -EINVAL);
    expect_size_err("K", -EINVAL);
    expect_size_err("KiB", -EINVAL);
    expect_size_err("-1", -EINVAL);
    expect_size_err("-1K", -EINVAL);
    expect_size_err("+1K", -EINVAL);
    expect_size_err(" 1K", -EINVAL);
    expect_size_err("1 K", -EINVAL);
    expect_size_err("1K ", -EINVAL);
    expect_size_err("1B", -EINVAL);
    expect_size_err("1KB", -EINVAL);
    expect_size_err("1T", -EINVAL);
    expect_size_err("1Ki", -EINVAL);
    expect_size_err("1KK", -EINVAL);
    expect_size_err("1.5G", -EINVAL);
    expect_size_err("0x10", -EINVAL);
}

static void test_parse_port(void)
{
    uint16_t p = 7;

    ASSERT_OK(rdzv_parse_port("0", &p));
    ASSERT_EQ(p, 0);
    ASSERT_OK(rdzv_parse_port("29400", &p));
    ASSERT_EQ(p, 29400);
    ASSERT_OK(rdzv_parse_port("65535", &p));
    ASSERT_EQ(p, 65535);
    ASSERT_EQ(rdzv_parse_port("65536", &p), -EINVAL);
    ASSERT_EQ(rdzv_parse_port("-1", &p), -EINVAL);
    ASSERT_EQ(rdzv_parse_port("", &p), -EINVAL);
    ASSERT_EQ(rdzv_parse_port("http", &p), -EINVAL);
    ASSERT_EQ(rdzv_parse_port("99999999999999999999999", &p), -EINVAL);
    ASSERT_EQ(p, 65535);
}

static void expect_hostport(const char *s, const char *host, int port)
{
    char buf[64];
    uint16_t p = 11111;

    snprintf(tap_note, sizeof(tap_note), "input \"%s\"", s);
    memset(buf, 'Z', sizeof(buf));
    ASSERT_OK(rdzv_parse_hostport(s, buf, sizeof(buf), &p));
    ASSERT_TRUE(strcmp(buf, host) == 0);
    ASSERT_EQ(p, port < 0 ? 11111 : port); /* no port: the default is left in place */
    tap_note[0] = '\0';
}

static void expect_hostport_err(const char *s)
{
    char buf[16];
    uint16_t p = 11111;

    snprintf(tap_note, sizeof(tap_note), "input \"%s\"", s ? s : "(null)");
    ASSERT_EQ(rdzv_parse_hostport(s, buf, sizeof(buf), &p), -EINVAL);
    ASSERT_EQ(p, 11111);
    tap_note[0] = '\0';
}

static void test_parse_hostport(void)
{
    char buf[8];
    uint16_t p = 1;

    expect_hostport("localhost", "localhost", -1);
    expect_hostport("localhost:29400", "localhost", 29400);
    expect_hostport("10.0.0.4:0", "10.0.0.4", 0);
    expect_hostport("node-1.example.com:65535", "node-1.example.com", 65535);
    expect_hostport("[::1]:29400", "::1", 29400);
    expect_hostport("[fe80::1%eth0]:80", "fe80::1%eth0", 80);
    expect_hostport("[::]", "::", -1);
    expect_hostport("::1", "::1", -1); /* bare IPv6: no port */
    expect_hostport("fe80::2:3", "fe80::2:3", -1);

    expect_hostport_err("");
    expect_hostport_err(NULL);
    expect_hostport_err(":29400");
    expect_hostport_err("host:");
    expect_hostport_err("host:65536");
    expect_hostport_err("host:-1");
    expect_hostport_err("host:+1");
    expect_hostport_err("host:http");
    expect_hostport_err("host:1x");
    expect_hostport_err("[::1");
    expect_hostport_err("[::1]x");
    expect_hostport_err("[::1]:");
    expect_hostport_err("[::1]:70000");
    expect_hostport_err("[]:80");
    expect_hostport_err("[]");

    /* The host must fit with its NUL. */
    ASSERT_OK(rdzv_parse_hostport("1234567:1", buf, sizeof(buf), &p));
    ASSERT_TRUE(strcmp(buf, "1234567") == 0);
    ASSERT_EQ(rdzv_parse_hostport("12345678:1", buf, sizeof(buf), &p), -EINVAL);
    ASSERT_EQ(rdzv_parse_hostport("[1234:5678]:1", buf, sizeof(buf), &p), -EINVAL);
}

/* rdzv_split_hostport: the host without brackets (empty allowed: the caller decides) and the
 * port's text as it is, NULL when there is no port; only the shape is checked. */
static void test_split_hostport(void)
{
    static const struct {
        const char *in, *host, *port; /* port NULL: none */
    } ok[] = {
        {"h:80", "h", "80"},      {"h:", "h", ""},         {":80", "", "80"},
        {"h", "h", NULL},         {"[::1]:x", "::1", "x"}, {"[]:80", "", "80"},
        {"[::1]", "::1", NULL},   {"fe80::2:3", "fe80::2:3", NULL},
    };
    char host[16];
    const char *port;

    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        snprintf(tap_note, sizeof(tap_note), "input \"%s\"", ok[i].in);
        port = "unset";
        ASSERT_OK(rdzv_split_hostport(ok[i].in, host, sizeof(host), &port));
        ASSERT_TRUE(strcmp(host, ok[i].host) == 0);
        if (ok[i].port)
            ASSERT_TRUE(port && strcmp(port, ok[i].port) == 0);
        else
            ASSERT_NULL(port);
    }
    tap_note[0] = '\0';
    ASSERT_EQ(rdzv_split_hostport(NULL, host, sizeof(host), &port), -EINVAL);
    ASSERT_EQ(rdzv_split_hostport("[::1", host, sizeof(host), &port), -EINVAL);
    ASSERT_EQ(rdzv_split_hostport("[::1]x", host, sizeof(host), &port), -EINVAL);
    ASSERT_EQ(rdzv_split_hostport("0123456789abcdef:1", host, sizeof(host), &port), -EINVAL);
}

/* rdzv_format_hostport writes what rdzv_parse_hostport reads back; IPv6 in brackets. */
static void test_format_hostport(void)
{
    const char *hosts[] = {"localhost", "10.0.0.4", "::1", "fe80::1%eth0"};
    char out[64], host[64];
    uint16_t p = 0;

    ASSERT_EQ(rdzv_format_hostport(out, sizeof(out), "10.0.0.4", 29400), 14);
    ASSERT_TRUE(strcmp(out, "10.0.0.4:29400") == 0);
    ASSERT_EQ(rdzv_format_hostport(out, sizeof(out), "::1", 5000), 10);
    ASSERT_TRUE(strcmp(out, "[::1]:5000") == 0);
    for (size_t i = 0; i < sizeof(hosts) / sizeof(hosts[0]); i++) {
        ASSERT_TRUE(rdzv_format_hostport(out, sizeof(out), hosts[i], 65535) > 0);
        ASSERT_OK(rdzv_parse_hostport(out, host, sizeof(host), &p));
        ASSERT_TRUE(strcmp(host, hosts[i]) == 0);
        ASSERT_EQ(p, 65535);
    }
    /* Too small: -ENOSPC, and what fitted is NUL-terminated. */
    ASSERT_EQ(rdzv_format_hostport(out, 8, "localhost", 1), -ENOSPC);
    ASSERT_EQ(strlen(out), 7);
    ASSERT_EQ(rdzv_format_hostport(out, 12, "localhost", 1), 11);
    ASSERT_EQ(rdzv_format_hostport(out, 11, "localhost", 1), -ENOSPC);
    /* The Raft link of a replica is its clients' port + 1; the highest client port has one. */
    ASSERT_EQ(rdzv_raft_port(29400), 29401);
    ASSERT_EQ(rdzv_raft_port(RDZV_REPLICA_PORT_MAX), 65535);
}

/* strtoull() skips all leading whitespace and negates "-1"; the ' ' guard alone lets "\t-1" in. */
static void test_parse_rejects_leading_whitespace(void)
{
    uint64_t v = 5;
    uint16_t port = 5;
    char host[16];

    ASSERT_EQ(rdzv_parse_u64("\t1", &v), -EINVAL);
    ASSERT_EQ(rdzv_parse_u64("\n-1", &v), -EINVAL);
    ASSERT_EQ(v, 5);
    ASSERT_EQ(rdzv_parse_size("\t-1G", &v), -EINVAL);
    ASSERT_EQ(v, 5);
    ASSERT_EQ(rdzv_parse_port("\t80", &port), -EINVAL);
    ASSERT_EQ(rdzv_parse_hostport("h:\n80", host, sizeof(host), &port), -EINVAL);
    ASSERT_EQ(port, 5);
}

static void test_buf_put_and_layout(void)
{
    struct rdzv_buf b = {0};
    static const uint8_t want[] = {
        0xab,                                                          /* u8 */
        0x04, 0x03, 0x02, 0x01,                                        /* u32 */
        0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01,                /* u64 */
        0x03, 0,    0,    0,    0,    0,    0,    0,    'k', 'e', 'y', /* str */
        0,    0,    0,    0,    0,    0,    0,    0,                   /* empty str */
    };

    ASSERT_EQ(rdzv_buf_avail(&b), 0);
    ASSERT_OK(rdzv_buf_put(&b, NULL, 0));
    ASSERT_EQ(b.len, 0);
    ASSERT_OK(rdzv_buf_put_u8(&b, 0xab));
    ASSERT_OK(rdzv_buf_put_u32(&b, 0x01020304u));
    ASSERT_OK(rdzv_buf_put_u64(&b, 0x0102030405060708ull));
    ASSERT_OK(rdzv_buf_put_str(&b, "key", 3));
    ASSERT_OK(rdzv_buf_put_str(&b, NULL, 0));
    ASSERT_EQ(b.len, sizeof(want));
    ASSERT_MEMEQ(b.data, want, sizeof(want));
    ASSERT_TRUE(b.cap >= b.len);
    ASSERT_EQ(rdzv_get_u32(b.data + 1), 0x01020304u);
    ASSERT_EQ(rdzv_get_u64(b.data + 5), 0x0102030405060708ull);
    rdzv_buf_free(&b);
    ASSERT_NULL(b.data);
    ASSERT_EQ(b.len + b.cap + b.off, 0);
    rdzv_buf_free(&b); /* twice is fine */
}

static void test_buf_growth(void)
{
    struct rdzv_buf b = {0};

    for (unsigned i = 0; i < 100000; i++) {
        uint8_t c = (uint8_t)(i * 31);

        ASSERT_OK(rdzv_buf_put(&b, &c, 1));
        ASSERT_TRUE(b.cap >= b.len);
    }
    ASSERT_EQ(b.len, 100000);
    for (unsigned i = 0; i < 100000; i++)
        ASSERT_EQ(b.data[i], (uint8_t)(i * 31));
    /* Growth is geometric: well under 2x the contents. */
    ASSERT_LE(b.cap, 2 * 100000);
    ASSERT_EQ(rdzv_buf_reserve(&b, SIZE_MAX), -ENOMEM);
    ASSERT_EQ(rdzv_buf_reserve(&b, SIZE_MAX - b.len + 1), -ENOMEM);
    ASSERT_EQ(b.len, 100000);
    rdzv_buf_free(&b);
}

/* Filled a few bytes at a time up to a length known in advance (a request's, read as a slow
 * client sends it): the buffer doubles, never past that length, and ends at it exactly. Grown
 * by exactly what each fill needs, it was copied once per fill. */
static void test_buf_growth_up_to_a_known_length(void)
{
    const size_t most = 3000017, step = 1000;
    struct rdzv_buf b = {0};
    unsigned grew = 0;

    ASSERT_OK(rdzv_buf_put(&b, "xyz", 3));
    rdzv_buf_consume(&b, 1); /* an unread part not at the front: moved there first */
    while (rdzv_buf_avail(&b) < most) {
        size_t cap = b.cap, k = most - rdzv_buf_avail(&b) < step ? most - rdzv_buf_avail(&b)
                                                                  : step;

        ASSERT_OK(rdzv_buf_reserve_upto(&b, k, most));
        ASSERT_TRUE(b.cap - b.len >= k);
        ASSERT_LE(b.cap, most);
        grew += b.cap != cap;
        memset(b.data + b.len, 'v', k);
        b.len += k;
    }
    ASSERT_EQ(b.cap, most);
    ASSERT_EQ(memcmp(rdzv_buf_head(&b), "yzv", 3), 0);
    ASSERT_LE(grew, 20); /* log2(3000017 / 64) + 2 */
    /* More than most asked: given, never refused. */
    ASSERT_OK(rdzv_buf_reserve_upto(&b, 10, most));
    ASSERT_TRUE(b.cap >= most + 10);
    rdzv_buf_free(&b);
}

static void test_buf_consume_compact(void)
{
    struct rdzv_buf b = {0};
    uint8_t *before;
    size_t cap;

    ASSERT_OK(rdzv_buf_put(&b, "0123456789", 10));
    rdzv_buf_consume(&b, 3);
    ASSERT_EQ(rdzv_buf_avail(&b), 7);
    ASSERT_MEMEQ(rdzv_buf_head(&b), "3456789", 7);
    rdzv_buf_consume(&b, 0);
    ASSERT_EQ(rdzv_buf_avail(&b), 7);

    rdzv_buf_compact(&b);
    ASSERT_EQ(b.off, 0);
    ASSERT_EQ(b.len, 7);
    ASSERT_MEMEQ(b.data, "3456789", 7);
    rdzv_buf_compact(&b); /* nothing to do */
    ASSERT_EQ(b.len, 7);

    /* Consuming everything resets the offsets but keeps the allocation. */
    cap = b.cap;
    rdzv_buf_consume(&b, 7);
    ASSERT_EQ(b.off, 0);
    ASSERT_EQ(b.len, 0);
    ASSERT_EQ(b.cap, cap);
    ASSERT_NOT_NULL(b.data);

    /* Reserve reuses consumed space at the front instead of growing. */
    while (b.len < b.cap)
        ASSERT_OK(rdzv_buf_put_u8(&b, (uint8_t)b.len));
    cap = b.cap;
    before = b.data;
    rdzv_buf_consume(&b, 16);
    ASSERT_OK(rdzv_buf_reserve(&b, 16));
    ASSERT_EQ(b.cap, cap);
    ASSERT_TRUE(b.data == before);
    ASSERT_EQ(b.off, 0);
    ASSERT_EQ(b.len, cap - 16);
    ASSERT_EQ(b.data[0], 16);
    ASSERT_OK(rdzv_buf_put(&b, "0123456789abcdef", 16));
    ASSERT_EQ(b.len, cap);
    ASSERT_EQ(b.cap, cap);
    ASSERT_MEMEQ(b.data + cap - 16, "0123456789abcdef", 16);

    /* ... and grows when that is not enough, keeping the unread bytes. */
    rdzv_buf_consume(&b, 4);
    ASSERT_OK(rdzv_buf_reserve(&b, 5));
    ASSERT_TRUE(b.cap > cap);
    ASSERT_EQ(rdzv_buf_avail(&b), cap - 4);
    ASSERT_EQ(rdzv_buf_head(&b)[0], 20);
    rdzv_buf_free(&b);
}

static void test_get_set_le(void)
{
    uint8_t p[8];

    rdzv_set_u64(p, 0x8877665544332211ull);
    ASSERT_EQ(p[0], 0x11);
    ASSERT_EQ(p[7], 0x88);
    ASSERT_EQ(rdzv_get_u64(p), 0x8877665544332211ull);
    rdzv_set_u32(p, 0xfffffffeu);
    ASSERT_EQ(p[0], 0xfe);
    ASSERT_EQ(rdzv_get_u32(p), 0xfffffffeu);
}

static void test_hash_and_hex(void)
{
    uint8_t data[40];
    char hex[2 * 4 + 1];

    for (size_t i = 0; i < sizeof(data); i++)
        data[i] = (uint8_t)(i * 7 + 1);
    for (size_t n = 0; n <= sizeof(data); n++) {
        /* Exact-size copies: the tail handling must not read past n. */
        uint8_t *p = malloc(n ? n : 1);

        ASSERT_NOT_NULL(p);
        memcpy(p, data, n);
        ASSERT_EQ(rdzv_hash64(1, p, n), rdzv_hash64(1, data, n));
        ASSERT_NE(rdzv_hash64(1, p, n), rdzv_hash64(2, p, n));
        if (n > 0)
            ASSERT_NE(rdzv_hash64(1, p, n), rdzv_hash64(1, p, n - 1));
        free(p);
    }
    rdzv_hex((const uint8_t *)"\x00\xff\x10\xab", 4, hex);
    ASSERT_TRUE(strcmp(hex, "00ff10ab") == 0);
    rdzv_hex(NULL, 0, hex);
    ASSERT_EQ(hex[0], '\0');
}

static void test_clock_monotonic(void)
{
    uint64_t a = rdzv_now_ns(), b = rdzv_now_ns(), ms = rdzv_now_ms();

    ASSERT_TRUE(b >= a);
    ASSERT_TRUE(ms >= a / 1000000u);
}

/* A long message cut to fit a buffer ends after a whole word, never inside one. */
/* A signal by the name users write, never strsignal's description ("Terminated"). */
static void test_signal_name(void)
{
    char buf[16];

    ASSERT_TRUE(strcmp(rdzv_signal_name(SIGTERM, buf, sizeof(buf)), "SIGTERM") == 0);
    ASSERT_TRUE(strcmp(rdzv_signal_name(SIGINT, buf, sizeof(buf)), "SIGINT") == 0);
    ASSERT_TRUE(strcmp(rdzv_signal_name(SIGKILL, buf, sizeof(buf)), "SIGKILL") == 0);
    ASSERT_TRUE(strcmp(rdzv_signal_name(SIGUSR1, buf, sizeof(buf)), "SIGUSR1") == 0);
    ASSERT_TRUE(strcmp(rdzv_signal_name(99, buf, sizeof(buf)), "signal 99") == 0);
}

static void test_cut_words_never_mid_word(void)
{
    char out[32];
    const char *src = "generation 1 failed; restart budget exhausted (0 of 0 restarts used)";

    ASSERT_TRUE(strcmp(rdzv_cut_words(out, sizeof(out), "short"), "short") == 0);
    rdzv_cut_words(out, sizeof(out), src);
    ASSERT_TRUE(strcmp(out, "generation 1 failed ...") == 0); /* "restart ..." won't fit */
    ASSERT_TRUE(strlen(out) < sizeof(out));
    rdzv_cut_words(out, sizeof(out), "generation 1 failed; budget (0 of 0 restarts used)");
    ASSERT_TRUE(strcmp(out, "generation 1 failed; budget ...") == 0);
    /* One word longer than the buffer: cut in it, on a whole UTF-8 sequence. */
    rdzv_cut_words(out, 10, "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9");
    ASSERT_TRUE(strcmp(out, "\xc3\xa9\xc3\xa9 ...") == 0);
}

int main(void)
{
    TEST(test_parse_i64n);
    TEST(test_parse_u64);
    TEST(test_parse_size);
    TEST(test_parse_port);
    TEST(test_parse_hostport);
    TEST(test_split_hostport);
    TEST(test_format_hostport);
    TEST(test_buf_put_and_layout);
    TEST(test_buf_growth);
    TEST(test_buf_growth_up_to_a_known_length);
    TEST(test_buf_consume_compact);
    TEST(test_get_set_le);
    TEST(test_hash_and_hex);
    TEST(test_clock_monotonic);
    TEST(test_cut_words_never_mid_word);
    TEST(test_signal_name);
    /* Last: checks input the parsers may not reject yet. */
    TEST(test_parse_rejects_leading_whitespace);
    return tap_done();
}
