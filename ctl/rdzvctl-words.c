/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvctl-words.c: rdzvctl's commands and status's options by name, and the one line a word
 * that names none gets, with the nearest one (rdzvctl-words.h). */
#include "ctl/rdzvctl-words.h"

#include <stdio.h>
#include <string.h>

#include "common/rdzv-opt.h"

static const char *const commands[] = {"ping", "get",      "set",  "add",    "delete",
                                       "check", "wait",    "num-keys", "list", "status",
                                       "release", "cancel", NULL};
static const char *const status_options[] = {"json", "ended", "watch", "count", NULL};

bool rdzvctl_command_known(const char *word)
{
    const char *near;

    for (size_t i = 0; commands[i]; i++)
        if (strcmp(word, commands[i]) == 0)
            return true;
    near = rdzv_opt_nearest(word, commands);
    fprintf(stderr, "rdzvctl: unknown command '%s'%s%s%s (see rdzvctl --help)\n", word,
            near ? "; did you mean " : "", near ? near : "", near ? "?" : "");
    return false;
}

void rdzvctl_status_option_unknown(const char *word)
{
    const char *name = strncmp(word, "--", 2) == 0 ? word + 2 : word;
    const char *near = rdzv_opt_nearest(name, status_options);

    if (near && strcmp(near, name)) /* one named wholly lacks its value: the usage below */
        fprintf(stderr, "rdzvctl: status: unknown option '%s'; did you mean --%s? (see rdzvctl "
                        "--help)\n", word, near);
    else
        fprintf(stderr, "rdzvctl: status takes --json, --ended, or --watch [SEC] [--count N] "
                        "(see rdzvctl --help)\n");
}
