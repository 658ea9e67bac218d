/* SPDX-License-Identifier: Apache-2.0 */
/* rdzv-log.c: leveled logging to stderr with a UTC timestamp; every message escaped, one line. */
#include "common/rdzv-log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>

/* The one process-wide setting, as in systemd's log.c: a logger is per process by nature. */
static struct {
    const char *prog;
    enum rdzv_log_level max;
} logcfg = {"rdzv", RDZV_LOG_INFO};
/* The context, per thread: rdzvd's HTTP thread logs beside the store's loop, which sets it. */
static _Thread_local char log_ctx[192]; /* "job=... gen=... node=..." or empty */

static const char *const level_names[] = {"error", "warn", "info", "debug", "trace"};

void rdzv_log_setup(const char *prog, enum rdzv_log_level max)
{
    logcfg.prog = prog;
    logcfg.max = max;
}

size_t rdzv_escape(char *out, size_t cap, const char *in)
{
    static const char hex[] = "0123456789abcdef";
    size_t o = 0;

    if (cap == 0)
        return 0;
    for (const unsigned char *p = (const unsigned char *)in; *p; p++) {
        char e[4];
        size_t n;

        if (*p == '\n' || *p == '\r' || *p == '\t' || *p == '\\') {
            e[0] = '\\';
            e[1] = *p == '\n' ? 'n' : *p == '\r' ? 'r' : *p == '\t' ? 't' : '\\';
            n = 2;
        } else if (*p < 0x20 || *p >= 0x7f) {
            e[0] = '\\';
            e[1] = 'x';
            e[2] = hex[*p >> 4];
            e[3] = hex[*p & 15];
            n = 4;
        } else {
            e[0] = (char)*p;
            n = 1;
        }
        if (o + n >= cap)
            break; /* whole escapes only */
        memcpy(out + o, e, n);
        o += n;
    }
    out[o] = '\0';
    return o;
}

void rdzv_log_set_context(const char *fmt, ...)
{
    char raw[sizeof(log_ctx)];
    va_list ap;

    if (!fmt) {
        log_ctx[0] = '\0';
        return;
    }
    va_start(ap, fmt);
    vsnprintf(raw, sizeof(raw), fmt, ap);
    va_end(ap);
    rdzv_escape(log_ctx, sizeof(log_ctx), raw);
}

enum rdzv_log_level rdzv_log_max(void)
{
    return logcfg.max;
}

int rdzv_log_parse_level(const char *s, enum rdzv_log_level *ret)
{
    for (unsigned i = 0; i < sizeof(level_names) / sizeof(level_names[0]); i++)
        if (strcasecmp(s, level_names[i]) == 0) {
            *ret = (enum rdzv_log_level)i;
            return 0;
        }
    return -EINVAL;
}

static void vlog(enum rdzv_log_level lvl, const char *suffix, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));
static void vlog(enum rdzv_log_level lvl, const char *suffix, const char *fmt, va_list ap)
{
    char ts[32], raw[1024], msg[4 * sizeof(raw)];
    struct timespec now;
    struct tm tm;

    clock_gettime(CLOCK_REALTIME, &now);
    gmtime_r(&now.tv_sec, &tm);
    strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S", &tm);
    vsnprintf(raw, sizeof(raw), fmt, ap);
    /* Here, not at the call sites: no peer's string can start a line of its own. */
    rdzv_escape(msg, sizeof(msg), raw);
    /* One fprintf per line so concurrent writers interleave by line, not by fragment. */
    fprintf(stderr, "%s.%03ldZ %s[%s]: %s%s%s%s%s\n", ts, now.tv_nsec / 1000000, logcfg.prog,
            level_names[lvl], log_ctx, log_ctx[0] ? " " : "", msg, suffix ? ": " : "",
            suffix ? suffix : "");
}

void rdzv_log(enum rdzv_log_level lvl, const char *fmt, ...)
{
    va_list ap;

    if (lvl > logcfg.max)
        return;
    va_start(ap, fmt);
    vlog(lvl, NULL, fmt, ap);
    va_end(ap);
}

int rdzv_log_error_errno(int r, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vlog(RDZV_LOG_ERROR, strerror(r < 0 ? -r : r), fmt, ap);
    va_end(ap);
    return r;
}

int rdzv_log_warn_errno(int r, const char *fmt, ...)
{
    va_list ap;

    if (RDZV_LOG_WARN > logcfg.max)
        return r;
    va_start(ap, fmt);
    vlog(RDZV_LOG_WARN, strerror(r < 0 ? -r : r), fmt, ap);
    va_end(ap);
    return r;
}
