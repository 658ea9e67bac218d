/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-job-secret.c: members' secrets and the keys they derive from (rdzvd-job-secret.h). */
#include "daemon/job/rdzvd-job-secret.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/rdzv-auth.h"
#include "common/rdzv-util.h"

int rdzvd_member_key_load(int dirfd, uint8_t key[RDZVD_MEMBER_KEY_BYTES])
{
    ssize_t n;
    int fd, r = 0;

    fd = openat(dirfd, RDZVD_MEMBER_KEY_FILE, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd >= 0) {
        n = read(fd, key, RDZVD_MEMBER_KEY_BYTES);
        r = n == RDZVD_MEMBER_KEY_BYTES ? 0 : -EBADMSG;
        goto out;
    }
    if (errno != ENOENT)
        return -errno;
    if ((r = rdzv_random_bytes(key, RDZVD_MEMBER_KEY_BYTES)) < 0)
        return r;
    fd = openat(dirfd, RDZVD_MEMBER_KEY_FILE,
                O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return -errno;
    n = write(fd, key, RDZVD_MEMBER_KEY_BYTES);
    r = n == RDZVD_MEMBER_KEY_BYTES && fsync(fd) == 0 ? 0 : -EIO;
out:
    close(fd);
    return r;
}

#define TABLE_MEMBER_KEY "member-key"

int rdzvd_job_table_member_key(struct rdzvd_store *t, const uint8_t **key, size_t *len)
{
    uint8_t fresh[RDZVD_MEMBER_KEY_BYTES];
    int r = rdzvd_store_get(t, TABLE_MEMBER_KEY, strlen(TABLE_MEMBER_KEY), key, len);

    if (r == 0)
        return *len == RDZVD_MEMBER_KEY_BYTES ? 0 : -EBADMSG;
    if (r != -ENOENT)
        return r;
    if ((r = rdzv_random_bytes(fresh, sizeof(fresh))) < 0 ||
        (r = rdzvd_store_set(t, TABLE_MEMBER_KEY, strlen(TABLE_MEMBER_KEY), fresh,
                             sizeof(fresh))) < 0)
        return r;
    explicit_bzero(fresh, sizeof(fresh));
    return rdzvd_store_get(t, TABLE_MEMBER_KEY, strlen(TABLE_MEMBER_KEY), key, len);
}

int rdzvd_member_secret_derive(const struct rdzvd_member_keys *k, const char *run_id,
                               const char *node_id, char out[RDZV_SECRET_HEX + 1])
{
    uint8_t msg[32 + 2 * (RDZV_ID_MAX + 1)], mac[RDZV_MAC_BYTES];
    const uint8_t *key = k->key;
    size_t keylen = k->len;
    int n;

    if (!key && k->table && rdzvd_job_table_member_key(k->table, &key, &keylen) < 0)
        key = NULL;
    if (!key)
        return -ENOKEY;
    n = snprintf((char *)msg, sizeof(msg), "rdzv-member-v1%c%s%c%s", 0, run_id, 0, node_id);
    if (n < 0 || (size_t)n >= sizeof(msg) ||
        rdzv_hmac_sha256(key, keylen, msg, (size_t)n, mac) < 0)
        return -EIO;
    rdzv_hex(mac, sizeof(mac), out);
    return 0;
}

int rdzvd_member_secret_new(const struct rdzvd_member_keys *k, const char *run_id,
                            const char *node_id, char out[RDZV_SECRET_HEX + 1])
{
    uint8_t rnd[RDZV_SECRET_HEX / 2];

    if (rdzvd_member_secret_derive(k, run_id, node_id, out) == 0)
        return 0;
    if (rdzv_random_bytes(rnd, sizeof(rnd)) < 0)
        return -EIO;
    rdzv_hex(rnd, sizeof(rnd), out);
    return 0;
}

bool rdzvd_member_secret_equal(const char *given, const char *secret)
{
    return given[0] &&
           rdzv_auth_equal((const uint8_t *)given, (const uint8_t *)secret, RDZV_SECRET_HEX);
}
