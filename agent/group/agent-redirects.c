/* SPDX-License-Identifier: Apache-2.0 */
/* agent-redirects.c: torchrun's --redirects/--tee/--local-ranks-filter values (agent-redirects.h).
 */
#include "agent/group/agent-redirects.h"

#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <string.h>

static int parse_error(const char **ret_msg, const char *msg)
{
    if (ret_msg)
        *ret_msg = msg;
    return -EINVAL;
}

/* A decimal local rank at *p (advanced past it); false if none or it overflows. */
static bool parse_rank(const char **p, unsigned long *ret)
{
    unsigned long v = 0;
    const char *s = *p;

    if (*s < '0' || *s > '9')
        return false;
    for (; *s >= '0' && *s <= '9'; s++) {
        if (v > (0xffffffffUL - (unsigned long)(*s - '0')) / 10)
            return false;
        v = v * 10 + (unsigned long)(*s - '0');
    }
    *p = s;
    *ret = v;
    return true;
}

static bool std_digit(char c)
{
    return c >= '0' && c <= '3';
}

int agent_redirects_parse(const char *s, unsigned nproc, uint8_t *masks, const char **ret_msg)
{
    static const char msg[] = "expected 0, 1, 2 or 3 (none, stdout, stderr, both), or local "
                              "rank:value pairs like 0:1,1:2";
    const char *p = s;

    if (!s)
        return parse_error(ret_msg, msg);
    if (std_digit(s[0]) && s[1] == '\0') {
        memset(masks, s[0] - '0', nproc);
        return 0;
    }
    /* validate the whole mapping first: on error the array is untouched */
    for (;;) {
        unsigned long lr;

        if (!parse_rank(&p, &lr) || *p++ != ':' || !std_digit(*p++))
            return parse_error(ret_msg, msg);
        if (*p == '\0')
            break;
        if (*p++ != ',')
            return parse_error(ret_msg, msg);
    }
    memset(masks, 0, nproc);
    for (p = s; *p;) {
        unsigned long lr = ULONG_MAX; /* set by parse_rank: the first pass checked it */

        (void)parse_rank(&p, &lr);
        if (lr < nproc)
            masks[lr] = (uint8_t)(p[1] - '0');
        p += 2;
        if (*p == ',')
            p++;
    }
    return 0;
}

int agent_ranks_filter_parse(const char *s, unsigned nproc, bool *shown, const char **ret_msg)
{
    static const char msg[] = "expected a comma-separated list of local ranks, like 0,1,2";
    const char *p = s;

    if (!s)
        return parse_error(ret_msg, msg);
    for (;;) {
        unsigned long lr;

        if (!parse_rank(&p, &lr))
            return parse_error(ret_msg, msg);
        if (*p == '\0')
            break;
        if (*p++ != ',')
            return parse_error(ret_msg, msg);
    }
    memset(shown, 0, nproc * sizeof(*shown));
    for (p = s; *p;) {
        unsigned long lr = ULONG_MAX; /* set by parse_rank: the first pass checked it */

        (void)parse_rank(&p, &lr);
        if (lr < nproc)
            shown[lr] = true;
        if (*p == ',')
            p++;
    }
    return 0;
}
