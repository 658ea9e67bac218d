/* SPDX-License-Identifier: Apache-2.0 */
/* rdzv-status-hide.c: what a reader who proved no token is shown of the status (rdzv-status.h):
 * no node id in any field or text. The one place the tokenless view is made, for the page, the
 * SVG timeline, /status.json, /metrics and STATUS alike (SECURITY.md). */
#include "proto/rdzv-status.h"

#include <ctype.h>
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

int rdzv_status_job_name(struct rdzv_status_job *j, const char *id)
{
    void *p;

    if (!id[0] || strlen(id) > RDZV_ID_MAX)
        return 0;
    if ((j->n_named & (j->n_named - 1)) == 0) { /* 0, 1, 2, 4, ...: full */
        p = realloc(j->named, (j->n_named ? 2 * j->n_named : 1) * sizeof(*j->named));
        if (!p)
            return -ENOMEM;
        j->named = p;
    }
    strcpy(j->named[j->n_named++], id);
    return 0;
}

/* The keys of one job: its node ids, longest first (so that an id inside a longer one goes with
 * the longer). */
struct keys {
    const char **k;
    size_t n;
};

static int longest_first(const void *a, const void *b)
{
    size_t x = strlen(*(const char *const *)a), y = strlen(*(const char *const *)b);

    return x < y ? 1 : x > y ? -1 : 0;
}

static void keys_add(struct keys *ks, const char *id)
{
    if (id[0])
        ks->k[ks->n++] = id;
}

/* A word character: an id is hidden where it stands alone, not inside a longer word. */
static bool word_at(const char *text, size_t at, size_t len)
{
    return at < len && (isalnum((unsigned char)text[at]) || text[at] == '_');
}

/* Replace text[at, at + n) by RDZV_STATUS_HIDDEN_ID in text (room for cap bytes, cut at the
 * end when it would not fit). Where the text goes on. */
static size_t put_hidden(char *text, size_t cap, size_t at, size_t n)
{
    size_t h = strlen(RDZV_STATUS_HIDDEN_ID), len = strlen(text), tail = len - at - n;

    if (at + h + tail + 1 > cap)
        tail = cap > at + h + 1 ? cap - at - h - 1 : 0;
    if (at + h + 1 > cap) { /* no room even for the word: cut there */
        text[at] = '\0';
        return at;
    }
    memmove(text + at + h, text + at + n, tail);
    memcpy(text + at, RDZV_STATUS_HIDDEN_ID, h);
    text[at + h + tail] = '\0';
    return at + h;
}

/* Every standing-alone occurrence of key in text hidden. */
static void hide_key(char *text, size_t cap, const char *key)
{
    size_t n = strlen(key), at = 0;
    const char *hit;

    while ((hit = strstr(text + at, key)) != NULL) {
        size_t pos = (size_t)(hit - text), len = strlen(text);
        bool alone = !(word_at(text, pos + n, len) && word_at(key, n - 1, n)) &&
                     !(pos > 0 && word_at(text, pos - 1, len) && word_at(key, 0, n));

        at = alone ? put_hidden(text, cap, pos, n) : pos + 1;
    }
}

/* What follows "node id " in a text (quoted or not), up to a delimiter, hidden: a node id that is
 * no key (one the job no longer knows) is named so. */
static void hide_after_words(char *text, size_t cap)
{
    static const char words[] = "node id ";
    size_t at = 0;
    const char *hit;

    while ((hit = strstr(text + at, words)) != NULL) {
        size_t pos = (size_t)(hit - text) + strlen(words), end = pos;
        char quote = text[pos] == '\'' ? '\'' : '\0';

        pos += quote != '\0';
        end = pos;
        while (text[end] && (quote ? text[end] != quote : !strchr(" ,);'", text[end])))
            end++;
        if (end > pos && (end - pos != strlen(RDZV_STATUS_HIDDEN_ID) ||
                          memcmp(text + pos, RDZV_STATUS_HIDDEN_ID, end - pos) != 0))
            at = put_hidden(text, cap, pos, end - pos);
        else
            at = end;
        if (at >= strlen(text))
            break;
    }
}

static void hide_text(char *text, size_t cap, const struct keys *ks)
{
    for (size_t i = 0; i < ks->n; i++)
        hide_key(text, cap, ks->k[i]);
    hide_after_words(text, cap);
}

/* Every text of j, with j's keys: -ENOMEM (then its texts are emptied instead). */
static int hide_job_texts(struct rdzv_status_job *j)
{
    struct keys ks = {.n = 0};
    size_t n = j->n_nodes + j->n_aside + j->n_named;
    struct rdzv_status_timeline *tl = j->timeline;
    int r = 0;

    ks.k = calloc(n ? n : 1, sizeof(*ks.k));
    if (!ks.k)
        r = -ENOMEM;
    for (size_t i = 0; ks.k && i < j->n_nodes; i++)
        keys_add(&ks, j->nodes[i].node_id);
    for (unsigned i = 0; ks.k && i < j->n_aside; i++)
        keys_add(&ks, j->aside[i].node_id);
    for (size_t i = 0; ks.k && i < j->n_named; i++)
        keys_add(&ks, j->named[i]);
    if (ks.k)
        qsort(ks.k, ks.n, sizeof(*ks.k), longest_first);
#define HIDE(t) (ks.k ? hide_text((t), sizeof(t), &ks) : (void)((t)[0] = '\0'))
    for (unsigned i = 0; i < j->n_events; i++)
        HIDE(j->events[i].text);
    for (unsigned i = 0; i < j->n_aside; i++)
        HIDE(j->aside[i].reason);
    HIDE(j->outcome_summary);
    for (unsigned i = 0; tl && i < tl->n_marks; i++)
        HIDE(tl->marks[i].text);
#undef HIDE
    free(ks.k);
    return r;
}

void rdzv_status_hide_node_ids(struct rdzv_status *st)
{
    for (size_t i = 0; i < st->n_jobs; i++) {
        struct rdzv_status_job *j = &st->jobs[i];

        (void)hide_job_texts(j); /* before the ids it looks for go */
        for (size_t k = 0; k < j->n_nodes; k++)
            j->nodes[k].node_id[0] = '\0';
        for (unsigned k = 0; k < j->n_aside; k++)
            j->aside[k].node_id[0] = '\0';
        free(j->named);
        j->named = NULL;
        j->n_named = 0;
    }
}
