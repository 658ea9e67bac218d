/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-disk.c: the state directory's free space and the job table's reserve (rdzvd-disk.h). */
#include "daemon/data/rdzvd-disk.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#define REPORT_FILES 3
#define RDZVD_DISK_SLACK_MIN (1u << 20) /* RDZVD_JOURNAL_COMPACT_MIN */

void rdzvd_disk_init(struct rdzvd_disk *d, int dirfd, const char *dir, uint64_t reserve)
{
    *d = (struct rdzvd_disk){.dirfd = dirfd, .dir = dir, .reserve = reserve};
}

uint64_t rdzvd_disk_reserve(const struct rdzvd_disk *d)
{
    uint64_t table = d->table_bytes ? *d->table_bytes : 0;

    return table > d->reserve / 4 ? table * 4 : d->reserve;
}

static int statvfs_free(int dirfd, uint64_t *ret)
{
    struct statvfs sv;

    if (fstatvfs(dirfd, &sv) < 0)
        return -errno;
    *ret = (uint64_t)sv.f_bavail * sv.f_frsize;
    return 0;
}

/* Read the free space. 0 or a negative errno (then nothing is known). */
static int disk_read(struct rdzvd_disk *d)
{
    int r;

    d->known = 0;
    r = (d->free_fn ? d->free_fn : statvfs_free)(d->dirfd, &d->avail);
    if (r < 0)
        return r;
    d->taken = 0;
    d->known = 1;
    return 0;
}

static int disk_fits(const struct rdzvd_disk *d, uint64_t n)
{
    uint64_t reserve = rdzvd_disk_reserve(d);

    return d->avail >= reserve && d->avail - reserve >= d->taken &&
           d->avail - reserve - d->taken >= n;
}

int rdzvd_disk_take(struct rdzvd_disk *d, uint64_t n, uint64_t keep)
{
    if (!d)
        return 0;
    if (n + keep < n)
        return -EDQUOT;
    if ((!d->known || d->taken >= RDZVD_DISK_RECHECK || !disk_fits(d, n + keep)) &&
        disk_read(d) < 0)
        return 0; /* unknown: the write itself tells */
    if (!disk_fits(d, n + keep))
        return -EDQUOT;
    d->taken += n;
    return 0;
}

uint64_t rdzvd_disk_bound(uint64_t share)
{
    uint64_t slack = share > RDZVD_DISK_SLACK_MIN ? share : RDZVD_DISK_SLACK_MIN;

    /* Saturating: a --max-store-bytes of 2^63 or more must not wrap to a bound of nothing. */
    return share + slack < share ? UINT64_MAX : share + slack;
}

void rdzvd_disk_changed(struct rdzvd_disk *d)
{
    if (d)
        d->known = 0;
}

struct big_file {
    char name[sizeof(((struct dirent *)0)->d_name)];
    uint64_t bytes;
};

void rdzvd_disk_report(int dirfd, char *buf, size_t len)
{
    struct big_file big[REPORT_FILES] = {{"", 0}};
    struct statvfs sv;
    struct dirent *de;
    size_t off;
    DIR *dp;
    int fd;

    if (fstatvfs(dirfd, &sv) == 0)
        snprintf(buf, len, "%" PRIu64 " bytes free of %" PRIu64,
                 (uint64_t)sv.f_bavail * sv.f_frsize, (uint64_t)sv.f_blocks * sv.f_frsize);
    else
        snprintf(buf, len, "free space unknown (%s)", strerror(errno));
    fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    dp = fd >= 0 ? fdopendir(fd) : NULL;
    if (!dp) {
        if (fd >= 0)
            close(fd);
        return;
    }
    while ((de = readdir(dp))) {
        struct stat st;
        int i;

        if (fstatat(dirfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
            continue;
        for (i = REPORT_FILES; i > 0 && big[i - 1].bytes < (uint64_t)st.st_size; i--)
            if (i < REPORT_FILES)
                big[i] = big[i - 1];
        if (i < REPORT_FILES) {
            snprintf(big[i].name, sizeof(big[i].name), "%s", de->d_name);
            big[i].bytes = (uint64_t)st.st_size;
        }
    }
    closedir(dp);
    for (int i = 0; i < REPORT_FILES && big[i].bytes; i++) {
        off = strlen(buf);
        snprintf(buf + off, len - off, "%s %s (%" PRIu64 " bytes)",
                 i ? "," : "; largest files:", big[i].name, big[i].bytes);
    }
}
