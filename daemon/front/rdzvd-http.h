/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-http.h: the read-only HTTP endpoint of rdzvd (--metrics-port): Prometheus text metrics
 * (GET /metrics), the status as JSON (GET /status.json) and a small status page (GET /), all made
 * from one struct rdzv_status (rdzvd_jobs_status(), proto/rdzv-status.h). HTTP/1.0-style: one
 * request per connection, then close. Requests are bounded (RDZVD_HTTP_MAX_REQ bytes,
 * RDZVD_HTTP_TIMEOUT_MS, RDZVD_HTTP_MAX_CONNS at once).
 *
 * Ownership: rdzvd_http_start's caller owns the endpoint until rdzvd_http_stop (its memory goes
 * in the close callbacks); the job registry is borrowed and must outlive it.
 * Errors: negative errno. Threads: the loop's only. */
#pragma once
#include <stdint.h>
#include <uv.h>

#define RDZVD_HTTP_MAX_REQ 8192
#define RDZVD_HTTP_TIMEOUT_MS 5000
#define RDZVD_HTTP_MAX_CONNS 64

struct rdzvd_jobs;
struct rdzvd_http;

/* Listen on addr:port (port 0: kernel-chosen) on loop, showing the status of jobs (and of their
 * server). *ret_port says where. 0 or -errno. */
int rdzvd_http_start(uv_loop_t *loop, const struct rdzvd_jobs *jobs, const char *addr,
                     uint16_t port, uint16_t *ret_port, struct rdzvd_http **ret);
/* Stop listening and close every connection; memory goes in the close callbacks. NULL: no-op. */
void rdzvd_http_stop(struct rdzvd_http *h);

/* The bodies, for tests and the handler: a malloc'd NUL-terminated string, NULL on -ENOMEM. */
char *rdzvd_http_metrics(const struct rdzvd_jobs *jobs);
char *rdzvd_http_page(const struct rdzvd_jobs *jobs);
