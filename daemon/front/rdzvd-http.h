/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-http.h: the read-only HTTP endpoint of rdzvd (--metrics-port): Prometheus text metrics
 * (GET /metrics), the status as JSON (GET /status.json) and a small status page (GET /), all made
 * from one struct rdzv_status (rdzvd_jobs_status(), proto/rdzv-status.h), and one job's page
 * (GET /job/RUN_ID, rdzvd-http-page.h). HTTP/1.0-style: one request per connection, then close.
 *
 * It runs on a thread of its own with its own loop, at RDZVD_HTTP_NICE: the store's loop pays
 * for no write, read or accept of a status client. The jobs stay the store's loop's: the HTTP
 * thread asks it for a body (a uv_async and a mutex-guarded list each way) and gets a malloc'd
 * string back; the store's loop makes one body per turn, and the requests of one kind that came
 * before it began share it. Each part is bounded (rdzvd-config.h): a request (RDZVD_HTTP_MAX_REQ
 * bytes within RDZVD_HTTP_TIMEOUT_MS, its answer made by then), an answer (the page's
 * RDZVD_PAGE_MAX bytes, read by its client within RDZVD_HTTP_WRITE_TIMEOUT_MS), the connections
 * (RDZVD_HTTP_MAX_CONNS, a newcomer taking the slot of one that stalls), the asks waiting
 * (RDZVD_HTTP_MAX_ASKS) and the work of one turn of the HTTP loop (RDZVD_HTTP_TURN_*); the status
 * page is made at most once per RDZVD_PAGE_TTL_MS and shared meanwhile.
 *
 * Ownership: rdzvd_http_start's caller owns the endpoint until rdzvd_http_stop (which joins the
 * thread; the rest goes in the close callbacks); the job registry is borrowed and must outlive it.
 * Errors: negative errno. Threads: start and stop on the store's loop's thread; the bodies'
 * functions read the job registry, so the store's loop's thread only. */
#pragma once
#include <stdint.h>
#include <uv.h>

struct rdzvd_jobs;
struct rdzvd_http;

/* Listen on addr:port (port 0: kernel-chosen) on loop, showing the status of jobs (and of their
 * server). *ret_port says where. 0 or -errno. */
int rdzvd_http_start(uv_loop_t *loop, const struct rdzvd_jobs *jobs, const char *addr,
                     uint16_t port, uint16_t *ret_port, struct rdzvd_http **ret);
/* Stop listening and close every connection; memory goes in the close callbacks. NULL: no-op. */
void rdzvd_http_stop(struct rdzvd_http *h);

/* The page (/ and /job/RUN_ID) is rdzvd-http-page.h's. The bodies of /metrics and /status.json
 * (rdzvd-http-body.c): a malloc'd NUL-terminated string, NULL on -ENOMEM. */
char *rdzvd_http_metrics(const struct rdzvd_jobs *jobs);
char *rdzvd_http_status_json(const struct rdzvd_jobs *jobs);
