/* SPDX-License-Identifier: Apache-2.0 */
/* rdzv-status-hide.c: what a reader who proved no token is shown of the status (rdzv-status.h):
 * no node id in any field or text, each text read once. The one place the tokenless view is
 * made, for the page, the SVG timeline, /status.json, /metrics and STATUS alike (SECURITY.md). */
#include "proto/rdzv-status.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* A byte an id is written with as it is, in a text (rdzv_node_id_text): none that ends it. */
static bool plain(unsigned char c)
{
    return c > ' ' && c != 0x7f && !strchr(",();'\"%", c);
}

/* A byte of an id as a text names it: a plain one, or an escape's. */
static bool in_word(char c)
{
    return plain((unsigned char)c) || c == '%';
}

const char *rdzv_node_id_text(const char *id, char *buf, size_t cap)
{
    size_t n = strlen(id), k = 0;
    bool as_is = n > 0 && id[n - 1] != ':';

    for (size_t i = 0; as_is && i < n; i++)
        as_is = plain((unsigned char)id[i]);
    if (as_is || cap == 0)
        return id;
    for (size_t i = 0; i < n && k + 4 <= cap; i++) {
        unsigned char c = (unsigned char)id[i];

        if (plain(c) && !(c == ':' && i == n - 1))
            buf[k++] = (char)c;
        else
            k += (size_t)snprintf(buf + k, cap - k, "%%%02x", c);
    }
    buf[k] = '\0';
    return buf;
}

/* n bytes of src at out[*k], as many as fit before cap's NUL. */
static void put(char *out, size_t *k, size_t cap, const char *src, size_t n)
{
    if (n > cap - 1 - *k)
        n = cap - 1 - *k;
    memcpy(out + *k, src, n);
    *k += n;
}

/* text with what follows each "node id " (quoted, or one word of rdzv_node_id_text's bytes)
 * replaced by RDZV_STATUS_HIDDEN_ID, in one pass; cut at cap when it grows past it. */
static void hide_text(char *text, size_t cap)
{
    static const char words[] = "node id ";
    const size_t wn = sizeof(words) - 1, hn = strlen(RDZV_STATUS_HIDDEN_ID);
    char out[RDZV_SUMMARY_MAX + 1]; /* the longest text */
    size_t i = 0, k = 0, len = strlen(text);

    if (cap > sizeof(out))
        cap = sizeof(out);
    while (i < len && k + 1 < cap) {
        size_t from, end;

        if (strncmp(text + i, words, wn) != 0) {
            out[k++] = text[i++];
            continue;
        }
        from = i + wn + (text[i + wn] == '\''); /* quoted: to its closing quote */
        put(out, &k, cap, text + i, from - i);
        end = from;
        while (end < len && (from > i + wn ? text[end] != '\'' : in_word(text[end])))
            end++;
        if (from == i + wn && end > from && text[end - 1] == ':')
            end--; /* an id never ends so (rdzv_node_id_text): the text's colon */
        i = from; /* nothing to hide, or hidden already: copied as it is */
        if (end > from && (end - from != hn || memcmp(text + from, RDZV_STATUS_HIDDEN_ID, hn))) {
            put(out, &k, cap, RDZV_STATUS_HIDDEN_ID, hn);
            i = end;
        }
    }
    out[k] = '\0';
    memcpy(text, out, k + 1);
}

/* Every text of j. */
static void hide_job_texts(struct rdzv_status_job *j)
{
    struct rdzv_status_timeline *tl = j->timeline;

    for (unsigned i = 0; i < j->n_events; i++)
        hide_text(j->events[i].text, sizeof(j->events[i].text));
    for (unsigned i = 0; i < j->n_aside; i++)
        hide_text(j->aside[i].reason, sizeof(j->aside[i].reason));
    hide_text(j->outcome_summary, sizeof(j->outcome_summary));
    for (unsigned i = 0; tl && i < tl->n_marks; i++)
        hide_text(tl->marks[i].text, sizeof(tl->marks[i].text));
}

void rdzv_status_hide_node_ids(struct rdzv_status *st)
{
    for (size_t i = 0; i < st->n_jobs; i++) {
        struct rdzv_status_job *j = &st->jobs[i];

        hide_job_texts(j);
        for (size_t k = 0; k < j->n_nodes; k++)
            j->nodes[k].node_id[0] = '\0';
        for (unsigned k = 0; k < j->n_aside; k++)
            j->aside[k].node_id[0] = '\0';
    }
}
