/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-disk.h: the free space of a state directory's file system, as the stores' journals may
 * use it. They leave a reserve to the job table's journal: a store's record that would take the
 * free space below it is refused (rdzvd_disk_take), so that no TCPStore client can fill the disk
 * that the job table's records need. The reserve is the larger of what its owner sets
 * (RDZVD_STATE_RESERVE) and 4 times the job table's journal, which covers that journal's growth
 * up to its next compaction and the compaction's snapshot.
 *
 * The free space is read with fstatvfs(2) at the first use, after every RDZVD_DISK_RECHECK
 * bytes taken, after a file was compacted or deleted (rdzvd_disk_changed), and before any
 * refusal; between two readings the bytes taken are counted down from it. Other writers on the
 * same file system (another rdzvd) are seen at the next reading. One thread: the loop's. */
#pragma once
#include <stddef.h>
#include <stdint.h>

/* Bytes taken between two readings of the free space at most. */
#define RDZVD_DISK_RECHECK (1u << 20)

struct rdzvd_disk {
    int dirfd;                   /* the state directory (borrowed) */
    const char *dir;             /* its name, for logs (borrowed) */
    uint64_t reserve;            /* left to the job table at least */
    const uint64_t *table_bytes; /* the job table journal's size now, or NULL */
    uint64_t avail;              /* free bytes at the last reading */
    uint64_t taken;              /* bytes taken since */
    int known;                   /* avail was read, and nothing was freed since */
    /* Reads the free bytes of dirfd's file system: 0 or a negative errno. NULL: fstatvfs(2)'s
     * f_bavail (a test sets its own, for a disk of its own size). */
    int (*free_fn)(int dirfd, uint64_t *ret);
};

void rdzvd_disk_init(struct rdzvd_disk *d, int dirfd, const char *dir, uint64_t reserve);
/* The reserve now: the larger of d->reserve and 4 times the job table's journal. */
uint64_t rdzvd_disk_reserve(const struct rdzvd_disk *d);
/* Take n bytes for a store's record, leaving at least keep bytes free above the reserve: 0, or
 * -EDQUOT (nothing taken). d NULL: 0. */
int rdzvd_disk_take(struct rdzvd_disk *d, uint64_t n, uint64_t keep);
/* A store's log's bound on disk: its share of --max-store-bytes plus as much again, 1 MiB at
 * least (the compaction's slack), saturating at UINT64_MAX. */
uint64_t rdzvd_disk_bound(uint64_t share);
/* A file of the directory shrank or went: read the free space again at the next take. */
void rdzvd_disk_changed(struct rdzvd_disk *d);
/* What fills the disk, for a log line: "N bytes free of M; largest files: a (X bytes), ..."
 * (the 3 largest files of the directory dirfd). */
void rdzvd_disk_report(int dirfd, char *buf, size_t len);
