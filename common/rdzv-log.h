/* SPDX-License-Identifier: Apache-2.0 */
/* rdzv-log.h: leveled logging to stderr. Library code (common/, proto/) logs at debug at most.
 * Every message (and the context) is escaped with rdzv_escape() before it is written: a string
 * from a peer (run id, host, node id, a frame's text) can neither start a line of its own nor
 * send control sequences to a terminal. One call is one line. */
#pragma once
#include <stdbool.h>
#include <stddef.h>

enum rdzv_log_level {
    RDZV_LOG_ERROR,
    RDZV_LOG_WARN,
    RDZV_LOG_INFO,
    RDZV_LOG_DEBUG,
    RDZV_LOG_TRACE
};

/* Set the process's program name (prefix of every line) and the most verbose level printed. */
void rdzv_log_setup(const char *prog, enum rdzv_log_level max);
enum rdzv_log_level rdzv_log_max(void);
/* Copy the NUL-terminated in to out (cap bytes, NUL included), with newline, CR and tab as \n,
 * \r, \t, a backslash as \\, and every other byte below 0x20 or from 0x7f up as \xNN. Stops
 * before an escape that would not fit whole. Returns the length written. */
size_t rdzv_escape(char *out, size_t cap, const char *in);

/* Structured context printed before every message ("job=42 gen=3 node=n1") of the calling
 * thread; NULL clears it. */
void rdzv_log_set_context(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Parse "error|warn|info|debug|trace". Returns 0 or -EINVAL. */
int rdzv_log_parse_level(const char *s, enum rdzv_log_level *ret);

void rdzv_log(enum rdzv_log_level lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static inline bool rdzv_log_enabled(enum rdzv_log_level lvl)
{
    return lvl <= rdzv_log_max();
}

#define log_error(...) rdzv_log(RDZV_LOG_ERROR, __VA_ARGS__)
#define log_warn(...) rdzv_log(RDZV_LOG_WARN, __VA_ARGS__)
#define log_info(...) rdzv_log(RDZV_LOG_INFO, __VA_ARGS__)
/* Cheap when disabled: arguments are not evaluated. */
#define log_debug(...)                                                                             \
    do {                                                                                           \
        if (rdzv_log_enabled(RDZV_LOG_DEBUG))                                                      \
            rdzv_log(RDZV_LOG_DEBUG, __VA_ARGS__);                                                 \
    } while (0)
#define log_trace(...)                                                                             \
    do {                                                                                           \
        if (rdzv_log_enabled(RDZV_LOG_TRACE))                                                      \
            rdzv_log(RDZV_LOG_TRACE, __VA_ARGS__);                                                 \
    } while (0)

/* Log "<message>: <strerror(r)>" at error level and return r (a negative errno). */
int rdzv_log_error_errno(int r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int rdzv_log_warn_errno(int r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define log_error_errno(...) rdzv_log_error_errno(__VA_ARGS__)
#define log_warn_errno(...) rdzv_log_warn_errno(__VA_ARGS__)
