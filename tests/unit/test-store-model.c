/* SPDX-License-Identifier: Apache-2.0 */
/* test-store-model.c: the store (rdzvd-store.h) against a simple reference model, by random
 * sequences of operations, with roomy and tight limits. */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/rdzv-util.h"
#include "storetest.h"

/* ---- randomized check against a reference model ---- */

#define M_KEYS 6
#define M_QMAX 4
#define M_OWNERS 3
#define M_REGS 64
#define M_WAITS 64

static const struct {
    const char *p;
    size_t len;
} m_keys[M_KEYS] = {{"a", 1}, {"b", 1}, {"", 0}, {"/x/y", 4}, {"a\0", 2}, {"longer-key-name", 15}};

static const char *const m_vals[] = {
    "",
    "0",
    "1",
    "-5",
    "+3",
    " 4",
    "abc",
    "9223372036854775807",
    "-9223372036854775808",
    "9223372036854775808",
    "twenty-bytes-of-text",
    "a value that is longer than the limit",
};

static const int64_t m_deltas[] = {0, 1, -1, 7, -100, INT64_MAX, INT64_MIN};

struct m_key {
    bool slot; /* the store holds a slot for it (value, queue or waiters) */
    bool present;
    uint8_t val[64];
    size_t vlen;
    unsigned qn;
    uint8_t q[M_QMAX][64];
    size_t qlen[M_QMAX];
};

struct m_reg {
    unsigned wait, key;
};

struct m_wait {
    bool live;
    unsigned owner, remaining;
};

struct model {
    const struct rdzv_limits *lim;
    struct m_key k[M_KEYS];
    struct m_reg regs[M_REGS]; /* in registration order */
    unsigned nregs;
    struct m_wait waits[M_WAITS];
    unsigned owner_nregs[M_OWNERS];
    unsigned owner_waits[M_OWNERS];
    unsigned wakes[M_OWNERS];
    uint64_t bytes;
    uint64_t held; /* rdzvd_store_held: each thing held at its cost */
};

/* Whether add more bytes held (sub of them given back) stay within the limit. */
static bool m_fits(const struct model *m, uint64_t add, uint64_t sub)
{
    return m->held - sub + add <= m->lim->max_store_bytes;
}

static bool m_has_regs(const struct model *m, unsigned key)
{
    for (unsigned i = 0; i < m->nregs; i++)
        if (m->regs[i].key == key)
            return true;
    return false;
}

static void m_gc(struct model *m, unsigned key)
{
    struct m_key *k = &m->k[key];

    if (k->slot && !k->present && k->qn == 0 && !m_has_regs(m, key)) {
        k->slot = false;
        m->bytes -= m_keys[key].len;
        m->held -= rdzvd_store_key_cost(m_keys[key].len);
    }
}

static int m_slot_get(struct model *m, unsigned key)
{
    if (m->k[key].slot)
        return 0;
    if (!m_fits(m, rdzvd_store_key_cost(m_keys[key].len), 0))
        return -ENOSPC;
    m->k[key].slot = true;
    m->bytes += m_keys[key].len;
    m->held += rdzvd_store_key_cost(m_keys[key].len);
    return 0;
}

static void m_reg_remove(struct model *m, unsigned i)
{
    struct m_wait *w = &m->waits[m->regs[i].wait];

    m->owner_nregs[w->owner]--;
    memmove(&m->regs[i], &m->regs[i + 1], (m->nregs - i - 1) * sizeof(m->regs[0]));
    m->nregs--;
    m->held -= rdzvd_store_reg_cost();
}

/* Satisfy registration i (its key was written). */
static void m_fire(struct model *m, unsigned i)
{
    unsigned wi = m->regs[i].wait;
    struct m_wait *w = &m->waits[wi];

    m_reg_remove(m, i);
    if (--w->remaining == 0) {
        w->live = false;
        m->owner_waits[w->owner]--;
        m->wakes[w->owner]++;
        m->held -= rdzvd_store_wait_cost();
    }
}

static void m_fire_all(struct model *m, unsigned key)
{
    for (unsigned i = 0; i < m->nregs;)
        if (m->regs[i].key == key)
            m_fire(m, i);
        else
            i++;
}

static int m_store_value(struct model *m, unsigned key, const uint8_t *a, size_t alen,
                         const uint8_t *b, size_t blen)
{
    struct m_key *k = &m->k[key];
    uint64_t old = k->present ? k->vlen : 0;
    uint8_t tmp[128];

    if (alen + blen > m->lim->max_value_len)
        return -EMSGSIZE;
    if (!m_fits(m, rdzvd_store_value_cost(alen + blen),
                k->present ? rdzvd_store_value_cost(old) : 0))
        return -ENOSPC;
    ASSERT_TRUE(alen + blen <= sizeof(k->val));
    if (alen)
        memcpy(tmp, a, alen);
    if (blen)
        memcpy(tmp + alen, b, blen);
    memcpy(k->val, tmp, alen + blen);
    m->bytes = m->bytes - old + alen + blen;
    m->held = m->held - (k->present ? rdzvd_store_value_cost(old) : 0) +
              rdzvd_store_value_cost(alen + blen);
    k->vlen = alen + blen;
    k->present = true;
    m_fire_all(m, key);
    return 0;
}

static int m_set(struct model *m, unsigned key, const char *v)
{
    int r = m_slot_get(m, key);

    if (r == 0)
        r = m_store_value(m, key, (const uint8_t *)v, strlen(v), NULL, 0);
    m_gc(m, key);
    return r;
}

/* An independent decimal parser: strtoll over a NUL-terminated copy. */
static int m_parse(const uint8_t *p, size_t n, int64_t *ret)
{
    char buf[80], *end;
    long long v;

    if (n == 0 || n >= sizeof(buf) || isspace(p[0]))
        return -EINVAL;
    memcpy(buf, p, n);
    buf[n] = '\0';
    if (strlen(buf) != n)
        return -EINVAL;
    errno = 0;
    v = strtoll(buf, &end, 10);
    if (end != buf + n || end == buf || !isdigit((unsigned char)end[-1]))
        return -EINVAL;
    if (errno == ERANGE)
        return -ERANGE;
    *ret = v;
    return 0;
}

static int m_add(struct model *m, unsigned key, int64_t delta, int64_t *ret)
{
    struct m_key *k = &m->k[key];
    int64_t cur = 0, sum = 0;
    char text[32];
    int r = m_slot_get(m, key);

    if (r == 0 && k->present)
        r = m_parse(k->val, k->vlen, &cur);
    if (r == 0 && __builtin_add_overflow(cur, delta, &sum))
        r = -ERANGE;
    if (r == 0) {
        snprintf(text, sizeof(text), "%" PRId64, sum);
        r = m_store_value(m, key, (const uint8_t *)text, strlen(text), NULL, 0);
    }
    if (r == 0)
        *ret = sum;
    m_gc(m, key);
    return r;
}

static bool m_exists(const struct model *m, unsigned key)
{
    return m->k[key].present || m->k[key].qn > 0;
}

/* Abort everything owner o has pending; returns the number of completed-but-unfired waits. */
static unsigned m_cancel(struct model *m, unsigned o)
{
    unsigned n = 0;

    for (unsigned i = 0; i < m->nregs;) {
        unsigned key = m->regs[i].key;

        if (m->waits[m->regs[i].wait].owner == o) {
            m_reg_remove(m, i);
            m_gc(m, key);
        } else {
            i++;
        }
    }
    for (unsigned wi = 0; wi < M_WAITS; wi++)
        if (m->waits[wi].live && m->waits[wi].owner == o) {
            m->waits[wi].live = false;
            m->held -= rdzvd_store_wait_cost();
            n++;
        }
    m->owner_waits[o] = 0;
    return n;
}

struct mc_keyset {
    bool seen[M_KEYS];
    unsigned n;
};

static int mc_visit(const uint8_t *key, size_t klen, void *ud)
{
    struct mc_keyset *ks = ud;

    for (unsigned i = 0; i < M_KEYS; i++)
        if (klen == m_keys[i].len && memcmp(key, m_keys[i].p, klen) == 0) {
            ASSERT_FALSE(ks->seen[i]);
            ks->seen[i] = true;
            ks->n++;
            return 0;
        }
    ASSERT_TRUE(!"foreach returned an unknown key");
    return 0;
}

static uint64_t mc_rng;

static uint64_t mc_next(void)
{
    /* splitmix64: reproducible across platforms. */
    uint64_t z = (mc_rng += 0x9e3779b97f4a7c15ull);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static unsigned mc_pick(unsigned n)
{
    return (unsigned)(mc_next() % n);
}

static void mc_compare(struct rdzvd_store *s, const struct model *m, const struct rdzvd_waiter *w,
                       const unsigned *wakes)
{
    ASSERT_EQ(rdzvd_store_bytes(s), m->bytes);
    ASSERT_EQ(rdzvd_store_held(s), m->held);
    for (unsigned o = 0; o < M_OWNERS; o++) {
        ASSERT_EQ(wakes[o], m->wakes[o]);
        ASSERT_EQ(w[o].nregs, m->owner_nregs[o]);
    }
    for (unsigned i = 0; i < M_KEYS; i++) {
        const uint8_t *val = NULL;
        size_t vlen = 0;
        int r = rdzvd_store_get(s, m_keys[i].p, m_keys[i].len, &val, &vlen);

        if (m->k[i].present) {
            ASSERT_OK(r);
            ASSERT_EQ(vlen, m->k[i].vlen);
            ASSERT_MEMEQ(val, m->k[i].val, vlen);
        } else {
            ASSERT_EQ(r, -ENOENT);
        }
        ASSERT_EQ(rdzvd_store_exists(s, m_keys[i].p, m_keys[i].len), m_exists(m, i));
        ASSERT_EQ(rdzvd_store_queue_len(s, m_keys[i].p, m_keys[i].len), m->k[i].qn);
    }
}

static void mc_run(uint64_t seed, unsigned steps, const struct rdzv_limits *lim)
{
    struct rdzvd_store *s = new_store(lim);
    struct rdzvd_waiter w[M_OWNERS];
    unsigned wakes[M_OWNERS] = {0};
    struct model *m = calloc(1, sizeof(*m));
    uint64_t nkeys_model;

    ASSERT_NOT_NULL(m);
    m->lim = lim;
    mc_rng = seed;
    for (unsigned o = 0; o < M_OWNERS; o++)
        rdzvd_waiter_init(&w[o], &wakes[o]);

    for (unsigned step = 0; step < steps; step++) {
        unsigned key = mc_pick(M_KEYS), op = mc_pick(13);
        const char *kp = m_keys[key].p;
        size_t kl = m_keys[key].len;
        const char *v = m_vals[mc_pick(RDZV_ARRAY_SIZE(m_vals))];
        int r, mr;

        snprintf(tap_note, sizeof(tap_note), "model check seed %" PRIu64 " step %u op %u key %u",
                 seed, step, op, key);
        switch (op) {
        case 0:
        case 1:
            ASSERT_EQ(rdzvd_store_set(s, kp, kl, v, strlen(v)), m_set(m, key, v));
            break;
        case 2: {
            int64_t delta = m_deltas[mc_pick(RDZV_ARRAY_SIZE(m_deltas))], got = 0, want = 0;

            r = rdzvd_store_add(s, kp, kl, delta, &got);
            mr = m_add(m, key, delta, &want);
            /* Digits that overflow before trailing junk: either refusal will do. */
            if (mr == -EINVAL && r == -ERANGE)
                mr = r;
            ASSERT_EQ(r, mr);
            if (r == 0)
                ASSERT_EQ(got, want);
            break;
        }
        case 3: {
            /* Expected is either the current value or a random one. */
            const char *des = m_vals[mc_pick(RDZV_ARRAY_SIZE(m_vals))];
            uint8_t exp[64];
            size_t explen = strlen(v);
            const uint8_t *cur = NULL, *mcur;
            size_t curlen = 0, mcurlen;
            struct m_key *k = &m->k[key];

            memcpy(exp, v, explen);
            if (k->present && mc_pick(2)) {
                memcpy(exp, k->val, k->vlen);
                explen = k->vlen;
            }
            r = rdzvd_store_compare_set(s, kp, kl, exp, explen, des, strlen(des), &cur, &curlen);
            if (!k->present && explen != 0) {
                mr = 0;
                mcur = exp;
                mcurlen = explen;
            } else if (!k->present || (k->vlen == explen && memcmp(k->val, exp, explen) == 0)) {
                mr = m_slot_get(m, key);
                if (mr == 0)
                    mr = m_store_value(m, key, (const uint8_t *)des, strlen(des), NULL, 0);
                m_gc(m, key);
                mcur = k->val;
                mcurlen = k->vlen;
            } else {
                mr = 0;
                mcur = k->val;
                mcurlen = k->vlen;
            }
            ASSERT_EQ(r, mr);
            if (r == 0) {
                ASSERT_EQ(curlen, mcurlen);
                ASSERT_MEMEQ(cur, mcur, curlen);
            }
            break;
        }
        case 4: {
            struct m_key *k = &m->k[key];

            r = rdzvd_store_append(s, kp, kl, v, strlen(v));
            mr = m_slot_get(m, key);
            if (mr == 0)
                mr = k->present
                         ? m_store_value(m, key, k->val, k->vlen, (const uint8_t *)v, strlen(v))
                         : m_store_value(m, key, (const uint8_t *)v, strlen(v), NULL, 0);
            m_gc(m, key);
            ASSERT_EQ(r, mr);
            break;
        }
        case 5: {
            struct m_key *k = &m->k[key];

            mr = k->present ? 1 : 0;
            if (k->present) {
                m->bytes -= k->vlen;
                m->held -= rdzvd_store_value_cost(k->vlen);
                k->present = false;
                k->vlen = 0;
                m_gc(m, key);
            }
            ASSERT_EQ(rdzvd_store_delete(s, kp, kl), mr);
            break;
        }
        case 6: {
            struct m_key *k = &m->k[key];
            size_t vl = strlen(v) > 20 ? 20 : strlen(v);

            r = rdzvd_store_queue_push(s, kp, kl, v, vl);
            mr = m_slot_get(m, key);
            if (mr == 0 &&
                (k->qn >= lim->max_queue_items || !m_fits(m, rdzvd_store_item_cost(vl), 0)))
                mr = -ENOSPC;
            if (mr == 0) {
                memcpy(k->q[k->qn], v, vl);
                k->qlen[k->qn++] = vl;
                m->bytes += vl;
                m->held += rdzvd_store_item_cost(vl);
                for (unsigned i = 0; i < m->nregs; i++)
                    if (m->regs[i].key == key) {
                        m_fire(m, i);
                        break;
                    }
            }
            m_gc(m, key);
            ASSERT_EQ(r, mr);
            break;
        }
        case 7: {
            struct m_key *k = &m->k[key];
            uint64_t before = 12345;
            uint8_t *item = NULL;
            size_t ilen = 0;

            ASSERT_OK(rdzvd_store_queue_pop(s, kp, kl, &before, &item, &ilen));
            ASSERT_EQ(before, k->qn);
            if (k->qn > 0) {
                ASSERT_EQ(ilen, k->qlen[0]);
                ASSERT_MEMEQ(item, k->q[0], ilen);
                m->bytes -= k->qlen[0];
                m->held -= rdzvd_store_item_cost(k->qlen[0]);
                memmove(k->q[0], k->q[1], sizeof(k->q[0]) * (M_QMAX - 1));
                memmove(&k->qlen[0], &k->qlen[1], sizeof(k->qlen[0]) * (M_QMAX - 1));
                k->qn--;
                m_gc(m, key);
                free(item);
            } else {
                ASSERT_NULL(item);
            }
            break;
        }
        case 8:
        case 9: {
            /* WAIT on 1..3 keys (maybe repeated) by a random owner. */
            unsigned o = mc_pick(M_OWNERS), nk = 1 + mc_pick(3), wi;
            bool failed = false;
            uint64_t cost;

            for (wi = 0; wi < M_WAITS && m->waits[wi].live; wi++)
                ;
            ASSERT_TRUE(wi < M_WAITS);
            /* A WAIT is charged with its first key registered (not for keys that exist). */
            ASSERT_OK(rdzvd_store_wait_begin(s, &w[o]));
            m->waits[wi] = (struct m_wait){.live = true, .owner = o, .remaining = 0};
            for (unsigned i = 0; i < nk && !failed; i++) {
                unsigned kk = i == 0 ? key : mc_pick(M_KEYS);

                r = rdzvd_store_wait_key(s, &w[o], m_keys[kk].p, m_keys[kk].len);
                mr = 0;
                if (!m_exists(m, kk)) {
                    if (m->owner_nregs[o] >= lim->max_wait_keys)
                        mr = -EMSGSIZE;
                    else
                        mr = m_slot_get(m, kk);
                    cost = rdzvd_store_reg_cost() +
                           (m->waits[wi].remaining ? 0 : rdzvd_store_wait_cost());
                    if (mr == 0 && !m_fits(m, cost, 0)) {
                        mr = -ENOSPC;
                        m_gc(m, kk);
                    }
                    if (mr == 0) {
                        m->held += cost;
                        ASSERT_TRUE(m->nregs < M_REGS);
                        m->regs[m->nregs++] = (struct m_reg){.wait = wi, .key = kk};
                        m->owner_nregs[o]++;
                        m->waits[wi].remaining++;
                    }
                }
                ASSERT_EQ(r, mr);
                failed = r < 0;
            }
            if (failed) {
                /* What the daemon does: the connection closes and drops all its waits. */
                m->waits[wi].live = false;
                if (m->waits[wi].remaining)
                    m->held -= rdzvd_store_wait_cost();
                for (unsigned i = 0; i < m->nregs;) {
                    unsigned kk = m->regs[i].key;

                    if (m->regs[i].wait == wi) {
                        m_reg_remove(m, i);
                        m_gc(m, kk);
                    } else {
                        i++;
                    }
                }
                ASSERT_EQ(rdzvd_store_cancel_waits(s, &w[o]), m_cancel(m, o));
                break;
            }
            r = rdzvd_store_wait_end(s, &w[o]);
            if (m->waits[wi].remaining == 0) {
                m->waits[wi].live = false;
                ASSERT_EQ(r, 1);
            } else {
                m->owner_waits[o]++;
                ASSERT_EQ(r, 0);
            }
            break;
        }
        case 10: {
            unsigned o = mc_pick(M_OWNERS);

            ASSERT_EQ(rdzvd_store_cancel_waits(s, &w[o]), m_cancel(m, o));
            break;
        }
        case 11: {
            struct mc_keyset ks = {0};

            ASSERT_EQ(rdzvd_store_foreach(s, mc_visit, &ks), 0);
            for (unsigned i = 0; i < M_KEYS; i++)
                ASSERT_EQ(ks.seen[i], m->k[i].present);
            break;
        }
        case 12: {
            /* MULTI_SET: a run of SETs. */
            for (unsigned i = 0, n = 1 + mc_pick(3); i < n; i++) {
                unsigned kk = mc_pick(M_KEYS);
                const char *vv = m_vals[mc_pick(RDZV_ARRAY_SIZE(m_vals))];

                ASSERT_EQ(rdzvd_store_set(s, m_keys[kk].p, m_keys[kk].len, vv, strlen(vv)),
                          m_set(m, kk, vv));
            }
            break;
        }
        }
        nkeys_model = 0;
        for (unsigned i = 0; i < M_KEYS; i++)
            nkeys_model += m->k[i].present;
        ASSERT_EQ(rdzvd_store_num_keys(s), nkeys_model);
        mc_compare(s, m, w, wakes);
    }
    /* Release waits both ways: some owners cancel, the store frees the rest. */
    ASSERT_EQ(rdzvd_store_cancel_waits(s, &w[0]), m_cancel(m, 0));
    rdzvd_store_free(s);
    for (unsigned o = 0; o < M_OWNERS; o++) {
        ASSERT_EQ(w[o].nregs, 0);
        ASSERT_TRUE(rdzv_list_empty(&w[o].waits));
    }
    tap_note[0] = '\0';
    free(m);
}

static void test_model_check(void)
{
    struct rdzv_limits roomy = RDZV_LIMITS_DEFAULT, tight = RDZV_LIMITS_DEFAULT;

    roomy.max_value_len = 40;
    roomy.max_queue_items = M_QMAX;
    roomy.max_wait_keys = 8;
    tight.max_value_len = 24;
    tight.max_queue_items = 3;
    tight.max_wait_keys = 3;
    /* A few keys, values, items and waits: both refusals and room come up. */
    tight.max_store_bytes = 4 * rdzvd_store_key_cost(2) + 2 * rdzvd_store_value_cost(8);
    for (uint64_t seed = 1; seed <= 200; seed++) {
        mc_run(seed, 1500, &roomy);
        mc_run(seed ^ 0xabcdef, 1500, &tight);
    }
}

int main(void)
{
    TEST(test_model_check);
    return tap_done();
}
