/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvctl-print.h: rdzvctl status's views of the status document (proto/rdzv-status.h): the
 * terminal text (jobs, nodes, the steps-per-second sparkline, ranks, events) and the JSON. Strings
 * from the daemon's peers are printed escaped. Writes to stdout only. */
#pragma once
#include <stdbool.h>

struct rdzv_status;

struct rdzvctl_view {
    bool color;         /* ANSI colors (a terminal) */
    bool ended_in_full; /* status --ended: each ended job as a live one; else one line each, cut
                         * to the terminal's width ($COLUMNS, else 100, when not a terminal) */
};

/* The terminal view. */
void rdzvctl_print_status(const struct rdzv_status *st, const struct rdzvctl_view *v);
/* status --json: the document as the daemon sent it (re-encoded from the struct). 0, -ENOMEM or
 * -EIO. */
int rdzvctl_print_status_json(const struct rdzv_status *st);
