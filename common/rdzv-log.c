/* SPDX-License-Identifier: Apache-2.0 */
/* rdzv-log.c: leveled logging to stderr with a UTC timestamp. */
#include "rdzv-log.h"

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
    char ctx[192]; /* "job=... gen=... node=..." or empty */
} logcfg = {"rdzv", RDZV_LOG_INFO, ""};

static const char *const level_names[] = {"error", "warn", "info", "debug", "trace"};

void rdzv_log_setup(const char *prog, enum rdzv_log_level max)
{
    logcfg.prog = prog;
    logcfg.max = max;
}

void rdzv_log_set_context(const char *fmt, ...)
{
    va_list ap;

    if (!fmt) {
        logcfg.ctx[0] = '\0';
        return;
    }
    va_start(ap, fmt);
    vsnprintf(logcfg.ctx, sizeof(logcfg.ctx), fmt, ap);
    va_end(ap);
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
    char ts[32], msg[1024];
    struct timespec now;
    struct tm tm;

    clock_gettime(CLOCK_REALTIME, &now);
    gmtime_r(&now.tv_sec, &tm);
    strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S", &tm);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    /* One fprintf per line so concurrent writers interleave by line, not by fragment. */
    fprintf(stderr, "%s.%03ldZ %s[%s]: %s%s%s%s%s\n", ts, now.tv_nsec / 1000000, logcfg.prog,
            level_names[lvl], logcfg.ctx, logcfg.ctx[0] ? " " : "", msg, suffix ? ": " : "",
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

int log_error_errno(int r, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vlog(RDZV_LOG_ERROR, strerror(r < 0 ? -r : r), fmt, ap);
    va_end(ap);
    return r;
}

int log_warn_errno(int r, const char *fmt, ...)
{
    va_list ap;

    if (RDZV_LOG_WARN > logcfg.max)
        return r;
    va_start(ap, fmt);
    vlog(RDZV_LOG_WARN, strerror(r < 0 ? -r : r), fmt, ap);
    va_end(ap);
    return r;
}
