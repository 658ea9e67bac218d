/* SPDX-License-Identifier: Apache-2.0 */
/* test-job-gpus.c: a node put aside is put aside by its GPUs' UUIDs too (JOIN gpu_uuids,
 * proto/SECURITY.md), driven with fake agents (jobtest.h): a node that shares a GPU with a node
 * the job put aside is refused under any host name, in memory and from the record after a
 * restart; the status lists the GPUs; RELEASE of one GPU takes that GPU back only. And what a
 * liar can do with them: a node naming another node's GPUs can get only itself refused, never
 * that node. */
#include "common/rdzv-log.h"
#include "jobtest.h"
#include "daemon/data/rdzvd-config.h"

#define U1 "GPU-5f2e1a3b-0c4d-4e5f-8a9b-0123456789ab"
#define U2 "GPU-00000000-1111-2222-3333-444444444444"
#define U3 "GPU-abcdef01-2345-6789-abcd-ef0123456789"
#define U4 "GPU-99999999-8888-7777-6666-555555555555"
#define U5 "GPU-11111111-1111-1111-1111-111111111111"

/* jn's GPUs: the comma-separated list. */
static void set_gpus(struct rdzv_join *jn, const char *list)
{
    char err[256];

    ASSERT_OK(rdzv_gpu_set_parse_list(list, &jn->gpus, err, sizeof(err)));
}

/* A new node (node id i, host "renamed<i>": another name than any before) with these GPUs. */
static int join_renamed(struct env *e, struct fake *f, int i, const char *gpus, char *err,
                        size_t errlen)
{
    struct rdzv_join jn = join_of(i, 2, 2, 4);

    memset(f, 0, sizeof(*f));
    jn.bad_node_failures = 1;
    snprintf(jn.host, sizeof(jn.host), "renamed%d", i);
    set_gpus(&jn, gpus);
    return join_err(e, f, &jn, err, errlen);
}

/* The GPUs the status lists for the job's first node put aside, comma-separated. */
static void status_gpus(struct env *e, char *out, size_t len)
{
    struct rdzvd_server_info info = {.start_ms = jt_now_ms()};
    char text[RDZV_GPU_UUID_LEN + 1];
    struct rdzv_status st;
    size_t off = 0;

    out[0] = '\0';
    ASSERT_OK(rdzvd_status_fill(&info, &e->jobs, &jt_steps.counts, NULL, NULL, jt_clock(), &st));
    ASSERT_EQ(st.n_jobs, 1);
    ASSERT_EQ(st.jobs[0].n_aside, 1);
    for (unsigned g = 0; g < st.jobs[0].aside[0].n_gpus; g++) {
        rdzv_gpu_uuid_format(&st.jobs[0].aside[0].gpus[g], text);
        off += (size_t)snprintf(out + off, len - off, "%s%s", g ? "," : "", text);
    }
    rdzv_status_free(&st);
}

/* Node 0 or 1 (its GPUs U1 and U2) fails and is put aside. A new node under another name that
 * has U2 is refused, saying which GPU and which node; one with other GPUs waits as a spare. From
 * the record after a restart, the same. The status lists U1 and U2; RELEASE U2 takes that GPU
 * back (U2's new node joins) while U1 and the host stay put aside. */
static void test_put_aside_by_gpus(void)
{
    struct rdzv_worker_exit w = {.generation = 1, .exit_code = 3};
    struct fake f[3] = {0}, again = {0}, other = {0};
    struct rdzv_join jn = join_of(0, 2, 2, 4);
    char path[64], err[512], gpus[256];
    int fd = jt_state_dir(path, sizeof(path));
    struct env e;
    int bad;

    env_init(&e, fd);
    for (int i = 0; i < 3; i++) {
        jn = join_of(i, 2, 2, 4);
        jn.bad_node_failures = 1;
        set_gpus(&jn, i == 0 ? U1 "," U2 : i == 1 ? U5 : U4);
        ASSERT_OK(join(&e, &f[i], &jn)); /* node 2 waits as the spare */
    }
    bad = 0;
    ASSERT_EQ(f[0].nrounds, 1);
    w.rank = f[bad].round.rank_offset;
    ASSERT_OK(jt_member_worker_exit(f[bad].m, &w, err, sizeof(err)));
    all_ready(f, 3, 1); /* a start-up failure: it goes once the generation stopped */
    ASSERT_TRUE(event_is(&f[bad], "put_aside"));
    ASSERT_EQ(f[2].nrounds, 1); /* the spare took its place */
    status_gpus(&e, gpus, sizeof(gpus));
    ASSERT_EQ(strcmp(gpus, U1 "," U2), 0);

    ASSERT_EQ(join_renamed(&e, &again, 9, U3 "," U2, err, sizeof(err)), -EACCES);
    ASSERT_TRUE(strstr(err, "this node's GPU " U2 " was put aside by job job with node host0 "
                            "(node id node-0): its workers failed 1 times") != NULL);
    ASSERT_OK(join_renamed(&e, &other, 8, U3, err, sizeof(err)));
    ASSERT_TRUE(other.spare);

    /* After a restart, from the record alone, then in the job rebuilt from it. */
    env_done(&e);
    env_init(&e, fd);
    ASSERT_EQ(join_renamed(&e, &again, 10, U2, err, sizeof(err)), -EACCES);
    ASSERT_TRUE(strstr(err, "GPU " U2 " was put aside") != NULL);
    ASSERT_OK(join_renamed(&e, &other, 11, U3, err, sizeof(err)));
    ASSERT_EQ(join_renamed(&e, &again, 12, U1, err, sizeof(err)), -EACCES);
    status_gpus(&e, gpus, sizeof(gpus));
    ASSERT_EQ(strcmp(gpus, U1 "," U2), 0);

    /* RELEASE of one GPU: that GPU only. */
    ASSERT_EQ(jt_jobs_release(&e.jobs, "job", U2, err, sizeof(err)), 1);
    ASSERT_EQ(jt_jobs_release(&e.jobs, "job", U2, err, sizeof(err)), 0);
    ASSERT_OK(join_renamed(&e, &again, 13, U2, err, sizeof(err)));
    ASSERT_EQ(join_renamed(&e, &again, 14, U1, err, sizeof(err)), -EACCES);
    jn = join_of(15, 2, 2, 4);
    snprintf(jn.host, sizeof(jn.host), "host0");
    ASSERT_EQ(join_err(&e, &again, &jn, err, sizeof(err)), -EACCES);
    status_gpus(&e, gpus, sizeof(gpus));
    ASSERT_EQ(strcmp(gpus, U1), 0);
    /* Released by its host: its GPUs go with it, and it is recorded so. */
    ASSERT_EQ(jt_jobs_release(&e.jobs, "job", "host0", err, sizeof(err)), 1);
    ASSERT_OK(join_renamed(&e, &again, 15, U1, err, sizeof(err)));
    env_done(&e);
    env_forget_table(fd);
    jt_state_dir_done(fd, path);
}

/* A liar (a token holder) names a member's GPUs in its JOIN: the member hears nothing. It gets
 * itself put aside (UNHEALTHY): it never held a place, so the job records its node id only, none
 * of the GPUs it claims (a member's, or one of an away member's that nobody else reports), and
 * the member's next agent (a new node id, after a restart too) still joins, as does a node with
 * the GPU only the liar named. */
static void test_named_gpus_refuse_only_the_namer(void)
{
    struct fake f[2] = {0}, liar = {0}, next = {0};
    struct rdzv_join jn;
    struct rdzvd_job_record rec;
    char path[64], err[512];
    int fd = jt_state_dir(path, sizeof(path));
    struct env e;

    env_init(&e, fd);
    for (int i = 0; i < 2; i++) {
        jn = join_of(i, 2, 2, 4);
        set_gpus(&jn, i == 0 ? U1 : U2);
        ASSERT_OK(join(&e, &f[i], &jn));
    }
    ASSERT_EQ(f[0].nrounds, 1);
    ASSERT_OK(join_renamed(&e, &liar, 5, U1 "," U4, err, sizeof(err)));
    ASSERT_TRUE(liar.spare);
    ASSERT_EQ(f[0].nevents, 0);
    jt_unhealthy(liar.m, "forged");
    ASSERT_TRUE(event_is(&liar, "put_aside"));
    for (int i = 0; i < 2; i++) {
        ASSERT_EQ(f[i].nevents, 0);
        ASSERT_FALSE(f[i].closed);
        ASSERT_EQ(f[i].nrounds, 1);
    }
    ASSERT_OK(rdzvd_job_record_get(e.table, "job", &rec));
    ASSERT_EQ(rec.n_hist, 1);
    ASSERT_EQ(rec.hist[0].gpus.n, 0); /* its node id only */
    ASSERT_EQ(rec.hist[0].host[0], '\0');
    rdzvd_job_record_clear(&rec);
    ASSERT_OK(join_renamed(&e, &next, 6, U1, err, sizeof(err)));
    ASSERT_OK(join_renamed(&e, &next, 7, U4, err, sizeof(err)));
    ASSERT_EQ(join_renamed(&e, &liar, 5, U4, err, sizeof(err)), -EACCES); /* its node id */
    ASSERT_TRUE(strstr(err, "node id node-5 was put aside by job job") != NULL);
    ASSERT_EQ(f[0].nevents, 0);
    env_done(&e);
    env_init(&e, fd);
    ASSERT_OK(join_renamed(&e, &next, 8, U1, err, sizeof(err)));
    env_done(&e);
    env_forget_table(fd);
    jt_state_dir_done(fd, path);
}

/* The record keeps a node's GPUs beside its history ("aside_gpus"): a record of an rdzvd that
 * predates them reads as before, and a record with them still has the history an older rdzvd
 * reads ("history" unchanged). What put would not write, get refuses. */
static void test_record_gpus(void)
{
    struct rdzvd_job_record_hist h[2] = {
        {.node_id = "a", .host = "ha", .failures = 2, .aside = true, .reason = "r"},
        {.node_id = "b", .host = "hb", .failures = 1}};
    struct rdzvd_job_record rec = {.run_id = "job", .min = 1, .max = 2, .n_hist = 2, .hist = h};
    struct rdzvd_job_record got;
    struct rdzvd_store *t;
    struct rdzv_limits lim = RDZV_LIMITS_DEFAULT;
    const uint8_t *val;
    size_t vlen;
    char err[256];

    ASSERT_OK(rdzvd_store_new(&lim, NULL, &t));

    ASSERT_OK(rdzv_gpu_set_parse_list(U1 "," U3, &h[0].gpus, err, sizeof(err)));
    ASSERT_OK(rdzvd_job_record_put(t, &rec));
    ASSERT_OK(rdzvd_store_get(t, "job/job", 7, &val, &vlen));
    /* The history as before, its GPUs beside it (after the failures' dates). */
#define HIST "\"history\":[[\"a\",\"ha\",2,true,\"r\"],[\"b\",\"hb\",1,false,\"\"]],"
#define GPUS "\"aside_gpus\":[[\"a\",[\"" U1 "\",\"" U3 "\"]]]"
    ASSERT_TRUE(memmem(val, vlen, HIST, strlen(HIST)) != NULL);
    ASSERT_TRUE(memmem(val, vlen, GPUS, strlen(GPUS)) != NULL);
#undef HIST
#undef GPUS
    ASSERT_OK(rdzvd_job_record_get(t, "job", &got));
    ASSERT_EQ(got.hist[0].gpus.n, 2);
    ASSERT_EQ(got.hist[1].gpus.n, 0);
    ASSERT_EQ(memcmp(&got.hist[0].gpus, &h[0].gpus, sizeof(h[0].gpus)), 0);
    rdzvd_job_record_clear(&got);
    /* GPUs of a node not put aside: put refuses them. */
    h[1].gpus = h[0].gpus;
    ASSERT_EQ(rdzvd_job_record_put(t, &rec), -EINVAL);
    h[1].gpus.n = 0;
    /* A record naming GPUs for no node put aside, or malformed ones: not a record. */
    {
        static const char *const bad[] = {
            "[[\"b\",[\"" U1 "\"]]]",
            "[[\"z\",[\"" U1 "\"]]]",
            "[[\"a\",[\"GPU-1\"]]]",
            "[[\"a\",[]]]",
            "[[\"a\",[\"" U1 "\"]],[\"a\",[\"" U3 "\"]]]",
            "{}",
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
            char text[1024];

            snprintf(text, sizeof(text),
                     "{\"run_id\":\"job\",\"min\":1,\"max\":2,\"max_restarts\":0,"
                     "\"generation\":0,\"restart_count\":0,\"running\":false,\"nnodes\":0,"
                     "\"world_size\":0,\"store_port\":0,\"history\":[[\"a\",\"ha\",2,true,"
                     "\"r\"],[\"b\",\"hb\",1,false,\"\"]],\"aside_gpus\":%s}",
                     bad[i]);
            ASSERT_OK(rdzvd_store_set(t, "job/job", 7, text, strlen(text)));
            ASSERT_EQ(rdzvd_job_record_get(t, "job", &got), -EBADMSG);
        }
    }
    (void)rdzvd_store_free(t);
}

int main(void)
{
    rdzv_log_setup("test-job-gpus", RDZV_LOG_ERROR);
    TEST(test_put_aside_by_gpus);
    TEST(test_named_gpus_refuse_only_the_namer);
    TEST(test_record_gpus);
    return tap_done();
}
