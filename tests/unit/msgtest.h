/* SPDX-License-Identifier: Apache-2.0 */
/* msgtest.h: the codec tests' frame reader (test-msg-join.c, test-msg-wait.c). */
#pragma once
#include <stdint.h>
#include <string.h>

#include "common/rdzv-buf.h"
#include "proto/rdzv-frame.h"
#include "proto/rdzv-msg.h"
#include "../tap.h"

/* The one frame in out, of op want: its body in place (*p, *n), and copied NUL-terminated into
 * body (len bytes, more than the body's). */
static inline void msgtest_frame(struct rdzv_buf *out, uint8_t want, const uint8_t **p,
                                 uint32_t *n, char *body, size_t len)
{
    const char *why = NULL;
    uint8_t op = 0;

    *p = NULL;
    *n = 0;
    ASSERT_TRUE(rdzv_frame_peek(rdzv_buf_head(out), rdzv_buf_avail(out), RDZV_MAX_MSG, &op, p, n,
                                &why) > 0);
    ASSERT_EQ(op, want);
    ASSERT_TRUE(*n < len);
    memcpy(body, *p, *n);
    body[*n] = '\0';
}
