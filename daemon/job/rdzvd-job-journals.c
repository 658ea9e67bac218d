/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-job-journals.c: the generation stores' journal names (rdzvd-job-journals.h). */
#include "daemon/job/rdzvd-job-journals.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "common/rdzv-auth.h"
#include "common/rdzv-util.h"
#include "daemon/data/rdzvd-journal.h"

/* "job-" and the 64 hex digits of SHA-256 of run_id (keyed: RDZVD_STATE_NAME_KEY) into buf. */
static int name_prefix(const char *run_id, char *buf, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    uint8_t mac[RDZV_MAC_BYTES];
    char digits[2 * RDZV_MAC_BYTES + 1];
    int r;

    r = rdzv_hmac_sha256((const uint8_t *)RDZVD_STATE_NAME_KEY, strlen(RDZVD_STATE_NAME_KEY),
                         (const uint8_t *)run_id, strlen(run_id), mac);
    if (r < 0) {
        if (len)
            buf[0] = '\0';
        return r;
    }
    for (size_t i = 0; i < RDZV_MAC_BYTES; i++) {
        digits[2 * i] = hex[mac[i] >> 4];
        digits[2 * i + 1] = hex[mac[i] & 15];
    }
    digits[2 * RDZV_MAC_BYTES] = '\0';
    snprintf(buf, len, "job-%s", digits);
    return 0;
}

int rdzvd_job_state_name(const char *run_id, uint64_t gen, char *buf, size_t len)
{
    int r = name_prefix(run_id, buf, len);

    if (r == 0)
        snprintf(buf + strlen(buf), len - strlen(buf), "-gen-%" PRIu64, gen);
    return r;
}

int rdzvd_job_record_drop_journal(int dirfd, const char *state_name)
{
    return rdzvd_journal_unlink(dirfd, state_name);
}

