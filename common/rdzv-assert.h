/* SPDX-License-Identifier: Apache-2.0 */
/* rdzv-assert.h: rdzv_assert(expr), on in every build type (NDEBUG does not turn it off). It
 * checks what a module holds true by its own construction: its arguments, its state, the order
 * of its results. It never checks what a peer sent: that is refused. A false one logs the
 * expression, its file, line and function at error level, runs the hook (a test's, which
 * prints what led there), and aborts. Keep each one cheap: O(1), no walk of a list. */
#pragma once

/* The process's hook, run once before a failed assertion aborts (NULL: none). One per process,
 * as the logger's settings: a test sets it around what it drives. */
void rdzv_assert_set_hook(void (*fn)(void *ud), void *ud);
__attribute__((noreturn, cold)) void rdzv_assert_fail(const char *expr, const char *file, int line,
                                                      const char *func);

#define rdzv_assert(expr)                                                                          \
    do {                                                                                           \
        if (__builtin_expect(!(expr), 0))                                                          \
            rdzv_assert_fail(#expr, __FILE__, __LINE__, __func__);                                 \
    } while (0)
