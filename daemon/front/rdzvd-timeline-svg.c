/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-timeline-svg.c: a job's timeline as inline SVG (rdzvd-timeline-svg.h). */
#include "daemon/front/rdzvd-timeline-svg.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "common/rdzv-buf.h"
#include "proto/rdzv-status.h"

/* The drawing, in SVG user units: the bands' row, the marks above them, the rate chart below. */
#define SVG_W 900
#define SVG_LEFT 8
#define SVG_RIGHT 8
#define MARK_Y 24   /* the marks' dots: marks closer than MARK_NEAR stack upwards */
#define MARK_STEP 9
#define MARK_NEAR 8.0
#define BAND_Y 32   /* the bands' row */
#define BAND_H 34
#define PHASE_Y 69  /* the recoveries' phases, as segments between the bands and the rates */
#define PHASE_H 9
#define RATE_Y 82   /* the rate chart's top */
#define RATE_H 70
#define AXIS_Y (RATE_Y + RATE_H + 14)
#define SVG_H (AXIS_Y + 6)

static const char *const band_fill[2] = {"#cfe3f7", "#b3d1ef"};
#define RATE_COLOR "#1f6fb2"
static const char *const mark_color[_RDZV_MARK_MAX] = {
    [RDZV_MARK_FAILURE] = "#c0392b", [RDZV_MARK_RESTART] = "#e67e22",
    [RDZV_MARK_NODE_LOST] = "#8e44ad", [RDZV_MARK_PUT_ASIDE] = "#000000",
    [RDZV_MARK_SPARE] = "#27ae60", [RDZV_MARK_LEADER] = "#2c3e50", [RDZV_MARK_END] = "#7f8c8d",
    [RDZV_MARK_STRAGGLER] = "#d35400"};
static const char *const mark_label[_RDZV_MARK_MAX] = {
    [RDZV_MARK_FAILURE] = "failure", [RDZV_MARK_RESTART] = "restart",
    [RDZV_MARK_NODE_LOST] = "node lost", [RDZV_MARK_PUT_ASIDE] = "put aside",
    [RDZV_MARK_SPARE] = "spare promoted", [RDZV_MARK_LEADER] = "leader change",
    [RDZV_MARK_END] = "end", [RDZV_MARK_STRAGGLER] = "straggler"};

static const char *const phase_fill[RDZV_RECOVERY_TOTAL] = {"#e74c3c", "#f39c12", "#9b59b6",
                                                            "#16a085"};
static const char *const phase_label[RDZV_RECOVERY_TOTAL] = {
    "stopping the workers", "rendezvous", "ranks and NCCL ids sent", "to the first step"};

struct scale {
    double t0, t1; /* the times at the left and right edges */
};

static double xat(const struct scale *s, double t)
{
    double w = SVG_W - SVG_LEFT - SVG_RIGHT;

    if (t < s->t0)
        t = s->t0;
    if (t > s->t1)
        t = s->t1;
    return SVG_LEFT + w * (t - s->t0) / (s->t1 - s->t0);
}

/* The span drawn: from the job's start (or its first band, mark or sample) to now, or to its
 * last band, mark or sample when it ended. */
static struct scale span(const struct rdzv_status_job *job, const struct rdzv_status_timeline *tl,
                         double now)
{
    struct scale s = {.t0 = now - job->age_s, .t1 = job->ended ? 0 : now};
    double rates_end = tl->rate_start + tl->n_rates * tl->rate_interval_s;

    for (unsigned i = 0; i < tl->n_bands; i++) {
        s.t0 = tl->bands[i].start < s.t0 ? tl->bands[i].start : s.t0;
        s.t1 = tl->bands[i].end > s.t1 ? tl->bands[i].end : s.t1;
        s.t1 = tl->bands[i].start > s.t1 ? tl->bands[i].start : s.t1;
    }
    for (unsigned i = 0; i < tl->n_marks; i++) {
        s.t0 = tl->marks[i].time < s.t0 ? tl->marks[i].time : s.t0;
        s.t1 = tl->marks[i].time > s.t1 ? tl->marks[i].time : s.t1;
    }
    if (tl->n_rates > 0) {
        s.t0 = tl->rate_start < s.t0 ? tl->rate_start : s.t0;
        s.t1 = job->ended && rates_end > s.t1 ? rates_end : s.t1;
    }
    if (s.t1 < s.t0 + 1)
        s.t1 = s.t0 + 1;
    return s;
}

static int put_bands(struct rdzv_buf *b, const struct rdzv_status_timeline *tl,
                     const struct scale *s, double now)
{
    int r = rdzv_buf_printf(b, "<g class=\"bands\">");

    for (unsigned i = 0; i < tl->n_bands; i++) {
        const struct rdzv_status_band *bd = &tl->bands[i];
        double end = bd->end > 0 ? bd->end : (now > bd->start ? now : bd->start);
        double x0 = xat(s, bd->start), x1 = xat(s, end), w = x1 - x0 < 1 ? 1 : x1 - x0;

        r |= rdzv_buf_printf(b,
                             "<rect class=\"band\" data-generation=\"%llu\" x=\"%.1f\" y=\"%d\" "
                             "width=\"%.1f\" height=\"%d\" fill=\"%s\" stroke=\"#5d8fc2\" "
                             "stroke-width=\"0.5\"><title>generation %llu: world size %lld on "
                             "%lld node(s), ",
                             (unsigned long long)bd->generation, x0, BAND_Y, w, BAND_H,
                             band_fill[bd->generation % 2], (unsigned long long)bd->generation,
                             (long long)bd->world_size, (long long)bd->nodes);
        r |= rdzv_buf_put_utc(b, bd->start, false);
        r |= rdzv_buf_printf(b, " to ");
        if (bd->end > 0)
            r |= rdzv_buf_put_utc(b, bd->end, false);
        else
            r |= rdzv_buf_printf(b, "now");
        r |= rdzv_buf_printf(b, "</title></rect>");
        if (w >= 48)
            r |= rdzv_buf_printf(b,
                                 "<text x=\"%.1f\" y=\"%d\" font-size=\"11\" fill=\"#123\">gen "
                                 "%llu &#183; world %lld</text>",
                                 x0 + 4, BAND_Y + BAND_H / 2 + 4,
                                 (unsigned long long)bd->generation, (long long)bd->world_size);
    }
    return r | rdzv_buf_printf(b, "</g>");
}

static int put_marks(struct rdzv_buf *b, const struct rdzv_status_timeline *tl,
                     const struct scale *s)
{
    int r = rdzv_buf_printf(b, "<g class=\"marks\">");
    double last_x = -1e9;
    int level = 0;

    for (unsigned i = 0; i < tl->n_marks; i++) {
        const struct rdzv_status_mark *m = &tl->marks[i];
        unsigned k = (unsigned)m->kind < _RDZV_MARK_MAX ? (unsigned)m->kind : RDZV_MARK_END;
        double x = xat(s, m->time);
        int y;

        level = x - last_x < MARK_NEAR && level < 2 ? level + 1 : 0;
        last_x = x;
        y = MARK_Y - level * MARK_STEP;
        r |= rdzv_buf_printf(b,
                             "<g class=\"mark mark-%s\" data-generation=\"%llu\"><title>%s, "
                             "generation %llu, ",
                             rdzv_mark_names[k], (unsigned long long)m->generation, mark_label[k],
                             (unsigned long long)m->generation);
        r |= rdzv_buf_put_utc(b, m->time, false);
        r |= rdzv_buf_printf(b, ": ");
        r |= rdzv_buf_put_escaped(b, m->text, true);
        r |= rdzv_buf_printf(b,
                             "</title><line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" "
                             "stroke=\"%s\" stroke-width=\"1.5\"/><circle cx=\"%.1f\" cy=\"%d\" "
                             "r=\"5\" fill=\"%s\"/></g>",
                             x, y, x, RATE_Y + RATE_H, mark_color[k], x, y, mark_color[k]);
    }
    return r | rdzv_buf_printf(b, "</g>");
}

static int put_rate(struct rdzv_buf *b, const struct rdzv_status_timeline *tl,
                    const struct scale *s)
{
    double top = 0;
    int r = 0;

    r |= rdzv_buf_printf(b,
                         "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"#fafafa\" "
                         "stroke=\"#ddd\"/>",
                         SVG_LEFT, RATE_Y, SVG_W - SVG_LEFT - SVG_RIGHT, RATE_H);
    for (unsigned i = 0; i < tl->n_rates; i++)
        top = tl->rates[i] > top ? tl->rates[i] : top;
    if (tl->n_rates == 0)
        return r | rdzv_buf_printf(b,
                                   "<text x=\"%d\" y=\"%d\" font-size=\"11\" fill=\"#888\">no "
                                   "progress reported (rdzv.progress, rdzv-train)</text>",
                                   SVG_LEFT + 6, RATE_Y + RATE_H / 2 + 4);
    r |= rdzv_buf_printf(b, "<polyline class=\"rate\" fill=\"none\" stroke=\"%s\" "
                            "stroke-width=\"1.5\" points=\"", RATE_COLOR);
    for (unsigned i = 0; i < tl->n_rates; i++) {
        double mid = tl->rate_start + (i + 0.5) * tl->rate_interval_s;
        double y = RATE_Y + RATE_H - (top > 0 ? (RATE_H - 6) * tl->rates[i] / top : 0);

        r |= rdzv_buf_printf(b, "%s%.1f,%.1f", i ? " " : "", xat(s, mid), y);
    }
    r |= rdzv_buf_printf(b,
                         "\"><title>rank 0's steps per second, each point over %.0f s</title>"
                         "</polyline><text x=\"%d\" y=\"%d\" font-size=\"10\" fill=\"#555\">%.3g "
                         "steps/s</text>",
                         tl->rate_interval_s, SVG_LEFT + 4, RATE_Y + 11, top);
    return r;
}

/* Each recovery as its phases' segments (a phase under way runs to now). */
static int put_recoveries(struct rdzv_buf *b, const struct rdzv_status_timeline *tl,
                          const struct scale *s, double now, bool ended)
{
    int r = rdzv_buf_printf(b, "<g class=\"recoveries\">");

    for (unsigned i = 0; i < tl->n_recoveries; i++) {
        const struct rdzv_status_recovery *rc = &tl->recoveries[i];
        const char *cause = (unsigned)rc->kind < _RDZV_MARK_MAX ? mark_label[rc->kind] : "?";

        for (unsigned ph = 0; ph < RDZV_RECOVERY_TOTAL; ph++) {
            double t0 = rc->t[ph], t1 = rc->t[ph + 1] > 0 ? rc->t[ph + 1] : now;
            double x0 = xat(s, t0), x1 = xat(s, t1);
            bool last = i + 1 == tl->n_recoveries && !ended;

            /* a phase not reached, or one never finished by an older recovery */
            if (!(t0 > 0) || (!(rc->t[ph + 1] > 0) && !last))
                continue;
            r |= rdzv_buf_printf(b,
                                 "<rect class=\"phase phase-%s\" data-generation=\"%llu\" "
                                 "x=\"%.1f\" y=\"%d\" width=\"%.1f\" height=\"%d\" "
                                 "fill=\"%s\"><title>recovery of generation %llu (%s%s): %s, "
                                 "%.3f s%s</title></rect>",
                                 rdzv_recovery_phase_names[ph],
                                 (unsigned long long)rc->generation, x0, PHASE_Y,
                                 x1 - x0 < 1 ? 1 : x1 - x0, PHASE_H, phase_fill[ph],
                                 (unsigned long long)rc->generation, cause,
                                 rc->inplace ? ", in place" : "", phase_label[ph],
                                 t1 > t0 ? t1 - t0 : 0, rc->t[ph + 1] > 0 ? "" : " so far");
        }
    }
    return r | rdzv_buf_printf(b, "</g>");
}

int rdzvd_timeline_svg(struct rdzv_buf *b, const struct rdzv_status_job *job, double now)
{
    const struct rdzv_status_timeline *tl = job->timeline;
    struct scale s;
    int r = 0;

    if (!tl)
        return 0;
    s = span(job, tl, now);
    r |= rdzv_buf_printf(b,
                         "<svg class=\"timeline\" xmlns=\"http://www.w3.org/2000/svg\" "
                         "width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" role=\"img\" "
                         "font-family=\"sans-serif\"><title>job ",
                         SVG_W, SVG_H, SVG_W, SVG_H);
    r |= rdzv_buf_put_escaped(b, job->run_id, true);
    r |= rdzv_buf_printf(b, ": %u generation(s), %u mark(s)</title>", tl->n_bands, tl->n_marks);
    r |= put_rate(b, tl, &s);
    r |= put_bands(b, tl, &s, now);
    r |= put_recoveries(b, tl, &s, now, job->ended);
    r |= put_marks(b, tl, &s);
    r |= rdzv_buf_printf(b, "<text x=\"%d\" y=\"%d\" font-size=\"10\" fill=\"#555\">", SVG_LEFT,
                         AXIS_Y);
    r |= rdzv_buf_put_utc(b, s.t0, false);
    r |= rdzv_buf_printf(b, "</text><text x=\"%d\" y=\"%d\" font-size=\"10\" fill=\"#555\" "
                            "text-anchor=\"end\">",
                         SVG_W - SVG_RIGHT, AXIS_Y);
    r |= rdzv_buf_put_utc(b, s.t1, false);
    r |= rdzv_buf_printf(b, "%s</text></svg>\n", job->ended ? "" : " (now)");
    return r;
}

/* A swatch of color and its label. */
static int swatch(struct rdzv_buf *b, const char *color, const char *label, bool first)
{
    return rdzv_buf_printf(b, "%s<span class=\"key\"><span style=\"display:inline-block;width:"
                              ".8em;height:.8em;background:%s\"></span> %s</span>",
                           first ? "" : " &#183; ", color, label);
}

int rdzvd_timeline_legend(struct rdzv_buf *b)
{
    int r = rdzv_buf_printf(b, "<p class=\"legend\">");

    r |= swatch(b, band_fill[1], "odd generations (bands)", true);
    r |= swatch(b, band_fill[0], "even generations", false);
    r |= swatch(b, RATE_COLOR, "rank 0's steps/s (line)", false);
    r |= rdzv_buf_printf(b, "<br>marks:");
    for (unsigned k = 0; k < _RDZV_MARK_MAX; k++)
        r |= swatch(b, mark_color[k], mark_label[k], k == 0);
    r |= rdzv_buf_printf(b, "<br>recoveries:");
    for (unsigned ph = 0; ph < RDZV_RECOVERY_TOTAL; ph++)
        r |= swatch(b, phase_fill[ph], phase_label[ph], ph == 0);
    return r | rdzv_buf_printf(b, " (hover for what happened)</p>\n");
}
