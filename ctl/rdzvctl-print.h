/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvctl-print.h: rdzvctl status's views of the status document (proto/rdzv-status.h): the
 * terminal text (jobs, nodes, the steps-per-second sparkline, ranks, events) and the JSON. Strings
 * from the daemon's peers are printed escaped. Writes to stdout only. */
#pragma once
#include <stdbool.h>

struct rdzv_status;

/* The terminal view; color: ANSI colors (a terminal). */
void rdzvctl_print_status(const struct rdzv_status *st, bool color);
/* status --json: the document as the daemon sent it (re-encoded from the struct). 0, -ENOMEM or
 * -EIO. */
int rdzvctl_print_status_json(const struct rdzv_status *st);
