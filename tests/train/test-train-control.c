/* SPDX-License-Identifier: Apache-2.0 */
/* test-train-control.c: rdzv-train's control channel (train-control.h, train/INPLACE.md): the
 * line parser, and the watcher thread on a real pipe (a newer generation wakes a waiter, an older
 * one is ignored, EOF ends the wait). */
#include <errno.h>
#include <stdbool.h>
#include <string.h>
#include <unistd.h>

#include "../tap.h"
#include "train-control.h"

static void test_parse(void)
{
    struct rdzv_worker_gen g;

    ASSERT_EQ(rdzv_worker_gen_parse("{\"op\":\"generation\",\"generation\":7,\"rank\":3,"
                                  "\"world_size\":4,\"local_rank\":1,\"master_addr\":\"10.0.0.1\","
                                  "\"master_port\":29517,\"nccl_id\":\"abcd\",\"restart_count\":2}",
                                  &g),
              1);
    ASSERT_EQ(g.generation, 7);
    ASSERT_EQ(g.rank, 3);
    ASSERT_EQ(g.world, 4);
    ASSERT_EQ(g.local_rank, 1);
    ASSERT_EQ(g.master_port, 29517);
    ASSERT_EQ(g.restart_count, 2);
    ASSERT_TRUE(strcmp(g.master_addr, "10.0.0.1") == 0);
    ASSERT_TRUE(strcmp(g.nccl_id, "abcd") == 0);
    ASSERT_EQ(rdzv_worker_gen_parse("{\"op\":\"generation\",\"generation\":8,\"rank\":0,"
                                  "\"world_size\":1,\"master_addr\":\"h\",\"master_port\":1,"
                                  "\"nccl_id\":null}",
                                  &g),
              1);
    ASSERT_EQ(g.nccl_id[0], '\0');
    ASSERT_EQ(rdzv_worker_gen_parse("{\"op\":\"later-op\",\"x\":1}", &g), 0);
    ASSERT_EQ(rdzv_worker_gen_parse("not json", &g), -EINVAL);
    ASSERT_EQ(rdzv_worker_gen_parse("{\"generation\":1}", &g), -EINVAL);
    ASSERT_EQ(rdzv_worker_gen_parse("{\"op\":\"generation\",\"generation\":8,\"rank\":1,"
                                  "\"world_size\":1,\"master_addr\":\"h\",\"master_port\":1}",
                                  &g),
              -EINVAL); /* rank >= world */
    ASSERT_EQ(rdzv_worker_gen_parse("{\"op\":\"generation\",\"generation\":8,\"rank\":0,"
                                  "\"world_size\":1,\"master_addr\":\"h\",\"master_port\":70000}",
                                  &g),
              -EINVAL);
}

static void say(int fd, const char *s)
{
    ASSERT_EQ(write(fd, s, strlen(s)), (ssize_t)strlen(s));
}

static void test_watcher(void)
{
    struct train_control *c;
    struct rdzv_worker_gen g;
    int fds[2];

    ASSERT_OK(pipe(fds));
    ASSERT_OK(train_control_start(fds[0], 5, &c));
    ASSERT_FALSE(train_control_pending(c, 5));
    ASSERT_EQ(train_control_wait(c, 5, 50, &g), -ETIMEDOUT);
    say(fds[1], "{\"op\":\"generation\",\"generation\":4,\"rank\":0,\"world_size\":1,"
                "\"master_addr\":\"h\",\"master_port\":1}\ngarbage\n");
    say(fds[1], "{\"op\":\"generation\",\"generation\":6,\"rank\":1,\"world_size\":2,");
    ASSERT_EQ(train_control_wait(c, 5, 100, &g), -ETIMEDOUT); /* half a line, an old one */
    say(fds[1], "\"master_addr\":\"h\",\"master_port\":2}\n");
    ASSERT_OK(train_control_wait(c, 5, 5000, &g));
    ASSERT_EQ(g.generation, 6);
    ASSERT_EQ(g.rank, 1);
    ASSERT_TRUE(train_control_pending(c, 5));
    ASSERT_FALSE(train_control_pending(c, 6));
    close(fds[1]);
    ASSERT_EQ(train_control_wait(c, 6, 5000, &g), -EPIPE);
    train_control_free(c);
    close(fds[0]);
}

int main(void)
{
    TEST(test_parse);
    TEST(test_watcher);
    return tap_done();
}
