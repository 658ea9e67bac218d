/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-record.c: a store change as a record (rdzvd-record.h). */
#include "daemon/data/rdzvd-record.h"

#include <errno.h>
#include <stdlib.h>

#include "common/rdzv-util.h"

enum rec_type {
    REC_SET = 1, REC_DEL = 2, REC_QPUSH = 3, REC_QPOP = 4, REC_DECISION = 5, REC_APPEND = 6,
    _REC_TYPE_MAX = REC_APPEND
};
#define REC_JOBS 0x80u /* the type's high bit: a record of RDZVD_TABLE_JOBS */

/* ---- CRC-32 (IEEE 802.3, reflected, zlib-compatible), table-driven ---- */

static uint32_t crc_table[256];

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;

        for (int k = 0; k < 8; k++)
            c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[i] = c;
    }
}

uint32_t rdzvd_crc32(uint32_t crc, const void *p, size_t n)
{
    const uint8_t *b = p;

    if (crc_table[1] == 0)
        crc_init();
    crc ^= 0xFFFFFFFFu;
    while (n--)
        crc = crc_table[(crc ^ *b++) & 0xFF] ^ (crc >> 8);
    return crc ^ 0xFFFFFFFFu;
}

static enum rec_type rec_type_of(enum rdzvd_change what)
{
    switch (what) {
    case RDZVD_CHANGE_SET:
        return REC_SET;
    case RDZVD_CHANGE_DELETE:
        return REC_DEL;
    case RDZVD_CHANGE_QPUSH:
        return REC_QPUSH;
    case RDZVD_CHANGE_QPOP:
        return REC_QPOP;
    case RDZVD_CHANGE_DECISION:
        return REC_DECISION;
    case RDZVD_CHANGE_APPEND:
        return REC_APPEND;
    }
    return REC_SET;
}

int rdzvd_record_header(uint8_t h[RDZVD_RECORD_HDR_LEN], enum rdzvd_change what,
                        const uint8_t *key, size_t klen, const uint8_t *val, size_t vlen)
{
    return rdzvd_record_header_in(h, RDZVD_TABLE_STORE, what, key, klen, val, vlen);
}

int rdzvd_record_header_in(uint8_t h[RDZVD_RECORD_HDR_LEN], enum rdzvd_table table,
                           enum rdzvd_change what, const uint8_t *key, size_t klen,
                           const uint8_t *val, size_t vlen)
{
    uint32_t crc;

    if (klen > UINT32_MAX || vlen > UINT32_MAX)
        return -EMSGSIZE;
    h[4] = (uint8_t)(rec_type_of(what) | (table == RDZVD_TABLE_JOBS ? REC_JOBS : 0));
    rdzv_set_u32(h + 5, (uint32_t)klen);
    rdzv_set_u32(h + 9, (uint32_t)vlen);
    crc = rdzvd_crc32(0, h + 4, RDZVD_RECORD_HDR_LEN - 4);
    crc = rdzvd_crc32(crc, key, klen);
    if (vlen)
        crc = rdzvd_crc32(crc, val, vlen);
    rdzv_set_u32(h, crc);
    return 0;
}

ssize_t rdzvd_record_decode(const uint8_t *p, size_t n, struct rdzvd_record *rec,
                            const char **why)
{
    static const enum rdzvd_change of_type[] = {
        [REC_SET] = RDZVD_CHANGE_SET, [REC_DEL] = RDZVD_CHANGE_DELETE,
        [REC_QPUSH] = RDZVD_CHANGE_QPUSH, [REC_QPOP] = RDZVD_CHANGE_QPOP,
        [REC_DECISION] = RDZVD_CHANGE_DECISION, [REC_APPEND] = RDZVD_CHANGE_APPEND};
    const char *dummy;
    uint32_t klen, vlen;
    uint8_t type;
    enum rdzvd_table table;

    if (!why)
        why = &dummy;
    if (n < RDZVD_RECORD_HDR_LEN) {
        *why = "record header cut short";
        return -EAGAIN;
    }
    table = p[4] & REC_JOBS ? RDZVD_TABLE_JOBS : RDZVD_TABLE_STORE;
    type = p[4] & (uint8_t)~REC_JOBS;
    klen = rdzv_get_u32(p + 5);
    vlen = rdzv_get_u32(p + 9);
    if ((uint64_t)klen + vlen > n - RDZVD_RECORD_HDR_LEN) {
        *why = "record cut short";
        return -EAGAIN;
    }
    /* The type before the CRC: a scan for records at every offset of a damaged journal
     * (rdzvd-journal.c) skips most offsets without checksumming anything. */
    if (type < REC_SET || type > _REC_TYPE_MAX ||
        ((type == REC_DEL || type == REC_QPOP) && vlen != 0) ||
        (type == REC_DECISION && vlen == 0)) {
        *why = "unknown record type";
        return -EBADMSG;
    }
    if (rdzvd_crc32(0, p + 4, RDZVD_RECORD_HDR_LEN - 4 + (size_t)klen + vlen) != rdzv_get_u32(p)) {
        *why = "CRC mismatch";
        return -EBADMSG;
    }
    *rec = (struct rdzvd_record){
        .table = table,
        .what = of_type[type],
        .key = p + RDZVD_RECORD_HDR_LEN,
        .klen = klen,
        .val = type == REC_DEL || type == REC_QPOP ? NULL : p + RDZVD_RECORD_HDR_LEN + klen,
        .vlen = vlen};
    return (ssize_t)(RDZVD_RECORD_HDR_LEN + (size_t)klen + vlen);
}

/* rec into s, whatever s's share (rdzvd_store_set_budget): the budget alone bounds it. */
static int record_apply(struct rdzvd_store *s, const struct rdzvd_record *rec)
{
    switch (rec->what) {
    case RDZVD_CHANGE_SET:
        return rdzvd_store_set(s, rec->key, rec->klen, rec->val, rec->vlen);
    case RDZVD_CHANGE_DELETE:
        (void)rdzvd_store_delete(s, rec->key, rec->klen);
        return 0;
    case RDZVD_CHANGE_QPUSH:
        return rdzvd_store_queue_push(s, rec->key, rec->klen, rec->val, rec->vlen);
    case RDZVD_CHANGE_QPOP: {
        uint8_t *item = NULL;
        size_t ilen = 0;
        uint64_t before;
        int r = rdzvd_store_queue_pop(s, rec->key, rec->klen, &before, &item, &ilen);

        free(item);
        return r;
    }
    case RDZVD_CHANGE_DECISION:
        return rdzvd_store_apply_decision(s, rec->key, rec->klen, rec->val, rec->vlen);
    case RDZVD_CHANGE_APPEND:
        return rdzvd_store_append(s, rec->key, rec->klen, rec->val, rec->vlen);
    }
    return -EINVAL;
}

int rdzvd_record_apply(struct rdzvd_store *s, const struct rdzvd_record *rec)
{
    uint64_t share = rdzvd_store_room(s).share;
    int r;

    rdzvd_store_set_budget(s, NULL, UINT64_MAX);
    r = record_apply(s, rec);
    rdzvd_store_set_budget(s, NULL, share);
    return r;
}
