/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-repl-recv.c: libraft's receive callback behind the state rules (rdzvd-repl-recv.h). */
#include "daemon/repl/rdzvd-repl-recv.h"

#include <stddef.h>

#include "common/rdzv-util.h"

/* The wrapped ones (few: one a replica in this process). */
static struct rdzv_list wrapped = {&wrapped, &wrapped};

static struct rdzvd_repl_recv *find(const struct raft_io *io)
{
    struct rdzv_list *pos, *tmp;

    rdzv_list_for_each_safe(pos, tmp, &wrapped) {
        struct rdzvd_repl_recv *w = rdzv_container_of(pos, struct rdzvd_repl_recv, node);

        if (w->io == io)
            return w;
    }
    return NULL;
}

/* What libraft would have freed of a message it is not given. */
static void drop_message(struct raft_message *m)
{
    struct raft_entry *e = m->append_entries.entries;
    void *batch = NULL;

    if (m->type == RAFT_IO_APPEND_ENTRIES && e) {
        for (unsigned i = 0; i < m->append_entries.n_entries; i++)
            if (e[i].batch != batch)
                raft_free(batch = e[i].batch);
        raft_free(e);
    } else if (m->type == RAFT_IO_INSTALL_SNAPSHOT) {
        raft_configuration_close(&m->install_snapshot.conf);
        raft_free(m->install_snapshot.data.base);
    }
}

static uint64_t term_of(const struct raft_message *m)
{
    switch (m->type) {
    case RAFT_IO_APPEND_ENTRIES:
        return m->append_entries.term;
    case RAFT_IO_APPEND_ENTRIES_RESULT:
        return m->append_entries_result.term;
    case RAFT_IO_REQUEST_VOTE:
        return m->request_vote.term;
    case RAFT_IO_REQUEST_VOTE_RESULT:
        return m->request_vote_result.term;
    case RAFT_IO_INSTALL_SNAPSHOT:
        return m->install_snapshot.term;
    case RAFT_IO_TIMEOUT_NOW:
        return m->timeout_now.term;
    default:
        return 0;
    }
}

static void recv_checked(struct raft_io *io, struct raft_message *m)
{
    struct rdzvd_repl_recv *w = find(io);
    uint64_t candidate = m->type == RAFT_IO_REQUEST_VOTE ? m->request_vote.candidate_id : 0;
    struct rdzv_raft_view v;
    const char *why = NULL;

    if (!w) { /* not reached: io is wrapped before raft_start and unwrapped after it closed */
        drop_message(m);
        return;
    }
    w->hooks->view(w->ud, m->server_id, &v);
    if (rdzv_raft_check_state(m->type, term_of(m), candidate, &v, &why) == 0) {
        w->recv(io, m);
        return;
    }
    drop_message(m);
    w->hooks->refused(w->ud, m->server_id, why);
}

static int start_checked(struct raft_io *io, unsigned msecs, raft_io_tick_cb tick,
                         raft_io_recv_cb recv)
{
    struct rdzvd_repl_recv *w = find(io);

    if (!w)
        return RAFT_INVALID;
    w->recv = recv;
    return w->io_start(io, msecs, tick, recv_checked);
}

void rdzvd_repl_recv_wrap(struct rdzvd_repl_recv *w, struct raft_io *io,
                          const struct rdzvd_repl_recv_hooks *hooks, void *ud)
{
    w->io = io;
    w->io_start = io->start;
    w->recv = NULL;
    w->hooks = hooks;
    w->ud = ud;
    io->start = start_checked;
    rdzv_list_add_tail(&wrapped, &w->node);
}

void rdzvd_repl_recv_unwrap(struct rdzvd_repl_recv *w)
{
    rdzv_list_del(&w->node);
    w->io = NULL;
}
