/* SPDX-License-Identifier: Apache-2.0 */
/* rdzv-assert.c: what a failed rdzv_assert does: log it, run the hook, abort. */
#include "common/rdzv-assert.h"

#include <stdbool.h>
#include <stdlib.h>

#include "common/rdzv-log.h"

/* The one process-wide hook, as the logger's settings are process-wide. */
static struct {
    void (*fn)(void *ud);
    void *ud;
    bool running; /* an assertion failed inside the hook: abort at once */
} hook;

void rdzv_assert_set_hook(void (*fn)(void *ud), void *ud)
{
    hook.fn = fn;
    hook.ud = ud;
}

void rdzv_assert_fail(const char *expr, const char *file, int line, const char *func)
{
    log_error("assertion failed: %s (%s:%d, %s)", expr, file, line, func);
    if (hook.fn && !hook.running) {
        hook.running = true;
        hook.fn(hook.ud);
    }
    abort();
}
