/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-repl.c: the store as a Raft state machine (rdzvd-repl.h). */
#include "daemon/repl/rdzvd-repl.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/rdzv-buf.h"
#include "common/rdzv-log.h"
#include "common/rdzv-util.h"
#include "daemon/data/rdzvd-record.h"

/* libraft's disk and wire formats pad each entry to 8 bytes and expect its length to be a
 * multiple of 8 already (an entry of 17 bytes desynchronised the stream between replicas: found
 * by test-repl-net under ASan). The records are followed by up to 7 zero bytes. */
static size_t pad8(size_t n)
{
    return (n + 7) & ~(size_t)7;
}

int rdzvd_repl_batch(struct raft_buffer *buf, uint64_t origin, const void *records, size_t n)
{
    size_t len = pad8(RDZVD_REPL_ORIGIN_LEN + n);
    uint8_t *p = raft_calloc(1, len ? len : 8);

    if (!p)
        return -ENOMEM;
    rdzv_set_u64(p, origin);
    if (n)
        memcpy(p + RDZVD_REPL_ORIGIN_LEN, records, n);
    buf->base = p;
    buf->len = len;
    return 0;
}

int rdzvd_repl_entry(struct raft_buffer *buf, enum rdzvd_change what, const void *key, size_t klen,
                     const void *val, size_t vlen)
{
    uint8_t h[RDZVD_RECORD_HDR_LEN];
    size_t len;
    uint8_t *p;
    int r;

    if (klen > UINT32_MAX || vlen > UINT32_MAX)
        return -EMSGSIZE;
    r = rdzvd_record_header(h, what, key, klen, val, vlen);
    if (r < 0)
        return r;
    len = pad8(RDZVD_REPL_ORIGIN_LEN + RDZVD_RECORD_HDR_LEN + klen + vlen);
    p = raft_calloc(1, len);
    if (!p)
        return -ENOMEM;
    /* origin 0: no replica applied it before it committed */
    memcpy(p + RDZVD_REPL_ORIGIN_LEN, h, sizeof(h));
    memcpy(p + RDZVD_REPL_ORIGIN_LEN + RDZVD_RECORD_HDR_LEN, key, klen);
    if (vlen)
        memcpy(p + RDZVD_REPL_ORIGIN_LEN + RDZVD_RECORD_HDR_LEN + klen, val, vlen);
    buf->base = p;
    buf->len = len;
    return 0;
}

/* The zero bytes that pad an entry or a snapshot to a multiple of 8 (at most 8: fewer than a
 * record header). */
static bool is_padding(const uint8_t *p, size_t n)
{
    if (n > 8)
        return false;
    while (n > 0)
        if (p[--n] != 0)
            return false;
    return true;
}

/* Apply every record of p[0..n) to s. The first store error is kept in *first (the rest still
 * apply: a replica must not stop half-way through an entry the others applied). 0, or
 * RAFT_MALFORMED when the bytes are not whole records (never committed by rdzvd: a bug). */
static int apply_records(struct rdzvd_repl_fsm *f, const uint8_t *p, size_t n, int *first)
{
    while (n > 0 && !is_padding(p, n)) {
        struct rdzvd_record rec;
        const char *why = NULL;
        ssize_t used = rdzvd_record_decode(p, n, &rec, &why);
        int r;

        if (used < 0) {
            log_error("replication: a log entry is not whole records (%s)", why);
            return RAFT_MALFORMED;
        }
        if (rec.table == RDZVD_TABLE_JOBS)
            r = f->jobs ? rdzvd_record_apply(f->jobs, &rec) : -ENOENT;
        else if (rec.what == RDZVD_CHANGE_DECISION)
            r = -EINVAL; /* a job's decision changes the job table, never the clients' store */
        else
            r = rdzvd_record_apply(f->store, &rec);
        f->records++;
        if (r < 0) {
            f->refused++;
            if (*first == 0)
                *first = r;
        }
        p += used;
        n -= (size_t)used;
    }
    return 0;
}

/* libraft's threshold: the entries after the last snapshot at which the next is taken (1: at the
 * next entry applied; with want_snapshot, at want_index). */
static void snapshot_due(struct rdzvd_repl_fsm *f)
{
    uint64_t at = f->snap_bytes > RDZVD_REPL_SNAPSHOT_BYTES / 2 ? f->snap_bytes * 2
                                                                : RDZVD_REPL_SNAPSHOT_BYTES;
    uint64_t n = RDZVD_REPL_SNAPSHOT_ENTRIES, target, snap;

    if (!f->raft)
        return;
    if (f->log_bytes >= at)
        n = 1;
    if (f->want_snapshot) {
        /* Entries after the snapshot: libraft snapshots once last_applied reaches target. */
        target = f->want_index;
        snap = f->raft->log.snapshot.last_index;
        n = target > snap + 1 ? target - snap : 1;
        n = n < RDZVD_REPL_SNAPSHOT_ENTRIES ? n : RDZVD_REPL_SNAPSHOT_ENTRIES;
    }
    raft_set_snapshot_threshold(f->raft, (unsigned)n);
}

void rdzvd_repl_fsm_snapshots(struct rdzvd_repl_fsm *f, struct raft *raft)
{
    f->raft = raft;
    raft_set_snapshot_trailing(raft, RDZVD_REPL_SNAPSHOT_TRAILING);
    snapshot_due(f);
}

bool rdzvd_repl_fsm_want_snapshot(struct rdzvd_repl_fsm *f)
{
    if (!f->raft || f->raft->log.snapshot.last_index > f->last_cmd + RDZVD_REPL_SNAPSHOT_TRAILING)
        return false;
    f->want_snapshot = true;
    f->want_index = f->last_cmd + RDZVD_REPL_SNAPSHOT_TRAILING + 1;
    snapshot_due(f);
    return true;
}

/* A snapshot of size bytes holds the log up to now. */
static void snapshot_taken(struct rdzvd_repl_fsm *f, uint64_t size, uint64_t index)
{
    f->log_bytes = 0;
    f->snap_bytes = size;
    if (index >= f->want_index)
        f->want_snapshot = false;
    snapshot_due(f);
}

static int fsm_apply(struct raft_fsm *fsm, const struct raft_buffer *buf, void **result)
{
    struct rdzvd_repl_fsm *f = (struct rdzvd_repl_fsm *)fsm;
    const uint8_t *p = buf->base;
    uint64_t origin;
    int first = 0, r;

    if (buf->len < RDZVD_REPL_ORIGIN_LEN) {
        log_error("replication: a log entry of %zu bytes has no origin", buf->len);
        return RAFT_MALFORMED;
    }
    origin = rdzv_get_u64(p);
    f->log_bytes += buf->len;
    if (f->raft)
        f->last_cmd = f->raft->last_applied + 1; /* libraft counts it applied after this */
    snapshot_due(f);
    if (origin != 0 && origin == f->origin) {
        /* This process made these changes in its store when it proposed them (as the leader);
         * the log now has them too. */
        f->skipped++;
        f->applied++;
        *result = NULL;
        return 0;
    }
    f->applying = true;
    r = apply_records(f, p + RDZVD_REPL_ORIGIN_LEN, buf->len - RDZVD_REPL_ORIGIN_LEN, &first);
    f->applying = false;
    if (r != 0)
        return r;
    f->applied++;
    *result = (void *)(intptr_t)first;
    return 0;
}

/* Where a dump's records go, and of which table they are. */
struct snap_out {
    struct rdzv_buf b;
    enum rdzvd_table table;
};

static int snap_record(void *ud, enum rdzvd_change what, const uint8_t *key, size_t klen,
                       const uint8_t *val, size_t vlen)
{
    struct snap_out *o = ud;
    struct rdzv_buf *b = &o->b;
    uint8_t h[RDZVD_RECORD_HDR_LEN];
    int r = rdzvd_record_header_in(h, o->table, what, key, klen, val, vlen);

    if (r == 0)
        r = rdzv_buf_put(b, h, sizeof(h));
    if (r == 0)
        r = rdzv_buf_put(b, key, klen);
    if (r == 0 && vlen)
        r = rdzv_buf_put(b, val, vlen);
    return r;
}

typedef int (*dump_fn)(void *ud, enum rdzvd_change what, const uint8_t *key, size_t klen,
                       const uint8_t *val, size_t vlen);

/* Both tables' dumps (fn: snap_record or unsnap_record) as records into o->b. */
static int dump_tables(struct rdzvd_repl_fsm *f, dump_fn fn, struct snap_out *o)
{
    int r;

    o->table = RDZVD_TABLE_STORE;
    r = rdzvd_store_dump(f->store, fn, o);
    if (r == 0 && f->jobs) {
        o->table = RDZVD_TABLE_JOBS;
        r = rdzvd_store_dump(f->jobs, fn, o);
    }
    return r;
}

/* The dump of the store and the job table as records, in one raft_malloc'd buffer (libraft
 * frees it with snapshot_finalize). */
static int fsm_snapshot(struct raft_fsm *fsm, struct raft_buffer *bufs[], unsigned *n_bufs)
{
    struct rdzvd_repl_fsm *f = (struct rdzvd_repl_fsm *)fsm;
    struct snap_out o = {.b = {0}};
    struct rdzv_buf *b = &o.b;
    struct raft_buffer *out = NULL;
    int r;

    /* The store is ahead of the log (changes proposed, not committed yet): a snapshot now would
     * hold them under an index they come after. libraft tries again later. */
    if (f->local_ahead)
        return RAFT_BUSY;
    r = dump_tables(f, snap_record, &o);
    if (r < 0)
        goto out;
    out = raft_malloc(sizeof(*out));
    if (!out || !(out->base = raft_calloc(1, pad8(rdzv_buf_avail(b) + 1)))) {
        raft_free(out);
        r = -ENOMEM;
        goto out;
    }
    memcpy(out->base, rdzv_buf_head(b), rdzv_buf_avail(b));
    out->len = pad8(rdzv_buf_avail(b) + 1);
    *bufs = out;
    *n_bufs = 1;
    snapshot_taken(f, out->len, f->raft ? f->raft->last_applied : 0);
out:
    rdzv_buf_free(b);
    return r < 0 ? RAFT_NOMEM : 0;
}

static int fsm_snapshot_finalize(struct raft_fsm *fsm, struct raft_buffer *bufs[], unsigned *n_bufs)
{
    for (unsigned i = 0; i < *n_bufs; i++)
        raft_free((*bufs)[i].base);
    raft_free(*bufs);
    *bufs = NULL;
    *n_bufs = 0;
    return 0;
}

/* Undo one record of the store's dump: a SET by a DELETE, a QPUSH by a QPOP. */
static int unsnap_record(void *ud, enum rdzvd_change what, const uint8_t *key, size_t klen,
                         const uint8_t *val, size_t vlen)
{
    (void)val;
    (void)vlen;
    return snap_record(ud, what == RDZVD_CHANGE_SET ? RDZVD_CHANGE_DELETE : RDZVD_CHANGE_QPOP, key,
                       klen, NULL, 0);
}

/* Empty the store and the job table (the undo of their dumps, applied after the dumps are
 * taken), then apply the snapshot. libraft hands buf over only when this succeeds: it is freed
 * here then; after a failure libraft frees it itself (freeing it here too was a double free). */
static int fsm_restore(struct raft_fsm *fsm, struct raft_buffer *buf)
{
    struct rdzvd_repl_fsm *f = (struct rdzvd_repl_fsm *)fsm;
    struct snap_out undo = {.b = {0}};
    int first = 0, r;

    r = dump_tables(f, unsnap_record, &undo);
    f->applying = true;
    if (r == 0)
        r = apply_records(f, rdzv_buf_head(&undo.b), rdzv_buf_avail(&undo.b), &first);
    if (r == 0)
        r = apply_records(f, buf->base, buf->len, &first);
    f->applying = false;
    rdzv_buf_free(&undo.b);
    if (r != 0)
        return r < 0 ? RAFT_NOMEM : r;
    f->last_cmd = 0; /* the snapshot holds every command entry */
    snapshot_taken(f, buf->len, UINT64_MAX);
    raft_free(buf->base);
    f->restores++;
    if (first < 0)
        log_warn("replication: the snapshot did not fit this replica's store (%s)",
                 strerror(-first));
    return 0;
}

void rdzvd_repl_fsm_init(struct rdzvd_repl_fsm *f, struct rdzvd_store *store,
                         struct rdzvd_store *jobs)
{
    memset(f, 0, sizeof(*f));
    f->fsm.version = 2;
    f->fsm.data = f;
    f->fsm.apply = fsm_apply;
    f->fsm.snapshot = fsm_snapshot;
    f->fsm.snapshot_finalize = fsm_snapshot_finalize;
    f->fsm.restore = fsm_restore;
    f->store = store;
    f->jobs = jobs;
}
