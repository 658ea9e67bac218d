/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-conn.h: what the job layer may do with an agent's connection: queue frames on it
 * (rdzvd_conn_out; the transport's output cap applies when they are flushed), close it after
 * the last frame or at once, attach its job member, name it in logs, ask the socket about it.
 * The functions live in the layers below: the transport (rdzvd-transport.h), the rdzv-peer
 * session (rdzvd-peer.h) and the server (rdzvd_conn_flush_pending in rdzvd-server.h).
 *
 * Ownership: connections belong to the transport; a struct rdzvd_conn * is valid until the
 * peer handler's closed() callback for it returns (or, for connections without a member, until
 * the current callback returns). Errors: negative errno. Threads: the loop's only. */
#pragma once
#include "daemon/net/rdzvd-peer.h"
#include "daemon/server/rdzvd-server.h"
#include "daemon/net/rdzvd-transport.h"
