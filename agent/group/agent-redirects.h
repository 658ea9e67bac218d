/* SPDX-License-Identifier: Apache-2.0 */
/* agent-redirects.h: torchrun's -r/--redirects, -t/--tee and --local-ranks-filter values, parsed
 * into per-local-rank arrays for agent_group_cfg (agent-workers.h says what each means):
 *   redirects / tee: "N" (every local rank) or "LR:N,LR:N,..." (ranks not named: 0), where N is
 *     0 (none), 1 (stdout), 2 (stderr) or 3 (both); torch's Std.from_str, which also accepts only
 *     these, but here a local rank may have more than one digit. Ranks >= nproc are ignored, as
 *     torch ignores them.
 *   local-ranks-filter: "LR,LR,..." (at least one); the local ranks whose output reaches the
 *     console. Ranks >= nproc are ignored.
 * Pure functions: no I/O, no globals; the caller prints the message of an error.
 *
 * Ownership: the caller's arrays, nproc entries, filled in full on success (untouched on error).
 * Errors: -EINVAL with *ret_msg (if not NULL) a static string saying what was expected.
 * Threads: any. */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#define AGENT_STD_OUT 1u /* mask bit: stdout */
#define AGENT_STD_ERR 2u /* mask bit: stderr */

/* Parse a -r/-t value into masks[0..nproc). */
int agent_redirects_parse(const char *s, unsigned nproc, uint8_t *masks, const char **ret_msg);

/* Parse a --local-ranks-filter value into shown[0..nproc). */
int agent_ranks_filter_parse(const char *s, unsigned nproc, bool *shown, const char **ret_msg);
