/* SPDX-License-Identifier: Apache-2.0 */
/* comm-gloo.cc: the CPU collective: gloo over TCP, rendezvous through the job's TCPStore
 * (proto/rdzv-store-client.c) behind a gloo::rendezvous::Store. C++ stays in this file; the
 * rest of the trainer sees the extern "C" struct train_comm. Every gloo exception becomes a
 * negative errno and a one-line message in c->err. */
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/pair.h>
#include <gloo/transport/tcp/device.h>
#if __has_include(<gloo/common/memory.h>)
#include <gloo/transport/tcp/pair.h>
#else
/* Debian's libgloo-dev ships gloo/transport/tcp/pair.h without the gloo/common/memory.h it
 * includes. Declared here: the one member gloo_interrupt() calls, exported by libgloo.so
 * (non-virtual, so no layout of the class is involved). */
namespace gloo {
namespace transport {
namespace tcp {
class Pair : public ::gloo::transport::Pair {
  public:
    std::exception_ptr signalExceptionExternal(const std::string &msg);
};
} // namespace tcp
} // namespace transport
} // namespace gloo
#endif

extern "C" {
#include "../proto/rdzv-store-client.h"
#include "train-comm.h"
}

namespace {

/* gloo's store interface over our TCPStore client; every key gets the attempt's prefix. */
class TcpStore : public gloo::rendezvous::Store {
  public:
    TcpStore(struct rdzv_store_client *s, std::string prefix, uint64_t timeout_ms)
        : s_(s), prefix_(std::move(prefix)), timeout_ms_(timeout_ms)
    {
    }

    void set(const std::string &key, const std::vector<char> &data) override
    {
        int r = rdzv_store_client_set(s_, (prefix_ + key).c_str(), data.data(), data.size());

        if (r < 0)
            fail("set", key, r);
    }

    std::vector<char> get(const std::string &key) override
    {
        void *val = nullptr;
        size_t len = 0;
        int r = rdzv_store_client_get(s_, (prefix_ + key).c_str(), timeout_ms_, &val, &len);

        if (r < 0)
            fail("get", key, r);
        std::vector<char> out(static_cast<char *>(val), static_cast<char *>(val) + len);
        free(val);
        return out;
    }

    void wait(const std::vector<std::string> &keys) override
    {
        wait(keys, std::chrono::milliseconds(timeout_ms_));
    }

    void wait(const std::vector<std::string> &keys,
              const std::chrono::milliseconds &timeout) override
    {
        std::vector<std::string> full;
        std::vector<const char *> ptrs;

        for (const auto &k : keys)
            full.push_back(prefix_ + k);
        for (const auto &k : full)
            ptrs.push_back(k.c_str());
        int r = rdzv_store_client_wait(s_, ptrs.data(), ptrs.size(),
                                 static_cast<uint64_t>(timeout.count()));
        if (r < 0)
            fail("wait for", keys.empty() ? std::string("?") : keys[0], r);
    }

  private:
    [[noreturn]] void fail(const char *what, const std::string &key, int r)
    {
        throw std::runtime_error(std::string("store ") + what + " '" + prefix_ + key +
                                 "': " + strerror(-r));
    }

    struct rdzv_store_client *s_;
    std::string prefix_;
    uint64_t timeout_ms_;
};

struct gloo_comm {
    struct train_comm c; /* first: the C side holds a pointer to it */
    struct rdzv_store_client *store = nullptr;
    std::shared_ptr<gloo::transport::Device> dev;
    std::shared_ptr<gloo::rendezvous::Context> ctx;
    std::chrono::milliseconds timeout{0};
    uint32_t tag = 0;
    int failed = 0; /* sticky error of a collective */
    std::atomic<bool> interrupted{false}; /* set by gloo_interrupt() from the watcher thread */
    /* The buffer of the collective in progress, if any: gloo_interrupt() aborts its waits. A
     * posted unbound send is not among what a pair's exception wakes (gloo fails bound buffers
     * and pending operations, not the sends queued on a socket a live peer stopped reading), so
     * without this a rank would sit out the collective's timeout. */
    std::mutex mu;
    gloo::transport::UnboundBuffer *current = nullptr;
};

/* Publishes a collective's buffer to gloo_interrupt() for as long as it lives; declared after
 * the options that own the buffer, so it is withdrawn before the buffer is freed. */
class Current {
  public:
    Current(struct gloo_comm *g, gloo::transport::UnboundBuffer *b) : g_(g)
    {
        std::lock_guard<std::mutex> lock(g_->mu);
        g_->current = b;
    }
    ~Current()
    {
        std::lock_guard<std::mutex> lock(g_->mu);
        g_->current = nullptr;
    }
    Current(const Current &) = delete;
    Current &operator=(const Current &) = delete;

  private:
    struct gloo_comm *g_;
};

gloo_comm *to_gloo(struct train_comm *c)
{
    return reinterpret_cast<gloo_comm *>(c);
}

#define INTERRUPTED "interrupted: the agent started a new generation (recovery in place)"

/* Record the first failure; later collectives return it at once instead of talking to a broken
 * mesh. */
int gloo_fail(gloo_comm *g, const char *op, const std::exception &e)
{
    if (!g->failed) {
        snprintf(g->c.err, sizeof(g->c.err), "gloo %s failed (a peer exited or stopped "
                 "responding): %s", op, e.what());
        g->failed = -ECONNABORTED;
    }
    return g->failed;
}

/* After a collective returned: an aborted wait makes gloo go on as if the send had completed
 * (its ring ignores waitSend's result), so the result of an interrupted collective is not
 * trusted. */
int gloo_check_interrupted(gloo_comm *g)
{
    if (!g->failed && g->interrupted.load(std::memory_order_acquire)) {
        snprintf(g->c.err, sizeof(g->c.err), "%s", INTERRUPTED);
        g->failed = -ECONNABORTED;
    }
    return g->failed;
}

int gloo_broadcast(struct train_comm *c, void *buf, size_t n, unsigned root)
{
    gloo_comm *g = to_gloo(c);

    if (gloo_check_interrupted(g))
        return g->failed;
    try {
        gloo::BroadcastOptions opts(g->ctx);
        auto out = g->ctx->createUnboundBuffer(buf, n);
        Current cur(g, out.get());
        opts.setOutput<uint8_t>(std::move(out));
        opts.setRoot(static_cast<int>(root));
        opts.setTag(g->tag++);
        opts.setTimeout(g->timeout);
        gloo::broadcast(opts);
    } catch (const std::exception &e) {
        return gloo_fail(g, "broadcast", e);
    }
    return gloo_check_interrupted(g);
}

int gloo_allreduce_mean(struct train_comm *c, float *buf, size_t n)
{
    gloo_comm *g = to_gloo(c);

    if (gloo_check_interrupted(g))
        return g->failed;
    try {
        gloo::AllreduceOptions opts(g->ctx);
        auto out = g->ctx->createUnboundBuffer(buf, n * sizeof(float));
        Current cur(g, out.get());
        opts.setOutput<float>(std::move(out));
        opts.setReduceFunction(static_cast<void (*)(void *, const void *, const void *, size_t)>(
            &gloo::sum<float>));
        opts.setTag(g->tag++);
        opts.setTimeout(g->timeout);
        gloo::allreduce(opts);
    } catch (const std::exception &e) {
        return gloo_fail(g, "allreduce", e);
    }
    if (gloo_check_interrupted(g))
        return g->failed;
    const float s = 1.0f / static_cast<float>(c->world);
    for (size_t i = 0; i < n; i++)
        buf[i] *= s;
    return 0;
}

int gloo_wait(struct train_comm *c)
{
    return to_gloo(c)->failed;
}

int gloo_poll(void *c)
{
    return to_gloo(static_cast<struct train_comm *>(c))->failed;
}

int gloo_barrier(struct train_comm *c)
{
    gloo_comm *g = to_gloo(c);

    if (gloo_check_interrupted(g))
        return g->failed;
    try {
        gloo::BarrierOptions opts(g->ctx);
        opts.setTag(g->tag++);
        opts.setTimeout(g->timeout);
        gloo::barrier(opts);
    } catch (const std::exception &e) {
        return gloo_fail(g, "barrier", e);
    }
    return 0;
}

void gloo_abort(struct train_comm *c)
{
    gloo_comm *g = to_gloo(c);

    if (!g->failed)
        g->failed = -ECONNABORTED;
}

/* From the watcher thread (train-control.c, under its mutex, while the training thread may be
 * inside a collective): fail every pair with an exception, then abort the waits of the
 * collective's own buffer. gloo hands the pair's exception to pending receives, so a collective
 * waiting on a live peer that is itself waiting elsewhere (a ring broken mid-step by a peer's
 * death: nobody's socket closes) throws now instead of at its timeout; a send already queued on
 * a socket is not among what that wakes, hence the abort (the ring's next send or receive on a
 * failed pair throws). A collective started later finds the pairs closed and throws at once. */
void gloo_interrupt(struct train_comm *c)
{
    gloo_comm *g = to_gloo(c);

    g->interrupted.store(true, std::memory_order_release);
    if (!g->ctx)
        return;
    for (int i = 0; i < g->ctx->size; i++) {
        if (i == g->ctx->rank)
            continue;
        auto *p = dynamic_cast<gloo::transport::tcp::Pair *>(g->ctx->getPair(i).get());
        if (p)
            (void)p->signalExceptionExternal(INTERRUPTED);
    }
    std::lock_guard<std::mutex> lock(g->mu);
    if (g->current) {
        g->current->abortWaitSend();
        g->current->abortWaitRecv();
    }
}

void gloo_destroy(struct train_comm *c)
{
    gloo_comm *g = to_gloo(c);

    g->ctx.reset();
    g->dev.reset();
    rdzv_store_client_free(g->store);
    delete g;
}

} // namespace

extern "C" int train_comm_gloo_new(const struct train_gloo_opts *o, struct train_comm **ret,
                                   char *err_out, size_t errlen)
{
    gloo_comm *g;
    char local[256];
    int64_t joined = 0;
    std::string base;
    int r;

    try {
        g = new gloo_comm();
    } catch (const std::bad_alloc &) {
        return -ENOMEM;
    }
    g->c.name = "gloo";
    g->c.rank = o->rank;
    g->c.world = o->world;
    g->c.broadcast = gloo_broadcast;
    g->c.allreduce_mean = gloo_allreduce_mean;
    g->c.wait = gloo_wait;
    g->c.poll = gloo_poll;
    g->c.barrier = gloo_barrier;
    g->c.abort = gloo_abort;
    g->c.interrupt = gloo_interrupt;
    g->c.destroy = gloo_destroy;
    g->timeout = std::chrono::milliseconds(o->timeout_ms);

    if (o->local_addr && *o->local_addr) {
        snprintf(local, sizeof(local), "%s", o->local_addr);
    } else {
        r = train_local_addr_for(o->master_addr, o->master_port, local, sizeof(local));
        if (r < 0) {
            snprintf(err_out, errlen, "no local address routes to MASTER_ADDR %s: %s (set "
                     "RDZV_LOCAL_ADDR)", o->master_addr, strerror(-r));
            goto out_free;
        }
    }
    r = rdzv_store_client_connect_cancel(o->master_addr, o->master_port, o->timeout_ms,
                                         RDZV_STORE_CLIENT_RETRY, o->cancel_fd, &g->store);
    if (r == -ECANCELED) {
        snprintf(err_out, errlen, "a new generation came while reaching the job's store at "
                 "%s:%u", o->master_addr, o->master_port);
        goto out_free;
    }
    if (r < 0) {
        snprintf(err_out, errlen, "cannot reach the job's store at %s:%u (MASTER_ADDR, "
                 "MASTER_PORT): %s", o->master_addr, o->master_port, strerror(-r));
        goto out_free;
    }
    /* One counter per world size on a store: the n-th run of w ranks on the same store
     * rendezvouses under its own prefix, so an earlier run's stale addresses are never read.
     * (rdzv-agent gives every generation a fresh store; this is for stores shared by hand.) */
    base = "rdzv-train/w" + std::to_string(o->world) + "/";
    r = rdzv_store_client_add(g->store, (base + "joined").c_str(), 1, &joined);
    if (r < 0 || joined < 1) {
        snprintf(err_out, errlen, "store %s:%u: ADD failed: %s", o->master_addr,
                 o->master_port, strerror(r < 0 ? -r : EPROTO));
        r = r < 0 ? r : -EPROTO;
        goto out_free;
    }
    try {
        gloo::transport::tcp::attr attr;
        attr.hostname = local;
        g->dev = gloo::transport::tcp::CreateDevice(attr);
        TcpStore store(g->store, base + std::to_string((joined - 1) / o->world) + "/",
                       o->timeout_ms);
        g->ctx = std::make_shared<gloo::rendezvous::Context>(static_cast<int>(o->rank),
                                                             static_cast<int>(o->world));
        g->ctx->setTimeout(g->timeout);
        g->ctx->connectFullMesh(store, g->dev);
    } catch (const std::exception &e) {
        snprintf(err_out, errlen, "gloo rendezvous (rank %u of %u, local address %s, store "
                 "%s:%u) failed: %s", o->rank, o->world, local, o->master_addr, o->master_port,
                 e.what());
        r = -ECONNABORTED;
        goto out_free;
    }
    *ret = &g->c;
    return 0;

out_free:
    gloo_destroy(&g->c);
    return r;
}
