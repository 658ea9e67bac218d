/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-journal.c: the store's append-only journal of records (rdzvd-record.h): replay with tail
 * recovery, snapshot compaction, fsync scheduling (format and policy in rdzvd-journal.h). */
#include "daemon/data/rdzvd-journal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "common/rdzv-log.h"
#include "common/rdzv-util.h"
#include "daemon/data/rdzvd-disk.h"
#include "daemon/data/rdzvd-record.h"
#include "daemon/data/rdzvd-store.h"

#define JOURNAL_MAGIC "RDZVJRN1"
#define JOURNAL_VERSION 3u   /* may hold APPEND records (rdzvd-record.h) */
#define JOURNAL_VERSION_2 2u /* the same header; read, and rewritten as version 3 */
#define JOURNAL_VERSION_1 1u /* no name in the header: read, and rewritten as version 3 */
#define HEADER_V1_LEN 16u
#define HEADER_MAX (16u + RDZVD_STATE_NAME_MAX)
#define REC_HDR_LEN RDZVD_RECORD_HDR_LEN
#define SNAP_BUF_LEN (64u << 10)
#define WRITE_BUF_LEN (64u << 10) /* buffered mode: records held until the owner's flush */
#define EVERYSEC_MS 1000
/* Bytes checksummed at most while looking for intact records after a bad one at start; past it
 * the bad record counts as corruption in the middle (nothing is truncated that might be data). */
#define SCAN_CRC_BUDGET (256u << 20)


struct rdzvd_journal {
    uv_timer_t timer;     /* EVERYSEC: one-shot, armed by the first unsynced write */
    uv_loop_t *loop;      /* NULL: no timer (unit tests) */
    struct rdzvd_store *store;
    enum rdzvd_fsync mode;
    int dirfd;
    int fd;               /* O_APPEND; holds our flock */
    bool dirty;           /* written since the last fdatasync */
    bool failed;          /* persistence off after an error */
    bool opened;          /* rdzvd_journal_open has succeeded */
    bool bounded;         /* rdzvd_journal_bound: held to rdzvd_journal_max_bytes */
    bool refusing;        /* a change was refused for want of room, and not logged since */
    bool futile;          /* a compaction for room did not halve the file: none until the next */
    struct rdzvd_disk *disk; /* rdzvd_journal_bound: the free space its records may take */
    uint64_t last_snapshot;
    uint8_t *buf;         /* buffered mode: records not written yet (NULL: write each at once) */
    size_t buf_len;
    void (*pending_fn)(void *ud);
    void *pending_ud;
    struct rdzvd_journal_stats st;
    const char *dir;
    char file[RDZVD_STATE_NAME_MAX + 16]; /* <name>.journal */
    char tmp[RDZVD_STATE_NAME_MAX + 16];  /* <name>.journal.tmp */
    char name[RDZVD_STATE_NAME_MAX + 1];  /* its owner, in the header */
};

/* ---- names and modes ---- */

int rdzvd_fsync_parse(const char *s, enum rdzvd_fsync *ret)
{
    if (strcmp(s, "everysec") == 0)
        *ret = RDZVD_FSYNC_EVERYSEC;
    else if (strcmp(s, "always") == 0)
        *ret = RDZVD_FSYNC_ALWAYS;
    else if (strcmp(s, "no") == 0)
        *ret = RDZVD_FSYNC_NO;
    else
        return -EINVAL;
    return 0;
}

const char *rdzvd_fsync_name(enum rdzvd_fsync mode)
{
    switch (mode) {
    case RDZVD_FSYNC_EVERYSEC:
        return "everysec";
    case RDZVD_FSYNC_ALWAYS:
        return "always";
    case RDZVD_FSYNC_NO:
        return "no";
    }
    return "?";
}

bool rdzvd_state_name_valid(const char *name)
{
    size_t n = 0;

    if (!name)
        return false;
    for (const char *p = name; *p; p++, n++) {
        char c = *p;

        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-'))
            return false;
    }
    return n >= 1 && n <= RDZVD_STATE_NAME_MAX;
}

/* ---- writing ---- */

static void journal_stop_handles(struct rdzvd_journal *j)
{
    if (j->loop)
        (void)uv_timer_stop(&j->timer);
}

/* Turn persistence off after an error; the store keeps serving. Returns r. */
static int journal_fail(struct rdzvd_journal *j, const char *what, int r)
{
    char disk[512] = "";

    if (j->failed)
        return r;
    j->failed = true;
    j->dirty = false;
    j->buf_len = 0;
    rdzvd_store_set_change_cb(j->store, NULL, NULL);
    rdzvd_store_set_room_cb(j->store, NULL, NULL);
    journal_stop_handles(j);
    if (!j->opened)
        return log_error_errno(r, "journal %s/%s: %s failed", j->dir, j->file, what);
    if (r == -ENOSPC || r == -EDQUOT) { /* say what filled the disk */
        disk[0] = ' ';
        disk[1] = '(';
        rdzvd_disk_report(j->dirfd, disk + 2, sizeof(disk) - 3);
        strcat(disk, ")");
    }
    log_error("journal %s/%s: %s failed: %s%s; persistence is OFF for this store from now on "
              "(rdzvd keeps serving it; its later changes will not survive a restart)",
              j->dir, j->file, what, strerror(-r), disk);
    return r;
}

static int write_all(int fd, struct iovec *iov, int n)
{
    while (n > 0) {
        ssize_t w = writev(fd, iov, n);

        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        while (n > 0 && (size_t)w >= iov->iov_len) {
            w -= (ssize_t)iov->iov_len;
            iov++;
            n--;
        }
        if (n > 0) {
            iov->iov_base = (uint8_t *)iov->iov_base + w;
            iov->iov_len -= (size_t)w;
        }
    }
    return 0;
}

static void journal_timer_cb(uv_timer_t *t)
{
    (void)rdzvd_journal_sync(t->data);
}

static void journal_mark_dirty(struct rdzvd_journal *j)
{
    if (j->mode == RDZVD_FSYNC_NO)
        return;
    j->dirty = true;
    if (j->mode == RDZVD_FSYNC_EVERYSEC && j->loop && !uv_is_active((uv_handle_t *)&j->timer))
        (void)uv_timer_start(&j->timer, journal_timer_cb, EVERYSEC_MS, 0);
}

/* Hand the buffered records to the kernel. Returns 0 or the error (persistence then off). */
static int journal_write_buf(struct rdzvd_journal *j)
{
    struct iovec iov = {j->buf, j->buf_len};
    int r;

    if (j->failed)
        return -EIO;
    if (j->buf_len == 0)
        return 0;
    r = write_all(j->fd, &iov, 1);
    j->buf_len = 0;
    if (r < 0)
        return journal_fail(j, "write", r);
    return 0;
}

static uint64_t compact_threshold(const struct rdzvd_journal *j)
{
    uint64_t live = rdzvd_store_bytes(j->store) + REC_HDR_LEN * rdzvd_store_num_keys(j->store);
    uint64_t t = RDZVD_JOURNAL_COMPACT_MIN;

    if (live * RDZVD_JOURNAL_COMPACT_FACTOR > t)
        t = live * RDZVD_JOURNAL_COMPACT_FACTOR;
    if (j->last_snapshot * RDZVD_JOURNAL_COMPACT_FACTOR > t)
        t = j->last_snapshot * RDZVD_JOURNAL_COMPACT_FACTOR;
    return t;
}

static int journal_compact(struct rdzvd_journal *j);

/* rdzvd_journal_max_bytes. */
static uint64_t journal_max(const struct rdzvd_journal *j)
{
    struct rdzvd_store_room rm = rdzvd_store_room(j->store);

    return rdzvd_disk_bound(rm.share < rm.max ? rm.share : rm.max);
}

/* The store's change hook. Compaction reads the store: only when no change of it is held
 * (rdzvd_store_change_held: the store is then what its records make). */
static void journal_change_cb(void *ud, enum rdzvd_change what, const uint8_t *key, size_t klen,
                              const uint8_t *val, size_t vlen)
{
    struct rdzvd_journal *j = ud;
    size_t len = REC_HDR_LEN + klen + vlen;
    uint8_t h[REC_HDR_LEN];
    struct iovec iov[3];
    int n = 0, r;

    r = rdzvd_record_header(h, what, key, klen, val, vlen);
    if (r < 0) {
        journal_fail(j, "write", r);
        return;
    }
    if (j->buf && len <= WRITE_BUF_LEN) {
        if (len > WRITE_BUF_LEN - j->buf_len && journal_write_buf(j) < 0)
            return;
        if (j->buf_len == 0 && j->pending_fn)
            j->pending_fn(j->pending_ud);
        memcpy(j->buf + j->buf_len, h, REC_HDR_LEN);
        memcpy(j->buf + j->buf_len + REC_HDR_LEN, key, klen);
        if (vlen)
            memcpy(j->buf + j->buf_len + REC_HDR_LEN + klen, val, vlen);
        j->buf_len += len;
    } else {
        /* Unbuffered, or too large to buffer: write it now (after what is buffered). */
        if (journal_write_buf(j) < 0)
            return;
        iov[n++] = (struct iovec){h, REC_HDR_LEN};
        if (klen)
            iov[n++] = (struct iovec){(void *)key, klen};
        if (vlen)
            iov[n++] = (struct iovec){(void *)val, vlen};
        r = write_all(j->fd, iov, n);
        if (r < 0) {
            journal_fail(j, "write", r);
            return;
        }
    }
    j->st.size += len;
    j->st.records++;
    journal_mark_dirty(j);
    /* Not while the store is ahead of its records (some are held): the snapshot would
     * hold them, and they would follow it. */
    if ((j->st.size > compact_threshold(j) || (j->bounded && j->st.size > journal_max(j))) &&
        !rdzvd_store_changes_held(j->store)) {
        j->futile = false;
        (void)journal_compact(j);
        return;
    }
    /* Unbuffered ALWAYS: nobody batches for us, so sync each record. */
    if (!j->buf && j->mode == RDZVD_FSYNC_ALWAYS)
        (void)rdzvd_journal_sync(j);
}

void rdzvd_journal_set_buffered(struct rdzvd_journal *j, void (*pending_fn)(void *ud), void *ud)
{
    if (!j->buf && !j->failed) {
        j->buf = malloc(WRITE_BUF_LEN);
        if (!j->buf)
            return; /* stays unbuffered: slower, still correct */
    }
    j->pending_fn = pending_fn;
    j->pending_ud = ud;
}

bool rdzvd_journal_pending(const struct rdzvd_journal *j)
{
    return j->buf_len > 0;
}

int rdzvd_journal_flush(struct rdzvd_journal *j)
{
    int r = journal_write_buf(j);

    if (r == 0 && j->mode == RDZVD_FSYNC_ALWAYS)
        r = rdzvd_journal_sync(j);
    return r;
}

int rdzvd_journal_sync(struct rdzvd_journal *j)
{
    if (journal_write_buf(j) < 0)
        return -EIO;
    journal_stop_handles(j);
    if (!j->dirty)
        return 0;
    if (fdatasync(j->fd) < 0)
        return journal_fail(j, "fsync", -errno);
    j->dirty = false;
    j->st.fsyncs++;
    return 0;
}

/* ---- snapshots ---- */

struct snap_writer {
    int fd;
    uint8_t *buf;
    size_t len;
    uint64_t total;
};

static int snap_flush(struct snap_writer *w)
{
    struct iovec iov = {w->buf, w->len};
    int r = w->len ? write_all(w->fd, &iov, 1) : 0;

    w->len = 0;
    return r;
}

static int snap_put(struct snap_writer *w, const void *p, size_t n)
{
    int r;

    w->total += n;
    if (n > SNAP_BUF_LEN - w->len) {
        r = snap_flush(w);
        if (r < 0)
            return r;
        if (n >= SNAP_BUF_LEN) {
            struct iovec iov = {(void *)p, n};

            return write_all(w->fd, &iov, 1);
        }
    }
    memcpy(w->buf + w->len, p, n);
    w->len += n;
    return 0;
}

static int snap_record_cb(void *ud, enum rdzvd_change what, const uint8_t *key, size_t klen,
                          const uint8_t *val, size_t vlen)
{
    struct snap_writer *w = ud;
    uint8_t h[REC_HDR_LEN];
    int r;

    r = rdzvd_record_header(h, what, key, klen, val, vlen);
    if (r == 0)
        r = snap_put(w, h, REC_HDR_LEN);
    if (r == 0)
        r = snap_put(w, key, klen);
    if (r == 0 && vlen)
        r = snap_put(w, val, vlen);
    return r;
}

/* The version 2 header naming its owner into h; returns its length. */
static size_t file_header(const struct rdzvd_journal *j, uint8_t h[HEADER_MAX])
{
    size_t n = strlen(j->name);

    memcpy(h, JOURNAL_MAGIC, 8);
    rdzv_set_u32(h + 8, JOURNAL_VERSION);
    rdzv_set_u32(h + 12, (uint32_t)n);
    memcpy(h + 16, j->name, n);
    rdzv_set_u32(h + 16 + n, rdzvd_crc32(0, h, 16 + n));
    return 16 + n + 4;
}

/* Write the store's content to <name>.journal.tmp, fsync it, rename it over the journal, fsync
 * the directory, and continue appending to it. Also creates a journal (from an empty store). */
static int journal_compact(struct rdzvd_journal *j)
{
    struct snap_writer w = {.fd = -1};
    uint8_t h[HEADER_MAX];
    const char *step = "snapshot";
    int r;

    if (j->failed)
        return -EIO;
    w.buf = malloc(SNAP_BUF_LEN);
    if (!w.buf)
        return journal_fail(j, "snapshot", -ENOMEM);
    w.fd = openat(j->dirfd, j->tmp, O_RDWR | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0600);
    if (w.fd < 0) {
        r = -errno;
        goto out_free;
    }
    /* The new inode becomes the journal: lock it before anyone can find it under that name. */
    if (flock(w.fd, LOCK_EX | LOCK_NB) < 0) {
        r = -errno;
        goto out_unlink;
    }
    r = snap_put(&w, h, file_header(j, h));
    if (r == 0)
        r = rdzvd_store_dump(j->store, snap_record_cb, &w);
    if (r == 0)
        r = snap_flush(&w);
    if (r < 0)
        goto out_unlink;
    step = "snapshot fsync";
    if (fdatasync(w.fd) < 0) {
        r = -errno;
        goto out_unlink;
    }
    step = "snapshot rename";
    if (renameat(j->dirfd, j->tmp, j->dirfd, j->file) < 0) {
        r = -errno;
        goto out_unlink;
    }
    if (j->fd >= 0)
        close(j->fd);
    j->fd = w.fd;
    j->buf_len = 0; /* the snapshot already holds what was buffered */
    j->st.size = w.total;
    j->last_snapshot = w.total;
    j->dirty = false;
    j->st.compactions++;
    free(w.buf);
    rdzvd_disk_changed(j->disk);
    /* The rename is durable only once the directory is. */
    if (fsync(j->dirfd) < 0)
        return journal_fail(j, "state directory fsync", -errno);
    log_debug("journal %s/%s: compacted to %" PRIu64 " bytes", j->dir, j->file, w.total);
    return 0;

out_unlink:
    close(w.fd);
    (void)unlinkat(j->dirfd, j->tmp, 0);
out_free:
    free(w.buf);
    /* A full disk leaves the journal as it was: it goes on, and compacts when there is room. */
    if (j->opened && (r == -ENOSPC || r == -EDQUOT)) {
        log_warn("journal %s/%s: no room for its snapshot (%s): not compacted, it goes on as it "
                 "is",
                 j->dir, j->file, strerror(-r));
        return r;
    }
    return journal_fail(j, step, r);
}

int rdzvd_journal_compact(struct rdzvd_journal *j)
{
    return journal_compact(j);
}

/* ---- the bound on disk ---- */

uint64_t rdzvd_journal_max_bytes(const struct rdzvd_journal *j)
{
    return journal_max(j);
}

/* Room for a record of len bytes: 0 or -EDQUOT. */
static int journal_room(struct rdzvd_journal *j, uint64_t len)
{
    if (j->st.size + len > journal_max(j))
        return -EDQUOT;
    return rdzvd_disk_take(j->disk, len, j->st.size + len);
}

/* The store's room hook: a change whose record has no room is refused, as one past the store's
 * memory. A journal holding more than RDZVD_JOURNAL_COMPACT_FACTOR times its live content
 * compacts first (what deleted keys held is given back). One that did not halve the file (the
 * live size undercounts queues) is the last until an ordinary compaction. */
static int journal_room_cb(void *ud, uint64_t bytes)
{
    struct rdzvd_journal *j = ud;
    uint64_t len = REC_HDR_LEN + bytes, before = j->st.size;
    uint64_t live = rdzvd_store_bytes(j->store) + REC_HDR_LEN * rdzvd_store_num_keys(j->store);
    int r = journal_room(j, len);

    if (r < 0 && !j->futile && before > RDZVD_JOURNAL_COMPACT_FACTOR * live &&
        !rdzvd_store_changes_held(j->store) && journal_compact(j) == 0) {
        j->futile = j->st.size * RDZVD_JOURNAL_COMPACT_FACTOR > before;
        r = journal_room(j, len);
    }
    if (j->failed)
        return 0; /* no journal any more: the store alone says */
    if (r < 0 && !j->refusing) {
        j->refusing = true;
        log_warn("journal %s/%s: refusing its store's changes: no room on disk for a record of "
                 "%" PRIu64 " bytes (the journal holds %" PRIu64 " of its bound %" PRIu64
                 " bytes; %s keeps %" PRIu64 " bytes free for the job table)",
                 j->dir, j->file, len, j->st.size, journal_max(j), j->dir,
                 j->disk ? rdzvd_disk_reserve(j->disk) : 0);
    } else if (r == 0) {
        j->refusing = false;
    }
    return r;
}

void rdzvd_journal_bound(struct rdzvd_journal *j, struct rdzvd_disk *disk)
{
    j->disk = disk;
    j->bounded = true;
    if (!j->failed)
        rdzvd_store_set_room_cb(j->store, journal_room_cb, j);
}

/* ---- replay ---- */

/* Replay p[off..n) into the store. *good is where the last intact record ends; *why says why
 * replay stopped before n. Returns 0 or the store's error (the journal exceeds its limits). */
static int journal_replay(struct rdzvd_journal *j, const uint8_t *p, size_t off, size_t n,
                          size_t *good, const char **why)
{
    *why = NULL;
    while (off < n) {
        struct rdzvd_record rec;
        ssize_t used = rdzvd_record_decode(p + off, n - off, &rec, why);
        int r;

        if (used < 0)
            break;
        if (rec.table != RDZVD_TABLE_STORE) {
            *why = "a record of the replicas' job table";
            break;
        }
        r = rdzvd_record_apply(j->store, &rec);
        if (r < 0)
            return r;
        j->st.replayed++;
        off += (size_t)used;
    }
    *good = off;
    return 0;
}

/* Whether an intact record of the clients' store starts anywhere in p[from..n), after the bad
 * one at from - 1 that stopped the replay: then that was corruption in the middle of the file,
 * not a torn tail (a crash mid-write leaves nothing intact behind its last record). 1 and *at
 * where the first one starts; 0: none (a torn tail); -E2BIG: SCAN_CRC_BUDGET was spent before
 * the end (treated as records following). */
static int records_follow(const uint8_t *p, size_t from, size_t n, size_t *at)
{
    uint64_t budget = SCAN_CRC_BUDGET;

    for (size_t off = from; off < n && n - off >= REC_HDR_LEN; off++) {
        uint64_t len = REC_HDR_LEN + (uint64_t)rdzv_get_u32(p + off + 5) +
                       rdzv_get_u32(p + off + 9);
        struct rdzvd_record rec;

        if (len > n - off)
            continue;
        if (len > budget)
            return -E2BIG;
        budget -= len;
        if (rdzvd_record_decode(p + off, n - off, &rec, NULL) > 0 &&
            rec.table == RDZVD_TABLE_STORE) {
            *at = off;
            return 1;
        }
    }
    return 0;
}

/* Check the header of p[0..n): *ret_len is its length. -EBADMSG (not a journal, or corrupt),
 * -EPROTONOSUPPORT (unknown version) or -EEXIST (another state name's journal: *owner says whose,
 * NUL-terminated, truncated to fit). A version 1 header names no owner: accepted. *ret_old is set
 * for versions 1 and 2 (the file is rewritten as the current version at once, so that no older
 * rdzvd replays a journal holding records it does not know). */
static int header_check(const struct rdzvd_journal *j, const uint8_t *p, size_t n, size_t *ret_len,
                        bool *ret_old, char owner[RDZVD_STATE_NAME_MAX + 1])
{
    uint32_t version, name_len;

    if (n < HEADER_V1_LEN || memcmp(p, JOURNAL_MAGIC, 8) != 0)
        return -EBADMSG;
    version = rdzv_get_u32(p + 8);
    if (version == JOURNAL_VERSION_1) {
        if (rdzv_get_u32(p + 12) != rdzvd_crc32(0, p, 12))
            return -EBADMSG;
        *ret_len = HEADER_V1_LEN;
        *ret_old = true;
        return 0;
    }
    if (version != JOURNAL_VERSION && version != JOURNAL_VERSION_2)
        return -EPROTONOSUPPORT;
    name_len = rdzv_get_u32(p + 12);
    if (name_len > RDZVD_STATE_NAME_MAX || n < 16u + name_len + 4u ||
        rdzv_get_u32(p + 16 + name_len) != rdzvd_crc32(0, p, 16u + name_len))
        return -EBADMSG;
    *ret_len = 16u + name_len + 4u;
    *ret_old = version != JOURNAL_VERSION;
    if (name_len != strlen(j->name) || memcmp(p + 16, j->name, name_len) != 0) {
        memcpy(owner, p + 16, name_len);
        owner[name_len] = '\0';
        return -EEXIST;
    }
    return 0;
}

/* Where replay of p[0..n) stopped at good (< n): a torn tail is truncated away with a warning;
 * corruption with intact records behind it is an error, and the file is left as it is. Returns
 * 0 or -EBADMSG (logged). */
static int journal_bad_record(struct rdzvd_journal *j, const uint8_t *p, size_t n, size_t good,
                              const char *why)
{
    size_t at = 0;
    int r = records_follow(p, good + 1, n, &at);

    if (r != 0) {
        char after[96];

        if (r > 0)
            snprintf(after, sizeof(after), "an intact record follows at byte offset %zu", at);
        else
            snprintf(after, sizeof(after), "%zu bytes follow it", n - good);
        return log_error_errno(-EBADMSG, "journal %s/%s: corrupt record at byte offset %zu (%s), "
                                         "and %s: refusing to start, the file is left as it is; "
                                         "to keep the %" PRIu64 " records before it run "
                                         "'truncate -s %zu %s/%s', or move the file away to "
                                         "start with an empty store",
                               j->dir, j->file, good, why, after, j->st.replayed, good, j->dir,
                               j->file);
    }
    j->st.dropped = (uint64_t)n - good;
    log_warn("journal %s/%s: dropped %" PRIu64 " bytes of torn or corrupt tail at offset %zu "
             "(%s); the %" PRIu64 " records before it were kept",
             j->dir, j->file, j->st.dropped, good, why, j->st.replayed);
    if (ftruncate(j->fd, (off_t)good) < 0 || fdatasync(j->fd) < 0)
        return log_error_errno(-errno, "journal %s/%s: cannot truncate the bad tail", j->dir,
                               j->file);
    return 0;
}

/* Lock and replay an existing journal file (j->fd). Logs its errors. Returns 0 (replayed), 1
 * (empty: start afresh), 2 (replayed a journal of an older version: rewrite it) or a negative
 * errno. */
static int journal_load(struct rdzvd_journal *j)
{
    struct stat st, path_st;
    char owner[RDZVD_STATE_NAME_MAX + 1];
    const char *why = NULL;
    uint8_t *map = NULL;
    size_t good = 0, hdr_len = 0;
    bool old = false;
    int r;

    if (flock(j->fd, LOCK_EX | LOCK_NB) < 0) {
        r = -errno;
        if (r == -EWOULDBLOCK)
            return log_error_errno(-EBUSY, "journal %s/%s: in use by another process (another "
                                           "rdzvd on the same --state-dir?)",
                                   j->dir, j->file);
        return log_error_errno(r, "journal %s/%s: cannot lock it", j->dir, j->file);
    }
    if (fstat(j->fd, &st) < 0)
        return log_error_errno(-errno, "journal %s/%s: stat", j->dir, j->file);
    /* Someone renamed a snapshot over it between our open and our lock: they are live. */
    if (fstatat(j->dirfd, j->file, &path_st, 0) < 0 || path_st.st_ino != st.st_ino ||
        path_st.st_dev != st.st_dev)
        return log_error_errno(-EBUSY, "journal %s/%s: replaced while opening it (another rdzvd "
                                       "on the same --state-dir?)",
                               j->dir, j->file);
    if (!S_ISREG(st.st_mode))
        return log_error_errno(-EINVAL, "journal %s/%s: not a regular file", j->dir, j->file);
    if (st.st_size == 0)
        return 1; /* created but never written: start afresh */
    if ((uint64_t)st.st_size < HEADER_V1_LEN || (uint64_t)st.st_size > SIZE_MAX)
        return log_error_errno(-EBADMSG, "journal %s/%s: corrupt header (%lld bytes); move the "
                                         "file away to start with an empty store",
                               j->dir, j->file, (long long)st.st_size);
    map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, j->fd, 0);
    if (map == MAP_FAILED)
        return log_error_errno(-errno, "journal %s/%s: cannot map it", j->dir, j->file);
    r = header_check(j, map, (size_t)st.st_size, &hdr_len, &old, owner);
    if (r == -EEXIST) {
        munmap(map, (size_t)st.st_size);
        return log_error_errno(r, "journal %s/%s: belongs to the store '%s', not to '%s'; "
                                  "refusing to replay, overwrite or delete it",
                               j->dir, j->file, owner, j->name);
    }
    if (r < 0) {
        munmap(map, (size_t)st.st_size);
        return log_error_errno(r, "journal %s/%s: %s; move the file away to start with an empty "
                                  "store",
                               j->dir, j->file,
                               r == -EBADMSG ? "not an rdzvd journal, or its header is corrupt"
                                             : "written by an unsupported journal version");
    }
    r = journal_replay(j, map, hdr_len, (size_t)st.st_size, &good, &why);
    if (r < 0) {
        munmap(map, (size_t)st.st_size);
        return log_error_errno(r, "journal %s/%s: replay stopped after %" PRIu64 " records: the "
                                  "store refused one (journal written with larger --max-* "
                                  "limits?)",
                               j->dir, j->file, j->st.replayed);
    }
    if (good < (size_t)st.st_size)
        r = journal_bad_record(j, map, (size_t)st.st_size, good, why);
    munmap(map, (size_t)st.st_size);
    if (r < 0)
        return r;
    j->st.size = good;
    return old ? 2 : 0;
}

static void journal_timer_close_cb(uv_handle_t *h)
{
    free(h->data);
}

static void journal_free(struct rdzvd_journal *j)
{
    if (j->fd >= 0)
        close(j->fd);
    j->fd = -1;
    free(j->buf);
    j->buf = NULL;
    if (!j->loop) {
        free(j);
        return;
    }
    uv_close((uv_handle_t *)&j->timer, journal_timer_close_cb);
}

int rdzvd_journal_open(uv_loop_t *loop, int dirfd, const char *dir, const char *name,
                       enum rdzvd_fsync mode, struct rdzvd_store *store,
                       struct rdzvd_journal **ret)
{
    struct rdzvd_journal *j;
    int r;

    if (!rdzvd_state_name_valid(name))
        return log_error_errno(-EINVAL, "journal name '%s' is not 1..%d characters of "
                                        "[A-Za-z0-9._-]",
                               name ? name : "(null)", RDZVD_STATE_NAME_MAX);
    if (rdzvd_store_num_keys(store) != 0 || rdzvd_store_bytes(store) != 0)
        return log_error_errno(-EINVAL, "journal %s: the store to replay into is not empty", name);
    j = calloc(1, sizeof(*j));
    if (!j)
        return -ENOMEM;
    j->dirfd = dirfd;
    j->dir = dir;
    j->mode = mode;
    j->store = store;
    snprintf(j->name, sizeof(j->name), "%s", name);
    snprintf(j->file, sizeof(j->file), "%s.journal", name);
    snprintf(j->tmp, sizeof(j->tmp), "%s.journal.tmp", name);
    j->fd = openat(dirfd, j->file, O_RDWR | O_APPEND | O_CLOEXEC | O_NOFOLLOW);
    if (j->fd < 0 && errno != ENOENT) {
        r = log_error_errno(-errno, "journal %s/%s: cannot open it", dir, j->file);
        goto out_free;
    }
    r = j->fd < 0 ? 1 : journal_load(j);
    if (r < 0)
        goto out_free;
    if (r == 1) {
        /* New (or empty): write a header-only snapshot, atomically. */
        if (j->fd >= 0)
            close(j->fd);
        j->fd = -1;
        r = journal_compact(j);
        if (r < 0)
            goto out_free; /* journal_compact logged it */
        j->st.compactions = 0;
        log_info("journal %s/%s: created (fsync %s)", dir, j->file, rdzvd_fsync_name(mode));
    } else {
        log_info("journal %s/%s: replayed %" PRIu64 " records: %" PRIu64 " keys, %" PRIu64
                 " bytes (fsync %s)",
                 dir, j->file, j->st.replayed, rdzvd_store_num_keys(store),
                 rdzvd_store_bytes(store), rdzvd_fsync_name(mode));
    }
    /* An older version's journal: rewritten at once as the current one (its owner's name in the
     * header; APPEND records may follow). */
    if ((r == 2 || j->st.size > compact_threshold(j)) && journal_compact(j) < 0) {
        r = -EIO;
        goto out_free;
    }
    /* Handles last: until here a failure frees j at once. */
    if (loop) {
        r = uv_timer_init(loop, &j->timer);
        if (r < 0)
            goto out_free; /* j->loop unset: freed at once */
        j->loop = loop;
        j->timer.data = j;
    }
    j->opened = true;
    rdzvd_store_set_change_cb(store, journal_change_cb, j);
    *ret = j;
    return 0;

out_free:
    rdzvd_store_set_change_cb(store, NULL, NULL);
    rdzvd_store_set_room_cb(store, NULL, NULL);
    journal_free(j);
    return r;
}

int rdzvd_journal_unlink(int dirfd, const char *name)
{
    struct rdzvd_journal j = {.dirfd = dirfd};
    char owner[RDZVD_STATE_NAME_MAX + 1];
    uint8_t h[HEADER_MAX + 4];
    size_t len;
    bool old;
    ssize_t n;
    int fd, r;

    if (!rdzvd_state_name_valid(name))
        return -EINVAL;
    snprintf(j.name, sizeof(j.name), "%s", name);
    snprintf(j.file, sizeof(j.file), "%s.journal", name);
    fd = openat(dirfd, j.file, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return errno == ENOENT ? 0 : -errno;
    n = read(fd, h, sizeof(h));
    r = n < 0 ? -errno : 0;
    close(fd);
    if (r < 0)
        return r;
    /* Only a readable header naming another store stops it: anything else is ours or junk. */
    if (header_check(&j, h, (size_t)n, &len, &old, owner) == -EEXIST)
        return -EEXIST;
    if (unlinkat(dirfd, j.file, 0) < 0 && errno != ENOENT)
        return -errno;
    return 0;
}

bool rdzvd_journal_failed(const struct rdzvd_journal *j)
{
    return j->failed;
}

const struct rdzvd_journal_stats *rdzvd_journal_stats(const struct rdzvd_journal *j)
{
    return &j->st;
}

void rdzvd_journal_close(struct rdzvd_journal *j, bool drop)
{
    if (!j)
        return;
    if (!j->failed) {
        rdzvd_store_set_change_cb(j->store, NULL, NULL);
        rdzvd_store_set_room_cb(j->store, NULL, NULL);
    }
    j->pending_fn = NULL;
    if (drop) {
        j->buf_len = 0;
        if (unlinkat(j->dirfd, j->file, 0) < 0 && errno != ENOENT)
            log_warn_errno(-errno, "journal %s/%s: cannot delete it, leaving it behind", j->dir,
                           j->file);
        (void)unlinkat(j->dirfd, j->tmp, 0);
        rdzvd_disk_changed(j->disk);
    } else if (journal_write_buf(j) == 0 && j->mode != RDZVD_FSYNC_NO) {
        (void)rdzvd_journal_sync(j);
    }
    journal_stop_handles(j);
    journal_free(j);
}
