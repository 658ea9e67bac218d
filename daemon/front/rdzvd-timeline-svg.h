/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-timeline-svg.h: a job's timeline (proto/rdzv-status.h) drawn as inline SVG for the status
 * page: one band per generation with its world size on it, a mark for each failure,
 * restart, node lost or put aside, spares promoted, leader change and the end (what happened in
 * its <title>: a browser shows it on hover), and rank 0's steps per second under them. No script,
 * no external asset, no CSS beyond presentation attributes: it renders wherever SVG does, and the
 * page's tables say the same in text.
 *
 * The SVG's structure is what tests read: <g class="bands"> holds one <rect class="band"
 * data-generation="N"> per generation, <g class="marks"> one <g class="mark mark-KIND"> per mark,
 * and <polyline class="rate"> the rate (absent without one). */
#pragma once

struct rdzv_buf;
struct rdzv_status_job;

/* Append job's timeline as an <svg> element to b, as of now (unix seconds): nothing when job has
 * no timeline. 0 or -ENOMEM. */
int rdzvd_timeline_svg(struct rdzv_buf *b, const struct rdzv_status_job *job, double now);
/* Append the timeline's legend (a <p class="legend">): every color the SVG uses, from the same
 * tables, with its meaning. 0 or -ENOMEM. */
int rdzvd_timeline_legend(struct rdzv_buf *b);
