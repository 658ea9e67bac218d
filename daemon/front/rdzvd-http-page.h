/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-http-page.h: the HTML status page (GET /) and one job's page (GET /job/RUN_ID) of the
 * HTTP status server (rdzvd-http.h), each bounded whatever the number and size of the jobs
 * (RDZVD_PAGE_*, rdzvd-config.h): the page lists the live jobs first (the first few in full, more
 * as one line each) and the newest jobs that ended as one line each, counts the rest, links each
 * run id to its job's page, and stops at RDZVD_PAGE_MAX bytes. Every string from a peer is
 * HTML-escaped, its control characters shown as the text \xNN; node ids are never shown.
 *
 * Ownership: the caller frees what it gets. Threads: the loop's (they read the job registry).
 * Errors: negative errno. */
#pragma once

struct rdzvd_jobs;

/* The status page: a malloc'd NUL-terminated string of at most RDZVD_PAGE_MAX bytes, NULL on
 * -ENOMEM. */
char *rdzvd_http_page(const struct rdzvd_jobs *jobs);
/* The page of the jobs of run_id (the live one, then the newest that ended), each in full, into
 * *ret (malloc'd, NUL-terminated, at most RDZVD_PAGE_MAX bytes). 0, -ENOENT when rdzvd knows no
 * job of run_id, or -ENOMEM. */
int rdzvd_http_job_page(const struct rdzvd_jobs *jobs, const char *run_id, char **ret);
