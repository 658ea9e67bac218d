/* SPDX-License-Identifier: Apache-2.0 */
/* rdzv-util.c: small helpers. */
#include "common/rdzv-util.h"

#include <ctype.h>
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

uint64_t rdzv_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t rdzv_now_ms(void)
{
    return rdzv_now_ns() / 1000000ull;
}

double rdzv_wall_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Leading decimal digits of s; *end points after them. strtoull alone would skip white space
 * and accept a sign: demand a digit first. */
static int parse_leading_u64(const char *s, unsigned long long *v, char **end)
{
    if (!s || *s < '0' || *s > '9')
        return -EINVAL;
    errno = 0;
    *v = strtoull(s, end, 10);
    return errno == ERANGE ? -ERANGE : 0;
}

int rdzv_parse_u64(const char *s, uint64_t *ret)
{
    unsigned long long v;
    char *end;
    int r = parse_leading_u64(s, &v, &end);

    if (r < 0)
        return r;
    if (*end != '\0')
        return -EINVAL;
    *ret = v;
    return 0;
}

int rdzv_parse_size(const char *s, uint64_t *ret)
{
    static const struct {
        const char *suffix;
        uint64_t mult;
    } units[] = {{"", 1},           {"K", 1ull << 10}, {"KiB", 1ull << 10}, {"M", 1ull << 20},
                 {"MiB", 1ull << 20}, {"G", 1ull << 30}, {"GiB", 1ull << 30}};
    unsigned long long v;
    char *end;
    int r = parse_leading_u64(s, &v, &end);

    if (r < 0)
        return r;
    for (size_t i = 0; i < RDZV_ARRAY_SIZE(units); i++)
        if (strcasecmp(end, units[i].suffix) == 0) {
            if (v > UINT64_MAX / units[i].mult)
                return -ERANGE;
            *ret = v * units[i].mult;
            return 0;
        }
    return -EINVAL;
}

/* "PREFIX_" + option name upper-cased with '-' as '_': --max-conns -> RDZVD_MAX_CONNS. */
void rdzv_env_name(const char *prefix, const char *opt, char *buf, size_t len)
{
    size_t n = (size_t)snprintf(buf, len, "%s_", prefix);

    for (; *opt && n + 1 < len; opt++, n++)
        buf[n] = *opt == '-' ? '_' : (char)toupper((unsigned char)*opt);
    if (n < len)
        buf[n] = '\0';
}

int rdzv_parse_i64n(const uint8_t *p, size_t n, int64_t *ret)
{
    bool neg = false;
    uint64_t v = 0, lim;
    size_t i = 0;

    if (n == 0)
        return -EINVAL;
    if (p[0] == '-' || p[0] == '+') {
        neg = p[0] == '-';
        i = 1;
        if (n == 1)
            return -EINVAL;
    }
    lim = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    for (; i < n; i++) {
        unsigned d;

        if (p[i] < '0' || p[i] > '9')
            return -EINVAL;
        d = p[i] - '0';
        if (v > (lim - d) / 10)
            return -ERANGE;
        v = v * 10 + d;
    }
    *ret = neg ? (int64_t)(0 - v) : (int64_t)v;
    return 0;
}

int rdzv_parse_port(const char *s, uint16_t *ret)
{
    uint64_t v;

    if (rdzv_parse_u64(s, &v) < 0 || v > 65535)
        return -EINVAL;
    *ret = (uint16_t)v;
    return 0;
}

int rdzv_split_hostport(const char *s, char *hostbuf, size_t hostlen, const char **portstr)
{
    const char *colon, *hs = s;
    size_t hl;

    if (!s || !hostlen)
        return -EINVAL;
    if (s[0] == '[') {
        const char *rb = strchr(s, ']');

        if (!rb)
            return -EINVAL;
        hs = s + 1;
        hl = (size_t)(rb - hs);
        colon = rb[1] == ':' ? rb + 1 : NULL;
        if (!colon && rb[1] != '\0')
            return -EINVAL;
    } else {
        colon = strrchr(s, ':');
        if (colon && strchr(s, ':') != colon)
            colon = NULL; /* bare IPv6 address without brackets: no port */
        hl = colon ? (size_t)(colon - s) : strlen(s);
    }
    if (hl >= hostlen)
        return -EINVAL;
    memcpy(hostbuf, hs, hl);
    hostbuf[hl] = '\0';
    *portstr = colon ? colon + 1 : NULL;
    return 0;
}

int rdzv_parse_hostport(const char *s, char *hostbuf, size_t hostlen, uint16_t *port)
{
    const char *portstr;

    if (rdzv_split_hostport(s, hostbuf, hostlen, &portstr) < 0 || !hostbuf[0])
        return -EINVAL;
    if (portstr && rdzv_parse_port(portstr, port) < 0)
        return -EINVAL;
    return 0;
}

int rdzv_format_hostport(char *out, size_t len, const char *host, unsigned port)
{
    int n = snprintf(out, len, strchr(host, ':') ? "[%s]:%u" : "%s:%u", host, port);

    if (n < 0)
        return -EINVAL;
    return (size_t)n < len ? n : -ENOSPC;
}

static inline uint64_t load64(const uint8_t *p)
{
    uint64_t v;

    memcpy(&v, p, sizeof(v));
    return v;
}

static inline uint64_t mix(uint64_t a, uint64_t b)
{
    __uint128_t r = (__uint128_t)a * b;

    return (uint64_t)r ^ (uint64_t)(r >> 64);
}

uint64_t rdzv_hash64(uint64_t seed, const void *data, size_t n)
{
    const uint8_t *p = data;
    const uint64_t k0 = 0xa0761d6478bd642full, k1 = 0xe7037ed1a0b428dbull;
    uint64_t h = seed ^ mix(seed ^ k0, n ^ k1);

    while (n >= 8) {
        h = mix(h ^ load64(p), k1);
        p += 8;
        n -= 8;
    }
    if (n) {
        uint64_t t = 0;

        memcpy(&t, p, n);
        h = mix(h ^ t ^ ((uint64_t)n << 56), k0);
    }
    return mix(h, h ^ k1);
}

/* n bytes from getrandom(); flags 0 blocks only before the pool is initialised, early at
 * boot. */
static int fill_random(uint8_t *out, size_t n, unsigned flags)
{
    while (n > 0) {
        ssize_t got = getrandom(out, n, flags);

        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            return -EIO;
        out += got;
        n -= (size_t)got;
    }
    return 0;
}

int rdzv_random_bytes(uint8_t *out, size_t n)
{
    return fill_random(out, n, 0);
}

uint64_t rdzv_random_u64(void)
{
    uint64_t v;

    if (fill_random((uint8_t *)&v, sizeof(v), GRND_NONBLOCK) == 0)
        return v;
    return rdzv_now_ns() ^ ((uint64_t)getpid() << 32);
}

void rdzv_hex(const uint8_t *p, size_t n, char *out)
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

int rdzv_find_in_path(const char *name, char *buf, size_t len)
{
    const char *path = getenv("PATH"), *p, *end;

    if (!path || !*path)
        return -ENOENT;
    for (p = path; *p; p = *end ? end + 1 : end) {
        int n;

        end = strchrnul(p, ':');
        n = snprintf(buf, len, "%.*s/%s", (int)(end - p), p, name);
        if (n < 0 || (size_t)n >= len)
            return -ENAMETOOLONG;
        if (end > p && access(buf, X_OK) == 0)
            return 0;
    }
    return -ENOENT;
}

char *rdzv_utf8_trim(char *s)
{
    size_t n = strlen(s), i = n, cont = 0;

    /* Walk back over at most 3 continuation bytes to the lead byte of the last sequence. */
    while (i > 0 && cont < 4 && ((unsigned char)s[i - 1] & 0xC0) == 0x80) {
        i--;
        cont++;
    }
    if (i > 0) {
        unsigned char lead = (unsigned char)s[i - 1];
        size_t want = lead >= 0xF0 ? 3 : lead >= 0xE0 ? 2 : lead >= 0xC0 ? 1 : 0;

        if (lead >= 0xC0 && cont < want)
            s[i - 1] = '\0'; /* the lead byte's sequence is cut short */
    }
    return s;
}

char *rdzv_cut_words(char *dst, size_t len, const char *src)
{
    size_t n = strlen(src), keep;

    if (n < len) {
        memcpy(dst, src, n + 1);
        return dst;
    }
    keep = len - 5; /* room for " ..." and the NUL */
    while (keep > 0 && src[keep] != ' ')
        keep--;
    while (keep > 0 && (src[keep - 1] == ' ' || src[keep - 1] == ',' || src[keep - 1] == ';'))
        keep--;
    if (keep == 0)
        keep = len - 5;
    memcpy(dst, src, keep);
    dst[keep] = '\0';
    rdzv_utf8_trim(dst);
    strcat(dst, " ...");
    return dst;
}

bool rdzv_has_ctl(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            return true;
    return false;
}

static int rmtree_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    if ((flag == FTW_DP ? rmdir(path) : unlink(path)) < 0 && errno != ENOENT)
        return -errno;
    return 0;
}

int rdzv_rmtree(const char *dir)
{
    int r = nftw(dir, rmtree_one, 16, FTW_DEPTH | FTW_PHYS);

    if (r == -1)
        return errno == ENOENT ? 0 : -errno;
    return r;
}

const char *rdzv_signal_name(int sig, char *buf, size_t n)
{
    static const struct {
        int sig;
        const char *name;
    } names[] = {{SIGHUP, "SIGHUP"},   {SIGINT, "SIGINT"},   {SIGQUIT, "SIGQUIT"},
                 {SIGILL, "SIGILL"},   {SIGABRT, "SIGABRT"}, {SIGBUS, "SIGBUS"},
                 {SIGFPE, "SIGFPE"},   {SIGKILL, "SIGKILL"}, {SIGUSR1, "SIGUSR1"},
                 {SIGSEGV, "SIGSEGV"}, {SIGUSR2, "SIGUSR2"}, {SIGPIPE, "SIGPIPE"},
                 {SIGALRM, "SIGALRM"}, {SIGTERM, "SIGTERM"}, {SIGXCPU, "SIGXCPU"}};

    for (size_t i = 0; i < RDZV_ARRAY_SIZE(names); i++)
        if (names[i].sig == sig)
            return names[i].name;
    snprintf(buf, n, "signal %d", sig);
    return buf;
}

bool rdzv_fd_self_connected(int fd)
{
    struct sockaddr_storage me, peer;
    socklen_t nme = sizeof(me), npeer = sizeof(peer);

    memset(&me, 0, sizeof(me));
    memset(&peer, 0, sizeof(peer));
    if (getsockname(fd, (struct sockaddr *)&me, &nme) < 0 ||
        getpeername(fd, (struct sockaddr *)&peer, &npeer) < 0)
        return false;
    return nme == npeer && memcmp(&me, &peer, nme) == 0;
}
