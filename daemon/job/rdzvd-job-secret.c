/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-job-secret.c: members' secrets (rdzvd-job-secret.h). */
#include "daemon/job/rdzvd-job-secret.h"

#include <errno.h>
#include <string.h>

#include "common/rdzv-auth.h"
#include "common/rdzv-util.h"

int rdzvd_member_secret_new(char out[RDZV_SECRET_HEX + 1])
{
    uint8_t rnd[RDZV_SECRET_HEX / 2];

    if (rdzv_random_bytes(rnd, sizeof(rnd)) < 0)
        return -EIO;
    rdzv_hex(rnd, sizeof(rnd), out);
    explicit_bzero(rnd, sizeof(rnd));
    return 0;
}

int rdzvd_member_secret_hash(const char *secret, char out[RDZVD_SECRET_HASH_HEX + 1])
{
    uint8_t mac[RDZV_MAC_BYTES];

    if (rdzv_hmac_sha256((const uint8_t *)RDZVD_SECRET_HASH_KEY, strlen(RDZVD_SECRET_HASH_KEY),
                         (const uint8_t *)secret, strlen(secret), mac) < 0)
        return -EIO;
    rdzv_hex(mac, sizeof(mac), out);
    return 0;
}

bool rdzvd_member_secret_proves(const char *given, const char *hash)
{
    char h[RDZVD_SECRET_HASH_HEX + 1];

    if (strlen(given) != RDZV_SECRET_HEX || rdzvd_member_secret_hash(given, h) < 0)
        return false;
    return rdzv_auth_equal((const uint8_t *)h, (const uint8_t *)hash, RDZVD_SECRET_HASH_HEX);
}

bool rdzvd_member_secret_equal(const char *given, const char *secret)
{
    return given[0] &&
           rdzv_auth_equal((const uint8_t *)given, (const uint8_t *)secret, RDZV_SECRET_HEX);
}
